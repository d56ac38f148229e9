#!/usr/bin/env python3
"""mdloader.DataLoader's two samplers side by side: which one should be the default.

    python                 one blocking Loader.fetch per step (mdl_fetch_batch: every
                           step waits for its own agreement, i.e. for the slowest rank),
                           into a buffer of the batch's own
    library                the library's epoch (mdl_next_batch): steps agreed ahead, no
                           blocking collective per step; each batch copied out of the
                           library's memory into its own (the default's lifetime)
    library, reuse_buffer  the same, the batches the library's memory (valid until the
                           next one, no copy)
    library, prefetch 2    "library", two batches fetched ahead on the library's thread

Every variant reads the same data through one Loader, one whole epoch per round, the
variants' epochs interleaved in an order drawn anew each round (the same on every rank)
so that load from other jobs hits them alike. Between two batches each rank "computes"
for compute +- jitter us (a sleep, as a GPU step leaves the core idle; uniform, different
on every rank): the lateness a blocking fetch waits for. Each rank holds --samples
samples of 1-3 KB; the first byte of every sample of every batch is checked.

Figures per variant and batch size (medians over rounds): the slowest rank's epoch time
over its steps (what the loop costs per step: compute, the epoch's start and every
stall included) and the slowest rank's median wait in ``next`` (a typical step's
exposed loading time, stalls left out). Output: a table on rank 0 and, with --csv, one row
per variant and batch.

    mpirun -n 2 python benches/python_sampler/sampler_bench.py [--batch 64 256]
        [--rounds 15] [--compute-us 200] [--jitter-us 100] [--csv FILE]
"""

import argparse
import csv
import random
import statistics
import time

import numpy as np
from mpi4py import MPI

import mdloader


def samples_of(rank: int, count: int, first_id: int) -> list:
    rng = np.random.default_rng(1000 + rank)
    sizes = rng.integers(1024, 3072, size=count)
    return [np.full(int(s), (first_id + k) % 251, dtype=np.uint8) for k, s in enumerate(sizes)]


def one_epoch(loader, compute_s: float, jitter_s: float, rng: random.Random) -> tuple:
    """(seconds of the whole epoch, each step's wait in next) on this rank."""
    waits = []
    it = iter(loader)
    start = time.perf_counter()
    while True:
        t = time.perf_counter()
        batch = next(it, None)
        if batch is None:
            break
        waits.append(time.perf_counter() - t)
        for k in (0, len(batch) - 1):
            if int(batch[k][0]) != int(batch.ids[k]) % 251:
                raise AssertionError(f"sample {int(batch.ids[k])}: wrong bytes")
        if compute_s:
            time.sleep(max(0.0, compute_s + rng.uniform(-jitter_s, jitter_s)))
    return time.perf_counter() - start, waits


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--samples", type=int, default=8192)
    ap.add_argument("--compute-us", type=float, default=200.0)
    ap.add_argument("--jitter-us", type=float, default=100.0)
    ap.add_argument("--csv")
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank = comm.rank
    rng = random.Random(rank)
    order = random.Random(7)  # the same on every rank
    with mdloader.Loader(comm) as ld:
        first = comm.exscan(a.samples) or 0
        ld.register_shard(samples_of(rank, a.samples, first))
        rows = []
        for batch_size in a.batch:
            kw = dict(shuffle=True, seed=1, drop_last=True)
            variants = {
                "python": mdloader.DataLoader(ld, batch_size, sampler="python", **kw),  # the default until 2026-12-06
                "library": mdloader.DataLoader(ld, batch_size, sampler="library", **kw),  # the default since
                "library, reuse_buffer": mdloader.DataLoader(ld, batch_size, sampler="library", reuse_buffer=True, **kw),
                "library, prefetch 2": mdloader.DataLoader(ld, batch_size, sampler="library", prefetch=2, **kw),
            }
            per_step = {name: [] for name in variants}
            wait = {name: [] for name in variants}
            for _ in range(a.rounds):
                names = list(variants)
                order.shuffle(names)
                for name in names:
                    comm.Barrier()
                    seconds, waits = one_epoch(variants[name], a.compute_us * 1e-6, a.jitter_us * 1e-6, rng)
                    steps = len(waits)
                    per_step[name].append(comm.allreduce(seconds / steps, op=MPI.MAX))
                    wait[name].append(comm.allreduce(statistics.median(waits), op=MPI.MAX))
            for name in variants:
                rows.append({"batch": batch_size, "variant": name,
                             "step_us": statistics.median(per_step[name]) * 1e6,
                             "wait_us": statistics.median(wait[name]) * 1e6})
    if rank == 0:
        print(f"# {comm.size} ranks, {MPI.Get_library_version().splitlines()[0].strip()}, "
              f"{a.samples} samples of 1-3 KB per rank, compute {a.compute_us:g} +- {a.jitter_us:g} us, "
              f"{a.rounds} rounds (medians; the slowest rank)")
        print(f"{'batch':>6} {'variant':<22} {'step us':>9} {'wait us':>9}")
        for r in rows:
            print(f"{r['batch']:>6} {r['variant']:<22} {r['step_us']:>9.1f} {r['wait_us']:>9.1f}")
        if a.csv:
            with open(a.csv, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)


if __name__ == "__main__":
    main()
