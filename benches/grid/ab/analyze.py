#!/usr/bin/env python3
"""Scores an A/B of run.sh:

    python3 benches/grid/ab/analyze.py RESULTS_DIR

Per build, round and rank count: AUTO within 10% of the faster engine and AUTO / oracle,
by the median step (sums of medians) and by the mean step (what the steps cost
together, which a busy machine's bimodal steps do not flip as they do a median); AUTO's
steps on the faster engine where the forced engines' medians lie >= 1.2x apart; AUTO's
switches and probes."""
import csv
import glob
import os
import sys

# grid_bench.c's columns (its --csv rows have no header line unless --header).
COLUMNS = ("mpi transport ranks batch sample t_onesided t_collective t_auto auto_onesided_steps "
           "auto_collective_steps t_ddstore t_floor_rma t_floor_a2a n_onesided n_collective n_auto "
           "n_ddstore n_floor_rma n_floor_a2a auto_probes auto_switches pred_onesided pred_collective "
           "mean_sample_bytes samples_per_rank wait bad t_node n_node node_local_fraction model_terms "
           "model_params rtt_us auto_unsure auto_surprise_probes noise_onesided noise_collective "
           "mean_onesided mean_collective mean_auto").split()


def score(rows, keys):
    """(within 10%, points, AUTO / oracle) of the rows by the columns `keys`."""
    within = n = 0
    auto_sum = oracle_sum = 0.0
    for r in rows:
        os_, coll, auto = (float(r[k] or 0) for k in keys)
        if not (os_ > 0 and coll > 0 and auto > 0):
            continue
        best = min(os_, coll)
        n += 1
        within += auto <= 1.1 * best
        auto_sum += auto
        oracle_sum += best
    return within, n, auto_sum / max(oracle_sum, 1e-12)


def main():
    results = sys.argv[1] if len(sys.argv) > 1 else "."
    print("| run | ranks | within 10% | AUTO / oracle | by the mean: within 10%, AUTO / oracle "
          "| steps on the faster engine (>= 1.2x apart) | switches | probes |")
    print("|---|---:|---:|---:|---|---:|---:|---:|")
    for path in sorted(glob.glob(os.path.join(results, "*.csv"))):
        rows = [r for r in csv.DictReader(open(path), fieldnames=COLUMNS) if r["mpi"] != "mpi"]
        for ranks in sorted({r["ranks"] for r in rows}):
            part = [r for r in rows if r["ranks"] == ranks]
            within, n, ratio = score(part, ("t_onesided", "t_collective", "t_auto"))
            mean_within, mean_n, mean_ratio = score(part, ("mean_onesided", "mean_collective", "mean_auto"))
            right = steps = switches = probes = 0
            for r in part:
                switches += int(r["auto_switches"])
                probes += int(r["auto_probes"])
                os_, coll = float(r["t_onesided"] or 0), float(r["t_collective"] or 0)
                if os_ > 0 and coll > 0 and max(os_, coll) >= 1.2 * min(os_, coll):
                    a, c = int(r["auto_onesided_steps"]), int(r["auto_collective_steps"])
                    steps += a + c
                    right += a if os_ < coll else c
            name = os.path.basename(path)[:-4]
            print(f"| {name} | {ranks} | {within}/{n} | {ratio:.3f} | {mean_within}/{mean_n}, {mean_ratio:.3f} "
                  f"| {right}/{steps} = {100 * right / max(steps, 1):.0f}% | {switches} | {probes} |")


if __name__ == "__main__":
    main()
