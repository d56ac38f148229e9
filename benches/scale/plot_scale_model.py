"""Plot the scale model's predicted winner, and where agreeing sampler steps ahead moves it.

    .venv/bin/python benches/scale/plot_scale_model.py [out.png] [label=file.csv ...]

Default: docs/figures/scale_model.png from benches/scale/scale_model.csv (jitter 2 us)
and benches/scale/scale_model_jitter20.csv (jitter 20 us), both written by
`cargo run --release --features bench --example scale_model` (see benches/scale/README.md).

One row per CSV, one panel per sample size. Colour: log2(T_collective / T_onesided) for
sampler steps agreed ahead (blue: one-sided predicted faster). Solid black line: their
crossover; dashed: the crossover of steps with a blocking agreement (mdl_fetch_batch).
"""
import csv
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import TwoSlopeNorm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
dst = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "docs/figures/scale_model.png")
inputs = [a.split("=", 1) for a in sys.argv[2:]] or [
    ("jitter 2 us", os.path.join(ROOT, "benches/scale/scale_model.csv")),
    ("jitter 20 us", os.path.join(ROOT, "benches/scale/scale_model_jitter20.csv")),
]


def load(path):
    """{(kind, sample_bytes): {(ranks, batch): log2(collective / onesided)}}"""
    grids = {}
    for r in csv.DictReader(open(path)):
        key = (r["kind"], float(r["sample_bytes"]))
        grids.setdefault(key, {})[(int(r["ranks"]), int(r["batch"]))] = math.log2(
            float(r["collective_s"]) / float(r["onesided_s"]))
    return grids


def as_array(cells, ranks, batches):
    return np.array([[cells[(p, b)] for b in batches] for p in ranks])


data = [(label, load(path)) for label, path in inputs]
samples = sorted({s for _, grids in data for (_, s) in grids})
fig, axes = plt.subplots(len(data), len(samples), figsize=(4.4 * len(samples) + 1, 4.2 * len(data)), squeeze=False)
norm = TwoSlopeNorm(vmin=-3, vcenter=0, vmax=3)
image = None
for i, (label, grids) in enumerate(data):
    for j, s in enumerate(samples):
        ax = axes[i][j]
        ahead, agreed = grids[("agreed_ahead", s)], grids[("agreed", s)]
        ranks = sorted({p for p, _ in ahead})
        batches = sorted({b for _, b in ahead})
        a, g = as_array(ahead, ranks, batches), as_array(agreed, ranks, batches)
        image = ax.imshow(a, cmap="RdBu", norm=norm, origin="lower", aspect="auto")
        if a.min() < 0 < a.max():
            ax.contour(a, levels=[0], colors="black", linewidths=1.2)
        if g.min() < 0 < g.max():
            ax.contour(g, levels=[0], colors="black", linewidths=1.0, linestyles="dashed")
        moved = int(np.sum((a > 0) & (g < 0)))
        ax.set_xticks(range(len(batches)))
        ax.set_xticklabels([str(b) for b in batches], fontsize=7, rotation=45)
        ax.set_yticks(range(len(ranks)))
        ax.set_yticklabels([str(p) for p in ranks], fontsize=7)
        if i == len(data) - 1:
            ax.set_xlabel("batch per rank")
        if j == 0:
            ax.set_ylabel(f"{label}\nranks")
        ax.set_title(f"sample {int(s)} B: {moved} cells turn one-sided", fontsize=9)
fig.suptitle("Scale model (Slingshot-like): blue one-sided, red collective faster for sampler steps agreed ahead;\n"
             "solid line: their crossover; dashed: with a blocking agreement per step", fontsize=10)
bar = fig.colorbar(image, ax=axes, shrink=0.8, pad=0.01)
bar.set_label("log2(T_collective / T_onesided)", fontsize=8)
fig.savefig(dst, dpi=120, bbox_inches="tight")
print(f"wrote {dst}")
