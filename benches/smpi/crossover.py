#!/usr/bin/env python3
"""Draw where the collective engine beats the one-sided one: simulated and modelled.

    .venv/bin/python benches/smpi/crossover.py <name,...> <out.png> <model.csv>...

Reads benches/smpi/results/<name>*.csv (run.sh's output) and, for each sample size
found there, plots the ratio collective / one-sided of the simulated step time
(slowest rank, median) against P, one line per batch size: below 1 the collective
engine wins. Each model CSV (examples/scale_model's output, kind "agreed", one sample
size each) is drawn beside it for the same sample size and batches: dotted where its
file name says "slingshot" (the model's own Slingshot defaults, per-get and
per-message costs included), dashed otherwise (the model with the simulated
platform's figures).
The title carries the platform, the smpirun settings and the library's commit.
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

sim = defaultdict(dict)  # (size, batch, throttled) -> {P: collective / onesided}
settings = []  # per file, the set of smpirun options and MDL_* variables
platform = ""
commits = set()
# The two engines of a point may come from two runs (the largest batches run one
# engine a run): pooled over the files before the ratio is taken.
got = defaultdict(dict)  # (size, batch, P, throttled) -> {engine: ms}
for path in result_paths(names):
    # MDL_MAX_GETS_IN_FLIGHT below the batch slows the one-sided engine: drawn apart.
    throttled = "throttled" in os.path.basename(path)
    mine, commit, line, rows = read_run(path)
    commits |= {commit} if commit else set()
    platform = platform or line or ""
    for row in rows:
        if row[0] == "step" and row[2] in ("onesided", "collective"):
            key, v = (int(row[4]), int(row[3]), int(row[1]), throttled), float(row[5])
            # Several throttles of one point: the least throttled (fastest) is the tightest bound.
            got[key][row[2]] = min(v, got[key].get(row[2], v))
    settings.append(mine)
for (size, batch, p, throttled), e in got.items():
    if throttled and "collective" not in e and "onesided" in e:
        # The throttle does not touch the collective engine: its step from an ordinary run.
        e = dict(e, collective=got.get((size, batch, p, False), {}).get("collective"))
        if e["collective"] is None:
            continue
    if len(e) == 2:
        sim[(size, batch, throttled)][p] = e["collective"] / e["onesided"]

modelled = []  # per model file: (size, batch) -> {P: ratio}
for path in models:
    m = defaultdict(dict)
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["kind"] == "agreed":
                m[(int(float(row["sample_bytes"])), int(row["batch"]))][int(row["ranks"])] = float(
                    row["collective_s"]
                ) / float(row["onesided_s"])
    slingshot = "slingshot" in os.path.basename(path)
    modelled.append(("model, Slingshot defaults" if slingshot else "model, this platform as SMPI charges it", ":" if slingshot else "--", m))

sizes = sorted({s for s, _, _ in sim})
batches = sorted({b for _, b, _ in sim})
colors = dict(zip(batches, ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]))
fig, axes = plt.subplots(1, len(sizes), figsize=(4.6 * len(sizes), 5.6), squeeze=False)
for ax, size in zip(axes[0], sizes):
    lo, hi = 16, 1024  # the model over the whole range the simulation aims at
    for batch in batches:
        points = sorted(sim[(size, batch, False)].items())
        if points:
            ax.plot(*zip(*points), marker="o", color=colors[batch], label=f"batch {batch}: SMPI")
        points = sorted(sim[(size, batch, True)].items())
        if points:
            ax.plot(*zip(*points), marker="x", ms=9, ls="none", color=colors[batch],
                    label=f"batch {batch}: SMPI, one-sided throttled (MDL_MAX_GETS_IN_FLIGHT): the ratio a lower bound")
        for label, style, m in modelled:
            line = [(p, v) for p, v in sorted(m[(size, batch)].items()) if lo <= p <= hi]
            if line:
                ax.plot(*zip(*line), color=colors[batch], lw=1, ls=style, label=f"batch {batch}: {label}")
    ax.axhline(1, color="black", lw=0.8)
    ax.text(lo, 1.05, "one-sided wins above, collective below", fontsize=6)
    ax.set(xscale="log", yscale="log", xlabel="ranks P", ylabel="collective / one-sided step time",
           title=f"{size} B samples")
    ax.set_xticks([16, 64, 256, 1024], ["16", "64", "256", "1024"])
    ax.set_xticks([], minor=True)
    ax.grid(True, which="both", alpha=0.3)
handles, labels = axes[0][0].get_legend_handles_labels()
for ax in axes[0][1:]:
    for h, l in zip(*ax.get_legend_handles_labels()):
        if l not in labels:
            handles.append(h)
            labels.append(l)
fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=6)
common = set.intersection(*settings) if settings else set()
some = set.union(*settings) - common if settings else set()
title = [
    "Simulated (SimGrid SMPI) beside the scale model, not measured: " + platform,
    "every run: " + " ".join(sorted(common)),
    "some runs (see each file's header): " + " ".join(sorted(some)) + "; library at " + ", ".join(sorted(commits)),
]
fig.suptitle("\n".join(textwrap.fill(line, 220) for line in title), fontsize=6)
fig.tight_layout(rect=(0, 0.17, 1, 0.88))
fig.savefig(out, dpi=110)
print("wrote", out)
