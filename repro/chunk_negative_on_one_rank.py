"""from_adios(chunk=-1) on rank 0 only (chunk is a local reading knob: ranks may differ).
Run at 2 ranks: rank 0 raises AttributeError alone, rank 1 waits (hang)."""
import os, sys, tempfile
from mpi4py import MPI
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from hydragnn_files import molecules, write_adios
from mdloader.pyg_sources import from_adios

comm = MPI.COMM_WORLD
d = comm.bcast(tempfile.mkdtemp(prefix="h41chunk1", dir="/tmp") if comm.rank == 0 else None)
bp = os.path.join(d, "a.bp")
if comm.rank == 0:
    write_adios(bp, {"trainset": molecules(10, seed=1)})
comm.Barrier()
try:
    ds = from_adios(bp, "trainset", comm, chunk=-1 if comm.rank == 0 else 4)
    print(f"rank {comm.rank}: len {len(ds)}", flush=True)
    print(f"rank {comm.rank}: graph 0 {ds[0]}", flush=True)
    ds.close()
except Exception as err:
    print(f"rank {comm.rank}: {type(err).__name__}: {err}", flush=True)
