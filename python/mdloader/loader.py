"""The loader handle: a ctypes wrapper over the C API (include/mdloader.h)."""

from __future__ import annotations

import ctypes
import enum
import json
import warnings
from collections.abc import Sequence
from typing import Any, Iterable, Iterator, Union

import numpy as np

from . import _lib

__all__ = ["Status", "Backend", "MDLError", "Loader", "Batch", "status_string", "last_error"]


class Status(enum.IntEnum):
    """Status codes of the C API (enum mdl_status)."""

    OK = 0
    ERR_NULL_ARG = 1
    ERR_INVALID_ARG = 2
    ERR_OUT_OF_RANGE = 3
    ERR_BUFFER_TOO_SMALL = 4
    ERR_STATE = 5
    ERR_MPI = 6
    ERR_NO_MEMORY = 7
    ERR_PANIC = 8
    ERR_REMOTE = 9


class Backend(enum.IntEnum):
    """Which engine moves the bytes (enum mdl_backend)."""

    AUTO = 0
    ONESIDED = 1
    COLLECTIVE = 2

    @classmethod
    def parse(cls, value: Union[str, int, "Backend"]) -> "Backend":
        if isinstance(value, str):
            try:
                return cls[value.strip().upper().replace("-", "")]
            except KeyError:
                raise ValueError(f"unknown backend {value!r}: expected auto, onesided or collective") from None
        return cls(int(value))


class MDLError(RuntimeError):
    """A call into libmdloader failed.

    Attributes: ``status`` (a :class:`Status`, or the raw int for an unknown code),
    ``message`` (the library's text from mdl_last_error: names the call and says why).
    A collective call that failed on another rank raises with ``Status.ERR_REMOTE`` here.
    """

    def __init__(self, status: int, message: str):
        try:
            self.status: Union[Status, int] = Status(status)
        except ValueError:
            self.status = status
        self.message = message
        name = self.status.name if isinstance(self.status, Status) else str(status)
        super().__init__(f"{message} [MDL_{name}]" if message else f"MDL_{name}")


def status_string(status: int) -> str:
    """The library's static text for a status code."""
    text = _lib.load_library().mdl_status_string(int(status))
    return text.decode() if text else ""


def last_error() -> str:
    """The message of this thread's last failed call ("" when none failed)."""
    lib = _lib.load_library()
    n = lib.mdl_last_error(None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    lib.mdl_last_error(buf, n + 1)
    return buf.value.decode(errors="replace")


def _check(status: int, prefix: str = "") -> None:
    if status != 0:
        message = last_error()
        raise MDLError(status, prefix + message if prefix else message)


def _ptr(a: np.ndarray | None) -> int | None:
    return None if a is None or a.size == 0 else a.ctypes.data


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
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(f"batch index {k} out of range for {len(self)} samples")
        return self.data[int(self.offsets[k]) : int(self.offsets[k + 1])]

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


SampleLike = Union[bytes, bytearray, memoryview, np.ndarray]


def _as_bytes(a: Any) -> np.ndarray:
    """Any buffer (bytes, numpy array of any dtype, ...) as a flat uint8 array (a view
    when possible)."""
    if isinstance(a, np.ndarray):
        a = np.ascontiguousarray(a)
        return a.reshape(-1).view(np.uint8)
    return np.frombuffer(memoryview(a).cast("B"), dtype=np.uint8)


def _shard_arrays(data: Any, offsets: Any) -> tuple[np.ndarray, np.ndarray]:
    if offsets is None:
        if isinstance(data, np.ndarray) and data.dtype != object:
            raise TypeError(
                "register_shard(data) without offsets takes a list of samples; for one buffer "
                "pass its offsets too: register_shard(data, offsets)"
            )
        parts = [_as_bytes(s) for s in data]
        sizes = np.fromiter((p.size for p in parts), dtype=np.uint64, count=len(parts))
        offs = np.zeros(len(parts) + 1, dtype=np.uint64)
        np.cumsum(sizes, out=offs[1:])
        buf = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint8)
        return buf, offs
    buf = _as_bytes(data)
    raw = np.asarray(offsets)
    if raw.ndim != 1 or (raw.size and raw.dtype.kind not in "iu"):
        raise TypeError(f"offsets must be a 1-d array of integers, got dtype {raw.dtype}, shape {raw.shape}")
    if raw.size and raw.dtype.kind == "i" and raw.min() < 0:
        raise ValueError("offsets must be >= 0")
    offs = np.ascontiguousarray(raw, dtype=np.uint64)
    if offs.size and int(offs[-1]) > buf.size:
        raise ValueError(f"offsets[-1] = {int(offs[-1])} is beyond the data ({buf.size} bytes)")
    return buf, offs


class Loader:
    """An MDLoader instance over an MPI communicator (collective creation).

    >>> from mpi4py import MPI
    >>> import mdloader
    >>> with mdloader.Loader(MPI.COMM_WORLD) as ld:
    ...     ld.register_shard([b"sample 0 of this rank", np.arange(3, dtype=np.float32)])
    ...     batch = ld.fetch([0, ld.num_samples - 1])
    ...     first = bytes(batch[0])

    comm: an mpi4py communicator (default ``MPI.COMM_WORLD``) or a Fortran handle
    (int, as from ``comm.py2f()``). The library duplicates it. backend: optional initial
    backend ("auto", "onesided", "collective"); ``MDL_BACKEND`` in the environment sets it
    too. Methods marked collective must be called by every rank, in the same order; if
    one rank passes a bad argument every rank raises (that rank its own error, the others
    :class:`MDLError` with ``Status.ERR_REMOTE``), nobody hangs.
    """

    def __init__(self, comm: Any = None, *, backend: Union[str, int, Backend, None] = None):
        from mpi4py import MPI

        if comm is None:
            comm = MPI.COMM_WORLD
        if isinstance(comm, int):
            comm = MPI.Comm.f2py(comm)
        self.comm = comm
        self.rank: int = comm.Get_rank()
        self.size: int = comm.Get_size()
        self._lib = _lib.load_library()
        _check_same_mpi(MPI)
        self._h = ctypes.c_void_p()
        _check(self._lib.mdl_init_f(comm.py2f(), ctypes.byref(self._h)))
        self._sizes: np.ndarray | None = None
        self._first_ids: np.ndarray | None = None
        self._n_local = 0
        self._epoch_steps: int | None = None  # steps of the built-in epoch in progress
        if backend is not None:
            self.set_backend(backend)

    # -- life cycle ---------------------------------------------------------------------
    def close(self) -> None:
        """Collective. Frees the loader (idempotent)."""
        if getattr(self, "_h", None) is not None and self._h.value:
            status = self._lib.mdl_finalize(ctypes.byref(self._h))
            self._h = ctypes.c_void_p()
            _check(status)

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        # Finalizing is collective: it cannot be done from the garbage collector.
        if getattr(self, "_h", None) is not None and self._h.value:
            warnings.warn("mdloader.Loader was not closed (use `with` or close())", ResourceWarning, stacklevel=2)

    @property
    def closed(self) -> bool:
        return not (self._h and self._h.value)

    def _handle(self) -> ctypes.c_void_p:
        if self.closed:
            raise MDLError(Status.ERR_STATE, "the loader is closed")
        return self._h

    # -- data -------------------------------------------------------------------------
    def register_shard(self, data: Any, offsets: Any = None) -> None:
        """Collective. Registers this rank's shard (once per loader); the data is copied.

        Either a sequence of samples (bytes, bytearray, numpy arrays of any dtype:
        each becomes one sample, its raw bytes), or one buffer ``data`` with ``offsets``
        (n + 1 byte offsets, offsets[0] == 0, non-decreasing): sample i is
        ``data[offsets[i]:offsets[i+1]]``. Global ids follow rank order: rank r's local
        sample i has id (sum of the shard sizes of ranks < r) + i.
        """
        h = self._handle()
        try:
            buf, offs = _shard_arrays(data, offsets)
        except Exception as err:
            # Fail on every rank together: n_samples = 1 with no offsets is refused.
            self._lib.mdl_register_shard(h, None, None, 1)
            raise err
        n = max(offs.size - 1, 0)
        _check(self._lib.mdl_register_shard(h, _ptr(buf), _ptr(offs), n))
        # Every sample's size, on every rank (for sizing fetch buffers without asking
        # the library per id): one Allgatherv on the caller's communicator.
        from mpi4py import MPI

        local = np.diff(offs).astype(np.uint64) if offs.size else np.zeros(0, dtype=np.uint64)
        counts = np.array(self.comm.allgather(int(local.size)), dtype=np.int64)
        sizes = np.empty(int(counts.sum()), dtype=np.uint64)
        self.comm.Allgatherv([local, MPI.UINT64_T], [sizes, (counts, None), MPI.UINT64_T])
        self._sizes = sizes
        self._first_ids = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        self._n_local = int(local.size)

    @property
    def num_samples(self) -> int:
        """The number of samples over all ranks (ids are 0 .. num_samples - 1)."""
        out = ctypes.c_uint64()
        _check(self._lib.mdl_num_samples(self._handle(), ctypes.byref(out)))
        return out.value

    def __len__(self) -> int:
        return self.num_samples

    @property
    def local_ids(self) -> range:
        """The global ids of this rank's own shard."""
        if self._first_ids is None:
            return range(0)
        first = int(self._first_ids[self.rank])
        return range(first, first + self._n_local)

    def sample_size(self, sample_id: int) -> int:
        """Size in bytes of a sample. Local, no communication."""
        out = ctypes.c_uint64()
        if sample_id < 0:
            raise MDLError(Status.ERR_OUT_OF_RANGE, f"sample id {sample_id} is negative")
        _check(self._lib.mdl_sample_size(self._handle(), int(sample_id), ctypes.byref(out)))
        return out.value

    def sample_sizes(self) -> np.ndarray:
        """Size in bytes of every sample (uint64, indexed by global id; a read-only view)."""
        if self._sizes is None:
            self._handle()
            raise MDLError(Status.ERR_STATE, "no shard registered yet (call register_shard first)")
        v = self._sizes.view()
        v.flags.writeable = False
        return v

    def fetch(self, ids: Iterable[int] | np.ndarray, out: np.ndarray | bytearray | None = None) -> Batch:
        """Collective. Fetches the samples ``ids`` (global, 0-based; may repeat, may be
        empty, differ per rank) and returns a :class:`Batch` of zero-copy views.

        out: optional buffer to fetch into (a uint8 numpy array or bytearray of at least
        the batch's size), to reuse memory across steps; by default a new one is allocated.
        A too-small ``out`` raises MDLError(ERR_BUFFER_TOO_SMALL).
        """
        h = self._handle()
        try:
            arr = np.asarray(ids if not isinstance(ids, range) else np.arange(ids.start, ids.stop, ids.step))
            if arr.ndim != 1:
                arr = arr.reshape(-1)
            if arr.size and arr.dtype.kind not in "iu":
                raise TypeError(f"ids must be integers, got dtype {arr.dtype}")
            negative = bool(arr.size and arr.dtype.kind == "i" and arr.min() < 0)
            if negative:
                arr = np.where(arr < 0, -1, arr)  # -1 -> 2**64 - 1: the library refuses it on every rank
            idv = np.ascontiguousarray(arr.astype(np.int64, copy=False)).view(np.uint64)
            n = idv.size
            if out is None:
                total = 0
                if n and self._sizes is not None:
                    valid = idv[idv < self._sizes.size]
                    total = int(self._sizes[valid].sum())
                buf = np.empty(total, dtype=np.uint8)
            else:
                buf = _as_bytes(out)
                if not buf.flags.writeable:
                    raise TypeError("out must be a writable buffer")
        except Exception as err:
            self._lib.mdl_fetch_batch(h, None, 1, None, 0, None)  # fail on every rank together
            raise err
        offs = np.empty(n + 1, dtype=np.uint64)
        status = self._lib.mdl_fetch_batch(h, _ptr(idv), n, _ptr(buf), buf.size, offs.ctypes.data)
        if status != 0:
            prefix = "a sample id is negative (ids are 0-based); " if negative else ""
            _check(status, prefix)
        return Batch(idv, buf[: int(offs[-1])], offs)

    def set_backend(self, backend: Union[str, int, Backend]) -> None:
        """Forces "onesided" or "collective", or returns to "auto". Local; takes effect at
        the next fetch and must be the same on every rank."""
        try:
            b = Backend.parse(backend)
        except ValueError as err:
            raise MDLError(Status.ERR_INVALID_ARG, str(err)) from None
        _check(self._lib.mdl_set_backend(self._handle(), int(b)))

    def stats(self) -> dict:
        """This rank's statistics (mdl_stats_json) as a dict; {} when the library has none."""
        fn = getattr(self._lib, "mdl_stats_json", None)
        if fn is None:
            return {}
        n = fn(self._handle(), None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        fn(self._handle(), buf, n + 1)
        return json.loads(buf.value.decode()) if n else {}

    # -- the library's built-in sampler ----------------------------------------------------
    @property
    def has_sampler(self) -> bool:
        """Whether the library has the built-in sampler (mdl_epoch_begin ...)."""
        return hasattr(self._lib, "mdl_epoch_begin")

    def _sampler_fn(self, name: str):
        if not self.has_sampler:
            raise MDLError(Status.ERR_STATE, f"{_lib.library_path()} has no built-in sampler ({name})")
        return getattr(self._lib, name)

    def epoch(
        self,
        batch_size: int,
        *,
        seed: int = 0,
        epoch: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        start_step: int = 0,
    ) -> Iterator[Batch]:
        """Collective. One epoch of the library's built-in sampler (mdl_epoch_begin /
        mdl_next_batch): a permutation of all ids drawn from (seed, epoch), the same in
        every language and on every rank, split like PyTorch's DistributedSampler, in
        batches of batch_size (the last may be smaller), fetched ahead when
        :meth:`set_prefetch` asked for it.

        The yielded batches are zero-copy views of the library's memory, **valid until
        the next batch is taken** (copy what must outlive the step: ``bytes(batch[k])``,
        ``np.array(batch[k])``). ``batch.ids`` and ``batch.offsets`` are copies.

        start_step: resume at this step (0-based) exactly as an uninterrupted run would
        (mdl_epoch_seek), e.g. after restarting from a checkpoint.

        Stopping early leaves the epoch open: plain :meth:`fetch` is refused until
        :meth:`end_epoch` (collective) or the next epoch begins.
        """
        begin = self._sampler_fn("mdl_epoch_begin")
        h = self._handle()
        _check(begin(h, int(seed), int(epoch), int(batch_size), int(bool(shuffle)), int(bool(drop_last))))
        self._epoch_steps = self.epoch_steps(batch_size, drop_last)
        if start_step:
            self.seek(start_step)
        next_batch = self._lib.mdl_next_batch
        ids_p = _lib.c_u64_p()
        offs_p = _lib.c_u64_p()
        data_p = ctypes.c_void_p()
        n = ctypes.c_size_t()
        refs = (ctypes.byref(ids_p), ctypes.byref(data_p), ctypes.byref(offs_p), ctypes.byref(n))
        while True:
            _check(next_batch(h, *refs))
            count = n.value
            if count == 0:
                self._epoch_steps = None
                return
            ids = np.ctypeslib.as_array(ids_p, (count,)).copy()
            offs = np.ctypeslib.as_array(offs_p, (count + 1,)).copy()
            total = int(offs[-1])
            if total:
                data = np.ctypeslib.as_array(ctypes.cast(data_p, ctypes.POINTER(ctypes.c_uint8)), (total,))
                data.flags.writeable = False
            else:
                data = np.zeros(0, dtype=np.uint8)
            yield Batch(ids, data, offs)

    def end_epoch(self) -> None:
        """Collective. Ends the built-in sampler's epoch in progress (after stopping
        early), so that :meth:`fetch` may be used again. No-op when none is open."""
        if self._epoch_steps is None:
            return
        try:
            self.seek(self._epoch_steps)  # the end: the next step is empty and closes the epoch
        except MDLError as err:
            if err.status == Status.ERR_STATE:  # no epoch open after all (e.g. a refused seek ended it)
                self._epoch_steps = None
                return
            raise
        ids_p, offs_p, data_p, n = _lib.c_u64_p(), _lib.c_u64_p(), ctypes.c_void_p(), ctypes.c_size_t()
        status = self._lib.mdl_next_batch(
            self._handle(), ctypes.byref(ids_p), ctypes.byref(data_p), ctypes.byref(offs_p), ctypes.byref(n)
        )
        self._epoch_steps = None
        _check(status)

    def epoch_steps(self, batch_size: int, drop_last: bool = False) -> int:
        """Steps of a built-in sampler epoch on every rank (the same everywhere)."""
        total, ranks = self.num_samples, self.size
        per_rank = total // ranks if drop_last else -(-total // ranks)
        return -(-per_rank // int(batch_size))

    def seek(self, step: int) -> None:
        """Collective. The next batch of the current built-in epoch is step ``step``
        (0-based), exactly as an uninterrupted run (resuming from a checkpoint)."""
        _check(self._sampler_fn("mdl_epoch_seek")(self._handle(), int(step)))

    def set_prefetch(self, depth: int) -> None:
        """Batches the built-in sampler fetches ahead on a library thread (0: none).
        Local, the same on every rank; needs MPI_THREAD_MULTIPLE (mpi4py's default)."""
        _check(self._sampler_fn("mdl_set_prefetch")(self._handle(), int(depth)))

    def batches(self, batch_size: int, **kwargs) -> "Any":
        """A :class:`mdloader.DataLoader` over this loader (see there for the arguments)."""
        from .data import DataLoader

        return DataLoader(self, batch_size, **kwargs)

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"rank {self.rank}/{self.size}"
        return f"<mdloader.Loader {state}>"


def _check_same_mpi(MPI: Any) -> None:
    """Refuses clearly a library built for the other MPI than mpi4py's (mixing the two
    in one process aborts deep inside MPI)."""
    built = _lib.mpi_family_of_library(_lib.library_path())
    version = MPI.Get_library_version()
    running = "openmpi" if "Open MPI" in version else "mpich" if "MPICH" in version else None
    if built and running and built != running:
        raise _lib.LibraryNotFound(
            f"{_lib.library_path()} is built for {built}, but mpi4py runs {running} "
            f"({version.splitlines()[0].strip()}). Point MDLOADER_LIBRARY at the library built for {running} "
            f"(e.g. target/{running}/release/libmdloader.so)."
        )
