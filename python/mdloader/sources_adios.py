"""HydraGNN's ADIOS2 datasets (``hydragnn.utils.datasets.adiosdataset.AdiosWriter``),
read by each rank for its own part only.

The layout, per label (``trainset``, ``valset``, ...), as HydraGNN writes and reads it:

- attributes ``{label}/ndata`` (the number of graphs) and ``{label}/keys`` (the graphs'
  attribute names, in the order HydraGNN's reader sets them);
- per key ``k``: a global array ``{label}/{k}``, every graph's array concatenated along
  dimension ``{label}/{k}/variable_dim`` (an attribute), and ``{label}/{k}/variable_count``
  and ``{label}/{k}/variable_offset`` (ndata each): graph i's length and first index
  along that dimension;
- global attributes: ``dataset_name`` (a string; HydraGNN's ``__getitem__`` tags every
  graph with it), ``pna_deg``, ``minmax_node_feature``, ``minmax_graph_feature``, ...

A rank reads the counts and offsets of its own graphs only (not the whole table, 16
bytes a graph and key), checks that they describe its graphs back to back, and then
reads each key's contiguous range a chunk of graphs at a time.
"""

from __future__ import annotations

import os
from typing import Iterator, Optional

import numpy as np

from .sources_agree import fingerprint_of
from .sources_columns import Columns

__all__ = ["AdiosPart", "HYDRAGNN_DATASET_NAMES"]

#: HydraGNN's codes of dataset names (``AbstractBaseDataset.__getitem__`` tags each graph
#: with ``torch.tensor([[code]])``, -1 for a name not listed): position = code.
HYDRAGNN_DATASET_NAMES = ("ani1x", "qm7x", "mptrj", "alexandria", "transition1x", "omat24", "oc2020_all", "oc2022",
                          "omol25", "qcml", "odac23", "nabla2dft", "oc2025", "opoly2026")


def check_metadata_files(path: str) -> None:
    """ValueError where a ``.bp`` directory's metadata files are cut short in a way that
    ADIOS2 2.12's reader does not survive: it dies of a segmentation fault (every rank,
    in ``adios2.FileReader``; tested) on an empty ``md.idx`` and on an ``mmd.0`` cut
    within a record. ``mmd.0`` (BP5's meta-metadata) is a sequence of records, each a
    little-endian uint64 id length and info length followed by those bytes: the records
    must end exactly at the end of the file."""
    if not os.path.isdir(path):
        return
    index = os.path.join(path, "md.idx")
    if os.path.isfile(index) and os.path.getsize(index) == 0:
        raise ValueError(f"{index} is empty: a truncated or unfinished ADIOS2 dataset")
    meta = os.path.join(path, "mmd.0")
    if not os.path.isfile(meta):
        return
    with open(meta, "rb") as f:
        data = f.read()
    at = 0
    while at < len(data):
        if at + 16 > len(data):
            break
        id_length, info_length = np.frombuffer(data, dtype="<u8", count=2, offset=at).tolist()
        at += 16 + id_length + info_length
    if at != len(data):
        raise ValueError(f"{meta}: its records end at byte {at}, the file at {len(data)}: truncated or damaged "
                         "(ADIOS2 would die of a segmentation fault reading it)")


class AdiosPart:
    """An ADIOS2 ``.bp`` dataset's metadata for ``label``, opened on this rank alone
    (ADIOS2's serial reader: each rank reads its own part, no collective I/O).
    ``keys``: read only these of the file's keys (HydraGNN's ``keys=``). Raises
    ValueError (naming what is missing) for a file that is not in HydraGNN's layout."""

    def __init__(self, path: str, label: str, keys: Optional[list] = None):
        import adios2

        self.path, self.label = path, label
        self._numpy_type = adios2.type_adios_to_numpy
        check_metadata_files(path)
        self.file = adios2.FileReader(path)
        try:
            self._read_metadata(adios2, keys)
            self.check_size()
        except Exception:
            self.close()
            raise

    def _read_metadata(self, adios2, keys: Optional[list]) -> None:
        variables = self.file.available_variables()
        self.attributes = self.file.available_attributes()
        for name in (f"{self.label}/ndata", f"{self.label}/keys"):
            if name not in self.attributes:
                raise ValueError(f"{self.path}: no attribute {name!r}: not a HydraGNN ADIOS dataset with label "
                                 f"{self.label!r} (labels here: {self._labels()})")
        self.ndata = int(np.asarray(self.file.read_attribute(f"{self.label}/ndata")).reshape(-1)[0])
        written = list(self.file.read_attribute_string(f"{self.label}/keys"))
        if keys is not None:
            unknown = [k for k in keys if k not in written]
            if unknown:
                raise ValueError(f"{self.path}: keys {unknown} are not among {self.label}'s keys {written}")
        # dataset_name was never a variable (the writer makes it an attribute).
        self.keys = [k for k in (written if keys is None else keys) if k != "dataset_name"]
        self.dtype, self.shape, self.vdim = {}, {}, {}
        for k in self.keys:
            base = f"{self.label}/{k}"
            for name in (base, f"{base}/variable_count", f"{base}/variable_offset"):
                if name not in variables:
                    raise ValueError(f"{self.path}: variable {name!r} is missing (key {k!r} of {self.label!r})")
            if f"{base}/variable_dim" not in self.attributes:
                raise ValueError(f"{self.path}: attribute {base + '/variable_dim'!r} is missing")
            var = self.file.inquire_variable(base)
            self.dtype[k] = np.dtype(adios2.type_adios_to_numpy(var.type()))
            self.shape[k] = tuple(int(d) for d in var.shape())
            self.vdim[k] = int(np.asarray(self.file.read_attribute(f"{base}/variable_dim")).reshape(-1)[0])
            if not 0 <= self.vdim[k] < len(self.shape[k]):
                raise ValueError(f"{self.path}: {base}/variable_dim = {self.vdim[k]} for a variable of shape "
                                 f"{self.shape[k]}")
            for table in ("count", "offset"):
                shape = tuple(self.file.inquire_variable(f"{base}/variable_{table}").shape())
                if shape != (self.ndata,):
                    raise ValueError(f"{self.path}: {base}/variable_{table} has shape {shape}, not ({self.ndata},) "
                                     f"({self.label}/ndata)")

    def check_size(self) -> None:
        """ValueError where the data files hold fewer bytes than the metadata's blocks.

        ADIOS2 2.12's reader does not fail on a truncated data file: its POSIX transport
        retries a read at the end of the file for ever (tested: the rank then hangs,
        and the job with it). The data files (``data.*``) hold at least every block's
        bytes (one block per writer rank, step and variable), plus alignment padding
        whose rule is ADIOS2's own: this lower bound never refuses a whole file, and a
        cut smaller than the padding (a few bytes) is not seen."""
        blocks = 0
        for name in self.file.available_variables():
            itemsize = np.dtype(self._numpy_type(self.file.inquire_variable(name).type())).itemsize
            for step in self.file.all_blocks_info(name):
                for block in step:
                    count = [int(c) for c in block["Count"].split(",") if c.strip()]
                    blocks += int(np.prod(count)) * itemsize
        files = [os.path.join(self.path, f) for f in os.listdir(self.path) if f.startswith("data.")] \
            if os.path.isdir(self.path) else []
        have = sum(os.path.getsize(f) for f in files)
        if files and have < blocks:
            raise ValueError(f"{self.path}: its data files hold {have} bytes, its metadata describes {blocks}: "
                             "truncated (ADIOS2 would wait at the end of the file for ever)")

    def _labels(self) -> list:
        return sorted({name.split("/")[0] for name in self.attributes if name.endswith("/ndata")})

    def attribute(self, name: str) -> Optional[np.ndarray]:
        """A global attribute's value, None where the file has none."""
        if name not in self.attributes:
            return None
        if self.attributes[name].get("Type") == "string":
            value = self.file.read_attribute_string(name)
            return value[0] if isinstance(value, list) and len(value) == 1 else value
        return np.asarray(self.file.read_attribute(name))

    def fingerprint(self) -> tuple:
        """What must be the same on every rank: the files' bytes and metadata digest, the
        number of graphs, the keys with their dtypes and global shapes."""
        return (fingerprint_of(self.path), self.ndata,
                tuple((k, self.dtype[k].str, self.shape[k], self.vdim[k]) for k in self.keys))

    def lengths(self, first: int, count: int) -> dict:
        """Each key's ``variable_count`` of graphs ``first .. first + count``, checked
        against its ``variable_offset``: the graphs must lie back to back in the global
        array, inside it (ValueError naming the key and graph otherwise)."""
        out = {}
        for k in self.keys:
            base = f"{self.label}/{k}"
            counts = self._read(f"{base}/variable_count", [first], [count]).astype(np.int64)
            offsets = self._read(f"{base}/variable_offset", [first], [count]).astype(np.int64)
            if count:
                expected = offsets[0] + np.cumsum(counts) - counts
                wrong = np.flatnonzero((counts < 0) | (offsets != expected))
                if wrong.size:
                    i = int(wrong[0])
                    raise ValueError(f"{self.path}: {base}: graph {first + i} has count {counts[i]}, offset "
                                     f"{offsets[i]}: the graphs are not back to back (a damaged file)")
                end = int(offsets[-1] + counts[-1])
                if offsets[0] < 0 or end > self.shape[k][self.vdim[k]]:
                    raise ValueError(f"{self.path}: {base}: graphs {first}..{first + count - 1} end at {end}, past "
                                     f"the variable's {self.shape[k][self.vdim[k]]} along dimension {self.vdim[k]}")
            out[k] = (counts, offsets)
        return out

    def chunks(self, lengths: dict, chunk: int) -> Iterator[Columns]:
        """The graphs of :meth:`lengths` as :class:`Columns` of up to ``chunk`` graphs,
        each key's range read in one call."""
        n = len(next(iter(lengths.values()))[0]) if lengths else 0
        for lo in range(0, n, chunk):
            hi = min(lo + chunk, n)
            values, counts = {}, {}
            for k in self.keys:
                c, o = lengths[k]
                start, size = [0] * len(self.shape[k]), list(self.shape[k])
                start[self.vdim[k]], size[self.vdim[k]] = int(o[lo]), int(c[lo:hi].sum())
                values[k] = self._read(f"{self.label}/{k}", start, size).reshape(size)
                counts[k] = c[lo:hi]
            yield Columns(hi - lo, list(self.keys), values, dict(self.vdim), counts)

    def _read(self, name: str, start: list, count: list) -> np.ndarray:
        if 0 in count:  # ADIOS2 refuses an empty selection
            var = self.file.inquire_variable(name)
            return np.empty(count, dtype=np.dtype(self._numpy_type(var.type())))
        return self.file.read(name, start, count)

    def close(self) -> None:
        """Close the reader. ADIOS2 2.12's close fails where a data file is gone (it opens
        the data files it never read: RuntimeError): a reader has nothing to flush, and
        its failure would replace the error agreed across ranks (and skip the loader's
        collective close on this rank only), so it is not raised."""
        try:
            self.file.close()
        except Exception:  # noqa: BLE001 - see above
            pass
