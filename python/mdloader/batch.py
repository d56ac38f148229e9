"""A fetched batch: the samples back to back in one buffer, and where each starts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["Batch", "sample_at", "aligned_empty", "PAGE"]


def sample_at(samples: Sequence, k, data, offsets, what: str):
    """``samples[k]`` for a sequence of samples laid out back to back in ``data`` with
    ``offsets`` (n + 1 entries): the k-th one (negative k from the end), or a list for a
    slice; IndexError naming ``what`` otherwise."""
    if isinstance(k, slice):
        return [samples[i] for i in range(*k.indices(len(samples)))]
    n = len(samples)
    if k < 0:
        k += n
    if not 0 <= k < n:
        raise IndexError(f"{what} index {k} out of range for {n} samples")
    return data[int(offsets[k]) : int(offsets[k + 1])]


class Batch(Sequence):
    """The samples of one fetch: ``data`` (one uint8 buffer, the samples back to back)
    and ``offsets`` (n + 1 uint64): sample k is ``data[offsets[k]:offsets[k+1]]``.

    ``batch[k]`` is that slice as a numpy uint8 *view* into the buffer (no copy); use
    ``batch.view(k, dtype)`` to reinterpret it, ``bytes(batch[k])`` to copy it out.
    ``ids`` are the global ids that were asked for, in order.
    """

    __slots__ = ("ids", "data", "offsets")

    def __init__(self, ids: np.ndarray, data: np.ndarray, offsets: np.ndarray):
        self.ids = ids
        self.data = data
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, k):  # type: ignore[override]
        return sample_at(self, k, self.data, self.offsets, "batch")

    def view(self, k: int, dtype: Any) -> np.ndarray:
        """Sample k reinterpreted as an array of dtype (zero copy)."""
        return self[k].view(dtype)

    @property
    def sizes(self) -> np.ndarray:
        """Size in bytes of each sample."""
        return np.diff(self.offsets)

    @property
    def nbytes(self) -> int:
        return int(self.offsets[-1]) if len(self.offsets) else 0

    def __repr__(self) -> str:
        return f"Batch({len(self)} samples, {self.nbytes} bytes)"


# The library copies into a buffer fastest from a page boundary (see mdl_fetch_batch).
PAGE = 4096


def aligned_empty(nbytes: int, align: int) -> np.ndarray:
    """A new uint8 buffer of nbytes whose first byte sits at a multiple of align."""
    if align <= 1:
        return np.empty(nbytes, dtype=np.uint8)
    raw = np.empty(nbytes + align, dtype=np.uint8)
    start = -raw.ctypes.data % align
    return raw[start : start + nbytes]
