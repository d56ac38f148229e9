"""The caller's arguments, checked exactly and made what the C API takes.

ctypes converts a Python int to c_uint64 / c_uint32 modulo 2^64 / 2^32 without a word:
sample_size(2**64) would ask for sample 0, set_prefetch(-1) for 2^32 - 1 batches. Every
integer is therefore checked here before it reaches the library; ids, output buffers and
a shard's samples are made the contiguous arrays the library reads and writes.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

U64_MAX = 2**64 - 1
U32_MAX = 2**32 - 1
# An id no loader has (ids are < num_samples <= 2^64 - 1): a collective call passes it in
# place of an id that cannot be represented, so that the library refuses the call on
# every rank (this rank MDL_ERR_OUT_OF_RANGE, the others MDL_ERR_REMOTE) instead of this
# rank raising alone and leaving the others waiting in the collective.
NO_SUCH_ID = U64_MAX


def integer(value: Any, what: str) -> int:
    """value as a Python int, exactly. TypeError for anything that is not an integer:
    floats (even 2.0), bools, strings, None."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what} must be an integer, not a bool ({value!r})")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, got {type(value).__name__} {value!r}") from None


def uint(value: Any, what: str, lo: int = 0, hi: int = U64_MAX) -> int:
    """An integer in lo .. hi (TypeError for a non-integer, ValueError out of range)."""
    v = integer(value, what)
    if not lo <= v <= hi:
        raise ValueError(f"{what} = {v} is out of range ({lo} .. {hi})")
    return v


def add_note(err: BaseException, text: str) -> None:
    if hasattr(err, "add_note"):  # Python 3.11+
        err.add_note(text)


FAILED_EVERYWHERE = (
    "(the library was called with an argument it refuses, so that this collective call failed on "
    "every rank: the others raise MDLError with Status.ERR_REMOTE instead of waiting)"
)


def id_array(ids: Any) -> tuple[np.ndarray, str]:
    """ids (any integer sequence or array, or a range) as a contiguous uint64 array with
    the same values. An integer that cannot be an id (negative, >= 2^64) becomes
    NO_SUCH_ID, and the second value says which it was (for the error message); the
    library then refuses the fetch on every rank. TypeError for anything not an integer
    (floats, bools, strings), even when numpy would convert it."""
    if isinstance(ids, range) and ids and -(2**63) <= min(ids[0], ids[-1]) and max(ids[0], ids[-1]) < 2**63:
        arr = np.arange(ids.start, ids.stop, ids.step, dtype=np.int64)
    else:
        arr = np.asarray(ids)
    arr = arr.reshape(-1)
    if arr.size == 0:
        return np.zeros(0, dtype=np.uint64), ""
    kind = arr.dtype.kind
    if kind == "u":
        return np.ascontiguousarray(arr, dtype=np.uint64), ""
    if kind == "i":
        bad = arr < 0
        idv = arr.astype(np.uint64)  # wraps the negatives: replaced just below
        if not bad.any():
            return idv, ""
        idv[bad] = NO_SUCH_ID
        return idv, f"id {int(arr[bad][0])} is negative (ids are 0-based); "
    if kind == "O" or (kind == "f" and not isinstance(ids, np.ndarray)):
        # Python ints beyond int64, or a list numpy turned into floats ([-1, 2**63] is
        # float64): check the original objects one by one.
        objs = np.asarray(ids, dtype=object).reshape(-1) if not isinstance(ids, np.ndarray) else arr
        idv = np.empty(objs.size, dtype=np.uint64)
        problem = ""
        for k, x in enumerate(objs.tolist()):
            v = integer(x, f"ids[{k}]")
            if 0 <= v <= U64_MAX:
                idv[k] = v
            else:
                idv[k] = NO_SUCH_ID
                if not problem:
                    problem = (f"id {v} is negative (ids are 0-based); " if v < 0
                               else f"id {v} does not fit in 64 bits; ")
        return idv, problem
    raise TypeError(f"ids must be integers, got an array of dtype {arr.dtype}")


def batch_ids(k: int, batch: Any) -> tuple[np.ndarray, str]:
    """Batch k of a user's epoch as id_array does, refusing what is not one batch: a
    single id (a sampler passed where a batch sampler belongs) or nested batches."""
    if not hasattr(batch, "__len__") and hasattr(batch, "__iter__"):
        batch = list(batch)  # an iterator or generator of ids
    if np.ndim(batch) != 1:
        what = "a single id" if np.ndim(batch) == 0 else f"{np.ndim(batch)}-dimensional"
        raise TypeError(f"batch {k} is {what}: each batch must be a flat sequence of ids (a sampler of single "
                        "ids belongs in torch's BatchSampler(sampler, batch_size, drop_last))")
    return id_array(batch)


def out_bytes(out: Any) -> np.ndarray:
    """The caller's out buffer as a flat uint8 array over the *same* memory (never a
    copy: the library must write into out itself). TypeError for a buffer that cannot
    be written in place: read-only, not C-contiguous (a strided view), holding Python
    objects."""
    if isinstance(out, np.ndarray):
        a = out.view(np.ndarray)  # np.matrix and other subclasses: the same memory, plain indexing
        if a.dtype.hasobject:
            raise TypeError(f"out must hold plain data, not Python objects (dtype {a.dtype})")
        if not a.flags.c_contiguous:
            raise TypeError(
                "out must be C-contiguous: a strided view (e.g. buf[::2], a column, a transpose) cannot "
                "be filled in place; pass a contiguous array (np.ascontiguousarray makes a copy, which "
                "would then not be out)"
            )
        if not a.flags.writeable:
            raise TypeError("out must be writable (this array is read-only)")
        buf = a.reshape(-1).view(np.uint8)
    else:
        try:
            m = memoryview(out)
        except TypeError:
            raise TypeError(
                f"out must be a writable, C-contiguous buffer (numpy array, bytearray, ...), "
                f"not {type(out).__name__}"
            ) from None
        if m.readonly:
            raise TypeError(f"out must be writable ({type(out).__name__} is read-only)")
        if not m.c_contiguous:
            raise TypeError("out must be C-contiguous: a strided memoryview cannot be filled in place")
        try:
            m = m.cast("B")
        except TypeError as err:
            raise TypeError(f"out cannot be used as raw bytes: {err}") from None
        buf = np.frombuffer(m, dtype=np.uint8)
    if buf.size and not buf.flags.writeable:
        raise TypeError("out must be writable")
    return buf


def pointer(a: np.ndarray | None) -> int | None:
    """The array's address for ctypes; None (NULL) for no array or an empty one."""
    return None if a is None or a.size == 0 else a.ctypes.data


def plain_tensor(value: Any) -> Any:
    """A torch tensor as DLPack exports its values: detached, with its lazy negation and
    conjugation (``t.conj().imag``) applied, which DLPack would otherwise drop."""
    if hasattr(value, "resolve_neg"):
        return value.detach().resolve_neg().resolve_conj()
    return value


def as_bytes(a: Any) -> np.ndarray:
    """Any buffer (bytes, numpy array of any dtype, a CPU torch tensor or any other
    DLPack array, ...) as a flat uint8 array (a view when possible)."""
    if not isinstance(a, np.ndarray) and hasattr(a, "__dlpack__"):
        # torch refuses to export a tensor that requires grad, and drops a lazy negation
        # or conjugation (t.conj().imag): its values are what we want
        a = np.from_dlpack(plain_tensor(a))
    if isinstance(a, np.ndarray):
        a = np.ascontiguousarray(a)
        return a.reshape(-1).view(np.uint8)
    return np.frombuffer(memoryview(a).cast("B"), dtype=np.uint8)


def _padded(parts: list, align: int) -> list:
    """The samples with zeros appended so that each size is a multiple of align."""
    if align == 1:
        return parts
    out = []
    for p in parts:
        pad = -p.size % align
        out.append(np.concatenate([p, np.zeros(pad, dtype=np.uint8)]) if pad else p)
    return out


def shard_arrays(data: Any, offsets: Any, align: int = 1) -> tuple[np.ndarray, np.ndarray]:
    if offsets is None:
        if isinstance(data, np.ndarray) and data.dtype != object:
            raise TypeError(
                "register_shard(data) without offsets takes a list of samples; for one buffer "
                "pass its offsets too: register_shard(data, offsets)"
            )
        parts = _padded([as_bytes(s) for s in data], align)
        sizes = np.fromiter((p.size for p in parts), dtype=np.uint64, count=len(parts))
        offs = np.zeros(len(parts) + 1, dtype=np.uint64)
        np.cumsum(sizes, out=offs[1:])
        buf = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint8)
        return buf, offs
    buf = as_bytes(data)
    raw = np.asarray(offsets)
    if raw.ndim != 1 or (raw.size and raw.dtype.kind not in "iu"):
        raise TypeError(f"offsets must be a 1-d array of integers, got dtype {raw.dtype}, shape {raw.shape}")
    if raw.size and raw.dtype.kind == "i" and raw.min() < 0:
        raise ValueError("offsets must be >= 0")
    offs = np.ascontiguousarray(raw, dtype=np.uint64)
    if offs.size and int(offs[-1]) > buf.size:
        raise ValueError(f"offsets[-1] = {int(offs[-1])} is beyond the data ({buf.size} bytes)")
    # Samples that already start and end on multiples of align (typed records do) are
    # taken as they are: cutting them apart and joining them again is a Python loop
    # over samples and a copy of the shard, for nothing.
    if align > 1 and offs.size > 1 and not (offs % align == 0).all():
        return shard_arrays([buf[int(a) : int(b)] for a, b in zip(offs[:-1], offs[1:])], None, align)
    return buf, offs
