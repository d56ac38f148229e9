#!/usr/bin/env python3
"""Draw the simulated curves of benches/smpi (README.md there) beside the scale model.

    .venv/bin/python benches/smpi/plot.py <name,...> <model.csv> <out.png>

Reads benches/smpi/results/<name>*.csv for each comma-separated name (run.sh's output: '#' header lines, then the
client's CSV) and the scale model's CSV for the same platform (examples/scale_model
with the platform's figures, kind "agreed": mdl_fetch_batch steps). Draws, per batch
size, each engine's and AUTO's simulated step time against P with the model's two
engines dashed, and mdl_init / mdl_register_shard against P. The title carries the
platform, the smpirun settings and the library's commit from the runs' headers.
"""
import csv
import glob
import os
import sys
import textwrap
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
prefix, model_path, out = sys.argv[1], sys.argv[2], sys.argv[3]

steps = defaultdict(dict)  # (batch, backend) -> {P: ms}
phases = defaultdict(dict)  # kind -> {P: s}
headers = {}
paths = sorted({p for name in prefix.split(",") for p in glob.glob(os.path.join(here, "results", name + "*.csv"))})
for path in paths:
    with open(path) as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0].startswith("#"):
                key = row[0][2:].split(" ")[0].rstrip(":")
                headers.setdefault(key, ",".join(row)[2:])
            elif row[0] == "step":
                steps[(int(row[3]), row[2])][int(row[1])] = float(row[5])
            elif row[0] in ("init", "register"):
                phases[row[0]][int(row[1])] = float(row[2])

model = defaultdict(dict)  # (batch, engine) -> {P: ms}
with open(model_path) as f:
    for row in csv.DictReader(f):
        if row["kind"] == "agreed":
            for engine in ("onesided", "collective"):
                model[(int(row["batch"]), engine)][int(row["ranks"])] = float(row[engine + "_s"]) * 1e3

batches = sorted({b for b, _ in steps})
fig, axes = plt.subplots(1, len(batches) + 1, figsize=(4.2 * (len(batches) + 1), 4.2))
colors = {"onesided": "tab:blue", "collective": "tab:red", "auto": "tab:green"}
for ax, batch in zip(axes, batches):
    for backend, color in colors.items():
        points = sorted(steps[(batch, backend)].items())
        if points:
            style = dict(marker="o", ms=7, mfc="none") if backend == "auto" else dict(marker=".")
            ax.plot(*zip(*points), color=color, label=f"{backend} (SMPI)", **style)
        modelled = [(p, v) for p, v in sorted(model[(batch, backend)].items()) if points and points[0][0] <= p <= points[-1][0]]
        if modelled:
            ax.plot(*zip(*modelled), color=color, ls="--", lw=1, label=f"{backend} (scale model)")
    ax.set(xscale="log", yscale="log", xlabel="ranks P", ylabel="step time, slowest rank (ms)", title=f"batch {batch} per rank")
    ax.set_xticks([16, 64, 256, 1024], ["16", "64", "256", "1024"])
    ax.set_xticks([], minor=True)
    ax.grid(True, which="both", alpha=0.3)
axes[0].legend(fontsize=7)
ax = axes[-1]
for kind, color in (("init", "tab:purple"), ("register", "tab:orange")):
    points = sorted(phases[kind].items())
    if points:
        ax.plot(*zip(*points), marker="o", color=color, label=f"mdl_{'init' if kind == 'init' else 'register_shard'}")
ax.set(xscale="log", yscale="log", xlabel="ranks P", ylabel="simulated seconds, slowest rank", title="init and registration")
ax.set_xticks([16, 64, 256, 1024], ["16", "64", "256", "1024"])
ax.set_xticks([], minor=True)
ax.grid(True, which="both", alpha=0.3)
ax.legend(fontsize=7)
title = [
    "Simulated (SimGrid SMPI), not measured: " + headers.get("platform", ""),
    "the first run's line (each file's header has its own): " + headers.get("smpirun", ""),
    headers.get("env", "") + "; " + headers.get("library", ""),
]
fig.suptitle("\n".join(textwrap.fill(line, 200) for line in title), fontsize=7)
fig.tight_layout(rect=(0, 0, 1, 0.88))
fig.savefig(out, dpi=110)
print("wrote", out)
