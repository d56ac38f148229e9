"""Readers of dataset files: each rank reads only its contiguous part.

A reader opens a file (or a directory of files) on every rank, reads its metadata
(how many samples, which variables, each sample's length) and then, for the rank's
part only, yields the samples a chunk at a time, never the whole part as per-sample
Python objects: an adapter (``mdloader.pyg_sources``) turns each chunk into the
library's typed records (:mod:`mdloader.sources.records`) and lets it go before the
next is read.

- :mod:`.adios`: HydraGNN's ADIOS2 ``.bp`` datasets (its ``AdiosWriter`` layout), read
  as columns: one array per variable holding the chunk's samples back to back, with
  each sample's length (:class:`.columns.Columns`); no per-sample object at all.
- :mod:`.pickle`: HydraGNN's pickle datasets (``SimplePickleWriter``: one pickle file
  per sample): each file holds one pickled object, which is unpickled, encoded and
  dropped.
- :mod:`.agree`: what every rank must agree on before registering (each rank's errors,
  a fingerprint of the file each rank opened), so that a bad file ends in the same
  clear error on every rank instead of one rank raising and the others waiting.
"""

from .agree import agree_problems, agree_fingerprint
from .columns import Columns

__all__ = ["Columns", "agree_problems", "agree_fingerprint"]
