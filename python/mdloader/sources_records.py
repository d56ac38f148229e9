"""The library's typed records (docs/typed_format.md, :mod:`mdloader.typed`) written
from columns: every sample's header and field sections placed with a few vectorised
copies per field and chunk, into one buffer allocated once for the rank's part.

:func:`mdloader.typed.encode` builds the same bytes from one mapping per sample (a
Python loop over samples and one small array per field and sample): at 10^6 samples
that loop, not the reading, was the start-up time. The layout must stay the same
byte for byte (tested against ``encode``).
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .typed import RECORD_ALIGN, Field

__all__ = ["record_sizes", "write_records", "field_of"]


def _pad8(n: np.ndarray) -> np.ndarray:
    return -(-n // RECORD_ALIGN) * RECORD_ALIGN


def _sections(fields: tuple, counts: np.ndarray) -> np.ndarray:
    """Bytes of each sample's section of each field, padding included: (n, F)."""
    row_bytes = np.array([f.row_bytes for f in fields], dtype=np.int64)
    return _pad8(counts * row_bytes)


def record_sizes(fields: tuple, counts: np.ndarray) -> np.ndarray:
    """Each record's size (int64, n) for samples of ``counts`` rows per field ((n, F),
    fields in schema order)."""
    return 8 * len(fields) + _sections(fields, counts).sum(axis=1, dtype=np.int64)


def write_records(buf: np.ndarray, starts: np.ndarray, fields: tuple, counts: np.ndarray, rows: list) -> None:
    """Write records into ``buf`` (uint8, zeroed: padding stays zero) at byte offsets
    ``starts`` (n, multiples of 8). ``counts``: (n, F) rows per sample and field;
    ``rows[k]``: field k's rows of every sample back to back (its dtype, C order)."""
    n, nfields = counts.shape
    if n == 0:
        return
    header = 8 * nfields
    words = buf.view("<i8")
    words[(starts // 8)[:, None] + np.arange(nfields)] = counts
    sections = _sections(fields, counts)
    section_start = starts[:, None] + header + np.cumsum(sections, axis=1) - sections
    for k, f in enumerate(fields):
        c = counts[:, k]
        total = int(c.sum())
        if total == 0 or f.row_bytes == 0:
            continue
        src = np.ascontiguousarray(rows[k], dtype=f.dtype).reshape(total, -1).view(np.uint8)
        first_row = np.cumsum(c) - c
        dst = np.repeat(section_start[:, k] - first_row * f.row_bytes, c) + np.arange(total, dtype=np.int64) * f.row_bytes
        # One window of row_bytes bytes at every byte offset: a fancy-indexed assignment
        # copies each row to its offset, whatever its alignment.
        windows = as_strided(buf, shape=(buf.size - f.row_bytes + 1, f.row_bytes), strides=(1, 1))
        windows[dst] = src


def field_of(name: str, dtype: np.dtype, sample_shape: tuple, cat: int) -> Field:
    """The schema field of samples of ``sample_shape`` (any length at ``cat``), as
    :func:`mdloader.typed.encode` makes it."""
    row = tuple(sample_shape[:cat]) + tuple(sample_shape[cat + 1:])
    dtype = np.dtype(dtype)
    return Field(name, dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype, row, cat)
