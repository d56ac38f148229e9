#!/usr/bin/env python3
"""Reference rows of the QM9 source CSV files, for the decode tests in C, Fortran and
Python: a plain text file that every language can read, made straight from qm9pack's CSV
with the standard library only (an independent reading of the CSV, sharing no code with
the converter in python/mdloader/qm9.py).

    make_reference.py OUT.txt [--count 600] [--seed 7] [--csv-dir DIR] [--rows N]

Chooses the first and last three rows, the first rows with the largest molecules, and
`count` random rows. Format (whitespace separated, numbers exactly as in the CSV):

    <number of molecules>
    <row> <QM9 index> <n_atoms> <gap in hartree>        one line per molecule, then
    <Z> <x> <y> <z>                                     one line per atom
"""

import argparse
import csv
import importlib.util
import random
import re
from pathlib import Path

Z = {"H": 1, "C": 6, "N": 7, "O": 8, "F": 9}
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def qm9pack_data() -> Path:
    spec = importlib.util.find_spec("qm9pack")
    if spec is None:
        raise SystemExit("qm9pack is not installed")
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--count", type=int, default=600)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--csv-dir", type=Path, default=None)
    ap.add_argument("--rows", type=int, default=None, help="only rows below this (for a --limit conversion)")
    args = ap.parse_args()
    directory = args.csv_dir or qm9pack_data()
    csv.field_size_limit(1 << 30)

    rows = []
    for name in ("qm9_part1.csv", "qm9_part2.csv", "qm9_part3.csv"):
        with open(directory / name, newline="") as f:
            reader = csv.DictReader(f)
            for rec in reader:
                if args.rows is not None and len(rows) >= args.rows:
                    break
                rows.append((rec["Index"], rec["N_atoms"], rec["HOMO_LUMO_gap_au"], rec["Elements"], rec["XYZ_Ang"]))
    n = len(rows)
    rng = random.Random(args.seed)
    largest = max(int(r[1]) for r in rows)
    chosen = {0, 1, 2, n - 3, n - 2, n - 1}
    chosen.update([k for k, r in enumerate(rows) if int(r[1]) == largest][:5])
    chosen.update(rng.sample(range(n), min(args.count, n)))

    with open(args.out, "w") as out:
        out.write(f"{len(chosen)}\n")
        for k in sorted(chosen):
            index, n_atoms, gap, elements, xyz = rows[k]
            symbols = re.findall(r"[A-Z][a-z]?", elements)
            coords = NUMBER.findall(xyz)
            if len(symbols) != int(n_atoms) or len(coords) != 3 * int(n_atoms):
                raise SystemExit(f"row {k}: {n_atoms} atoms but {len(symbols)} elements, {len(coords)} coordinates")
            out.write(f"{k} {index} {n_atoms} {gap}\n")
            for a, s in enumerate(symbols):
                out.write(f"{Z[s]} {coords[3 * a]} {coords[3 * a + 1]} {coords[3 * a + 2]}\n")
    print(f"{args.out}: {len(chosen)} molecules of {n} rows")


if __name__ == "__main__":
    main()
