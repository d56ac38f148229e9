"""from_adios on a .bp whose metadata files (md.0, md.idx, mmd.0) are cut or emptied."""
import os, shutil, sys, tempfile
from mpi4py import MPI
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from hydragnn_files import molecules, write_adios
from mdloader.pyg_sources import from_adios

comm = MPI.COMM_WORLD
d = comm.bcast(tempfile.mkdtemp(prefix="h41md", dir="/tmp") if comm.rank == 0 else None)
good = os.path.join(d, "good.bp")
if comm.rank == 0:
    write_adios(good, {"trainset": molecules(50, seed=1)})
    print(sorted(os.listdir(good)), flush=True)
comm.Barrier()
for victim in ("md.0", "md.idx", "mmd.0"):
    for how in ("half", "empty"):
        path = os.path.join(d, f"{victim}-{how}.bp")
        if comm.rank == 0:
            shutil.copytree(good, path)
            f = os.path.join(path, victim)
            if os.path.exists(f):
                os.truncate(f, os.path.getsize(f) // 2 if how == "half" else 0)
        comm.Barrier()
        try:
            ds = from_adios(path, "trainset", comm)
            print(f"rank {comm.rank}: {victim} {how}: built, len {len(ds)}", flush=True)
            ds.close()
        except Exception as err:
            print(f"rank {comm.rank}: {victim} {how}: {type(err).__name__}: {str(err)[:150]}", flush=True)
