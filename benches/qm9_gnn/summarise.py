#!/usr/bin/env python3
"""Medians over the runs of benches/qm9_gnn/run.sh (one JSON line per run): per feeder,
the training loop's samples/s, the loop's wait for data per epoch and, with mdloader,
the library's fetch time per epoch and the ratio of the two: the slowest rank's wait over
the slowest rank's fetch, and the largest ratio of any one rank.
The first epoch of a run is left out of the per-epoch figures (start-up: the loader's
warm-up, first touch of buffers)."""

import json
import statistics
import sys


def main(path: str) -> int:
    runs = [json.loads(line) for line in open(path) if line.strip()]
    if not runs:
        print(f"{path}: no runs")
        return 1
    r0 = runs[0]
    print(f"{r0['mpi']}, {r0['ranks']} ranks, batch {r0['batch_size']} per rank, {r0['train']} training molecules, "
          f"collate {r0['collate']}, torch {r0['torch']}; medians over the epochs after the first of "
          f"{len(runs) // 2} runs per feeder")
    print("| feeder | samples/s | wait for data per epoch (s) | library fetch per epoch (s) | wait / fetch, slowest ranks | wait / fetch, worst rank | val MAE after last epoch (eV) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for feeder in ("mdloader", "list"):
        mine = [r for r in runs if r["feeder"] == feeder]
        if not mine:
            continue
        epochs = [e for r in mine for e in r["epochs"][1:]] or [e for r in mine for e in r["epochs"]]
        rate = statistics.median(e["samples_per_s"] for e in epochs)
        wait = statistics.median(max(e["wait_s"]) for e in epochs)
        mae = statistics.median(r["epochs"][-1]["val_mae_ev"] for r in mine)
        if feeder == "mdloader":
            fetch = statistics.median(max(e["fetch_s"]) for e in epochs)
            slowest = statistics.median(max(e["wait_s"]) / max(e["fetch_s"]) for e in epochs)
            worst = statistics.median(max(w / f for w, f in zip(e["wait_s"], e["fetch_s"])) for e in epochs)
            print(f"| mdloader.torch | {rate:.0f} | {wait:.3f} | {fetch:.3f} | {slowest:.2f} | {worst:.2f} | {mae:.3f} |")
        else:
            print(f"| torch DataLoader over a list | {rate:.0f} | {wait:.3f} | | | | {mae:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
