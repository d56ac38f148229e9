"""Scores the A/B of run.sh: per build, round and rank count, AUTO within 10% of the
faster engine (medians), AUTO / oracle (sums of medians), AUTO's steps on the faster
engine where the forced engines lie >= 1.2x apart, and AUTO's switches and probes."""
import csv
import glob
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
# grid_bench.c's columns (its --csv rows have no header line).
COLUMNS = ("mpi transport ranks batch sample t_onesided t_collective t_auto auto_onesided_steps "
           "auto_collective_steps t_ddstore t_floor_rma t_floor_a2a n_onesided n_collective n_auto "
           "n_ddstore n_floor_rma n_floor_a2a auto_probes auto_switches").split()
print("| run | ranks | within 10% | AUTO / oracle | steps on the faster engine (>= 1.2x apart) | switches | probes |")
print("|---|---:|---:|---:|---:|---:|---:|")
for path in sorted(glob.glob(os.path.join(here, "*.csv"))):
    rows = list(csv.DictReader(open(path), fieldnames=COLUMNS))
    for ranks in sorted({r["ranks"] for r in rows}):
        within = n = right = steps = switches = probes = 0
        auto_sum = oracle_sum = 0.0
        for r in rows:
            if r["ranks"] != ranks:
                continue
            os_, coll, auto = float(r["t_onesided"]), float(r["t_collective"]), float(r["t_auto"])
            if not (os_ > 0 and coll > 0 and auto > 0):
                continue
            best = min(os_, coll)
            n += 1
            within += auto <= 1.1 * best
            auto_sum += auto
            oracle_sum += best
            switches += int(r["auto_switches"])
            probes += int(r["auto_probes"])
            if max(os_, coll) >= 1.2 * best:
                a, c = int(r["auto_onesided_steps"]), int(r["auto_collective_steps"])
                steps += a + c
                right += a if os_ < coll else c
        name = os.path.basename(path)[:-4]
        print(f"| {name} | {ranks} | {within}/{n} | {auto_sum / oracle_sum:.3f} | {right}/{steps} = {100 * right / max(steps, 1):.0f}% | {switches} | {probes} |")
