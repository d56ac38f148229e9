"""HydraGNN's pickle datasets (``hydragnn.utils.datasets.pickledataset.SimplePickleWriter``),
read by each rank for its own part only.

The layout, per label: ``{basedir}/{label}-meta.pkl`` holds six pickles one after the
other (``minmax_node_feature``, ``minmax_graph_feature``, the number of samples,
``use_subdir``, ``nmax_persubdir``, a dict of attributes such as ``pna_deg``), and
sample i is one pickled object in ``{basedir}/{label}-{i}.pkl``, or in
``{basedir}/{i // nmax_persubdir}/{label}-{i}.pkl`` with ``use_subdir``.

A sample's file holds the object itself (a torch_geometric ``Data``), so reading it
makes that object; the reader yields a chunk of them at a time, and the adapter encodes
and drops each chunk before the next is read.
"""

from __future__ import annotations

import os
import pickle
from typing import Iterator

from .sources_agree import fingerprint_of

__all__ = ["PicklePart"]


class PicklePart:
    """A pickle dataset's metadata for ``label`` (ValueError, naming the file, where it
    is missing or damaged)."""

    def __init__(self, basedir: str, label: str):
        self.basedir, self.label = basedir, label
        self.meta = os.path.join(basedir, f"{label}-meta.pkl")
        try:
            with open(self.meta, "rb") as f:
                (self.minmax_node_feature, self.minmax_graph_feature, self.ndata, self.use_subdir,
                 self.nmax_persubdir, attrs) = (pickle.load(f) for _ in range(6))
        except FileNotFoundError:
            raise ValueError(f"{self.meta}: no such file: not a HydraGNN pickle dataset with label {label!r}") from None
        except (EOFError, pickle.UnpicklingError, ValueError, TypeError) as err:
            raise ValueError(f"{self.meta}: damaged or truncated ({type(err).__name__}: {err})") from None
        if not isinstance(self.ndata, int) or self.ndata < 0:
            raise ValueError(f"{self.meta}: the number of samples is {self.ndata!r}")
        self.attrs = attrs or {}

    def fingerprint(self) -> tuple:
        """What must be the same on every rank: the metadata file's bytes and digest and
        what it says (each rank opens only its own samples' files)."""
        return fingerprint_of(self.meta), self.ndata, bool(self.use_subdir), self.nmax_persubdir

    def path_of(self, i: int) -> str:
        name = f"{self.label}-{i}.pkl"
        if self.use_subdir:
            return os.path.join(self.basedir, str(i // self.nmax_persubdir), name)
        return os.path.join(self.basedir, name)

    def chunks(self, ids: range, chunk: int) -> Iterator[list]:
        """The objects of samples ``ids``, ``chunk`` at a time (ValueError naming the
        file where one is missing, truncated or damaged)."""
        for lo in range(0, len(ids), chunk):
            yield [self._load(i) for i in ids[lo:lo + chunk]]

    def _load(self, i: int):
        path = self.path_of(i)
        try:
            with open(path, "rb") as f:
                return pickle.load(f)
        except FileNotFoundError:
            raise ValueError(f"{path}: no such file (sample {i} of {self.ndata} in {self.meta})") from None
        except (EOFError, pickle.UnpicklingError, ValueError, TypeError, AttributeError) as err:
            raise ValueError(f"{path}: damaged or truncated ({type(err).__name__}: {err})") from None
