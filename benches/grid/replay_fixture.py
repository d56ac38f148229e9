#!/usr/bin/env python3
"""The cost model on its own, replayed from a grid run: does the calibrated model,
before any online correction, pick the faster engine where the engines are at least
1.2x apart (the decisive points)?

    python3 benches/grid/replay_fixture.py GRID.csv [--write src/estimator/testdata/grid_replay.csv]

Reads grid_bench.c's rows (their model_terms and model_params columns: the model's
terms averaged over the predicted batches and the AUTO loader's calibration), prints
the accuracy per MPI, transport and rank count, and with --write keeps what the
estimator's unit test replays (`model_picks_the_faster_engine_on_a_recorded_grid` in
src/estimator/model.rs): measured times, terms and parameters, no timing.
"""
import argparse
import csv
import sys
from collections import defaultdict

DECISIVE = 1.2
FIELDS = ["mpi", "transport", "ranks", "batch", "sample", "t_onesided", "t_collective", "model_terms", "model_params"]


def predictions(row):
    """Both engines' predicted seconds. The one-sided engine's 4 terms come first; the
    collective's follow: 4 (rounds, samples, bytes, served) or, in files from before
    c_coll, 3 (rounds, samples, max(bytes, served)). Each term has its parameter."""
    terms = [float(x) for x in row["model_terms"].split(";")]
    params = [float(x) for x in row["model_params"].split(";")]
    if len(terms) != len(params) or len(terms) not in (7, 8):
        raise ValueError(f"{len(terms)} model terms and {len(params)} parameters: neither layout")
    onesided = sum(t * p for t, p in zip(terms[:4], params[:4]))
    collective = sum(t * p for t, p in zip(terms[4:], params[4:]))
    return onesided, collective


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("grid")
    ap.add_argument("--write")
    args = ap.parse_args()
    rows = [r for r in csv.DictReader(open(args.grid)) if r.get("model_terms") and r["t_onesided"] and r["t_collective"]]
    if not rows:
        sys.exit(f"{args.grid}: no rows with model_terms (a grid_bench.c from before they were written?)")
    tally = defaultdict(lambda: [0, 0])
    for r in rows:
        os_t, coll_t = float(r["t_onesided"]), float(r["t_collective"])
        if max(os_t, coll_t) < DECISIVE * min(os_t, coll_t):
            continue
        pred_os, pred_coll = predictions(r)
        key = (r["mpi"], r["transport"], r["ranks"])
        tally[key][0] += (pred_os < pred_coll) == (os_t < coll_t)
        tally[key][1] += 1
    right = sum(t[0] for t in tally.values())
    total = sum(t[1] for t in tally.values())
    for key, (r, n) in sorted(tally.items()):
        print(f"{'/'.join(key)}: {r}/{n} decisive points right")
    print(f"all: {right}/{total} = {right / max(total, 1):.1%} of the decisive points ({len(rows)} points)")
    if args.write:
        with open(args.write, "w", newline="") as out:
            w = csv.DictWriter(out, FIELDS, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {args.write}")


if __name__ == "__main__":
    main()
