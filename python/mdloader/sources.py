"""Readers of dataset files, a layer that every adapter can use: each rank reads only
its contiguous part.

A reader opens a file (or a directory of files) on every rank, reads its metadata
(how many samples, which variables, each sample's length) and then, for the rank's
part only, yields the samples a chunk at a time, never the whole part as per-sample
Python objects: an adapter (:mod:`mdloader.pyg_sources`) turns each chunk into the
library's typed records (:mod:`mdloader.sources_records`) and lets it go before the
next is read.

- :mod:`mdloader.sources_adios`: HydraGNN's ADIOS2 ``.bp`` datasets (its
  ``AdiosWriter`` layout), read as columns: one array per variable holding the chunk's
  samples back to back, with each sample's length (:class:`Columns`); no per-sample
  object at all.
- :mod:`mdloader.sources_pickle`: HydraGNN's pickle datasets (``SimplePickleWriter``:
  one pickle file per sample): each file holds one pickled object, which is
  unpickled, encoded and dropped.
- :mod:`mdloader.sources_agree`: what every rank must agree on before registering
  (each rank's errors, a fingerprint of the file each rank opened), so that a bad file
  ends in the same clear :class:`SourceError` on every rank instead of one rank raising
  and the others waiting.

(Modules side by side rather than a subpackage: the package's modules are one flat
layer graph, checked by tests/python/test_imports.py.)
"""

from .sources_adios import AdiosPart
from .sources_agree import SourceError, agree_fingerprint, agree_problems
from .sources_columns import Columns
from .sources_pickle import PicklePart

__all__ = ["AdiosPart", "PicklePart", "Columns", "SourceError", "agree_problems", "agree_fingerprint"]
