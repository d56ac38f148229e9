"""The loader alone against torch_geometric's own DataLoader, side by side in one run.

Both deliver torch_geometric Batch objects of the same graphs, batch B per rank, one
epoch split over the ranks (DistributedSampler's order for torch_geometric, the
library's for mdloader):

  pyg       torch_geometric.loader.DataLoader over an in-memory list of every Data on
            each rank (the per-rank copy of the dataset that MDLoader avoids), with a
            DistributedSampler, num_workers=0;
  mdloader  mdloader.pyg.DataLoader over a DistDataset (each rank holds 1/P of the
            graphs): the library's sampler, prefetch 2, fetch + vectorised collate.

Epochs alternate between the two; samples/s is graphs per second per rank over an
epoch, the median over the epochs, the slowest rank's. QM9-sized synthetic molecules
(3-29 atoms, about 18 on average, z, pos, edges within 1.7 of a random geometry, y of
19 targets) unless --qm9 PACK gives real QM9 records (python -m mdloader.qm9 convert).

    mpirun -n 2 python benches/pyg/collate_bench.py [--graphs 20000] [--batch 256] [--epochs 5]
"""

import argparse
import statistics
import time

import numpy as np
import torch
from mpi4py import MPI
from torch.utils.data.distributed import DistributedSampler
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader as PygDataLoader

from mdloader.pyg import DataLoader, DistDataset


def synthetic(count: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        n = int(rng.integers(3, 30))
        pos = rng.normal(scale=1.2, size=(n, 3)).astype(np.float32)
        d = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
        src, dst = np.nonzero((d < 1.7) & (d > 0))
        out.append(Data(z=torch.from_numpy(rng.integers(1, 10, n)), pos=torch.from_numpy(pos),
                        edge_index=torch.from_numpy(np.stack([src, dst]).astype(np.int64)),
                        y=torch.from_numpy(rng.normal(size=(1, 19)).astype(np.float32)), idx=i))
    return out


def qm9(path: str) -> list:
    from mdloader.qm9 import decode, load_slice

    data, offsets, first = load_slice(path, 0, 1)
    out = []
    for i in range(len(offsets) - 1):
        m = decode(data[int(offsets[i]):int(offsets[i + 1])])
        out.append(Data(z=torch.from_numpy(m.z.astype(np.int64)), pos=torch.from_numpy(m.pos),
                        edge_index=torch.from_numpy(m.edges.T.astype(np.int64).copy()),
                        y=torch.tensor([[m.gap]], dtype=torch.float32), idx=first + i))
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--graphs", type=int, default=20000)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--qm9", default=None)
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    graphs = qm9(a.qm9)[: a.graphs] if a.qm9 else synthetic(a.graphs, 7)
    dataset = DistDataset(graphs, "bench", comm)
    ours = DataLoader(dataset, batch_size=a.batch, shuffle=True, prefetch=2)
    sampler = DistributedSampler(graphs, num_replicas=comm.size, rank=comm.rank, shuffle=True)
    theirs = PygDataLoader(graphs, batch_size=a.batch, sampler=sampler)
    rates = {"pyg": [], "mdloader": []}
    for epoch in range(a.epochs + 1):  # the first of each is warm-up
        for name, loader in (("pyg", theirs), ("mdloader", ours)):
            loader_epoch = getattr(loader, "set_epoch", None) or sampler.set_epoch
            loader_epoch(epoch)
            comm.Barrier()
            start, count = time.perf_counter(), 0
            for batch in loader:
                count += batch.num_graphs
            rate = count / (time.perf_counter() - start)
            slowest = comm.allreduce(rate, op=MPI.MIN)
            if epoch:
                rates[name].append(slowest)
    if comm.rank == 0:
        pyg, ours_rate = statistics.median(rates["pyg"]), statistics.median(rates["mdloader"])
        print(f"mpi={MPI.Get_library_version().splitlines()[0].strip()[:24]!r} ranks={comm.size} graphs={len(graphs)} batch={a.batch} "
              f"epochs={a.epochs} data={'qm9' if a.qm9 else 'synthetic'}")
        print(f"pyg DataLoader (in-memory list): {pyg:.0f} graphs/s per rank (median)")
        print(f"mdloader.pyg.DataLoader:         {ours_rate:.0f} graphs/s per rank (median)")
        print(f"ratio mdloader / pyg: {ours_rate / pyg:.2f}")
    dataset.close()


if __name__ == "__main__":
    main()
