"""The figures of benches/hydragnn_lj/run.sh's runs at one rank count:

    report.py <results dir> <ranks> <runs>

Per epoch, each path's train/val/test loss as HydraGNN prints them (rank 0's "Epoch: ..."
line) and whether the two paths' are identical; per path the median over epochs and
runs of the train loop's time, its data wait (HydraGNN's "dataload" spans) and the
epoch (one epoch's start to the next's: train, validation and test; the last epoch has
none), each the slowest rank's; peak RSS per rank (the largest over runs)."""

import glob
import json
import re
import statistics
import sys

LOSSES = re.compile(r"Epoch: (\d+), Train Loss: (\S+), Val Loss: (\S+), Test Loss: (\S+)")
PATHS = ("ddstore", "mdloader")


def losses(out):
    return [tuple(m.groups()) for m in LOSSES.finditer(open(out).read())]


def ranks(prefix):
    return [json.load(open(f)) for f in sorted(glob.glob(f"{prefix}.r*.json"))]


def main():
    results, np_, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    by_path = {p: [(losses(f"{results}/LJ-np{np_}-{p}-{r}.out"), ranks(f"{results}/LJ-np{np_}-{p}-{r}"))
                   for r in range(1, runs + 1)] for p in PATHS}
    print(f"HydraGNN examples/LennardJones, {np_} ranks, {runs} run(s) per path")
    print("epoch  " + "  ".join(f"{p + ' train/val/test':<38}" for p in PATHS) + "  identical")
    first = {p: by_path[p][0][0] for p in PATHS}
    identical = all(by_path[p][r][0] == first["ddstore"] for p in PATHS for r in range(runs))
    for e, (a, b) in enumerate(zip(first["ddstore"], first["mdloader"])):
        print(f"{e:>5}  {' '.join(a[1:]):<38}  {' '.join(b[1:]):<38}  {'yes' if a == b else 'NO'}")
    print(f"losses identical in every epoch of every run: {'yes' if identical and first['ddstore'] else 'NO'}")
    print(f"{'path':<9} {'train s/epoch':>13} {'data wait s/epoch':>17} {'epoch s':>8}  peak RSS MiB per rank")
    for p in PATHS:
        train, wait, epoch, rss = [], [], [], {}
        for _, per_rank in by_path[p]:
            count = min(len(r["epochs"]) for r in per_rank)
            for e in range(count):
                train.append(max(r["epochs"][e]["train_s"] for r in per_rank))
                wait.append(max(r["epochs"][e]["dataload_s"] for r in per_rank))
                if e + 1 < count:
                    epoch.append(max(r["epochs"][e + 1]["start"] - r["epochs"][e]["start"] for r in per_rank))
            for r in per_rank:
                rss[r["rank"]] = max(rss.get(r["rank"], 0), r["peak_rss_mib"])
        med = lambda xs: f"{statistics.median(xs):.3f}" if xs else "-"  # noqa: E731
        print(f"{p:<9} {med(train):>13} {med(wait):>17} {med(epoch):>8}  "
              + " ".join(f"{rss[k]:.0f}" for k in sorted(rss)))


if __name__ == "__main__":
    main()
