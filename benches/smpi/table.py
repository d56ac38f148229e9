#!/usr/bin/env python3
"""Print run.sh's results as Markdown tables (the READMEs' tables come from here).

    benches/smpi/table.py <name,...> [model.csv...]

Reads benches/smpi/results/<name>*.csv; prints step time (ms, slowest rank, median)
per P, sample size and batch for each engine and AUTO ("-": not run), with the steps AUTO gave each engine, then
mdl_init and mdl_register_shard per P, and each run's verified bytes. Model CSVs
(examples/scale_model's output, kind "agreed", one sample size each) add the model's
two engines (ms) and the ratio simulated / modelled for each.
"""
import csv
import glob
import os
import sys
from collections import defaultdict

here = os.path.dirname(os.path.abspath(__file__))
paths = sorted({p for n in sys.argv[1].split(",") for p in glob.glob(os.path.join(here, "results", n + "*.csv"))})
steps, phases, verified = defaultdict(dict), defaultdict(dict), {}
for path in paths:
    # MDL_MAX_GETS_IN_FLIGHT below the batch ("throttled" in the name): the one-sided
    # and AUTO figures are upper bounds of the library's default, marked so.
    mark = " (throttled)" if "throttled" in os.path.basename(path) else ""
    with open(path) as f:
        for row in csv.reader(f):
            if not row or row[0].startswith("#"):
                continue
            if row[0] == "step":
                key, new = (int(row[1]), int(row[4]), int(row[3])), (float(row[5]), int(row[6]), int(row[7]), mark)
                old = steps[key].get(row[2])
                # Several throttles of one point: the least throttled (fastest) is the tightest bound.
                if not (old and mark and old[3] and old[0] < new[0]):
                    steps[key][row[2]] = new
            elif row[0] in ("init", "register"):
                phases[int(row[1])][row[0]] = float(row[2])
            elif row[0] == "verified":
                verified[int(row[1])] = int(row[2])

model = {}  # (P, size, batch) -> (onesided ms, collective ms)
for path in sys.argv[2:]:
    with open(path) as f:
        for r in csv.DictReader(f):
            if r["kind"] == "agreed":
                key = (int(r["ranks"]), int(float(r["sample_bytes"])), int(r["batch"]))
                model[key] = (float(r["onesided_s"]) * 1e3, float(r["collective_s"]) * 1e3)
extra = " model one-sided (sim/model) | model collective (sim/model) |" if model else ""
print("| P | sample (B) | batch | one-sided | collective | AUTO | AUTO's steps (one-sided/collective) |" + extra)
print("|---:|---:|---:|---:|---:|---:|---|" + ("---:|---:|" if model else ""))
for (p, size, b), e in sorted(steps.items()):
    cell = lambda k: f"{e[k][0]:.3g}{e[k][3]}" if k in e else "-"  # noqa: E731
    picks = f"{e['auto'][1]}/{e['auto'][2]}" if "auto" in e else "-"
    row = f"| {p} | {size} | {b} | {cell('onesided')} | {cell('collective')} | {cell('auto')} | {picks} |"
    if model:
        m = model.get((p, size, b))
        for i, k in enumerate(("onesided", "collective")):
            ratio = f" ({e[k][0] / m[i]:.2f})" if m and k in e else ""
            row += f" {m[i]:.3g}{ratio} |" if m else " - |"
    print(row)
print()
print("| P | mdl_init (ms) | mdl_register_shard (ms) | bytes verified |")
print("|---:|---:|---:|---:|")
for p, v in sorted(phases.items()):
    print(f"| {p} | {v.get('init', 0) * 1e3:.3g} | {v.get('register', 0) * 1e3:.3g} | {verified.get(p, 'not finished')} |")
