"""fairchem ``AtomicData`` as typed records, and fairchem batches built from them.

A structure (an ``AtomicData`` of one graph, as ``AtomicData.from_ase`` or fairchem's
``AseDBDataset`` makes it) becomes one typed record (:mod:`mdloader.typed`: raw array
bytes, no pickle), one field per attribute:

- tensors as they are (``pos`` float32[n, 3], ``atomic_numbers`` int64[n], ``cell``
  float32[1, 3, 3], ``pbc`` bool[1, 3], ``edge_index`` int64[2, m], ``energy``
  float32[1], ``forces`` float32[n, 3], ...), concatenated along the dimension that
  ``AtomicData.__cat_dim__`` names (-1 for ``*index*`` attributes, else 0);
- 0-d tensors, stacked;
- strings (``dataset`` as ``common_transform`` sets it) and one-string lists (``sid``,
  ``dataset`` as the constructor makes it) as UTF-8 bytes, each ended by a NUL, so that
  a batch's strings are one ``bytes.decode().split("\\0")``;
- Python numbers as 0-d arrays.

``batch`` is not stored: it is every atom's structure, made per batch. Each
attribute's kind and concatenation dimension are the ``facts``, agreed across ranks
with the schema.

:func:`collate` builds from a fetched batch's fields the ``AtomicData`` that
``atomicdata_list_to_batch`` makes of the same structures (every tensor, the ``*index*``
attributes shifted by the atoms before them, the string lists, and the slices,
cumulative sums, concatenation dimensions and atom counts that ``get_example`` reads),
with vectorised numpy: no loop over structures.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
import torch
from fairchem.core.datasets.atomic_data import AtomicData

__all__ = ["facts_and_records", "collate", "examples"]

# Kinds of attribute.
TENSOR = "tensor"  # concatenated along its cat dim
INDEX = "index"  # a tensor concatenated and shifted by the atoms before it (*index*)
SCALAR = "scalar"  # a 0-d tensor: stacked
STRING = "str"  # a str: a list of them in a batch
STRINGS = "strs"  # a list of one str: flattened in a batch
NUMBER = "number"  # a Python number: a list of them in a batch
BATCH = "batch"  # the structure of every atom: made, not stored

_NUL = b"\0"


def _attribute(data: AtomicData, key: str) -> tuple:
    """(array or None, kind, cat dim as fairchem says it) of one attribute of a
    one-structure ``data``."""
    value = data[key]
    if key == "batch":
        return None, BATCH, 0
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided or value.dtype in (torch.bfloat16,) or value.is_complex():
            raise TypeError(f"attribute {key!r}: a {value.dtype} {value.layout} tensor is not stored "
                            "(plain numeric and bool tensors are)")
        array = value.detach().cpu().resolve_neg().numpy()
        if value.dim() == 0:
            return array, SCALAR, None
        cat = data.__cat_dim__(key, value)
        if "index" in key:  # AtomicData.__inc__: *index* attributes are shifted by the atom count
            if value.dtype == torch.bool or value.is_floating_point():
                raise TypeError(f"attribute {key!r}: an index attribute (shifted by the atom count in a batch) "
                                f"of dtype {value.dtype}; fairchem's indices are integers")
            return array, INDEX, cat
        return array, TENSOR, cat
    if isinstance(value, str):
        return _utf8(key, value), STRING, 0
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        if len(value) != 1:
            raise ValueError(f"attribute {key!r}: a list of {len(value)} strings; a structure's string lists "
                             "hold one string each (as AtomicData's sid and dataset do)")
        return _utf8(key, value[0]), STRINGS, 0
    if isinstance(value, (bool, int, float)) and "index" not in key:
        return np.asarray(value), NUMBER, None
    raise TypeError(f"attribute {key!r}: a {type(value).__name__} is neither a tensor, a string, a list of one "
                    "string nor a number (structures are stored as raw array bytes, no pickle)")


def _utf8(key: str, text: str) -> np.ndarray:
    raw = text.encode("utf-8")
    if _NUL in raw:
        raise ValueError(f"attribute {key!r}: the string {text!r} holds a NUL character, which ends strings "
                         "in the stored records")
    return np.frombuffer(raw + _NUL, dtype=np.uint8)


def facts_and_records(structures: Sequence[AtomicData]) -> tuple:
    """(facts, records, cat_dims) of ``structures``: the facts a tuple of (key, kind,
    cat dim) sorted by key, the same for every structure (ValueError naming the first
    that differs); the records mappings of arrays for :func:`mdloader.typed.encode`,
    with ``cat_dims`` its concatenation dimensions."""
    facts: Optional[tuple] = None
    records = []
    for i, data in enumerate(structures):
        if not isinstance(data, AtomicData):
            raise TypeError(f"structure {i} is a {type(data).__name__}, not a fairchem AtomicData")
        if data.num_graphs != 1:
            raise ValueError(f"structure {i} is a batch of {data.num_graphs} structures, not one")
        record, mine = {}, []
        for key in sorted(data.keys()):
            array, kind, cat = _attribute(data, key)
            mine.append((key, kind, cat))
            if array is not None:
                record[key] = array
        mine = tuple(mine)
        if facts is None:
            facts = mine
        elif mine != facts:
            raise ValueError(f"structure {i}'s attributes differ from structure 0's: {_difference(facts, mine)}")
        records.append(record)
    cat_dims = {key: cat for key, kind, cat in facts or () if cat is not None}
    return facts, records, cat_dims


def _difference(first: tuple, other: tuple) -> str:
    a, b = {f[0]: f[1:] for f in first}, {f[0]: f[1:] for f in other}
    only_first, only_other = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    if only_first or only_other:
        return f"only structure 0 has {only_first}, only this one {only_other}"
    key = next(k for k in a if a[k] != b[k])
    return f"{key!r} is {b[key]} here, {a[key]} in structure 0 (kind, concatenation dimension)"


def _strings(values: np.ndarray) -> list:
    """The NUL-ended strings of a batch's bytes, in order (one decode, one split)."""
    return values.tobytes().decode("utf-8").split("\0")[:-1]


def collate(fields: Any, facts: tuple, constants: Optional[dict] = None) -> AtomicData:
    """The ``AtomicData`` that ``atomicdata_list_to_batch`` makes of the structures whose
    fields (:class:`mdloader.typed.TypedFields`) are given, built without a loop over
    structures. ``constants``: string attributes that every structure has, added as
    fairchem's ``ConcatDataset`` adds ``dataset_name`` to each (``{"dataset_name":
    "omol.train"}``)."""
    natoms = np.asarray(fields.values["natoms"], dtype=np.int64).reshape(-1)
    n = natoms.shape[0]
    first_atom = np.cumsum(natoms) - natoms
    atom_bounds = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(natoms, out=atom_bounds[1:])
    one_each = list(range(n + 1))
    zeros = [0] * (n + 1)
    values, slices, cumsum, cat_dims = {}, {}, {}, {}
    for key, kind, cat in facts:
        cat_dims[key] = cat
        cumsum[key] = zeros
        if kind == BATCH:
            values[key] = torch.from_numpy(np.repeat(np.arange(n, dtype=np.int64), natoms))
            slices[key] = atom_bounds.tolist()
            continue
        value, counts = fields.values[key], fields.counts[key]
        if kind in (STRING, STRINGS):
            values[key] = _strings(value)
            slices[key] = one_each
            continue
        if kind == NUMBER:
            values[key] = value.tolist()
            slices[key] = one_each
            cat_dims[key] = 0  # a number's cat dim, as atomicdata_list_to_batch records it
            continue
        if kind == INDEX:
            shape = [1] * value.ndim
            shape[cat] = -1
            value = value + np.repeat(first_atom, counts).astype(value.dtype, copy=False).reshape(shape)
            cumsum[key] = atom_bounds.tolist()
        bounds = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=bounds[1:])
        values[key] = torch.from_numpy(np.ascontiguousarray(value))
        slices[key] = bounds.tolist()
    for key, text in (constants or {}).items():
        values[key], slices[key], cumsum[key], cat_dims[key] = [text] * n, one_each, zeros, 0
    batch = AtomicData.from_dict(values)
    batch.assign_batch_stats(slices, cumsum, cat_dims, natoms.tolist())
    return batch


def examples(batch: AtomicData, facts: tuple, constants: Optional[dict] = None) -> list:
    """The structures of a batch of :func:`collate`, each as the ``AtomicData`` it was
    registered as (strings stay strings, one-string lists lists)."""
    plain = {key for key, kind, _ in facts if kind == STRING} | set(constants or ())
    out = []
    for k in range(batch.num_graphs):
        item = batch.get_example(k)
        for key in plain:
            # get_example hands the constructor a str, which it makes a list for `dataset`
            value = item[key]
            item[key] = value[0] if isinstance(value, list) else value
        out.append(item)
    return out
