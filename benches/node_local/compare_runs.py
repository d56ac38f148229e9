#!/usr/bin/env python3
"""Node-local over memcpy, per point, as the median (and range) over repeated runs of
benches/node_local/run.sh, for one set of runs or two side by side, with the points
below issue 18's targets marked (>= 0.9 for sampler steps, >= 0.8 for mdl_fetch_batch).

    benches/node_local/compare_runs.py AFTER.csv [AFTER.csv ...] [--before BEFORE.csv ...]

Single runs move by 5-10% on a shared machine: compare medians of three or more."""
import argparse
import csv
import statistics

TARGET = {"sampler": 0.9, "fetch": 0.8}


def ratios(paths):
    points = {}
    for path in paths:
        for row in csv.DictReader(open(path)):
            key = (row["mpi"], row["mode"], int(row["ranks"]), int(row["batch"]), int(row["sample"]))
            points.setdefault(key, []).append(float(row["node_over_memcpy_bandwidth"]))
    return points


def shown(values):
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("after", nargs="+")
    parser.add_argument("--before", nargs="*", default=[])
    args = parser.parse_args()
    after, before = ratios(args.after), ratios(args.before)
    below = 0
    print("mpi      way in            ranks batch sample  " + ("before             " if before else "") + "node / memcpy, median (range)")
    for key, values in after.items():
        mpi, mode, ranks, batch, sample = key
        target = TARGET[mode.split("-")[0]]
        miss = statistics.median(values) < target
        below += miss
        was = f"{shown(before[key]):19}" if key in before else ""
        print(f"{mpi:8} {mode:16} {ranks:6} {batch:5} {sample:6}  {was}{shown(values)}{'  below target' if miss else ''}")
    print(f"{below} of {len(after)} points below the target in the median")


if __name__ == "__main__":
    main()
