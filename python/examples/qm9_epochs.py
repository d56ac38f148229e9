#!/usr/bin/env python3
"""QM9 sharded across ranks with MDLoader: epochs of shuffled batches per engine.

Each rank reads only its contiguous slice of a converted QM9 pack file
(`python -m mdloader.qm9 convert qm9.qm9g`, see docs/qm9_format.md) and registers it;
then, for each engine (one-sided, collective, automatic), it runs epochs of globally
shuffled mini-batches the way a GNN training loop reads them (mdloader.DataLoader: every
rank its share of the epoch, batch_size molecules per rank per step) and reports the
aggregate samples/s and MB/s (all ranks' samples over the slowest rank's time).
With --decode every batch is also turned into a PyG-style disjoint graph (mdloader.qm9.collate),
which is what a trainer would do next; every record's row is checked against its id.

    mpirun -n 4 python qm9_epochs.py target/qm9/qm9.qm9g [--epochs 2] [--batch-size 128]
        [--engines onesided,collective,auto] [--max-steps N] [--warmup-steps 20] [--decode]
        [--sampler python|library] [--prefetch K]
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

import mdloader
from mdloader import qm9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pack", type=Path, help="a QM9 pack file (python -m mdloader.qm9 convert OUT)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=128, help="molecules per rank per step")
    ap.add_argument("--engines", default="onesided,collective,auto")
    ap.add_argument("--max-steps", type=int, default=0, help="stop each epoch after this many steps (0: all)")
    ap.add_argument("--warmup-steps", type=int, default=20, help="untimed steps per engine before its epochs")
    ap.add_argument("--decode", action="store_true", help="also decode every batch into a graph batch")
    ap.add_argument("--sampler", choices=["python", "library"], default="python",
                    help="mdloader.DataLoader's sampler: python (fetch per step) or the library's built-in one")
    ap.add_argument("--prefetch", type=int, default=0, help="with --sampler library: batches fetched ahead")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    t0 = time.perf_counter()
    data, offsets, first = qm9.load_slice(args.pack, rank, size)
    t_read = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    bad = 0
    with mdloader.Loader(comm) as ld:
        t0 = time.perf_counter()
        ld.register_shard(data, offsets)
        t_register = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        shard_bytes = int(offsets[-1])
        del data
        if rank == 0:
            total_bytes = comm.reduce(shard_bytes)
            print(
                f"QM9: {ld.num_samples} molecules, {total_bytes / 1e6:.1f} MB over {size} ranks; "
                f"read slices {t_read:.2f} s, register {t_register:.2f} s (incl. the loader's calibration)"
            )
            print(f"{'engine':<11} {'epochs':>6} {'steps':>6} {'samples':>9} {'seconds':>8} {'samples/s':>11} {'MB/s':>8}")
        else:
            comm.reduce(shard_bytes)
        for engine in args.engines.split(","):
            ld.set_backend(engine)
            if args.sampler == "library":
                loader = ld.batches(args.batch_size, shuffle=True, seed=args.seed, drop_last=True,
                                    sampler="library", prefetch=args.prefetch, reuse_buffer=True)
            else:
                loader = ld.batches(args.batch_size, shuffle=True, seed=args.seed, drop_last=True, reuse_buffer=True,
                                    sampler="python")
            steps = len(loader) if not args.max_steps else min(len(loader), args.max_steps)
            samples = nbytes = 0
            elapsed = 0.0
            # Untimed warm-up (first touch of buffers, the estimator's first steps).
            loader.set_epoch(1_000_000)
            warm = iter(loader)
            for _ in range(min(args.warmup_steps, len(loader))):
                next(warm)
            warm.close()
            if args.sampler == "library":
                ld.end_epoch()
            for epoch in range(args.epochs):
                loader.set_epoch(epoch)
                comm.Barrier()
                start = time.perf_counter()
                it = iter(loader)
                for _ in range(steps):
                    batch = next(it)
                    samples += len(batch)
                    nbytes += batch.nbytes
                    if args.decode:
                        graph = qm9.collate(batch)
                        bad += int(np.count_nonzero(graph["row"] != batch.ids.astype(np.int64)))
                    else:
                        # the cheapest check: the record's row (offset 16) is its id
                        for k in (0, len(batch) - 1):
                            bad += int(batch[k][16:20].view("<u4")[0] != batch.ids[k])
                elapsed += time.perf_counter() - start
                it.close()
                if args.sampler == "library":
                    ld.end_epoch()  # stopped early (or at the end): close the epoch on every rank
            slowest = comm.allreduce(elapsed, op=MPI.MAX)
            all_samples = comm.allreduce(samples)
            all_bytes = comm.allreduce(nbytes)
            if rank == 0:
                print(
                    f"{engine:<11} {args.epochs:>6} {steps:>6} {all_samples:>9} {slowest:>8.3f} "
                    f"{all_samples / slowest:>11,.0f} {all_bytes / slowest / 1e6:>8.1f}"
                )
        stats = ld.stats()
    bad = comm.allreduce(bad)
    if rank == 0:
        if stats:
            cal = stats.get("calibration", {})
            print(
                f"rank 0 loader stats: {stats.get('steps')} steps; one-sided {stats['onesided']['steps']}, "
                f"collective {stats['collective']['steps']}; decisions {stats.get('decisions')}, "
                f"probes {stats.get('probes')}, switches {stats.get('switches')}; calibration {cal.get('source')} "
                f"({cal.get('seconds', 0):.2f} s)"
            )
        print("all fetched records matched their ids" if bad == 0 else f"{bad} records did NOT match their ids")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
