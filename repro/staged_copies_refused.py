"""Each rank reads its own node-local copy of the same .bp (staged with a plain copy,
`cp -r`: new mtimes): refused as "the ranks see different files", though the bytes are
identical and the message itself advises "identical copies"."""
import os, shutil, sys, tempfile, time
from mpi4py import MPI
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from hydragnn_files import molecules, write_adios
from mdloader.pyg_sources import from_adios

comm = MPI.COMM_WORLD
d = comm.bcast(tempfile.mkdtemp(prefix="h41stage", dir="/tmp") if comm.rank == 0 else None)
src = os.path.join(d, "src.bp")
if comm.rank == 0:
    write_adios(src, {"trainset": molecules(30, seed=1)})
comm.Barrier()
time.sleep(0.05 * comm.rank)
mine = os.path.join(d, f"local{comm.rank}.bp")
shutil.copytree(src, mine, copy_function=shutil.copyfile)  # as `cp -r`: contents only
comm.Barrier()
try:
    ds = from_adios(mine, "trainset", comm)
    print(f"rank {comm.rank}: len {len(ds)}", flush=True)
    ds.close()
except Exception as err:
    print(f"rank {comm.rank}: {type(err).__name__}: {str(err)[:400]}", flush=True)
