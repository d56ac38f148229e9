"""A batch of QM9 records (docs/qm9_format.md) as one disjoint-union graph, decoded in a
fixed number of numpy operations whatever the batch size.

:func:`mdloader.qm9.collate` decodes molecule by molecule in Python (clear, and the
reference this is tested against); at 128 molecules a step that loop costs more than
fetching them. Here every field of every record is gathered at once: the headers as one
(B, 32) block, then atoms and edges through index arithmetic on the whole buffer.
"""

from __future__ import annotations

import numpy as np

from .qm9 import HEADER, RECORD_MAGIC, RECORD_VERSION

__all__ = ["collate_records"]

_MAGIC = np.frombuffer(RECORD_MAGIC, dtype="<u4")[0]


def collate_records(data: np.ndarray, offsets: np.ndarray) -> dict:
    """Records ``data[offsets[k]:offsets[k+1]]`` (uint8 buffer, n + 1 offsets, every
    record starting at a multiple of 4 bytes from ``data``'s start, as fetched batches
    of QM9 records do) as the arrays of PyTorch Geometric's batching: ``z`` (sum N,)
    int64, ``pos`` (sum N, 3) float32, ``edge_index`` (2, sum E) int64 with atom
    indices offset per molecule, ``batch`` (sum N,) molecule of each atom, ``y`` (B,)
    float32 gaps in hartree, ``row`` (B,) int64. ValueError for a buffer that does not
    hold QM9 records of this version."""
    offs = np.asarray(offsets, dtype=np.int64)
    starts, sizes = offs[:-1], np.diff(offs)
    b = starts.size
    if b and (starts % 4).any():
        raise ValueError("QM9 records must start at multiples of 4 bytes")
    words = data[: int(offs[-1]) if b else 0].view("<u4")
    w0 = starts // 4  # each record's first word
    head = words[w0[:, None] + np.arange(HEADER.size // 4)]  # (B, 8) words
    version_atoms = head[:, 1]
    n_atoms = (version_atoms >> 16).astype(np.int64)
    n_edges = head[:, 2].astype(np.int64)
    record_bytes = head[:, 7].astype(np.int64)
    expected = HEADER.size + n_atoms + (-n_atoms % 4) + 12 * n_atoms + 8 * n_edges
    if b and ((head[:, 0] != _MAGIC).any() or ((version_atoms & 0xFFFF) != RECORD_VERSION).any()
              or (record_bytes != expected).any() or (record_bytes != sizes).any()):
        raise ValueError("not a batch of QM9 records (version 1): a magic, version or size does not match")

    molecule = np.repeat(np.arange(b, dtype=np.int64), n_atoms)
    first_atom = np.cumsum(n_atoms) - n_atoms  # each molecule's first atom in the batch
    # z: one byte per atom right after the header
    z = data[_segments(starts + HEADER.size, n_atoms)].astype(np.int64)
    # pos: three float32 per atom after z and its padding
    pos_start = w0 + (HEADER.size + n_atoms + (-n_atoms % 4)) // 4
    pos = words.view("<f4")[_segments(pos_start, 3 * n_atoms)].reshape(-1, 3)
    # edges: two u32 per edge after the positions, shifted by the molecule's first atom
    pairs = words[_segments(pos_start + 3 * n_atoms, 2 * n_edges)].astype(np.int64).reshape(-1, 2)
    pairs += np.repeat(first_atom, n_edges)[:, None]
    return {
        "z": z,
        "pos": pos,
        "edge_index": np.ascontiguousarray(pairs.T),
        "batch": molecule,
        "y": head[:, 5].view("<f4").copy(),
        "row": head[:, 4].astype(np.int64),
    }


def _segments(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices starts[k] .. starts[k] + lengths[k] - 1 of every k, concatenated."""
    total = int(lengths.sum())
    shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    return shift + np.arange(total, dtype=np.int64)
