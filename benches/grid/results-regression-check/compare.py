import csv, statistics as st, math, sys
def load(p):
    rows = {}
    for r in csv.DictReader(open(p)):
        rows[(r['mpi'], int(r['batch']), int(r['sample']))] = r
    return rows
runs = {w: [load(f"benches/grid/results-regression-check/grid-{w}-{i}.csv") for i in (1, 2)] for w in ("base", "head")}
keys = sorted(runs['base'][0])
for col in ("t_onesided", "t_collective", "t_auto", "t_node"):
    for mpi in ("openmpi", "mpich"):
        ratios = []
        for k in keys:
            if k[0] != mpi: continue
            b = st.median(float(r[k][col]) for r in runs['base'])
            h = st.median(float(r[k][col]) for r in runs['head'])
            if b > 0 and h > 0: ratios.append(h / b)
        g = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"{col:13s} {mpi:8s} head/base over {len(ratios)} points: geo {g:.3f}, median {st.median(ratios):.3f}, min {min(ratios):.2f}, max {max(ratios):.2f}")
# auto within 10% of oracle
for w in ("base", "head"):
    for i, r in enumerate(runs[w]):
        ok = tot = 0; ao = []
        for k, row in r.items():
            o = min(float(row['t_onesided']), float(row['t_collective']))
            a = float(row['t_auto'])
            tot += 1; ok += a <= 1.1 * o; ao.append(a / o)
        print(f"{w} run {i+1}: AUTO within 10% of the faster engine at {ok}/{tot}, AUTO/oracle geo {math.exp(sum(map(math.log, ao))/len(ao)):.3f}")
