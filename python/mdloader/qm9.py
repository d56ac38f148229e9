"""QM9 as graph sample records for MDLoader: converter, reader and decoder.

The QM9 data set (130,831 molecules with 3-29 atoms, DFT geometries and properties)
ships as CSV files in the PyPI package ``qm9pack`` (``qm9pack/data/qm9_part{1,2,3}.csv``).
This module converts every molecule into one self-contained little-endian binary
record (atomic numbers, positions, a radius-graph edge list, the HOMO-LUMO gap), packs
the records into one file with an offset table, lets each rank read its contiguous
slice of that file to register with :class:`mdloader.Loader`, and decodes fetched
records into numpy arrays without copying.

The layouts (record version 1, pack file version 1) are specified in
docs/qm9_format.md; C (tests/qm9/qm9_record.h) and Fortran (fortran/qm9_record.f90)
decoders follow the same document.

Command line::

    python -m mdloader.qm9 convert OUT.qm9g [--cutoff 5.0] [--limit N] [--csv-dir DIR]
    python -m mdloader.qm9 info OUT.qm9g
    python -m mdloader.qm9 show OUT.qm9g ID
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Sequence

import numpy as np

__all__ = [
    "RECORD_MAGIC",
    "RECORD_VERSION",
    "PACK_MAGIC",
    "PACK_VERSION",
    "DEFAULT_CUTOFF",
    "HEADER",
    "Molecule",
    "encode",
    "decode",
    "radius_edges",
    "record_size",
    "csv_dir",
    "iter_csv",
    "convert",
    "read_index",
    "load_slice",
    "collate",
]

RECORD_MAGIC = b"QM9G"
RECORD_VERSION = 1
PACK_MAGIC = b"QM9GPACK"
PACK_VERSION = 1
#: Radius of the graph's edges, in Angstrom (SchNet's and DimeNet's usual choice).
DEFAULT_CUTOFF = 5.0

#: The 32-byte record header: magic, version, n_atoms, n_edges, mol_index, row, gap,
#: cutoff, record_bytes.
HEADER = struct.Struct("<4sHHIIIffI")
assert HEADER.size == 32
PACK_HEADER = struct.Struct("<8sIIQ")
assert PACK_HEADER.size == 24

#: Atomic numbers of the elements in QM9.
ELEMENTS = {"H": 1, "C": 6, "N": 7, "O": 8, "F": 9}


def _pad4(n: int) -> int:
    return (4 - n % 4) % 4


def record_size(n_atoms: int, n_edges: int) -> int:
    """Bytes of a record with n_atoms atoms and n_edges directed edges."""
    return HEADER.size + n_atoms + _pad4(n_atoms) + 12 * n_atoms + 8 * n_edges


@dataclass
class Molecule:
    """One decoded record. The arrays are read-only views into the record's bytes."""

    mol_index: int  #: QM9's molecule number (1..133885; dsgdb9nsd_NNNNNN.xyz)
    row: int  #: 0-based position in the data set = the sample id in a converted file
    gap: float  #: HOMO-LUMO gap in hartree (as float32)
    cutoff: float  #: edge radius in Angstrom
    z: np.ndarray  #: (n_atoms,) uint8 atomic numbers
    pos: np.ndarray  #: (n_atoms, 3) float32 positions in Angstrom
    edges: np.ndarray  #: (n_edges, 2) uint32 directed edges (source, target), 0-based atoms

    @property
    def n_atoms(self) -> int:
        return int(self.z.shape[0])

    @property
    def n_edges(self) -> int:
        return int(self.edges.shape[0])

    @property
    def edge_index(self) -> np.ndarray:
        """(2, n_edges) as PyTorch Geometric's edge_index (a transposed view)."""
        return self.edges.T


def radius_edges(pos32: np.ndarray, cutoff: float) -> np.ndarray:
    """The record's edges for float32 positions: every ordered pair (i, j), i != j, with
    dx*dx + dy*dy + dz*dz <= cutoff**2, evaluated in double precision from the float32
    values (dx = double(x_i) - double(x_j), the sum left to right, cutoff as float32 then
    double), sorted by i then j. Returns (n_edges, 2) uint32."""
    p = np.asarray(pos32, dtype=np.float32).astype(np.float64)
    c = float(np.float32(cutoff))
    d = p[:, None, :] - p[None, :, :]
    d2 = (d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1]) + d[..., 2] * d[..., 2]
    mask = d2 <= c * c
    np.fill_diagonal(mask, False)
    i, j = np.nonzero(mask)  # row-major: sorted by i, then j
    return np.stack([i, j], axis=1).astype(np.uint32)


def encode(
    z: Sequence[int] | np.ndarray,
    pos: np.ndarray,
    gap: float,
    mol_index: int,
    row: int,
    cutoff: float = DEFAULT_CUTOFF,
) -> bytes:
    """One record (version 1) for a molecule; positions are stored as float32 and the
    edges computed from the stored values (see radius_edges)."""
    z8 = np.asarray(z, dtype=np.uint8)
    n = int(z8.size)
    if not 1 <= n <= 0xFFFF:
        raise ValueError(f"n_atoms = {n} out of range")
    pos32 = np.ascontiguousarray(pos, dtype="<f4").reshape(n, 3)
    edges = radius_edges(pos32, cutoff)
    e = int(edges.shape[0])
    size = record_size(n, e)
    header = HEADER.pack(RECORD_MAGIC, RECORD_VERSION, n, e, mol_index, row, gap, cutoff, size)
    out = b"".join((header, z8.tobytes(), b"\0" * _pad4(n), pos32.tobytes(), edges.astype("<u4").tobytes()))
    assert len(out) == size
    return out


def decode(record, *, check: bool = True) -> Molecule:
    """A record (bytes, bytearray, memoryview or a uint8 numpy array, e.g. ``batch[k]``)
    as a :class:`Molecule` of zero-copy views. check: verify magic, version and size."""
    buf = record if isinstance(record, np.ndarray) else np.frombuffer(record, dtype=np.uint8)
    if buf.size < HEADER.size:
        raise ValueError(f"a QM9 record has at least {HEADER.size} bytes, got {buf.size}")
    magic, version, n, e, mol_index, row, gap, cutoff, size = HEADER.unpack_from(buf[: HEADER.size].tobytes())
    if check:
        if magic != RECORD_MAGIC:
            raise ValueError(f"not a QM9 record (magic {magic!r}, expected {RECORD_MAGIC!r})")
        if version != RECORD_VERSION:
            raise ValueError(f"QM9 record version {version} is not supported (this reader knows {RECORD_VERSION})")
        if size != record_size(n, e) or size != buf.size:
            raise ValueError(f"QM9 record size mismatch: header says {size}, layout {record_size(n, e)}, got {buf.size}")
    a = HEADER.size + n + _pad4(n)
    z = buf[HEADER.size : HEADER.size + n]
    pos = buf[a : a + 12 * n].view("<f4").reshape(n, 3)
    edges = buf[a + 12 * n : a + 12 * n + 8 * e].view("<u4").reshape(e, 2)
    return Molecule(mol_index=mol_index, row=row, gap=gap, cutoff=cutoff, z=z, pos=pos, edges=edges)


# ---------------------------------------------------------------------------------------
# The source CSV files


def csv_dir() -> Path:
    """qm9pack's data folder, found without importing qm9pack (which imports pandas)."""
    spec = importlib.util.find_spec("qm9pack")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the PyPI package qm9pack is not installed (pip install qm9pack)")
    for location in spec.submodule_search_locations:
        data = Path(location) / "data"
        if (data / "qm9_part1.csv").is_file():
            return data
    raise FileNotFoundError(f"qm9pack is installed but has no data/qm9_part1.csv in {spec.submodule_search_locations}")


CSV_FILES = ("qm9_part1.csv", "qm9_part2.csv", "qm9_part3.csv")
_STRIP = str.maketrans("", "", "[]' ")


@dataclass
class CsvMolecule:
    row: int
    mol_index: int
    symbols: list
    xyz: np.ndarray  # (n, 3) float64
    gap: float


def iter_csv(directory: Optional[Path] = None, limit: Optional[int] = None) -> Iterator[CsvMolecule]:
    """The molecules of qm9pack's CSV files, in file order (part 1, 2, 3; ascending
    Index): row, Index, element symbols, XYZ_Ang, HOMO_LUMO_gap_au."""
    directory = Path(directory) if directory else csv_dir()
    csv.field_size_limit(1 << 30)
    row = 0
    for name in CSV_FILES:
        with open(directory / name, newline="") as f:
            reader = csv.reader(f)
            header = next(reader)
            col = {h: k for k, h in enumerate(header)}
            ci, ce, cx, cg, cn = (col[k] for k in ("Index", "Elements", "XYZ_Ang", "HOMO_LUMO_gap_au", "N_atoms"))
            for fields in reader:
                if limit is not None and row >= limit:
                    return
                symbols = fields[ce].translate(_STRIP).split(",")
                xyz = np.array(fields[cx].translate(_STRIP).split(","), dtype=np.float64).reshape(-1, 3)
                if len(symbols) != int(fields[cn]) or xyz.shape[0] != len(symbols):
                    raise ValueError(f"{name}: molecule {fields[ci]}: N_atoms, Elements and XYZ_Ang disagree")
                yield CsvMolecule(row, int(fields[ci]), symbols, xyz, float(fields[cg]))
                row += 1


def convert(
    out: Path | str,
    *,
    cutoff: float = DEFAULT_CUTOFF,
    limit: Optional[int] = None,
    directory: Optional[Path] = None,
    progress: bool = False,
) -> dict:
    """Converts qm9pack's CSV files into a pack file (docs/qm9_format.md) at ``out``.
    Returns statistics (molecules, bytes, edges, seconds)."""
    started = time.perf_counter()
    records = []
    sizes = []
    edges = 0
    for m in iter_csv(directory, limit):
        z = [ELEMENTS[s] for s in m.symbols]
        rec = encode(z, m.xyz, m.gap, m.mol_index, m.row, cutoff)
        records.append(rec)
        sizes.append(len(rec))
        edges += struct.unpack_from("<I", rec, 8)[0]
        if progress and m.row % 20000 == 0:
            print(f"  {m.row} molecules, {time.perf_counter() - started:.1f} s", file=sys.stderr)
    n = len(records)
    offsets = np.zeros(n + 1, dtype="<u8")
    np.cumsum(np.array(sizes, dtype=np.uint64), out=offsets[1:])
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    with open(tmp, "wb") as f:
        f.write(PACK_HEADER.pack(PACK_MAGIC, PACK_VERSION, RECORD_VERSION, n))
        f.write(offsets.tobytes())
        for rec in records:
            f.write(rec)
    tmp.replace(out)
    return {
        "molecules": n,
        "bytes": int(offsets[-1]),
        "file_bytes": out.stat().st_size,
        "edges": edges,
        "cutoff": cutoff,
        "seconds": time.perf_counter() - started,
    }


# ---------------------------------------------------------------------------------------
# Reading a pack file


@dataclass
class PackIndex:
    path: Path
    n_records: int
    data_start: int  #: file offset of record 0
    offsets: np.ndarray  #: (n + 1,) uint64, relative to data_start

    def slice_bounds(self, rank: int, size: int) -> tuple[int, int]:
        """Rank's contiguous share [lo, hi) of the records: lo = n * rank // size."""
        return self.n_records * rank // size, self.n_records * (rank + 1) // size


def read_index(path: Path | str) -> PackIndex:
    """The header and offset table of a pack file."""
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(PACK_HEADER.size)
        if len(head) < PACK_HEADER.size:
            raise ValueError(f"{path}: too short for a QM9 pack file")
        magic, version, record_version, n = PACK_HEADER.unpack(head)
        if magic != PACK_MAGIC:
            raise ValueError(f"{path}: not a QM9 pack file (magic {magic!r})")
        if version != PACK_VERSION or record_version != RECORD_VERSION:
            raise ValueError(f"{path}: pack version {version} / record version {record_version} not supported")
        offsets = np.fromfile(f, dtype="<u8", count=n + 1)
    if offsets.size != n + 1:
        raise ValueError(f"{path}: truncated offset table")
    return PackIndex(path, n, PACK_HEADER.size + 8 * (n + 1), offsets.astype(np.uint64))


def load_slice(path: Path | str, rank: int = 0, size: int = 1) -> tuple[np.ndarray, np.ndarray, int]:
    """Reads rank's contiguous slice of a pack file (records n*rank//size ..
    n*(rank+1)//size - 1): returns (data uint8, offsets uint64 from 0, first record id),
    ready for ``Loader.register_shard(data, offsets)``. Global ids then equal rows."""
    index = read_index(path)
    lo, hi = index.slice_bounds(rank, size)
    start, stop = int(index.offsets[lo]), int(index.offsets[hi])
    with open(index.path, "rb") as f:
        f.seek(index.data_start + start)
        data = np.fromfile(f, dtype=np.uint8, count=stop - start)
    if data.size != stop - start:
        raise ValueError(f"{path}: truncated records")
    return data, index.offsets[lo : hi + 1] - index.offsets[lo], lo


def collate(batch) -> dict:
    """A fetched :class:`mdloader.Batch` of QM9 records as one disjoint-union graph, the
    way PyTorch Geometric batches graphs: ``z`` (sum N,) int64, ``pos`` (sum N, 3) float32,
    ``edge_index`` (2, sum E) int64 with atom indices offset per molecule, ``batch``
    (sum N,) molecule of each atom, ``y`` (B,) float32 gaps, ``mol_index`` and ``row`` (B,)."""
    mols = [decode(batch[k]) for k in range(len(batch))]
    counts = np.array([m.n_atoms for m in mols], dtype=np.int64)
    first = np.concatenate(([0], np.cumsum(counts)[:-1])) if mols else np.zeros(0, dtype=np.int64)
    return {
        "z": np.concatenate([m.z for m in mols]).astype(np.int64) if mols else np.zeros(0, np.int64),
        "pos": np.concatenate([m.pos for m in mols]) if mols else np.zeros((0, 3), np.float32),
        "edge_index": (
            np.concatenate([m.edges.astype(np.int64).T + f for m, f in zip(mols, first)], axis=1)
            if mols
            else np.zeros((2, 0), np.int64)
        ),
        "batch": np.repeat(np.arange(len(mols), dtype=np.int64), counts),
        "y": np.array([m.gap for m in mols], dtype=np.float32),
        "mol_index": np.array([m.mol_index for m in mols], dtype=np.int64),
        "row": np.array([m.row for m in mols], dtype=np.int64),
    }


# ---------------------------------------------------------------------------------------
# Command line


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mdloader.qm9", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("convert", help="convert qm9pack's CSV files into a pack file")
    c.add_argument("out", type=Path)
    c.add_argument("--cutoff", type=float, default=DEFAULT_CUTOFF, help="edge radius in Angstrom (default 5.0)")
    c.add_argument("--limit", type=int, default=None, help="convert only the first N molecules")
    c.add_argument("--csv-dir", type=Path, default=None, help="folder with qm9_part{1,2,3}.csv (default: qm9pack's)")
    i = sub.add_parser("info", help="summary of a pack file")
    i.add_argument("file", type=Path)
    s = sub.add_parser("show", help="decode one record of a pack file")
    s.add_argument("file", type=Path)
    s.add_argument("id", type=int)
    args = parser.parse_args(argv)

    if args.command == "convert":
        stats = convert(args.out, cutoff=args.cutoff, limit=args.limit, directory=args.csv_dir, progress=True)
        print(
            f"converted {stats['molecules']} molecules into {args.out}: {stats['file_bytes'] / 1e6:.1f} MB, "
            f"{stats['edges']} edges (cutoff {stats['cutoff']} A), {stats['seconds']:.1f} s"
        )
    elif args.command == "info":
        index = read_index(args.file)
        sizes = np.diff(index.offsets)
        print(
            f"{args.file}: {index.n_records} records, {int(index.offsets[-1])} bytes; "
            f"record size min {int(sizes.min())}, median {int(np.median(sizes))}, max {int(sizes.max())}"
        )
    else:
        index = read_index(args.file)
        if not 0 <= args.id < index.n_records:
            parser.error(f"id must be in [0, {index.n_records})")
        with open(args.file, "rb") as f:
            f.seek(index.data_start + int(index.offsets[args.id]))
            rec = f.read(int(index.offsets[args.id + 1] - index.offsets[args.id]))
        m = decode(rec)
        print(f"row {m.row}: QM9 molecule {m.mol_index}, {m.n_atoms} atoms, {m.n_edges} edges, gap {m.gap:.6f} Ha")
        for zz, p in zip(m.z, m.pos):
            print(f"  Z={int(zz):2d}  {p[0]:12.6f} {p[1]:12.6f} {p[2]:12.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
