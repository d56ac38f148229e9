#!/usr/bin/env python3
"""torch_geometric's SchNet trained on QM9's HOMO-LUMO gap with DDP over gloo, fed by
mdloader.pyg (torch_geometric Batch objects from the library's sampler), or, for
comparison, by torch_geometric's own DataLoader over an in-memory list of every training
graph on each rank with a DistributedSampler.

    mpirun -n 2 python qm9_schnet.py target/qm9/qm9.qm9g [--train 8192] [--val 1024] [--epochs 3]
        [--batch-size 64] [--feeder mdloader|pyg] [--check]

Each rank turns only its slice of the QM9 records (python -m mdloader.qm9 convert) into
torch_geometric ``Data`` objects (z, pos, the record's radius edges, y = the gap in eV,
row) and registers them (``DistDataset(..., local=True)``). SchNet's interaction graph is
computed in plain torch within each molecule (torch_geometric's default needs the
compiled pyg-lib). Every epoch prints the validation MAE in eV over all validation
molecules, samples/s (all ranks' samples over the slowest rank's loop), the time the
loop waited for data and, with mdloader, the library's fetch time; the last line is
``RESULT {json}``. --check: exit 1 unless the validation MAE fell.
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI
from torch.utils.data.distributed import DistributedSampler
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader as PygDataLoader
from torch_geometric.nn.models import SchNet

import mdloader.pyg as mdpyg
from mdloader import qm9
from mdloader.ddp import end_gloo, init_gloo
from qm9_gnn import my_rows, report  # the same slicing and report as the plain-torch GNN

HARTREE_EV = 27.211386


def radius_within_molecules(cutoff: float):
    """SchNet's interaction graph in plain torch: every pair of atoms of one molecule
    closer than ``cutoff`` (QM9's molecules have at most 29 atoms)."""

    def graph(pos: torch.Tensor, batch: torch.Tensor):
        d = torch.cdist(pos, pos)
        near = (batch[:, None] == batch[None, :]) & (d < cutoff)
        near.fill_diagonal_(False)
        src, dst = near.nonzero(as_tuple=True)
        return torch.stack([src, dst]), d[src, dst]

    return graph


def graphs_of(pack: Path, lo: int, hi: int) -> list:
    """Records lo .. hi - 1 as torch_geometric Data objects."""
    index = qm9.read_index(pack)
    start, stop = int(index.offsets[lo]), int(index.offsets[hi])
    with open(pack, "rb") as f:
        f.seek(index.data_start + start)
        data = np.fromfile(f, dtype=np.uint8, count=stop - start)
    offsets = index.offsets[lo : hi + 1] - index.offsets[lo]
    out = []
    for k in range(hi - lo):
        m = qm9.decode(data[int(offsets[k]) : int(offsets[k + 1])])
        out.append(Data(z=torch.from_numpy(m.z.astype(np.int64)), pos=torch.from_numpy(m.pos.copy()),
                        edge_index=torch.from_numpy(m.edge_index.astype(np.int64)),
                        y=torch.tensor([m.gap * HARTREE_EV], dtype=torch.float32), row=m.row))
    return out


def fetch_seconds(dataset: mdpyg.DistDataset) -> float:
    """The library's fetch time so far (engines and node-local copies)."""
    s = dataset.loader.stats()
    return s["onesided"]["seconds"] + s["collective"]["seconds"] + s.get("node_local", {}).get("seconds", 0.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pack", type=Path)
    ap.add_argument("--train", type=int, default=8192)
    ap.add_argument("--val", type=int, default=1024)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64, help="molecules per rank per step")
    ap.add_argument("--feeder", choices=["mdloader", "pyg"], default="mdloader")
    ap.add_argument("--collate-ahead", type=int, default=2,
                    help="mdloader: batches collated ahead on the loader's thread (0: in the loop)")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--interactions", type=int, default=3)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", action="store_true", help="exit 1 unless the validation MAE fell over the epochs")
    args = ap.parse_args()

    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    torch.set_num_threads(1)  # ranks share the cores
    torch.manual_seed(args.seed)
    init_gloo(comm)
    if args.train + args.val > qm9.read_index(args.pack).n_records:
        raise SystemExit("--train + --val is more than the pack holds")

    mine = graphs_of(args.pack, *my_rows(0, args.train, rank, size))
    gaps = np.array([float(g.y) for g in mine])
    n, s1, s2 = comm.allreduce(np.array([gaps.size, gaps.sum(), (gaps**2).sum()]))
    mean, std = s1 / n, float(np.sqrt(s2 / n - (s1 / n) ** 2))
    trainset = mdpyg.DistDataset(mine, "trainset", comm, local=True)
    valset = mdpyg.DistDataset(graphs_of(args.pack, *my_rows(args.train, args.train + args.val, rank, size)),
                               "valset", comm, local=True)
    if args.feeder == "mdloader":
        train = mdpyg.DataLoader(trainset, batch_size=args.batch_size, shuffle=True, seed=args.seed, drop_last=True,
                                 collate_ahead=args.collate_ahead)
        set_epoch = train.set_epoch
    else:
        # The baseline: every rank holds every training graph in a list.
        everything = graphs_of(args.pack, 0, args.train)
        sampler = DistributedSampler(everything, num_replicas=size, rank=rank, shuffle=True, seed=args.seed,
                                     drop_last=True)
        train = PygDataLoader(everything, batch_size=args.batch_size, sampler=sampler, drop_last=True)
        set_epoch = sampler.set_epoch
    val = mdpyg.DataLoader(valset, batch_size=256, prefetch=0)

    model = torch.nn.parallel.DistributedDataParallel(
        SchNet(hidden_channels=args.hidden, num_filters=args.hidden, num_interactions=args.interactions,
               num_gaussians=25, cutoff=5.0, interaction_graph=radius_within_molecules(5.0)))
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    def validate() -> float:
        model.eval()
        rows, errors = [], []
        with torch.no_grad():
            for b in val:
                pred = model(b.z, b.pos, b.batch).squeeze(-1) * std + mean
                errors.append((pred - b.y).abs().numpy())
                rows.append(b.row.numpy())
        model.train()
        rows = np.concatenate(comm.allgather(np.concatenate(rows)))
        errors = np.concatenate(comm.allgather(np.concatenate(errors)))
        _, first = np.unique(rows, return_index=True)  # the padding repeats a few
        assert first.size == args.val, (first.size, args.val)
        return float(errors[first].mean())

    epochs = []
    # The fetch time is read once between epochs: the next epoch's first batches are
    # fetched ahead while this one validates, and count in the epoch that reads them.
    fetched_until = fetch_seconds(trainset) if args.feeder == "mdloader" else 0.0
    for epoch in range(args.epochs):
        set_epoch(epoch)
        comm.Barrier()
        started = time.perf_counter()
        waited = loss_sum = 0.0
        samples = steps = 0
        it = iter(train)
        while True:
            t = time.perf_counter()
            b = next(it, None)
            waited += time.perf_counter() - t
            if b is None:
                break
            if steps == 0:
                first_wait = waited  # the epoch's first batch: nothing to overlap it with
            pred = model(b.z, b.pos, b.batch).squeeze(-1)
            loss = torch.nn.functional.l1_loss(pred, (b.y - mean) / std)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum += float(loss.detach())
            samples += b.num_graphs
            steps += 1
        elapsed = time.perf_counter() - started
        if args.feeder == "mdloader":
            fetched_before, fetched_until = fetched_until, fetch_seconds(trainset)
            fetched = fetched_until - fetched_before
        else:
            fetched = float("nan")
        slowest = comm.allreduce(elapsed, op=MPI.MAX)
        record = {"epoch": epoch, "steps": steps, "train_l1": loss_sum / max(steps, 1), "val_mae_ev": validate(),
                  "samples_per_s": comm.allreduce(samples) / slowest, "wait_s": comm.allgather(waited),
                  "first_wait_s": comm.allgather(first_wait),
                  "fetch_s": comm.allgather(fetched), "loop_s": slowest}
        epochs.append(record)
        if rank == 0:
            line = (f"epoch {epoch}: {steps} steps, val MAE {record['val_mae_ev']:.3f} eV, "
                    f"{record['samples_per_s']:.0f} samples/s, waited for data {max(record['wait_s']):.3f} s (slowest rank; "
                    f"first batch {max(record['first_wait_s']):.3f} s)")
            if args.feeder == "mdloader":
                ratio = max(w / f for w, f in zip(record["wait_s"], record["fetch_s"]))
                line += f", library fetch {max(record['fetch_s']):.3f} s, wait/fetch {ratio:.2f} (worst rank)"
            print(line, flush=True)
    summary = {"feeder": args.feeder, "ranks": size, "mpi": MPI.Get_library_version().splitlines()[0].strip(),
               "batch_size": args.batch_size, "train": args.train, "val": args.val, "epochs": epochs}
    trainset.close()
    valset.close()
    end_gloo(comm)
    return report(summary, args.check, rank)


if __name__ == "__main__":
    sys.exit(main())
