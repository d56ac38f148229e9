"""QM9 records: encoder/decoder round trip, the pack file, and QM9 through MDLoader from
Python compared with the source CSV rows (the reference file made by
tests/qm9/make_reference.py, shared with the C and Fortran decode tests).

The MPI decode test needs MDL_QM9_PACK (a converted pack file) and MDL_QM9_REFERENCE;
tests/run_binding_tests.sh sets both.
"""

import os
import struct

import numpy as np
import pytest

import mdloader
from mdloader import qm9


def read_reference(path):
    mols = []
    with open(path) as f:
        tokens = f.read().split()
    n = int(tokens[0])
    at = 1
    for _ in range(n):
        row, index, n_atoms, gap = int(tokens[at]), int(tokens[at + 1]), int(tokens[at + 2]), tokens[at + 3]
        at += 4
        z, xyz = [], []
        for _ in range(n_atoms):
            z.append(int(tokens[at]))
            xyz.append([float(t) for t in tokens[at + 1 : at + 4]])
            at += 4
        mols.append({"row": row, "index": index, "gap": float(gap), "z": z, "xyz": xyz})
    return mols


def pairs_within(pos32, cutoff32):
    """The layout's edge rule written out with Python floats (IEEE double)."""
    p = [[float(v) for v in atom] for atom in pos32]
    c = float(cutoff32)
    out = []
    for i in range(len(p)):
        for j in range(len(p)):
            if i == j:
                continue
            dx, dy, dz = p[i][0] - p[j][0], p[i][1] - p[j][1], p[i][2] - p[j][2]
            if (dx * dx + dy * dy) + dz * dz <= c * c:
                out.append((i, j))
    return out


def test_encode_decode_round_trip():
    pos = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 6.0, 0.0]])
    rec = qm9.encode([6, 1, 8], pos, 0.25, mol_index=42, row=7, cutoff=5.0)
    assert len(rec) == qm9.record_size(3, 2) and len(rec) % 4 == 0
    m = qm9.decode(rec)
    assert (m.mol_index, m.row, m.n_atoms, m.n_edges) == (42, 7, 3, 2)
    assert m.z.tolist() == [6, 1, 8] and m.gap == np.float32(0.25) and m.cutoff == 5.0
    assert m.edges.tolist() == [[0, 1], [1, 0]]  # atom 2 is 6 A away
    assert m.edge_index.shape == (2, 2)
    assert np.array_equal(m.pos, pos.astype(np.float32))
    with pytest.raises(ValueError):
        qm9.decode(b"XXXX" + rec[4:])
    with pytest.raises(ValueError):
        qm9.decode(rec[:-4])
    bad_version = rec[:4] + struct.pack("<H", 2) + rec[6:]
    with pytest.raises(ValueError, match="version"):
        qm9.decode(bad_version)


def test_convert_small_and_slices(comm, tmp_path):
    try:
        qm9.csv_dir()
    except FileNotFoundError:
        pytest.skip("qm9pack is not installed")
    path = tmp_path / f"small{comm.rank}.qm9g"
    stats = qm9.convert(path, limit=40)
    assert stats["molecules"] == 40
    index = qm9.read_index(path)
    assert index.n_records == 40 and index.data_start % 8 == 0
    rows = []
    for r in range(3):
        data, offsets, first = qm9.load_slice(path, r, 3)
        assert first == 40 * r // 3
        for k in range(len(offsets) - 1):
            m = qm9.decode(data[offsets[k] : offsets[k + 1]])
            rows.append(m.row)
    assert rows == list(range(40))
    assert qm9.main(["info", str(path)]) == 0


@pytest.mark.skipif(not os.environ.get("MDL_QM9_PACK"), reason="MDL_QM9_PACK is not set")
def test_qm9_through_mdloader_matches_the_csv(comm):
    ref = read_reference(os.environ["MDL_QM9_REFERENCE"])
    data, offsets, first = qm9.load_slice(os.environ["MDL_QM9_PACK"], comm.rank, comm.size)
    errors = []
    checked = edges = 0
    with mdloader.Loader(comm) as ld:
        ld.register_shard(data, offsets)
        assert first == ld.local_ids.start
        start = len(ref) * comm.rank // comm.size
        order = [ref[(start + k) % len(ref)] for k in range(len(ref))]
        engines = ["onesided", "collective", "auto"]
        for step, b in enumerate(range(0, len(order), 64)):
            chunk = order[b : b + 64]
            ld.set_backend(engines[step % 3])
            batch = ld.fetch([m["row"] for m in chunk])
            for k, want in enumerate(chunk):
                m = qm9.decode(batch[k])
                where = f"row {want['row']}"
                if (m.row, m.mol_index, m.z.tolist()) != (want["row"], want["index"], want["z"]):
                    errors.append(f"{where}: header or Z differ")
                    continue
                if m.gap != np.float32(want["gap"]):
                    errors.append(f"{where}: gap {m.gap} != {want['gap']}")
                if not np.array_equal(m.pos, np.array(want["xyz"], dtype=np.float64).astype(np.float32)):
                    errors.append(f"{where}: positions differ")
                if [tuple(e) for e in m.edges.tolist()] != pairs_within(m.pos, m.cutoff):
                    errors.append(f"{where}: edges differ")
                checked += 1
                edges += m.n_edges
    total = comm.allreduce(checked)
    if comm.rank == 0:
        print(f"\nqm9 decode (Python): {comm.size} ranks, {total} molecules checked, {comm.allreduce(edges)} edges")
    else:
        comm.allreduce(edges)
    assert not errors, errors[:10]
    assert total == len(ref) * comm.size


def test_collate(comm, tmp_path):
    try:
        qm9.csv_dir()
    except FileNotFoundError:
        pytest.skip("qm9pack is not installed")
    path = tmp_path / f"c{comm.rank}.qm9g"
    qm9.convert(path, limit=30)
    data, offsets, _ = qm9.load_slice(path, comm.rank, comm.size)
    with mdloader.Loader(comm) as ld:
        ld.register_shard(data, offsets)
        batch = ld.fetch([0, 5, 29])
        g = qm9.collate(batch)
        mols = [qm9.decode(batch[k]) for k in range(3)]
        assert g["row"].tolist() == [0, 5, 29]
        assert g["z"].shape[0] == sum(m.n_atoms for m in mols) == g["pos"].shape[0] == g["batch"].shape[0]
        assert g["edge_index"].shape == (2, sum(m.n_edges for m in mols))
        assert g["edge_index"].max() < g["z"].shape[0]
        assert g["y"].dtype == np.float32
