"""mdloader.pyg.DataLoader resumed after a restart of the job, for
tests/run_binding_tests.sh: two mpirun jobs on the same number of ranks.

    mpirun -n P python tests/python/pyg_resume_case.py save DIR     # epoch 1 cut after 2 batches
    mpirun -n P python tests/python/pyg_resume_case.py resume DIR   # a new job: the rest, then epoch 2

The first job runs epochs 1 and 2 whole (what an uninterrupted run yields), then epoch 1
again, cut after 2 batches, and saves each rank's state (json for the library's sampler,
torch.save for a DistributedSampler's) and the uninterrupted run's graph ids after the
cut. The second job loads the states into new loaders over a new dataset and must yield
exactly those ids. Prints "saved: ok" / "resumed after a restart: ok" on rank 0."""

import json
import os
import sys
from pathlib import Path

import torch
from mpi4py import MPI
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("MDL_CALIBRATION", "off")  # as in the pytest suite: it only costs time here
from test_pyg import graphs  # noqa: E402

from mdloader.pyg import DataLoader, DistDataset  # noqa: E402

CUT = 2  # batches of epoch 1 taken before the state is saved

comm = MPI.COMM_WORLD
mode, folder = sys.argv[1], Path(sys.argv[2])
dataset = DistDataset(graphs(41), "trainset", comm)


def make(kind: str) -> DataLoader:
    if kind == "library":
        return DataLoader(dataset, batch_size=4, shuffle=True, seed=5)
    sampler = DistributedSampler(dataset, num_replicas=comm.size, rank=comm.rank, shuffle=True, seed=3)
    return DataLoader(dataset, batch_size=3, sampler=sampler)


def ids_of(loader: DataLoader, epoch: int) -> list:
    loader.set_epoch(epoch)
    return [batch.idx.tolist() for batch in loader]


for kind, save, load in (("library", lambda s, p: p.write_text(json.dumps(s)), lambda p: json.loads(p.read_text())),
                         ("sampler", torch.save, torch.load)):
    state_file = folder / f"{kind}-state-rank{comm.rank}"
    expected_file = folder / f"{kind}-expected-rank{comm.rank}.json"
    if mode == "save":
        whole = make(kind)
        expected = ids_of(whole, 1)[CUT:] + ids_of(whole, 2)
        cut = make(kind)
        cut.set_epoch(1)
        for step, _ in enumerate(cut, 1):
            if step == CUT:
                save(cut.state_dict(), state_file)
                break
        expected_file.write_text(json.dumps(expected))
    else:
        resumed = make(kind)
        resumed.load_state_dict(load(state_file))
        got = ids_of(resumed, 1) + ids_of(resumed, 2)
        assert got == json.loads(expected_file.read_text()), (kind, got)
dataset.close()
if comm.rank == 0:
    print("saved: ok" if mode == "save" else "resumed after a restart: ok", flush=True)
