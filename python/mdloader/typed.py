"""Typed samples: records of named arrays, stored as their raw bytes (no pickle) and
fetched back per field, one concatenated array per field plus per-sample counts.

A sample is a mapping of names to arrays (numpy arrays, CPU torch tensors, anything
with ``__dlpack__``, Python numbers). Each field has a **concatenation dimension**, the
one whose length differs from sample to sample (atoms, edges), 0 unless the caller
says otherwise (``edge_index`` of shape ``[2, m]`` concatenates along its last
dimension, as torch_geometric does). The field's dtype and its other dimensions form
the **schema**, the same for every sample and agreed across ranks.

Record layout (one library sample per record; documented in docs/typed_format.md so
that C and Fortran can read it too):

- a header of one little-endian int64 per field, in schema order (fields sorted by
  name): the sample's length along the field's concatenation dimension (1 for a
  0-d value);
- then each field's elements, the concatenation dimension moved first (C order), each
  field's part padded with zeros to a multiple of 8 bytes.

Every record is a multiple of 8 bytes, so records start 8-byte aligned in a batch.
Decoding a batch is vectorised: one fancy-indexed gather per field, no loop over
samples.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .args import plain_tensor
from .batch import Batch

__all__ = ["Field", "Schema", "TypedFields", "TypedBatch", "encode", "decode", "is_typed_sample", "agree_schema"]

RECORD_ALIGN = 8

CatDims = Union[None, Mapping[str, int], Callable[[str, np.ndarray], int]]


@dataclass(frozen=True)
class Field:
    """One field of the schema."""

    name: str
    dtype: np.dtype
    #: The shape of one row: the sample's shape without the concatenation dimension.
    row_shape: tuple
    #: Where the concatenation dimension sits in a sample's own array (None: a 0-d value).
    cat_dim: Optional[int]
    #: Bytes of one row (derived; kept, as decoding asks for it per field and batch).
    row_bytes: int = field(init=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "row_bytes", int(self.dtype.itemsize * np.prod(self.row_shape, dtype=np.int64)))

    def describe(self) -> str:
        shape = [str(d) for d in self.row_shape]
        if self.cat_dim is not None:
            shape.insert(self.cat_dim, "n")
        return f"{self.dtype.name}[{', '.join(shape)}]"


@dataclass(frozen=True)
class Schema:
    fields: tuple

    @property
    def names(self) -> list:
        return [f.name for f in self.fields]

    def key(self) -> tuple:
        """A plain value that compares equal across ranks exactly when the schemas do."""
        return tuple((f.name, f.dtype.str, f.row_shape, f.cat_dim) for f in self.fields)

    def __repr__(self) -> str:
        return "Schema(" + ", ".join(f"{f.name}: {f.describe()}" for f in self.fields) + ")"


def is_typed_sample(sample: Any) -> bool:
    """A mapping of names to arrays, or a torch_geometric ``Data``-like object."""
    return isinstance(sample, Mapping) or (hasattr(sample, "to_dict") and hasattr(sample, "keys"))


def _as_array(value: Any, name: str) -> np.ndarray:
    if isinstance(value, np.ndarray):
        a = value
    elif hasattr(value, "__dlpack__") and not isinstance(value, (bytes, bytearray, memoryview)):
        try:
            a = np.from_dlpack(plain_tensor(value))
        except (RuntimeError, BufferError, TypeError) as err:  # e.g. torch.bfloat16, which numpy lacks
            raise TypeError(f"field {name!r}: numpy cannot take a {type(value).__name__} of dtype "
                            f"{getattr(value, 'dtype', '?')} ({err}); typed samples hold numpy dtypes (mdloader.pyg "
                            "stores bfloat16 attributes of graphs)") from None
    elif isinstance(value, (bool, int, float, np.number, np.bool_)):
        a = np.asarray(value)
    else:
        raise TypeError(f"field {name!r}: {type(value).__name__} is not an array or a number "
                        "(typed samples store raw array bytes only, no pickle)")
    if a.dtype.kind not in "biufc":
        raise TypeError(f"field {name!r}: dtype {a.dtype} is not a plain numeric dtype")
    return a


def _cat_dim(cat_dims: CatDims, name: str, a: np.ndarray) -> Optional[int]:
    if a.ndim == 0:
        return None
    if cat_dims is None:
        d = 0
    elif callable(cat_dims):
        d = cat_dims(name, a)
    else:
        d = cat_dims.get(name, 0)
    if not -a.ndim <= d < a.ndim:
        raise ValueError(f"field {name!r}: concatenation dimension {d} is out of range for shape {a.shape}")
    return d % a.ndim


def _field_of(name: str, a: np.ndarray, cat_dims: CatDims) -> Field:
    d = _cat_dim(cat_dims, name, a)
    row = () if d is None else a.shape[:d] + a.shape[d + 1:]
    return Field(name, a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype, tuple(row), d)


def _rows(a: np.ndarray, f: Field) -> np.ndarray:
    """The sample's field as contiguous little-endian rows (concatenation dimension first)."""
    rows = a.reshape(1) if f.cat_dim is None else np.moveaxis(a, f.cat_dim, 0)
    return np.ascontiguousarray(rows, dtype=f.dtype)


def _pad8(n):
    return -(-n // RECORD_ALIGN) * RECORD_ALIGN


def _items(sample: Any) -> list:
    if isinstance(sample, Mapping):
        return list(sample.items())
    return [(k, sample[k]) for k in sample.keys()]


def encode(samples: Sequence, cat_dims: CatDims = None) -> tuple:
    """(schema or None for no samples, data uint8, offsets uint64) of ``samples`` (this
    rank's). Every sample must have the same fields, dtypes and row shapes: a difference
    is ValueError naming the sample, the field and both values."""
    if len(samples) == 0:
        return None, np.zeros(0, dtype=np.uint8), np.zeros(1, dtype=np.uint64)
    schema = None
    records, sizes = [], np.empty(len(samples), dtype=np.uint64)
    for i, sample in enumerate(samples):
        if not is_typed_sample(sample):
            raise TypeError(f"sample {i} is a {type(sample).__name__}, not a mapping of arrays "
                            "(every sample of a typed shard must be one)")
        arrays = {name: _as_array(v, name) for name, v in _items(sample)}
        if schema is None:
            schema = Schema(tuple(_field_of(n, arrays[n], cat_dims) for n in sorted(arrays)))
        elif sorted(arrays) != schema.names:
            raise ValueError(f"sample {i} has fields {sorted(arrays)}, sample 0 has {schema.names}")
        header = np.empty(len(schema.fields), dtype="<i8")
        parts = [header.view(np.uint8)]
        for k, f in enumerate(schema.fields):
            a = arrays[f.name]
            mine = _field_of(f.name, a, cat_dims)
            if mine != f:
                raise ValueError(f"sample {i}: field {f.name!r} is {mine.describe()}, sample 0's is {f.describe()}")
            rows = _rows(a, f)
            header[k] = rows.shape[0]
            raw = rows.reshape(-1).view(np.uint8)
            parts.append(raw)
            pad = -raw.size % RECORD_ALIGN
            if pad:
                parts.append(np.zeros(pad, dtype=np.uint8))
        record = np.concatenate(parts)
        records.append(record)
        sizes[i] = record.size
    offsets = np.zeros(len(samples) + 1, dtype=np.uint64)
    np.cumsum(sizes, out=offsets[1:])
    return schema, np.concatenate(records), offsets


def _gather(buf: np.ndarray, starts: np.ndarray, nbytes: int) -> np.ndarray:
    """The ``nbytes`` bytes at each byte offset in ``starts`` of ``buf``, as one array of
    shape (len(starts), nbytes): one fancy-indexed copy, whatever the alignment."""
    if nbytes == 0 or starts.size == 0:
        return np.zeros((starts.size, nbytes), dtype=np.uint8)
    windows = as_strided(buf, shape=(buf.size - nbytes + 1, nbytes), strides=(1, 1))
    return windows[starts]


class TypedFields:
    """A decoded batch: ``values[name]`` the field's rows of every sample concatenated
    along its concatenation dimension (in the sample's own axis order), ``counts[name]``
    each sample's length along it (int64, n), for a batch of n samples."""

    __slots__ = ("schema", "values", "counts")

    def __init__(self, schema: Schema, values: dict, counts: dict):
        self.schema, self.values, self.counts = schema, values, counts

    def __getitem__(self, name: str) -> np.ndarray:
        return self.values[name]

    def __repr__(self) -> str:
        n = len(next(iter(self.counts.values()))) if self.counts else 0
        return f"TypedFields({n} samples: " + ", ".join(f"{k} {v.shape}" for k, v in self.values.items()) + ")"


def decode(schema: Schema, data: np.ndarray, offsets: np.ndarray) -> TypedFields:
    """The fields of a batch of records (``data`` and its n + 1 ``offsets``)."""
    fields = schema.fields
    n = len(offsets) - 1
    starts = np.asarray(offsets[:-1], dtype=np.int64)
    header_bytes = 8 * len(fields)
    counts = _gather(data, starts, header_bytes).copy().view("<i8").reshape(n, len(fields))
    row_bytes = np.array([f.row_bytes for f in fields], dtype=np.int64)
    section = _pad8(counts * row_bytes)
    section_start = starts[:, None] + header_bytes + np.cumsum(section, axis=1) - section
    values, per_field = {}, {}
    for k, f in enumerate(fields):
        c = counts[:, k]
        total = int(c.sum())
        first_row = np.cumsum(c) - c
        row_start = np.repeat(section_start[:, k] - first_row * f.row_bytes, c) + np.arange(total, dtype=np.int64) * f.row_bytes
        rows = _gather(data, row_start, f.row_bytes).reshape(-1).view(f.dtype).reshape((total,) + f.row_shape)
        values[f.name] = rows if f.cat_dim is None else np.moveaxis(rows, 0, f.cat_dim)
        per_field[f.name] = c.copy()
    return TypedFields(schema, values, per_field)


def agree_schema(comm: Any, schema: Optional[Schema], problem: str, extra: Any = None) -> tuple:
    """(the job's schema, the job's ``extra``) (collective: one allgather). Every rank raises the same
    ValueError when any rank could not encode its samples (naming the rank and what
    went wrong), when the schemas differ (naming the field and the values) or when no
    rank has a sample; ``extra`` (any plain value, e.g. a binding's own per-field
    facts) must be equal too."""
    everyone = comm.allgather((None if schema is None else schema.key(), problem, extra))
    for rank, (_, why, _) in enumerate(everyone):
        if why:
            raise ValueError(f"register_shard: on rank {rank}: {why}")
    present = [(rank, key, ext) for rank, (key, _, ext) in enumerate(everyone) if key is not None]
    if not present:
        raise ValueError("register_shard: no rank has a typed sample: the schema is unknown")
    first_rank, first, first_extra = present[0]
    for rank, key, ext in present[1:]:
        if key != first:
            raise ValueError("register_shard: the samples' schema differs across ranks: " + _difference(first_rank, first, rank, key))
        if ext != first_extra:
            raise ValueError(f"register_shard: rank {first_rank} and rank {rank} differ: {first_extra!r} and {ext!r}")
    if schema is None:
        schema = Schema(tuple(Field(name, np.dtype(dt), tuple(shape), cat) for name, dt, shape, cat in first))
    return schema, first_extra


def _difference(ra: int, a: tuple, rb: int, b: tuple) -> str:
    fa, fb = {f[0]: f for f in a}, {f[0]: f for f in b}
    for name in sorted(set(fa) | set(fb)):
        if name not in fa or name not in fb:
            where = ra if name in fa else rb
            return f"field {name!r} only on rank {where} (rank {ra}: {sorted(fa)}, rank {rb}: {sorted(fb)})"
        if fa[name] != fb[name]:
            show = lambda f: Field(f[0], np.dtype(f[1]), tuple(f[2]), f[3]).describe()
            return f"field {name!r} is {show(fa[name])} on rank {ra} and {show(fb[name])} on rank {rb}"
    return "(no field differs)"


def typed_batch(schema: Schema, batch: Any, decoded: bool = False) -> "TypedBatch":
    """``batch`` with its schema; ``decoded``: decode now (the batch's memory is the
    library's and is reused at the next step)."""
    typed = TypedBatch(schema, batch.ids, batch.data, batch.offsets)
    if decoded:
        typed.fields
    return typed


class TypedBatch(Batch):
    """A :class:`mdloader.Batch` of typed records: the byte view stays
    (``batch[k]``, ``data``, ``offsets``), and ``fields`` decodes it once into one
    concatenated array per field with per-sample ``counts`` (:class:`TypedFields`;
    copies, valid after the batch's memory is reused)."""

    __slots__ = ("schema", "_fields")

    def __init__(self, schema: Schema, ids, data, offsets):
        super().__init__(ids, data, offsets)
        self.schema = schema
        self._fields = None

    @property
    def fields(self) -> TypedFields:
        if self._fields is None:
            self._fields = decode(self.schema, self.data, self.offsets)
        return self._fields

    def __repr__(self) -> str:
        return f"TypedBatch({len(self)} samples, {self.nbytes} bytes, {self.schema!r})"
