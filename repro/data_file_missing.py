"""from_adios on a .bp whose data.0 is gone (metadata intact)."""
import os, shutil, sys, tempfile
from mpi4py import MPI
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from hydragnn_files import molecules, write_adios
from mdloader.pyg_sources import from_adios

comm = MPI.COMM_WORLD
d = comm.bcast(tempfile.mkdtemp(prefix="h41nodata", dir="/tmp") if comm.rank == 0 else None)
path = os.path.join(d, "a.bp")
if comm.rank == 0:
    write_adios(path, {"trainset": molecules(50, seed=1)})
    os.remove(os.path.join(path, "data.0"))
comm.Barrier()
try:
    ds = from_adios(path, "trainset", comm)
    print(f"rank {comm.rank}: built, len {len(ds)}; graph 0 {ds[0]}", flush=True)
    ds.close()
except Exception as err:
    import traceback; traceback.print_exc() if comm.rank == 0 else None
    print(f"rank {comm.rank}: {type(err).__name__}: {str(err)[:300]}", flush=True)
