#!/usr/bin/env python3
"""AUTO against the oracle on grid runs, with the standard library alone (analyze.py
also draws figures and needs matplotlib):

    python3 benches/grid/score_auto.py GRID.csv [GRID.csv ...]

Per file: the share of points where AUTO's median step is within 10% of the faster
forced engine's (t_auto <= 1.1 * min(t_onesided, t_collective)), and AUTO / oracle
(the sum of AUTO's medians over the sum of the faster engine's), over all points and
per MPI; the same by the mean step where the file has it (grid_bench's last columns:
what the steps cost together, which a busy machine's bimodal steps do not flip as they
do a median); then each point AUTO missed, with its one-sided / collective steps."""
import csv
import sys
from collections import defaultdict


def main():
    for path in sys.argv[1:]:
        rows = [r for r in csv.DictReader(open(path)) if r["t_onesided"] and r["t_collective"] and r["t_auto"]]
        per_mpi = defaultdict(lambda: [0, 0, 0.0, 0.0])
        misses = []
        for r in rows:
            onesided, collective, auto = float(r["t_onesided"]), float(r["t_collective"]), float(r["t_auto"])
            oracle = min(onesided, collective)
            tally = per_mpi[r["mpi"]]
            tally[0] += auto <= 1.1 * oracle
            tally[1] += 1
            tally[2] += auto
            tally[3] += oracle
            if auto > 1.1 * oracle:
                misses.append(f"  missed: {r['mpi']} {r['transport']} {r['ranks']} ranks, {r['batch']} x {r['sample']} B: "
                              f"one-sided {onesided:.1f}, collective {collective:.1f}, AUTO {auto:.1f} us "
                              f"({r['auto_onesided_steps']}/{r['auto_collective_steps']} steps)")
        right, points, auto_sum, oracle_sum = (sum(t[i] for t in per_mpi.values()) for i in range(4))
        per = "; ".join(f"{mpi} {t[0]}/{t[1]}, {t[2] / t[3]:.3f}" for mpi, t in sorted(per_mpi.items()))
        print(f"{path}: AUTO within 10% at {right}/{points} = {right / max(points, 1):.1%}, "
              f"AUTO / oracle {auto_sum / max(oracle_sum, 1e-12):.3f} ({per})")
        print(by_mean(rows))
        print("\n".join(misses))


def by_mean(rows):
    """The scores by the mean step, where every row has one."""
    means = [[float(r[k]) for k in ("mean_onesided", "mean_collective", "mean_auto")] for r in rows if r.get("mean_auto")]
    if not means or len(means) < len(rows):
        return "  by the mean step: not in this file"
    right = sum(auto <= 1.1 * min(onesided, collective) for onesided, collective, auto in means)
    ratio = sum(m[2] for m in means) / max(sum(min(m[0], m[1]) for m in means), 1e-12)
    return f"  by the mean step: AUTO within 10% at {right}/{len(means)} = {right / len(means):.1%}, AUTO / oracle {ratio:.3f}"


if __name__ == "__main__":
    main()
