"""Spread of per-rank step cost over a QM9 epoch: fixed-size batches against node-budget
batches (mdloader.pyg.DataLoader(node_budget=...)), in one run, epochs alternated.

In data-parallel training every step waits for its slowest rank, so a step costs the
maximum over ranks of the ranks' compute times; ``max/mean`` over ranks, per step, is
what that waiting costs. Each rank times only its compute (a small SchNet-like model,
forward and backward, one torch thread), never the wait for data or for the others:
wall time, and the CPU time of its thread (which a shared machine's other jobs do not
inflate by descheduling the rank).
Also reported, free of timing noise: the same ratio for each step's node and edge
counts.

    mpirun -n 2 python -m mpi4py benches/budget/step_spread.py --pack target/qm9/qm9.qm9g

(``python -m mdloader.qm9 convert target/qm9/qm9.qm9g`` makes the pack file from the
PyPI package qm9pack.) See README.md here for the figures.
"""

import argparse
import time

import numpy as np
import torch
from mpi4py import MPI
from torch_geometric.data import Data

from mdloader.pyg import DataLoader, DistDataset
from mdloader.qm9 import decode, read_index


class Pack:
    """The pack file's molecules as torch_geometric graphs, decoded when indexed: each
    rank builds only its own part (DistDataset(local=False) indexes its share)."""

    def __init__(self, path: str, limit: int):
        self.index = read_index(path)
        self.n = min(limit, self.index.n_records) if limit else self.index.n_records
        self.file = open(path, "rb")

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Data:
        lo, hi = int(self.index.offsets[i]), int(self.index.offsets[i + 1])
        self.file.seek(self.index.data_start + lo)
        m = decode(np.frombuffer(self.file.read(hi - lo), dtype=np.uint8))
        return Data(z=torch.from_numpy(m.z.astype(np.int64)), pos=torch.from_numpy(m.pos.copy()),
                    edge_index=torch.from_numpy(m.edges.T.astype(np.int64)),
                    y=torch.tensor([[m.gap]], dtype=torch.float32))


class Model(torch.nn.Module):
    """SchNet-shaped: embedding, interaction layers (messages over edges filtered by
    distance, summed at the target), a sum readout."""

    def __init__(self, width: int = 64, layers: int = 3):
        super().__init__()
        self.embed = torch.nn.Embedding(10, width)
        self.filters = torch.nn.ModuleList(torch.nn.Linear(16, width) for _ in range(layers))
        self.updates = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(layers))
        self.out = torch.nn.Linear(width, 1)
        self.centers = torch.linspace(0, 5, 16)

    def forward(self, batch):
        h = self.embed(batch.z.clamp(max=9))
        src, dst = batch.edge_index
        dist = (batch.pos[src] - batch.pos[dst]).norm(dim=1, keepdim=True)
        rbf = torch.exp(-4.0 * (dist - self.centers) ** 2)
        for filt, upd in zip(self.filters, self.updates):
            m = h[src] * filt(rbf)
            h = h + torch.nn.functional.silu(upd(torch.zeros_like(h).index_add_(0, dst, m)))
        energy = torch.zeros(batch.num_graphs, 1).index_add_(0, batch.batch, self.out(h))
        return energy


def one_epoch(loader, model, opt, epoch):
    """(per-step compute seconds: wall, CPU of this thread; nodes, edges) of this rank
    over one epoch."""
    loader.set_epoch(epoch)
    times, cpu, nodes, edges = [], [], [], []
    for batch in loader:
        t, c = time.perf_counter(), time.thread_time()
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(batch), batch.y)
        loss.backward()
        opt.step()
        cpu.append(time.thread_time() - c)
        times.append(time.perf_counter() - t)
        nodes.append(batch.num_nodes)
        edges.append(batch.edge_index.shape[1])
    return np.array(times), np.array(cpu), np.array(nodes), np.array(edges)


def spread(comm, values):
    """Per step: max over ranks / mean over ranks; (median, mean, sum(max)/sum(mean))."""
    every = np.array(comm.allgather(values), dtype=np.float64)  # (ranks, steps)
    ratio = every.max(axis=0) / every.mean(axis=0)
    return float(np.median(ratio)), float(ratio.mean()), float(every.max(axis=0).sum() / every.mean(axis=0).sum())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pack", required=True)
    p.add_argument("--graphs", type=int, default=0, help="the first N molecules (0: all)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--budget", type=int, default=0, help="nodes a batch (0: batch x mean nodes)")
    p.add_argument("--epochs", type=int, default=3, help="epochs of each variant, alternated")
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    comm = MPI.COMM_WORLD
    t = time.perf_counter()
    ds = DistDataset(Pack(args.pack, args.graphs), "qm9", comm)
    counts = ds.get_node_counts()
    budget = args.budget or int(round(args.batch * counts.mean()))
    loaders = {
        "fixed": DataLoader(ds, batch_size=args.batch, shuffle=True, seed=1),
        "budget": DataLoader(ds, node_budget=budget, shuffle=True, seed=1),
    }
    if comm.rank == 0:
        print(f"{len(ds)} graphs ({counts.min()}-{counts.max()} atoms, mean {counts.mean():.2f}), {comm.size} ranks, "
              f"{MPI.Get_library_version().splitlines()[0]}; ready in {time.perf_counter() - t:.1f} s; batch "
              f"{args.batch}, node_budget {budget}; steps a rank: fixed {len(loaders['fixed'])}, budget "
              f"{len(loaders['budget'])}", flush=True)
    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    results = {name: [] for name in loaders}
    for epoch in range(args.epochs):
        for name, loader in loaders.items():
            times, cpu, nodes, edges = one_epoch(loader, model, opt, epoch)
            row = (spread(comm, times), spread(comm, cpu), spread(comm, nodes), spread(comm, edges),
                   comm.allreduce(times.sum(), op=MPI.MAX))
            results[name].append(row)
            if comm.rank == 0:
                (tm, _, tw), (cm, _, cw), (nm, _, nw), (em, _, ew), total = row
                print(f"epoch {epoch} {name:6s}: max/mean over ranks, median over steps (sum of max / sum of mean): "
                      f"wall {tm:.3f} ({tw:.3f}), cpu {cm:.3f} ({cw:.3f}), nodes {nm:.3f} ({nw:.3f}), edges "
                      f"{em:.3f} ({ew:.3f}); compute {total:.1f} s (slowest rank)", flush=True)
    if comm.rank == 0:
        print("medians over epochs of: per-step max/mean over ranks, median over steps / sum(max)/sum(mean)")
        med = {}
        for name, rows in results.items():
            med[name] = [float(np.median([r[k][j] for r in rows])) for k in range(4) for j in (0, 2)]
            print(f"  {name:6s}: " + "; ".join(f"{what} {med[name][2 * k]:.3f} / {med[name][2 * k + 1]:.3f}"
                                               for k, what in enumerate(("wall", "cpu", "nodes", "edges"))))
        f, b = med["fixed"], med["budget"]
        print("  fixed / budget: " + "; ".join(f"{what} {f[2 * k] / b[2 * k]:.3f} / {f[2 * k + 1] / b[2 * k + 1]:.3f}"
                                              for k, what in enumerate(("wall", "cpu", "nodes", "edges"))))
    ds.close()


if __name__ == "__main__":
    main()
