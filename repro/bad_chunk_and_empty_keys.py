"""from_adios(chunk=-1) / from_pickle(chunk=-1) / from_adios(keys=[]): no error; what
dataset comes out? Run at 2 ranks."""
import os, sys, tempfile
from mpi4py import MPI
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from hydragnn_files import molecules, write_adios, write_pickle
from mdloader.pyg_sources import from_adios, from_pickle

comm = MPI.COMM_WORLD
d = comm.bcast(tempfile.mkdtemp(prefix="h41chunk", dir="/tmp") if comm.rank == 0 else None)
bp, pk = os.path.join(d, "a.bp"), os.path.join(d, "pk")
if comm.rank == 0:
    write_adios(bp, {"trainset": molecules(10, seed=1)})
    write_pickle(pk, "trainset", molecules(10, seed=1))
comm.Barrier()
for name, make in (("adios chunk=-1", lambda: from_adios(bp, "trainset", comm, chunk=-1)),
                   ("pickle chunk=-1", lambda: from_pickle(pk, "trainset", comm, chunk=-1)),
                   ("adios chunk=0", lambda: from_adios(bp, "trainset", comm, chunk=0)),
                   ("adios keys=[]", lambda: from_adios(bp, "trainset", comm, keys=[]))):
    try:
        ds = make()
    except Exception as err:
        print(f"rank {comm.rank}: {name}: {type(err).__name__}: {err}", flush=True)
        continue
    try:
        n = len(ds)
        g = ds[0] if n else None
        print(f"rank {comm.rank}: {name}: len {n}, graph 0 {g}", flush=True)
    except Exception as err:
        print(f"rank {comm.rank}: {name}: len {len(ds)}; ds[0] -> {type(err).__name__}: {err}", flush=True)
    ds.close()
