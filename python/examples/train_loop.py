#!/usr/bin/env python3
"""A PyTorch-style distributed training loop fed by MDLoader (numpy only, no torch).

Every rank "simulates" its own samples: particle snapshots with a varying number of
particles, stored as float32 records [target, x0, y0, z0, x1, y1, z1, ...]. The target
is a linear function of the snapshot's mean position plus noise. The shards are
registered with MDLoader, and each epoch every rank reads its share of a global shuffle
in batches (mdloader.DataLoader, like torch's DataLoader + DistributedSampler), computes
the gradient of a linear model on its batch, and the gradients are averaged over the
ranks with an allreduce (as DistributedDataParallel does). The model converges to the
true weights, which the script checks at the end (exit status 1 if not).

    mpirun -n 4 python train_loop.py [--epochs 5] [--batch-size 32] [--backend auto]

With PyTorch, `torch.from_numpy(batch.view(k, np.float32))` turns a sample into a tensor
without copying.
"""

import argparse
import sys
import time

import numpy as np
from mpi4py import MPI

import mdloader

TRUE_W = np.array([0.5, -1.25, 2.0, 0.75], dtype=np.float64)  # weights of mean x, y, z and the bias


def simulate(rank, count, seed=0):
    """This rank's snapshots: float32 [target, positions...], 3 to 40 particles each."""
    rng = np.random.default_rng([seed, rank])
    samples = []
    for _ in range(count):
        n = int(rng.integers(3, 41))
        pos = rng.normal(loc=rng.normal(size=3), scale=0.5, size=(n, 3))
        target = TRUE_W[:3] @ pos.mean(axis=0) + TRUE_W[3] + rng.normal(scale=0.01)
        samples.append(np.concatenate(([target], pos.ravel())).astype(np.float32))
    return samples


def features(batch):
    """(B, 4) features [mean x, mean y, mean z, 1] and (B,) targets of a batch (the
    sample views are read in place)."""
    x = np.empty((len(batch), 4))
    y = np.empty(len(batch))
    for k in range(len(batch)):
        rec = batch.view(k, np.float32)
        y[k] = rec[0]
        x[k, :3] = rec[1:].reshape(-1, 3).mean(axis=0)
        x[k, 3] = 1.0
    return x, y


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples-per-rank", type=int, default=2000)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--backend", default="auto", choices=["auto", "onesided", "collective"])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    # Ranks produce different amounts of data: the loader does not care.
    samples = simulate(rank, args.samples_per_rank + 37 * rank, args.seed)

    with mdloader.Loader(comm, backend=args.backend) as ld:
        ld.register_shard(samples)
        del samples  # the loader holds its own copy
        loader = mdloader.DataLoader(ld, batch_size=args.batch_size, shuffle=True, seed=args.seed, drop_last=True)
        if rank == 0:
            print(f"{size} ranks, {ld.num_samples} samples, {len(loader)} steps per epoch, backend {args.backend}")
        w = np.zeros(4)
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            comm.Barrier()
            t0 = time.perf_counter()
            loss_sum = np.zeros(2)
            fetched = 0
            for batch in loader:  # one collective step per batch (the library's sampler), the same count on every rank
                x, y = features(batch)
                err = x @ w - y
                grad = np.empty(4)
                comm.Allreduce(x.T @ err / len(y), grad)  # average the gradients, as DDP does
                w -= args.lr * grad / size
                loss_sum += (float(err @ err), len(y))
                fetched += len(batch)
            elapsed = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            total = comm.allreduce(loss_sum)
            fetched = comm.allreduce(fetched)
            if rank == 0:
                print(
                    f"epoch {epoch}: mse {total[0] / total[1]:.6f}, {fetched} samples in {elapsed:.3f} s "
                    f"({fetched / elapsed:,.0f} samples/s incl. training)"
                )
        stats = ld.stats()
    ok = np.allclose(w, TRUE_W, atol=0.05)
    ok = comm.allreduce(ok, op=MPI.LAND)
    if rank == 0:
        print(f"learned w = {np.round(w, 3).tolist()}, true w = {TRUE_W.tolist()}: {'ok' if ok else 'NOT CONVERGED'}")
        if stats:
            print(
                f"rank 0 loader stats: {stats.get('steps')} steps, one-sided {stats['onesided']['steps']}, "
                f"collective {stats['collective']['steps']}"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
