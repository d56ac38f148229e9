#!/usr/bin/env python3
"""A message-passing network trained on QM9's HOMO-LUMO gap with DDP, fed by MDLoader
through torch's own DataLoader (mdloader.torch), or, for comparison, by torch's
DataLoader over an in-memory list of every training molecule on each rank.

    mpirun -n 4 python qm9_gnn.py target/qm9/qm9.qm9g [--train 8192] [--val 1024]
        [--epochs 3] [--batch-size 64] [--collate thread|workers|main] [--feeder mdloader|list] [--max-steps N]

The model is plain torch (no PyTorch Geometric): atom embeddings, continuous-filter
convolutions over the records' radius graph (SchNet's idea at a small size), a sum per
molecule. DDP averages gradients over gloo. Each rank registers only its slice of the
training molecules (rows [0, train)) and of the validation molecules (rows [train,
train + val)); every epoch it reports the validation MAE in eV over all validation
molecules, the training loop's samples/s (all ranks' samples over the slowest rank's
time), the time the loop waited for data and, with mdloader, the library's fetch time
(its own statistics). The last line is ``RESULT {json}`` with every figure.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

import mdloader
import mdloader.torch as mdt
from mdloader import qm9
from mdloader.ddp import end_gloo, init_gloo
from mdloader.qm9_graph import collate_records

HARTREE_EV = 27.211386


class GapNet(nn.Module):
    """Embeddings of atomic numbers, `layers` continuous-filter convolutions over the
    edges (distances expanded in Gaussians, smoothly cut off), a sum per molecule."""

    def __init__(self, hidden: int = 64, layers: int = 3, gaussians: int = 16, cutoff: float = 5.0):
        super().__init__()
        self.embed = nn.Embedding(10, hidden)
        self.register_buffer("centers", torch.linspace(0.0, cutoff, gaussians))
        self.gamma = (gaussians / cutoff) ** 2
        self.cutoff = cutoff
        self.filters = nn.ModuleList(
            nn.Sequential(nn.Linear(gaussians, hidden), nn.SiLU(), nn.Linear(hidden, hidden)) for _ in range(layers)
        )
        self.updates = nn.ModuleList(
            nn.Sequential(nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, hidden)) for _ in range(layers)
        )
        self.readout = nn.Sequential(nn.Linear(hidden, hidden // 2), nn.SiLU(), nn.Linear(hidden // 2, 1))

    def forward(self, g: dict) -> torch.Tensor:
        src, dst = g["edge_index"]
        d = (g["pos"][src] - g["pos"][dst]).norm(dim=1)
        envelope = 0.5 * (torch.cos(d * (torch.pi / self.cutoff)) + 1.0)
        rbf = torch.exp(-self.gamma * (d[:, None] - self.centers) ** 2) * envelope[:, None]
        h = self.embed(g["z"])
        for conv, update in zip(self.filters, self.updates):
            messages = h[src] * conv(rbf)
            h = h + update(torch.zeros_like(h).index_add_(0, dst, messages))
        per_atom = self.readout(h).squeeze(-1)
        return torch.zeros(len(g["y"]), dtype=per_atom.dtype).index_add_(0, g["batch"], per_atom)


def graph_tensors(records: np.ndarray, offsets: np.ndarray) -> dict:
    """The vectorised collate, as tensors (torch.from_numpy: no copy)."""
    return {k: torch.from_numpy(v) for k, v in collate_records(records, offsets).items()}


def collate_samples(samples: mdt.Samples) -> dict:
    """collate_fn for mdloader.torch: the batch's bytes are already one buffer."""
    return graph_tensors(samples.array, samples.np_offsets)


def collate_list(records: list) -> dict:
    """collate_fn for the baseline: the records are separate arrays, joined first."""
    sizes = np.fromiter((r.size for r in records), dtype=np.int64, count=len(records))
    offsets = np.zeros(len(records) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return graph_tensors(np.concatenate(records), offsets)


def read_rows(pack: Path, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Records lo .. hi - 1 of a pack file: (bytes, offsets from 0)."""
    index = qm9.read_index(pack)
    start, stop = int(index.offsets[lo]), int(index.offsets[hi])
    with open(pack, "rb") as f:
        f.seek(index.data_start + start)
        data = np.fromfile(f, dtype=np.uint8, count=stop - start)
    return data, (index.offsets[lo : hi + 1] - index.offsets[lo]).astype(np.int64)


def my_rows(lo: int, hi: int, rank: int, size: int) -> tuple[int, int]:
    n = hi - lo
    return lo + n * rank // size, lo + n * (rank + 1) // size


def fetch_seconds(ld: mdloader.Loader) -> float:
    """The library's time fetching so far: its engines' steps and, with MDL_NODE_LOCAL=on,
    its copies out of the node's shared memory (which also count the rank's own samples:
    an upper bound)."""
    s = ld.stats()
    return s["onesided"]["seconds"] + s["collective"]["seconds"] + s.get("node_local", {}).get("seconds", 0.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pack", type=Path)
    ap.add_argument("--train", type=int, default=0, help="training molecules (rows 0 ..); 0: all but --val")
    ap.add_argument("--val", type=int, default=4096, help="validation molecules (the rows after the training ones)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64, help="molecules per rank per step")
    ap.add_argument("--max-steps", type=int, default=0, help="training steps per epoch (0: the whole epoch)")
    ap.add_argument("--feeder", choices=["mdloader", "list"], default="mdloader")
    ap.add_argument("--collate", choices=["thread", "workers", "main"], default="thread",
                    help="where batches are collated: a background thread (mdloader.torch.BackgroundLoader), "
                         "torch's worker processes (--workers), or the training thread")
    ap.add_argument("--workers", type=int, default=1, help="with --collate workers: DataLoader worker processes")
    ap.add_argument("--prefetch", type=int, default=2, help="batches the library fetches ahead (mdloader)")
    ap.add_argument("--sharing", choices=["file_descriptor", "file_system"], default=None,
                    help="how worker processes hand tensors over (torch.multiprocessing's sharing strategy)")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless the validation MAE after the last epoch is below the one after the first")
    args = ap.parse_args()

    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    torch.set_num_threads(1)  # ranks share the cores
    if args.sharing:
        torch.multiprocessing.set_sharing_strategy(args.sharing)
    torch.manual_seed(args.seed)
    init_gloo(comm)
    n_total = qm9.read_index(args.pack).n_records
    n_train = args.train or n_total - args.val
    if n_train + args.val > n_total:
        raise SystemExit(f"--train + --val = {n_train + args.val} > {n_total} molecules in {args.pack}")

    train_ld = mdloader.Loader(comm)
    val_ld = mdloader.Loader(comm)
    data, offsets = read_rows(args.pack, *my_rows(0, n_train, rank, size))
    train_ld.register_shard(data, offsets)
    # Targets standardised with the training set's mean and spread (exact, all ranks).
    gaps = collate_records(data, offsets)["y"].astype(np.float64) * HARTREE_EV
    n, s1, s2 = comm.allreduce(np.array([gaps.size, gaps.sum(), (gaps**2).sum()]))
    mean, std = s1 / n, float(np.sqrt(s2 / n - (s1 / n) ** 2))
    del data, offsets, gaps
    val_ld.register_shard(*read_rows(args.pack, *my_rows(n_train, n_train + args.val, rank, size)))

    workers = args.workers if args.collate == "workers" else 0
    loader_kw = dict(num_workers=workers, persistent_workers=workers > 0, prefetch_factor=2 if workers else None)
    if args.feeder == "mdloader":
        train_ds = mdt.ShardDataset(train_ld)
        sampler = mdt.DistributedBatchSampler(train_ds, args.batch_size, shuffle=True, seed=args.seed,
                                              drop_last=True, prefetch=args.prefetch)
        train = DataLoader(train_ds, batch_sampler=sampler, collate_fn=collate_samples, **loader_kw)
    else:
        # The baseline: every rank holds every training molecule in a list.
        data, offsets = read_rows(args.pack, 0, n_train)
        records = [data[offsets[k] : offsets[k + 1]] for k in range(n_train)]
        sampler = DistributedSampler(records, num_replicas=size, rank=rank, shuffle=True, seed=args.seed,
                                     drop_last=True)
        batches = BatchSampler(sampler, args.batch_size, drop_last=True)
        train = DataLoader(records, batch_sampler=batches, collate_fn=collate_list, **loader_kw)
    if args.collate == "thread":
        train = mdt.BackgroundLoader(train, depth=2)
    val_ds = mdt.ShardDataset(val_ld)
    val_sampler = mdt.DistributedBatchSampler(val_ds, 256, shuffle=False, drop_last=False, prefetch=0)
    val = DataLoader(val_ds, batch_sampler=val_sampler, collate_fn=collate_samples)

    model = nn.parallel.DistributedDataParallel(GapNet(args.hidden, args.layers))
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    def validate() -> float:
        """MAE in eV over every validation molecule once (the padding repeats a few)."""
        model.eval()
        rows, errors = [], []
        with torch.no_grad():
            for g in val:
                pred = model(g) * std + mean
                errors.append((pred - g["y"] * HARTREE_EV).abs().numpy())
                rows.append(g["row"].numpy())
        model.train()
        rows = np.concatenate(comm.allgather(np.concatenate(rows)))
        errors = np.concatenate(comm.allgather(np.concatenate(errors)))
        _, first = np.unique(rows, return_index=True)
        assert first.size == args.val, (first.size, args.val)
        return float(errors[first].mean())

    steps = len(train) if not args.max_steps else min(len(train), args.max_steps)
    epochs = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        fetched_before = fetch_seconds(train_ld) if args.feeder == "mdloader" else 0.0
        comm.Barrier()
        started = time.perf_counter()
        waited = loss_sum = 0.0
        samples = 0
        it = iter(train)
        for _ in range(steps):
            t = time.perf_counter()
            g = next(it)
            waited += time.perf_counter() - t
            if samples == 0:
                first_wait = waited  # the epoch's first batch: nothing to overlap it with
            target = (g["y"].double() * HARTREE_EV - mean) / std
            loss = nn.functional.l1_loss(model(g), target.float())
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum += float(loss.detach())
            samples += len(g["y"])
            # The batch is freed here, inside the step, so that the wait measured above is
            # only the wait for the next batch (freeing one costs about a millisecond).
            g = loss = None
        elapsed = time.perf_counter() - started
        del it  # stopping early: the next epoch begins a new one on every rank (mdloader refuses nothing)
        fetched = fetch_seconds(train_ld) - fetched_before if args.feeder == "mdloader" else float("nan")
        slowest = comm.allreduce(elapsed, op=MPI.MAX)
        record = {
            "epoch": epoch,
            "steps": steps,
            "train_l1": loss_sum / steps,
            "val_mae_ev": validate(),
            "samples_per_s": comm.allreduce(samples) / slowest,
            "wait_s": comm.allgather(waited),
            "first_wait_s": comm.allgather(first_wait),
            "fetch_s": comm.allgather(fetched),
            "loop_s": slowest,
        }
        epochs.append(record)
        if rank == 0:
            ratio = max(w / f for w, f in zip(record["wait_s"], record["fetch_s"])) if args.feeder == "mdloader" else 0
            print(
                f"epoch {epoch}: {steps} steps, train L1 {record['train_l1']:.3f} (std units), val MAE "
                f"{record['val_mae_ev']:.3f} eV, {record['samples_per_s']:.0f} samples/s, waited for data "
                f"{max(record['wait_s']):.3f} s (slowest rank; first batch {max(record['first_wait_s']):.3f} s)"
                + (f", library fetch {max(record['fetch_s']):.3f} s, wait/fetch {ratio:.2f} (worst rank)"
                   if args.feeder == "mdloader" else ""),
                flush=True,
            )
    summary = {
        "feeder": args.feeder, "ranks": size, "mpi": MPI.Get_library_version().splitlines()[0].strip(),
        "collate": args.collate, "workers": workers, "batch_size": args.batch_size, "train": n_train, "val": args.val,
        "torch": torch.__version__, "epochs": epochs,
    }
    del train, val  # worker processes end before the loaders close
    train_ld.close()
    val_ld.close()
    end_gloo(comm)
    return report(summary, args.check, rank)


def report(summary: dict, check: bool, rank: int) -> int:
    """Print ``RESULT {json}`` on rank 0; with ``check``, 1 unless the validation MAE
    fell from the first epoch to the last (every rank returns the same)."""
    if rank == 0:
        print("RESULT " + json.dumps(summary), flush=True)
    maes = [e["val_mae_ev"] for e in summary["epochs"]]
    if check and not (len(maes) >= 2 and maes[-1] < maes[0]):
        if rank == 0:
            print(f"the validation MAE did not decrease over the epochs: {maes}", flush=True)
        return 1
    if check and rank == 0:
        print(f"learned: validation MAE {maes[0]:.3f} -> {maes[-1]:.3f} eV over {len(maes)} epochs", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
