#!/usr/bin/env python3
"""Scores AUTO over repeated grid runs (benches/grid/consistency.sh):

    python benches/grid/consistency.py RESULTS_DIR [TITLE [FIGURE.png]]

RESULTS_DIR holds <condition>-<k>/<mpi>/grid.csv. For every run: the share of points
where AUTO's median step is within 10% of the faster forced engine's, and AUTO / oracle
(sums of medians), and the same by the mean step where the runs have it (grid_bench's
last columns: a busy machine's steps are bimodal, and a median sits in either mode by
chance). Per condition: for every two runs, the share of points where AUTO's
majority engine differed, and the same counted only where the engines are >= 1.2x
apart (where the choice matters). Writes RESULTS_DIR/summary.md and, with matplotlib,
a bar per run (FIGURE.png, by default docs/figures/auto_consistency.png)."""
import csv
import itertools
import pathlib
import re
import statistics
import sys
from collections import defaultdict

ROOT = pathlib.Path(__file__).resolve().parents[2]


def read_run(run_dir):
    points = {}
    for path in sorted(run_dir.glob("*/grid.csv")):
        for r in csv.DictReader(open(path)):
            if not (r["t_onesided"] and r["t_collective"] and r["t_auto"]):
                continue
            key = (r["mpi"], r["transport"], int(r["ranks"]), int(r["batch"]), int(r["sample"]))
            onesided, collective, auto = float(r["t_onesided"]), float(r["t_collective"]), float(r["t_auto"])
            chose_collective = int(r["auto_collective_steps"]) > int(r["auto_onesided_steps"])
            means = tuple(float(r[k]) for k in ("mean_onesided", "mean_collective", "mean_auto")) if r.get("mean_auto") else None
            points[key] = (onesided, collective, auto, chose_collective, means)
    return points


def score(points):
    within = sum(auto <= 1.1 * min(os, coll) for os, coll, auto, *_ in points.values())
    auto_sum = sum(p[2] for p in points.values())
    oracle_sum = sum(min(p[0], p[1]) for p in points.values())
    return within, len(points), auto_sum / oracle_sum if oracle_sum else float("nan")


def score_by_mean(points):
    """`score` by the mean steps, None where some point has none."""
    means = [p[4] for p in points.values()]
    if not means or None in means:
        return None
    return score({k: m for k, m in enumerate(means)})


def per_part(points):
    parts = defaultdict(lambda: [0, 0])
    for (mpi, transport, ranks, _, _), (os, coll, auto, *_) in points.items():
        parts[(mpi, transport, ranks)][0] += auto <= 1.1 * min(os, coll)
        parts[(mpi, transport, ranks)][1] += 1
    return parts


def disagreement(runs, decisive_only):
    shares = []
    for a, b in itertools.combinations(runs, 2):
        keys = [k for k in a if k in b]
        if decisive_only:
            # Decisive in both runs: the engines >= 1.2x apart.
            keys = [k for k in keys if all(max(r[k][0], r[k][1]) >= 1.2 * min(r[k][0], r[k][1]) for r in (a, b))]
        if keys:
            shares.append(sum(a[k][3] != b[k][3] for k in keys) / len(keys))
    return shares


def main():
    results = pathlib.Path(sys.argv[1])
    runs = defaultdict(dict)
    for d in sorted(results.iterdir()):
        m = re.fullmatch(r"(\w+)-(\d+)", d.name)
        if d.is_dir() and m:
            points = read_run(d)
            if points:
                runs[m.group(1)][int(m.group(2))] = points
    lines = ["# AUTO run after run", "", f"From `{results.relative_to(ROOT) if results.is_relative_to(ROOT) else results}`.", "",
             "| condition | run | points | AUTO within 10% | AUTO / oracle | by the mean step: within 10%, AUTO / oracle | per part (within 10%) |",
             "|---|---:|---:|---:|---:|---|---|"]
    summary = {}
    for condition, by_run in runs.items():
        scores = []
        for k, points in sorted(by_run.items()):
            within, n, ratio = score(points)
            scores.append((k, within / n, ratio))
            parts = ", ".join(f"{mpi} {t} {r}: {w}/{n_}" for (mpi, t, r), (w, n_) in sorted(per_part(points).items()))
            by_mean = score_by_mean(points)
            mean_cell = f"{by_mean[0]}/{by_mean[1]} = {by_mean[0] / by_mean[1]:.1%}, {by_mean[2]:.3f}" if by_mean else "-"
            lines.append(f"| {condition} | {k} | {n} | {within}/{n} = {within / n:.1%} | {ratio:.3f} | {mean_cell} | {parts} |")
        all_pairs = disagreement(list(by_run.values()), False)
        decisive = disagreement(list(by_run.values()), True)
        summary[condition] = (scores, all_pairs, decisive)
    lines += ["", "| condition | runs | within 10%: worst, median | AUTO / oracle: median, worst | two runs chose differently: mean (max), all points | decisive points (>= 1.2x apart) |",
              "|---|---:|---|---|---|---|"]
    for condition, (scores, pairs, decisive) in summary.items():
        w = sorted(s[1] for s in scores)
        r = sorted(s[2] for s in scores)
        mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")
        lines.append(f"| {condition} | {len(scores)} | {w[0]:.1%}, {statistics.median(w):.1%} | {statistics.median(r):.3f}, {r[-1]:.3f} | "
                     f"{mean(pairs):.1%} ({max(pairs, default=float('nan')):.1%}) | {mean(decisive):.1%} ({max(decisive, default=float('nan')):.1%}) |")
    text = "\n".join(lines) + "\n"
    (results / "summary.md").write_text(text)
    print(text)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: no figure)")
        return
    labels, within, ratios, colours = [], [], [], []
    palette = {"quiet": "tab:blue", "loaded": "tab:red", "old": "tab:gray", "new": "tab:orange"}
    for condition, (scores, _, _) in summary.items():
        for k, share, ratio in scores:
            labels.append(f"{condition} {k}")
            within.append(100 * share)
            ratios.append(ratio)
            colours.append(palette.get(condition, "tab:green"))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.bar(labels, within, color=colours)
    right.bar(labels, ratios, color=colours)
    left.axhline(97, color="tab:blue", ls=":", lw=1)
    left.axhline(95, color="tab:red", ls=":", lw=1)
    right.axhline(1.03, color="tab:blue", ls=":", lw=1)
    right.axhline(1.05, color="tab:red", ls=":", lw=1)
    left.set(ylabel="points with AUTO within 10% (%)", ylim=(50, 100), title="AUTO's step within 10% of the faster engine")
    right.set(ylabel="AUTO / oracle", ylim=(0.8, 1.2), title="AUTO's total over the faster engine's")
    for ax in (left, right):
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    fig.suptitle(sys.argv[2] if len(sys.argv) > 2 else "dotted: the targets quiet (blue) and loaded (red)", fontsize=9)
    fig.tight_layout()
    out = pathlib.Path(sys.argv[3]) if len(sys.argv) > 3 else ROOT / "docs" / "figures" / "auto_consistency.png"
    fig.savefig(out, dpi=110)
    print(f"figure: {out}")


if __name__ == "__main__":
    main()
