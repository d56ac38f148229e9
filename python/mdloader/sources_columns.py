"""A chunk of samples as columns: per variable, the samples' arrays back to back.

This is how HydraGNN's ADIOS2 files store a dataset (one global array per variable,
the samples concatenated along its varying dimension, with each sample's length), and
what the library's typed records are built from without a Python object per sample.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Columns"]


@dataclass
class Columns:
    """``n`` samples. ``values[key]``: their arrays of variable ``key`` concatenated
    along ``axis[key]``; ``counts[key]``: each sample's length along it (int64, n).
    ``keys``: the variables in the file's order."""

    n: int
    keys: list
    values: dict
    axis: dict
    counts: dict

    def rows(self, key: str, cat: int) -> tuple:
        """(rows, lengths): the samples' arrays of ``key`` with dimension ``cat`` of a
        sample's own array moved first and the samples back to back along it (C order:
        the typed records' layout), and each sample's length along ``cat``.

        Normally ``cat`` is the file's concatenation axis, and this is a move of axes.
        A file may concatenate along another dimension where no dimension varied (HydraGNN's
        writer then uses dimension 0: ``edge_index`` [2, m] of graphs that all have m
        edges), and every sample's length along that axis is then the same: the
        samples are cut apart by a reshape instead."""
        values, axis, counts = self.values[key], self.axis[key], self.counts[key]
        if cat == axis:
            return np.ascontiguousarray(np.moveaxis(values, axis, 0)), counts
        if self.n == 0:
            shape = list(values.shape)
            shape.pop(axis)
            return np.empty([0] + shape, dtype=values.dtype), counts
        length = values.shape[axis] // self.n
        if not (counts == length).all():
            raise ValueError(f"variable {key!r}: samples of different lengths along dimension {axis} cannot be cut "
                             f"along dimension {cat}")
        per_sample = np.moveaxis(values, axis, 0).reshape((self.n, length) + values.shape[:axis] + values.shape[axis + 1:])
        per_sample = np.moveaxis(per_sample, 1, axis + 1)  # each sample's own array, sample first
        rows = np.moveaxis(per_sample, cat + 1, 1)
        return (np.ascontiguousarray(rows).reshape((-1,) + rows.shape[2:]),
                np.full(self.n, rows.shape[1], dtype=np.int64))
