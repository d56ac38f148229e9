#!/usr/bin/env python3
"""Draw the simulated step time against the batch, per sample size and rank count,
beside the scale model (benches/smpi, README.md there).

    .venv/bin/python benches/smpi/batches.py <name,...> <out.png> <model.csv>...

Reads benches/smpi/results/<name>*.csv (run.sh's output) and draws, one panel per
(sample size, P) found there, each engine's and AUTO's simulated step time (slowest
rank, median) against the batch per rank, solid, and each model CSV of the same sample
size (examples/scale_model's output, kind "agreed") dashed. Points missing from the
runs (a one-sided step SimGrid could not finish in the wall time) are simply absent;
the tables say why. The title carries the platform, the smpirun settings and the
library's commit from the runs' headers.
"""
import csv
import os
import sys
import textwrap
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from runs import read_run, result_paths  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
names, out, models = sys.argv[1], sys.argv[2], sys.argv[3:]

steps = defaultdict(dict)  # (size, P, backend) -> {batch: ms}
settings, commits, platform = [], set(), ""
throttled = defaultdict(dict)  # the same, from runs with MDL_MAX_GETS_IN_FLIGHT below the batch
for path in result_paths(names):
    into = throttled if "throttled" in os.path.basename(path) else steps
    mine, commit, line, rows = read_run(path)
    commits |= {commit} if commit else set()
    if line and not platform:
        platform = line.split(" (")[0] + line[line.index(")") + 1:]
    for row in rows:
        if row[0] == "step":
            key, b, v = (int(row[4]), int(row[1]), row[2]), int(row[3]), float(row[5])
            # Several throttles of one point: the least throttled (fastest) is the tightest bound.
            into[key][b] = min(v, into[key].get(b, v))
    settings.append(mine)

model = defaultdict(dict)  # (size, P, engine) -> {batch: ms}
for path in models:
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["kind"] == "agreed":
                for engine in ("onesided", "collective"):
                    key = (int(float(row["sample_bytes"])), int(row["ranks"]), engine)
                    model[key][int(row["batch"])] = float(row[engine + "_s"]) * 1e3

# A panel per (sample size, P) with more than one batch: the larger P have batch 16 alone.
panels = sorted({(s, p) for s, p, _ in steps if len({b for (s2, p2, _), e in steps.items() if (s2, p2) == (s, p) for b in e}) > 1})
# One row per sample size, one column per P.
sizes = sorted({s for s, _ in panels})
ranks = sorted({p for _, p in panels})
fig, grid = plt.subplots(len(sizes), len(ranks), figsize=(4.4 * len(ranks), 3.6 * len(sizes) + 1.2), squeeze=False)
for i, size in enumerate(sizes):
    for j, p in enumerate(ranks):
        if (size, p) not in panels:
            grid[i][j].set_visible(False)
axes = [[grid[sizes.index(s)][ranks.index(p)] for s, p in panels]]
colors = {"onesided": "tab:blue", "collective": "tab:red", "auto": "tab:green"}
for ax, (size, p) in zip(axes[0], panels):
    for backend, color in colors.items():
        points = sorted(steps[(size, p, backend)].items())
        if points:
            style = dict(marker="o", ms=8, mfc="none", lw=0.8) if backend == "auto" else dict(marker=".")
            ax.plot(*zip(*points), color=color, label=f"{backend} (SMPI)", **style)
        marks = sorted(throttled[(size, p, backend)].items())
        if marks:
            ax.plot(*zip(*marks), marker="x", ms=9, ls="none", color=color,
                    label=f"{backend} (SMPI, gets in flight throttled: an upper bound)")
        line = [(b, v) for b, v in sorted(model[(size, p, backend)].items()) if 16 <= b <= 1024]
        if line:
            ax.plot(*zip(*line), color=color, ls="--", lw=1, label=f"{backend} (scale model)")
    ax.set(xscale="log", yscale="log", xlabel="batch per rank", ylabel="step time, slowest rank (ms)",
           title=f"P = {p}, {size} B samples")
    ax.set_xticks([16, 64, 256, 1024], ["16", "64", "256", "1024"])
    ax.set_xticks([], minor=True)
    ax.grid(True, which="both", alpha=0.3)
axes[0][0].legend(fontsize=7)
common = set.intersection(*settings) if settings else set()
some = set.union(*settings) - common if settings else set()
title = [
    "Simulated (SimGrid SMPI), not measured; dashed: the scale model as SMPI charges the platform. " + platform,
    "every run: " + " ".join(sorted(common)),
    ("some runs (see each file's header): " + " ".join(sorted(some)) + "; " if some else "")
    + "library at " + ", ".join(sorted(commits)),
]
fig.suptitle("\n".join(textwrap.fill(line, 200) for line in title), fontsize=6)
fig.tight_layout(rect=(0, 0, 1, 1 - 0.9 / (3.6 * len(sizes) + 1.2)))
fig.savefig(out, dpi=110)
print("wrote", out)
