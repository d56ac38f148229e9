"""Small fairchem datasets made here: slabs with an adsorbate and gas-phase molecules
built with ASE, energies and forces from ASE's EMT, written as fairchem ``.aselmdb``
files (with the ``metadata.npz`` of atom counts fairchem reads beside them).

    python tests/python/fairchem_data.py OUT_DIR COUNT [--files 2] [--seed 0] [--no-metadata]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

METALS = ("Cu", "Ni", "Pd", "Ag", "Pt", "Au", "Al")
ADSORBATES = ("O", "H", "C", "N")
MOLECULES = ("H2O", "CO2", "CH4", "NH3", "C2H6", "CH3OH", "C2H4")


def structures(count: int, seed: int = 0) -> list:
    """``count`` ase.Atoms with a single-point calculator holding EMT's energy and
    forces: about two slabs (periodic in x and y, 8-25 atoms) for each molecule (no
    cell, 3-8 atoms)."""
    from ase.build import add_adsorbate, fcc111, molecule
    from ase.calculators.emt import EMT
    from ase.calculators.singlepoint import SinglePointCalculator
    from ase.constraints import FixAtoms

    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        if rng.random() < 0.7:
            a = fcc111(METALS[rng.integers(len(METALS))], size=(2, int(rng.integers(2, 4)), int(rng.integers(2, 5))),
                       vacuum=7.0)
            add_adsorbate(a, ADSORBATES[rng.integers(len(ADSORBATES))], 1.8, "fcc")
            a.set_constraint(FixAtoms(indices=[atom.index for atom in a if atom.tag >= 2]))
        else:
            a = molecule(MOLECULES[rng.integers(len(MOLECULES))])
        a.rattle(0.05, seed=seed * 100003 + i)
        a.calc = EMT()
        energy, forces = a.get_potential_energy(), a.get_forces()
        a.calc = SinglePointCalculator(a, energy=energy, forces=forces)
        out.append(a)
    return out


def write_aselmdb(folder: Path, count: int, files: int = 2, seed: int = 0, metadata: bool = True) -> Path:
    """``count`` structures in ``files`` .aselmdb files in ``folder`` (and its
    metadata.npz); returns the folder."""
    import ase.db

    folder.mkdir(parents=True, exist_ok=True)
    atoms = structures(count, seed)
    bounds = np.linspace(0, count, files + 1).astype(int)
    for f in range(files):
        path = folder / f"part{f:03d}.aselmdb"
        path.unlink(missing_ok=True)
        with ase.db.connect(str(path)) as db:
            for k in range(bounds[f], bounds[f + 1]):
                db.write(atoms[k], data={"sid": f"structure-{k}"})
    if metadata:
        # In the order fairchem's AseDBDataset reads the files (sorted) and their rows.
        np.savez(folder / "metadata.npz", natoms=np.array([len(a) for a in atoms], dtype=np.int32))
    return folder


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("count", type=int)
    ap.add_argument("--files", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-metadata", action="store_true")
    args = ap.parse_args()
    write_aselmdb(args.out, args.count, args.files, args.seed, not args.no_metadata)
    print(f"wrote {args.count} structures in {args.files} files to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
