#!/usr/bin/env python3
"""Per point of a benches/ab/run.sh CSV: the median time of the old and the new
library over the rounds, and new / old (below 1: the new one is faster). The last
lines give the median ratio over all points and its spread, which is the figure to
quote: single points move by 5-10% on a shared machine.

    benches/ab/compare.py RESULTS.csv"""
import csv
import statistics
import sys


def main(path):
    times = {}
    for row in csv.DictReader(open(path)):
        key = (row["bench"], row["mode"], int(row["batch"]), row["sample"], row["loader"])
        times.setdefault(key, {}).setdefault(row["side"], []).append(float(row["us"]))
    print(f"{path}\n{'bench':10} {'mode':8} {'batch':>6} {'sample':>6} {'loader':14} {'old us':>9} {'new us':>9} {'new/old':>8}")
    ratios = []
    for key in sorted(times):
        sides = times[key]
        if "old" not in sides or "new" not in sides:
            continue
        old, new = statistics.median(sides["old"]), statistics.median(sides["new"])
        ratio = new / old if old > 0 else float("nan")
        ratios.append(ratio)
        print(f"{key[0]:10} {key[1]:8} {key[2]:>6} {key[3]:>6} {key[4]:14} {old:9.1f} {new:9.1f} {ratio:8.3f}")
    if ratios:
        quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
        print(f"median new/old over {len(ratios)} points: {statistics.median(ratios):.3f} "
              f"(quartiles {quartiles[0]:.3f}-{quartiles[2]:.3f}, range {min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main(sys.argv[1])
