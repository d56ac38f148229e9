"""Medians of run.sh's lines: per MPI, size and variant, the start-up of the slowest rank
and each rank's CPU seconds and peak RSS, medians over runs.

    python report.py target/readers/openmpi-results.txt [more ...]
"""

import collections
import re
import statistics
import sys

LINE = re.compile(r"^(\S+) run=(\d+) (\S+) graphs=(\d+) rank=(\d+) startup_s=([\d.]+) cpu_s=([\d.]+) "
                  r"rss_before_MiB=(\d+) peak_rss_MiB=(\d+)")


def main() -> None:
    runs = collections.defaultdict(lambda: collections.defaultdict(dict))
    for name in sys.argv[1:]:
        for line in open(name):
            m = LINE.match(line)
            if m:
                mpi, run, how, n, rank = m.group(1), int(m.group(2)), m.group(3), int(m.group(4)), int(m.group(5))
                runs[(mpi, n, how)][run][rank] = tuple(float(m.group(i)) for i in range(6, 10))
    print(f"{'mpi':8s} {'graphs':>8s} {'path':17s} {'runs':>4s} {'startup s':>9s} {'CPU s/rank':>12s} "
          f"{'RSS before MiB':>15s} {'peak RSS MiB/rank':>18s}")
    for (mpi, n, how), by_run in sorted(runs.items()):
        ranks = sorted({r for one in by_run.values() for r in one})
        slowest = statistics.median(max(v[0] for v in one.values()) for one in by_run.values())
        cpu = [statistics.median(one[r][1] for one in by_run.values() if r in one) for r in ranks]
        before = [statistics.median(one[r][2] for one in by_run.values() if r in one) for r in ranks]
        peak = [statistics.median(one[r][3] for one in by_run.values() if r in one) for r in ranks]
        print(f"{mpi:8s} {n:8d} {how:17s} {len(by_run):4d} {slowest:9.2f} "
              f"{' '.join(f'{c:.1f}' for c in cpu):>12s} {' '.join(f'{b:.0f}' for b in before):>15s} "
              f"{' '.join(f'{p:.0f}' for p in peak):>18s}")


if __name__ == "__main__":
    main()
