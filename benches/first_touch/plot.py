"""Median step of each engine against the steps already run (benches/first_touch/run.sh).

    python3 benches/first_touch/plot.py RESULTS.csv [FIGURE.png]
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

path = sys.argv[1]
figure = sys.argv[2] if len(sys.argv) > 2 else path.rsplit(".", 1)[0] + ".png"
with open(path) as f:
    header = f.readline().lstrip("# ").strip()
    rows = list(csv.DictReader(f))
batches = sorted({int(r["batch_per_rank"]) for r in rows})
fig, axes = plt.subplots(1, len(batches), figsize=(5 * len(batches), 3.8), squeeze=False)
for ax, batch in zip(axes[0], batches):
    for engine, style in (("onesided", "o-"), ("collective", "s-"), ("auto", "x--")):
        points = sorted(
            (int(r["warmup"]), 1e3 * float(r["median_step_s"]))
            for r in rows
            if int(r["batch_per_rank"]) == batch and r["engine"] == engine
        )
        ax.plot([p[0] for p in points], [p[1] for p in points], style, label=engine)
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlabel("steps run before the 50 measured")
    ax.set_ylabel("median step (ms)")
    ax.set_title(f"batch {batch} a rank")
    ax.set_ylim(bottom=0)
    ax.legend()
fig.suptitle(header, fontsize=8)
fig.tight_layout()
fig.savefig(figure, dpi=110)
print("wrote", figure)
