"""Plot the library's CPU work per sampler step against the number of ranks.

    .venv/bin/python benches/scale/plot_step_cost.py [benches/scale/step_cost.csv] [docs/figures/step_cost.png]

One line per batch size: the total per step now, and dashed, what finding the others'
requests cost before (replanning every rank's batch, O(P x B)).
"""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "benches/scale/step_cost.csv")
dst = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "docs/figures/step_cost.png")

rows = list(csv.DictReader(open(src)))
fig, ax = plt.subplots(figsize=(7, 4.5))
for batch in sorted({int(r["batch"]) for r in rows}):
    pts = sorted((int(r["ranks"]), float(r["total_us"]), float(r["replan_all_us"])) for r in rows if int(r["batch"]) == batch)
    line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"B = {batch}: library, per step")
    ax.plot([p[0] for p in pts], [p[2] for p in pts], linestyle="--", color=line.get_color(), alpha=0.6,
            label=f"B = {batch}: replanning every rank (before)")
ax.axhline(50, color="grey", linewidth=0.8)
ax.text(2.2, 55, "target: 50 us at P = 4096, B = 256", color="grey", fontsize=8)
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("ranks P (rank 0 simulated, no MPI)")
ax.set_ylabel("CPU microseconds per step")
ax.set_title("MDLoader's own work per sampler step")
ax.legend(fontsize=7, ncol=2)
ax.grid(True, which="both", alpha=0.2)
fig.tight_layout()
fig.savefig(dst, dpi=110)
print(f"wrote {dst}")
