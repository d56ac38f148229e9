#!/usr/bin/env python3
"""QM9 epochs through replica groups of one node, against the engines, side by side.

Run on several (emulated) hosts, every rank reading its part of a converted QM9 pack
(`python -m mdloader.qm9 convert`). Five variants read shuffled epochs of the built-in
sampler (batch --batch-size per rank, drop_last), their epochs interleaved (epoch e of
every variant, in an order drawn anew per epoch) so that load from other jobs hits
them alike:

    onesided    the dataset sharded over the job, MDL_NODE_LOCAL=off, engine forced
    collective  the same loader, collective engine forced
    auto        the same loader, AUTO
    node        sharded over the job, MDL_NODE_LOCAL=on, AUTO: a mixed step (the node's
                samples copied out of shared memory, the rest through the engine)
    replica     one replica group per node (mdl_init_replicated(comm, 0)),
                MDL_NODE_LOCAL=on, AUTO: every sample read from the node's shared memory

Per variant: samples/s of the whole job (all ranks' samples over the slowest rank's
time), the bytes the engines moved (the library's statistics) and the bytes the hosts'
network interface (--iface) sent during the variant's epochs (/sys/class/net counters,
read by one rank per node between barriers: MPI's own traffic, agreements included).
Every record's row (its id) is checked. Output: a table on rank 0 and, with --csv, one
row per variant.

    mpirun ... python benches/qm9_replica/qm9_replica.py PACK [--epochs 3]
        [--batch-size 128] [--iface mdlnv0] [--csv FILE]
"""

import argparse
import csv
import os
import random
import time
from pathlib import Path

import mpi4py

# Open MPI's osc pt2pt (the one-sided component between the emulated hosts) refuses
# windows under MPI_THREAD_MULTIPLE, mpi4py's default; no prefetch thread is used here.
mpi4py.rc.thread_level = "funneled"
from mpi4py import MPI  # noqa: E402

import mdloader  # noqa: E402
from mdloader import qm9  # noqa: E402

VARIANTS = ["onesided", "collective", "auto", "node", "replica"]


def tx_bytes(iface):
    """Bytes this host's interface sent so far (None where it does not exist)."""
    try:
        return int(Path(f"/sys/class/net/{iface}/statistics/tx_bytes").read_text())
    except OSError:
        return None


def open_loader(comm, pack, node_local, group_size=None):
    """A registered loader; the node-local setting is agreed at init, so every rank sets
    it alike before."""
    os.environ["MDL_NODE_LOCAL"] = "on" if node_local else "off"
    ld = mdloader.Loader(comm, group_size=group_size)
    info = ld.replica
    data, offsets, _ = qm9.load_slice(pack, info.rank_in_group, info.group_size)
    ld.register_shard(data, offsets)
    return ld


def engine_bytes(stats):
    """Bytes this rank received through the engines (not its own, not the node's)."""
    return int(stats.get("bytes_remote", 0))


def run_epoch(comm, node_leader, ld, backend, epoch, args):
    """One shuffled epoch: (seconds of the slowest rank, samples, engine bytes, bytes sent
    by the network interfaces of all nodes, wrong records)."""
    ld.set_backend(backend)
    before = engine_bytes(ld.stats())
    loader = ld.batches(args.batch_size, shuffle=True, seed=args.seed, drop_last=True, sampler="library",
                         reuse_buffer=True)  # views of the library's memory, no copy
    loader.set_epoch(epoch)
    comm.Barrier()
    sent = tx_bytes(args.iface) if node_leader else 0
    start = time.perf_counter()
    samples = bad = 0
    for batch in loader:
        samples += len(batch)
        for k in (0, len(batch) - 1):  # a record's row (offset 16) is its id
            bad += int(batch[k][16:20].view("<u4")[0] != batch.ids[k])
    ld.end_epoch()
    elapsed = time.perf_counter() - start
    comm.Barrier()
    after = tx_bytes(args.iface) if node_leader else 0
    sent = None if sent is None or after is None else after - sent
    moved = engine_bytes(ld.stats()) - before
    slowest = comm.allreduce(elapsed, op=MPI.MAX)
    unknown = comm.allreduce(int(sent is None))
    total_sent = None if unknown else comm.allreduce(sent)
    return slowest, comm.allreduce(samples), comm.allreduce(moved), total_sent, comm.allreduce(bad)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pack", type=Path)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=128, help="molecules per rank per step")
    ap.add_argument("--iface", default="mdlnv0", help="the network interface between the hosts")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--csv", type=Path)
    args = ap.parse_args()

    comm = MPI.COMM_WORLD
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    node_leader = node.rank == 0
    nodes = comm.allreduce(int(node_leader))
    sharded = open_loader(comm, args.pack, node_local=False)
    mixed = open_loader(comm, args.pack, node_local=True)
    replica = open_loader(comm, args.pack, node_local=True, group_size=0)
    runs = {
        "onesided": (sharded, "onesided"),
        "collective": (sharded, "collective"),
        "auto": (sharded, "auto"),
        "node": (mixed, "auto"),
        "replica": (replica, "auto"),
    }
    if comm.rank == 0:
        groups = replica.replica.num_groups
        print(f"QM9: {sharded.num_samples} molecules, {comm.size} ranks on {nodes} nodes, {groups} replica groups; "
              f"{args.epochs} epochs per variant, batch {args.batch_size} per rank, interleaved", flush=True)
    # One untimed epoch each (first touch, the estimator's first steps).
    for name in VARIANTS:
        run_epoch(comm, node_leader, *runs[name], 1_000_000, args)
    totals = {name: [0.0, 0, 0, 0, 0] for name in VARIANTS}
    order = list(VARIANTS)
    for epoch in range(args.epochs):
        random.Random(epoch).shuffle(order)  # the same on every rank
        for name in order:
            result = run_epoch(comm, node_leader, *runs[name], epoch, args)
            for i, value in enumerate(result):
                totals[name][i] = None if value is None or totals[name][i] is None else totals[name][i] + value
    steps = sharded.stats()
    for ld in (sharded, mixed, replica):
        ld.close()
    if comm.rank != 0:
        return
    rows = []
    print(f"{'variant':<11} {'seconds':>8} {'samples/s':>11} {'engine MB':>10} {'network MB':>11} {'vs auto':>8}")
    auto_rate = totals["auto"][1] / totals["auto"][0]
    for name in VARIANTS:
        seconds, samples, moved, sent, bad = totals[name]
        rate = samples / seconds
        net = "n/a" if sent is None else f"{sent / 1e6:.2f}"
        print(f"{name:<11} {seconds:>8.3f} {rate:>11,.0f} {moved / 1e6:>10.2f} {net:>11} {rate / auto_rate:>7.2f}x")
        rows.append({"variant": name, "ranks": comm.size, "nodes": nodes, "epochs": args.epochs,
                     "batch": args.batch_size, "seconds": f"{seconds:.4f}", "samples": samples,
                     "samples_per_s": f"{rate:.0f}", "engine_bytes": moved, "network_bytes": sent, "bad": bad})
    wrong = sum(r["bad"] for r in rows)
    print(f"wrong records: {wrong}; sharded loader's steps: one-sided {steps['onesided']['steps']}, "
          f"collective {steps['collective']['steps']}")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    if wrong:
        raise SystemExit("wrong records delivered")


if __name__ == "__main__":
    main()
