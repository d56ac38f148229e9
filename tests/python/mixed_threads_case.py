"""mdloader.pyg.DataLoader and mdloader.DataLoader(num_workers=1) where one rank's MPI
runs at MPI_THREAD_FUNNELED and the others' at MULTIPLE (run as two MPMD parts, the
first with --funneled): the loop left early, a fetch, whole epochs and the epoch started
ahead must all work, every rank taking the same batches, and every rank is told that no
thread runs. Prints "mixed thread levels: ok" on rank 0."""

import sys
import warnings
from pathlib import Path

import mpi4py

if "--funneled" in sys.argv:
    mpi4py.rc.thread_level = "funneled"
from mpi4py import MPI  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_pyg import graphs  # noqa: E402

import mdloader  # noqa: E402
from mdloader.pyg import DataLoader, DistDataset  # noqa: E402

comm = MPI.COMM_WORLD
dataset = DistDataset(graphs(41), "trainset", comm)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    loader = DataLoader(dataset, batch_size=2, shuffle=True)
    for step, _ in enumerate(loader):
        if step == 1:
            break  # left early: every rank must have taken the same batches
lowered = [str(w.message) for w in caught if "collate_ahead=0" in str(w.message)]
assert lowered, "every rank is told that batches are not collated ahead"
assert dataset[0].num_nodes > 0  # a collective fetch after the early stop
for epoch in range(2):
    loader.set_epoch(epoch)
    assert sum(1 for _ in loader) == len(loader)
assert dataset[1].num_nodes > 0
dataset.close()

# The byte-level loader's worker thread.
with mdloader.Loader(comm) as plain:
    plain.register_shard([bytes([comm.rank, i]) for i in range(11)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        workers = mdloader.DataLoader(plain, batch_size=3, shuffle=True, num_workers=1, sampler="library")
        for step, _ in enumerate(workers):
            if step == 1:
                break
    assert any("calling thread" in str(w.message) for w in caught), [str(w.message) for w in caught]
    assert len(plain.fetch([0, 1]).offsets) == 3
    assert sum(1 for _ in workers) == len(workers)
levels = comm.allgather(MPI.Query_thread())
if comm.rank == 0:
    print(f"mixed thread levels: ok (levels {levels})", flush=True)
