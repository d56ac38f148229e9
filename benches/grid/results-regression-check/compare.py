"""Head against base, point by point: the median of each side's runs per point, then the
ratio head / base summarised over the points. The raw-MPI floors and the DDStore
emulation run no library code, so their ratio is the machine's drift between the sides;
an engine's ratio well above its floor's would be the library's.

    python3 compare.py                      # the first check: grid-{base,head}-{1,2}.csv
    python3 compare.py 'rerun/base-*.csv' 'rerun/head-*.csv'
"""
import csv, glob, math, os, statistics as st, sys

HERE = os.path.dirname(os.path.abspath(__file__))


def load(path):
    return {(r['mpi'], int(r['batch']), int(r['sample'])): r for r in csv.DictReader(open(path))}


def runs(pattern):
    paths = sorted(glob.glob(os.path.join(HERE, pattern)))
    if not paths:
        sys.exit(f"no file matches {pattern}")
    return [load(p) for p in paths]


base, head = (runs(p) for p in (sys.argv[1:3] if len(sys.argv) == 3 else ("grid-base-[12].csv", "grid-head-[12].csv")))
print(f"{len(base)} base runs, {len(head)} head runs")
for mpi in sorted({k[0] for k in base[0]}):
    for col in ("t_onesided", "t_collective", "t_auto", "t_node", "t_floor_rma", "t_floor_a2a", "t_ddstore"):
        ratios = []
        for k in base[0]:
            if k[0] != mpi or any(k not in r for r in base + head):
                continue
            b = st.median(float(r[k][col]) for r in base)
            h = st.median(float(r[k][col]) for r in head)
            if b > 0 and h > 0:
                ratios.append(h / b)
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"{mpi:8s} {col:13s} head/base over {len(ratios)} points: geo {geo:.3f}, median {st.median(ratios):.3f}, "
              f"min {min(ratios):.2f}, max {max(ratios):.2f}")
for side, rs in (("base", base), ("head", head)):
    for i, r in enumerate(rs):
        within = [float(row['t_auto']) <= 1.1 * min(float(row['t_onesided']), float(row['t_collective'])) for row in r.values()]
        print(f"{side} run {i + 1}: AUTO within 10% of the faster engine at {sum(within)}/{len(within)}")
