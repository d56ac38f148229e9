import csv, glob, statistics as st, sys
def load(path):
    rows = []
    with open(path) as f:
        for r in csv.reader(f):
            if not r or r[0] == 'mpi': continue
            rows.append(r)
    return rows
H = None
for f in sorted(glob.glob('benches/grid/results-consistency/ab-raised-defaults/*.csv')):
    rows = load(f)
    within = 0; ratios = []; sw = 0; n = 0; per = {}
    for r in rows:
        os_, co, au = float(r[5]), float(r[6]), float(r[7])
        if not (os_ > 0 and co > 0 and au > 0): continue
        best = min(os_, co); ratio = au / best; n += 1
        within += ratio <= 1.10; ratios.append(ratio); sw += int(r[20])
        per.setdefault(r[2], [0, 0]); per[r[2]][0] += ratio <= 1.10; per[r[2]][1] += 1
    gm = st.geometric_mean(ratios) if ratios else 0
    print(f"{f.split('/')[-1]:12s} points {n:3d} within10% {within:3d} ({100*within/max(n,1):.1f}%) auto/oracle geo {gm:.3f} switches {sw} per-np {per}")
print("share of AUTO's steps on the engine that was faster (forced medians >= 1.2x apart):")
for f in sorted(glob.glob('benches/grid/results-consistency/ab-raised-defaults/*.csv')):
    right = total = 0; pts = 0
    for r in load(f):
        os_, co = float(r[5]), float(r[6]); a, c = int(r[8]), int(r[9])
        if not (os_ > 0 and co > 0) or max(os_, co) < 1.2 * min(os_, co): continue
        pts += 1; total += a + c; right += a if os_ < co else c
    print(f"  {f.split('/')[-1]:12s} decisive points {pts:3d}: {right}/{total} steps = {100*right/max(total,1):.1f}%")
