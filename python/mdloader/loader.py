"""The loader handle: a ctypes wrapper over the C API (include/mdloader.h)."""

from __future__ import annotations

import ctypes
import enum
import functools
import inspect
import json
import math
import os
import threading
import warnings
from typing import Any, Iterable, Iterator, NamedTuple, Union

import numpy as np

from . import _lib, abort
from .args import (FAILED_EVERYWHERE, U32_MAX, U64_MAX, add_note, batch_ids, id_array, integer, out_bytes, pointer,
                   shard_arrays, uint)
from .batch import PAGE, Batch, aligned_empty
from .data import DataLoader
from .errors import EpochTakenOver, MDLError, Status, check, last_error, status_string
from .typed import RECORD_ALIGN, agree_schema, encode, is_typed_sample, typed_batch

# Status, MDLError, status_string, last_error and Batch live in .errors and .batch; named
# here too for code that imported them from mdloader.loader before the split.
__all__ = ["Status", "Backend", "MDLError", "Loader", "Batch", "status_string", "last_error"]


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
        try:
            return cls(integer(value, "backend"))
        except TypeError as err:
            raise ValueError(str(err)) from None


class ReplicaInfo(NamedTuple):
    """Where a rank sits among the replica groups (:attr:`Loader.replica`)."""

    group: int
    num_groups: int
    rank_in_group: int
    group_size: int


def _called_by_every_rank(method):
    """Marks a method of :class:`Loader` that every rank calls at the same point (a
    collective call, or a setting that must be the same on every rank): an epoch that a
    thread of this package runs on the loader (see :meth:`Loader.epoch_on_thread`) is
    stopped first when another thread makes the call. Every rank stops it at the same
    point; left running, that thread's collective calls (its epoch's steps, the next
    epoch's mdl_epoch_begin) and this one would reach the library in one order on one
    rank and in the other order on another, a mismatch that aborts the job
    (MPI_ERR_TRUNCATE) or hangs it."""

    if inspect.isgeneratorfunction(method):
        # An epoch begins at the generator's first ``next``, not at the call: the thread
        # is stopped there, or it could begin an epoch of its own in between.
        @functools.wraps(method)
        def generator(self, *args, **kwargs):
            self._stop_epoch_thread()
            return (yield from method(self, *args, **kwargs))

        return generator

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        self._stop_epoch_thread()
        return method(self, *args, **kwargs)

    return call


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
    too. group_size: replica groups (``mdl_init_replicated``): comm is split into groups
    of ``group_size`` consecutive ranks (dividing comm's size), or one group per node
    with 0, each holding a full copy of the dataset: every rank registers its part of
    its group's copy (:meth:`replica_part`), fetches read only the rank's own group, and
    the sampler still splits every epoch over all of comm (see :attr:`replica`). Methods marked collective must be called by every rank, in the same order; if
    one rank passes a bad argument every rank raises (that rank its own error, the others
    :class:`MDLError` with ``Status.ERR_REMOTE``), nobody hangs.

    Arguments are checked exactly before they reach ctypes (which would wrap an integer
    modulo 2^64 without a word): a non-integer is TypeError, an integer out of range
    ValueError, or MDLError(ERR_OUT_OF_RANGE) for a sample id. In a collective call
    (the constructor's backend, register_shard, fetch, epoch, seek) the binding then still
    calls the library, with an argument the library refuses, so that the call fails on
    every rank: this rank raises the TypeError/ValueError, the others MDLError(ERR_REMOTE).
    What cannot be agreed: a closed loader on one rank, or a communicator that is not one
    (these raise on that rank alone, as in the C API, docs/hardening.md 5).
    """

    def __init__(self, comm: Any = None, *, backend: Union[str, int, Backend, None] = None,
                 group_size: int | None = None):
        from mpi4py import MPI

        if comm is None:
            comm = MPI.COMM_WORLD
        if isinstance(comm, int):
            comm = MPI.Comm.f2py(comm)
        _refuse_torchrun(MPI)
        self.comm = comm
        self.rank: int = comm.Get_rank()
        self.size: int = comm.Get_size()
        self._lib = _lib.load_library()
        _check_same_mpi(MPI)
        abort.install()
        self._h = ctypes.c_void_p()
        self._first_id = 0  # this rank's first global id, and its number of samples
        self._n_local = 0
        self._max_size = 0  # the largest sample on any rank (sizes fetch buffers; see fetch)
        self._epoch_steps: int | None = None  # steps of the built-in epoch in progress
        self._epoch_owner: object | None = None  # the generator of Loader.epoch whose epoch it is
        self._epoch_thread: tuple | None = None  # (thread, stop) of epoch_on_thread
        self._align = 1  # register_shard's align: every sample's size is a multiple of it
        self.schema = None  # typed samples' schema (mdloader.typed), agreed at registration
        try:
            groups = None if group_size is None else uint(group_size, "group_size", hi=(1 << 31) - 1)
            initial = None if backend is None else Backend.parse(backend)
        except (TypeError, ValueError) as err:
            # Collective: a NULL out-pointer makes mdl_init fail on every rank.
            self._lib.mdl_init_f(comm.py2f(), None)
            add_note(err, FAILED_EVERYWHERE)
            if isinstance(err, TypeError):
                raise
            raise MDLError(Status.ERR_INVALID_ARG, str(err)) from err
        if groups is None:
            check(self._lib.mdl_init_f(comm.py2f(), ctypes.byref(self._h)))
        else:
            check(self._lib.mdl_init_replicated_f(comm.py2f(), groups, ctypes.byref(self._h)))
        if initial is not None:
            check(self._lib.mdl_set_backend(self._h, int(initial)))

    # -- life cycle ---------------------------------------------------------------------
    def epoch_on_thread(self, thread: threading.Thread | None, stop: Any = None) -> None:
        """Local. Says that ``thread`` runs this loader's epochs (the collate thread of
        ``mdloader.pyg.DataLoader``) and that ``stop()`` stops it and ends its epoch, on
        every rank alike; a collective method called from any other thread calls
        ``stop()`` first. ``None``: no thread does any more."""
        self._epoch_thread = None if thread is None else (thread, stop)

    def _stop_epoch_thread(self) -> None:
        held = self._epoch_thread
        if held is not None and held[0] is not threading.current_thread():
            self._epoch_thread = None
            held[1]()

    @_called_by_every_rank
    def close(self) -> None:
        """Collective. Frees the loader (idempotent). Where another rank is in a
        different call (``Status.ERR_CALL_MISMATCH``, naming both calls) nothing is done
        and the loader stays open: close again once every rank does."""
        if getattr(self, "_h", None) is not None and self._h.value:
            # mdl_finalize sets the handle to NULL whenever it frees it.
            check(self._lib.mdl_finalize(ctypes.byref(self._h)))

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, kind, value, traceback) -> None:
        # Closing is collective: leaving the block by an exception that the other ranks
        # may not share (a failed collate, a KeyboardInterrupt) must not wait in it for
        # them. The loader stays open; MPI_Finalize closes it (every rank reaches it), or
        # the job ends first (mdloader.abort).
        if kind is None:
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
    @_called_by_every_rank
    def register_shard(self, data: Any, offsets: Any = None, *, align: int = 1, cat_dims: Any = None) -> None:
        """Collective. Registers this rank's shard (once per loader); the data is copied.

        **Typed samples**: a sequence of mappings of names to arrays (numpy arrays, CPU
        torch tensors, numbers), e.g. ``{"z": int64[n], "pos": float32[n, 3],
        "edge_index": int64[2, m], "y": float32[1]}``. Each field's dtype and its shape
        apart from its concatenation dimension (``cat_dims``: a dict of name -> dimension
        or a function (name, array) -> dimension; 0 by default) form the schema, the same
        for every sample and agreed across ranks (a difference is ValueError on every rank,
        naming the field and the values). The raw bytes are stored, no pickle
        (docs/typed_format.md). Fetched batches are then :class:`mdloader.typed.TypedBatch`:
        ``batch.fields["pos"]`` is every sample's ``pos`` concatenated,
        ``batch.fields.counts["pos"]`` each sample's rows. ``schema`` holds the schema.
        torch_geometric ``Data``: see :mod:`mdloader.pyg`.

        Either a sequence of samples (bytes, bytearray, numpy arrays of any dtype, CPU
        torch tensors: each becomes one sample, its raw bytes), or one buffer ``data``
        with ``offsets`` (n + 1 byte offsets, offsets[0] == 0, non-decreasing): sample i
        is ``data[offsets[i]:offsets[i+1]]``. Global ids follow rank order: rank r's local
        sample i has id (sum of the shard sizes of ranks < r) + i.

        align: samples are stored back to back, so a sample starts wherever the previous
        one ended (a float32 array may sit at an odd byte). With ``align`` (a power of
        two, e.g. 8 or 64) every sample's size is rounded up to a multiple of it with
        zero bytes, so that in every fetched batch each sample starts at a multiple of
        ``align`` from the batch's start (and :meth:`fetch` allocates its buffers
        ``align``-aligned): zero-copy typed views. Sizes then include the padding
        (``sample_size``, ``batch.sizes``): pick the largest itemsize of your records to
        change no size, or records that know their own length. The same on every rank
        (checked: a mismatch raises ValueError on every rank).
        """
        h = self._handle()
        if self._agreed_typed(data, offsets):
            data, offsets, align = self._typed_shard(data, cat_dims)
        try:
            align = self._agreed_align(align)
            buf, offs = shard_arrays(data, offsets, align)
        except Exception as err:
            # Fail on every rank together: n_samples = 1 with no offsets is refused.
            self._lib.mdl_register_shard(h, None, None, 1)
            add_note(err, FAILED_EVERYWHERE)
            raise
        n = max(offs.size - 1, 0)
        check(self._lib.mdl_register_shard(h, pointer(buf), pointer(offs), n))
        # The binding keeps no per-sample data (the library's index has every size; a
        # copy here would double that memory on every rank): only this rank's first id
        # and count (local_ids) and the largest sample anywhere, which bounds a batch's
        # bytes without asking the library per id (fetch). One allgather of P pairs.
        local_max = int(np.diff(offs).max()) if n else 0
        mine = self.replica
        everyone = self.comm.allgather((mine.group, mine.rank_in_group, n, local_max))
        # Ids are the group's, in the order of its ranks.
        self._first_id = sum(count for group, rank, count, _ in everyone
                             if group == mine.group and rank < mine.rank_in_group)
        self._n_local = n
        self._max_size = max(m for *_, m in everyone)

    def _agreed_typed(self, data: Any, offsets: Any) -> bool:
        """Whether the shards are typed samples (collective, one allgather, whatever the
        arguments): a rank with no sample follows the others; bytes on one rank and
        mappings on another is ValueError on every rank."""
        try:
            if offsets is not None:
                kind = "bytes"
            else:
                kind = ("typed" if is_typed_sample(data[0]) else "bytes") if len(data) else None
        except Exception:  # noqa: BLE001 - not a sequence of samples: the byte path says what is wrong
            kind = "bytes"
        kinds = {k for k in self.comm.allgather(kind) if k}
        if len(kinds) > 1:
            raise ValueError("register_shard: some ranks pass typed samples (mappings of arrays), others byte samples")
        return kinds == {"typed"}

    def _typed_shard(self, samples: Any, cat_dims: Any) -> tuple:
        """(data, offsets, align) of typed samples, their schema agreed (collective)."""
        schema, problem = None, ""
        try:
            schema, data, offsets = encode(samples, cat_dims)
        except Exception as err:  # noqa: BLE001 - any failure here is agreed, not raised alone
            problem = f"{type(err).__name__}: {err}"
        self.schema, _ = agree_schema(self.comm, schema, problem)
        return data, offsets, RECORD_ALIGN

    def _agreed_align(self, align: Any) -> int:
        """align, checked and compared across ranks (one allgather): any rank's bad or
        differing value raises on every rank, naming the values."""
        try:
            mine = uint(align, "align", lo=1, hi=1 << 20)
            problem = "" if mine & (mine - 1) == 0 else f"align = {mine} is not a power of two"
        except (TypeError, ValueError) as err:
            mine, problem = -1, str(err)
        everyone = self.comm.allgather((mine, problem))
        bad = [(r, p) for r, (_, p) in enumerate(everyone) if p]
        if bad:
            raise ValueError(f"register_shard: on rank {bad[0][0]}: {bad[0][1]}")
        values = sorted({a for a, _ in everyone})
        if len(values) > 1:
            raise ValueError(f"register_shard: align differs across ranks ({values[0]} and {values[-1]}); "
                             "pass the same value on every rank")
        self._align = mine
        return mine

    @property
    def replica(self) -> "ReplicaInfo":
        """This rank's replica group: ``(group, num_groups, rank_in_group, group_size)``,
        group and rank 0-based; without groups ``(0, 1, rank, size)``. Local."""
        if not hasattr(self._lib, "mdl_replica_info"):
            return ReplicaInfo(0, 1, self.rank, self.size)
        values = [ctypes.c_uint32() for _ in range(4)]
        check(self._lib.mdl_replica_info(self._handle(), *(ctypes.byref(v) for v in values)))
        return ReplicaInfo(*(v.value for v in values))

    def replica_part(self, num_samples: int) -> range:
        """This rank's even part of a dataset of ``num_samples`` samples, for its group
        to hold a full copy (without groups, the same split over comm). Local."""
        n = uint(num_samples, "num_samples")
        first, count = ctypes.c_uint64(), ctypes.c_uint64()
        check(self._lib.mdl_replica_part(self._handle(), n, ctypes.byref(first), ctypes.byref(count)))
        return range(first.value, first.value + count.value)

    @property
    def align(self) -> int:
        """The alignment samples were registered with (1: packed back to back)."""
        return self._align

    def _out_align(self) -> int:
        """Where fetch's own buffers start: a multiple of the samples' alignment and of
        a page."""
        return math.lcm(self._align, PAGE)

    @property
    def num_samples(self) -> int:
        """The number of samples over all ranks, or in one replica group's copy (ids are
        0 .. num_samples - 1)."""
        out = ctypes.c_uint64()
        check(self._lib.mdl_num_samples(self._handle(), ctypes.byref(out)))
        return out.value

    def __len__(self) -> int:
        return self.num_samples

    @property
    def local_ids(self) -> range:
        """The global ids of this rank's own shard."""
        return range(self._first_id, self._first_id + self._n_local)

    def sample_size(self, sample_id: int) -> int:
        """Size in bytes of a sample. Local, no communication.

        TypeError for a non-integer id (floats included); MDLError(ERR_OUT_OF_RANGE) for
        an id outside 0 .. num_samples - 1 (ids beyond 64 bits and negative ones too:
        they are never passed to the library, where ctypes would wrap them)."""
        sid = integer(sample_id, "sample id")
        h = self._handle()
        if not 0 <= sid <= U64_MAX:
            kind = "negative (ids are 0-based)" if sid < 0 else "beyond 64 bits"
            raise MDLError(Status.ERR_OUT_OF_RANGE, f"sample id {sid} is out of range: {kind}")
        out = ctypes.c_uint64()
        check(self._lib.mdl_sample_size(h, sid, ctypes.byref(out)))
        return out.value

    def sample_sizes(self, ids: Iterable[int] | np.ndarray | None = None) -> np.ndarray:
        """Sizes in bytes of the samples ``ids`` (default: every sample, by global id) as
        uint64. Local. Asks the library one id at a time (about a microsecond each): the
        binding keeps no copy of the library's index."""
        h = self._handle()
        if ids is None:
            idv, problem = np.arange(self.num_samples, dtype=np.uint64), ""
        else:
            idv, problem = id_array(ids)
        if problem:
            raise MDLError(Status.ERR_OUT_OF_RANGE, problem.rstrip("; "))
        sizes = np.empty(idv.size, dtype=np.uint64)
        fn, out = self._lib.mdl_sample_size, ctypes.c_uint64()
        ref = ctypes.byref(out)
        for k, sid in enumerate(idv.tolist()):
            check(fn(h, sid, ref))
            sizes[k] = out.value
        return sizes

    # Above this many bytes, a batch's buffer is sized exactly (per id) rather than by
    # n * the largest sample: the per-id cost (~1-2 us) is then small beside the bytes moved.
    _BOUND_LIMIT = 64 << 20

    def _batch_bytes(self, idv: np.ndarray) -> int:
        """At least the bytes of the samples idv (uint64 ids), without per-sample state:
        n * the largest sample, or the exact sum (per id) when that bound is large. Ids
        out of range count 0 (the library refuses them in the fetch)."""
        bound = idv.size * self._max_size
        if bound <= self._BOUND_LIMIT:
            return bound
        n = self.num_samples
        fn, out = self._lib.mdl_sample_size, ctypes.c_uint64()
        ref, h, total = ctypes.byref(out), self._handle(), 0
        for sid in idv.tolist():
            if sid < n and fn(h, sid, ref) == 0:
                total += out.value
        return total

    @_called_by_every_rank
    def fetch(self, ids: Iterable[int] | np.ndarray, out: np.ndarray | bytearray | None = None) -> Batch:
        """Collective. Fetches the samples ``ids`` (global, 0-based; may repeat, may be
        empty, differ per rank) and returns a :class:`Batch` of zero-copy views.

        ids: integers only (a float, even 2.0, is TypeError); an id outside
        0 .. num_samples - 1 (negative and beyond 64 bits included) is
        MDLError(ERR_OUT_OF_RANGE) here and MDLError(ERR_REMOTE) on the other ranks.

        out: optional buffer to fetch into, to reuse memory across steps: a writable,
        C-contiguous numpy array (any plain dtype; the samples are written as raw bytes
        from its start) or bytearray, or any writable contiguous buffer. The batch's views
        share its memory. A strided view, a read-only or an object buffer is TypeError (it
        cannot be written in place). A too-small ``out`` raises
        MDLError(ERR_BUFFER_TOO_SMALL) (nothing is written beyond it). By default a new
        buffer is allocated (sized by the largest sample, or exactly for batches over 64 MiB).

        Any argument refused on one rank makes the call fail on every rank (the others
        raise MDLError(ERR_REMOTE)), so that no rank waits for another.
        """
        h = self._handle()
        # A built-in epoch left open (a loop that stopped early) ends here, on every rank
        # alike (the library refuses plain fetches during one).
        self.end_epoch()
        try:
            idv, problem = id_array(ids)
            # (allocations too: a MemoryError here must not leave the other ranks waiting)
            buf = aligned_empty(self._batch_bytes(idv), self._out_align()) if out is None else out_bytes(out)
            offs = np.empty(idv.size + 1, dtype=np.uint64)
        except Exception as err:
            # Fail on every rank together: n = 1 with no ids is refused by the library.
            self._lib.mdl_fetch_batch(h, None, 1, None, 0, None)
            add_note(err, FAILED_EVERYWHERE)
            raise
        n = idv.size
        status = self._lib.mdl_fetch_batch(h, pointer(idv), n, pointer(buf), buf.size, offs.ctypes.data)
        if status != 0:
            check(status, problem if status == Status.ERR_OUT_OF_RANGE else "")
        # A buffer of our own was sized by the largest sample: the batch keeps its unused
        # tail (at most n * the largest sample, and 64 MiB; pages never written are not
        # resident). Shrinking it (realloc, mremap) measured slower per step under Open MPI.
        # Decoded now where the caller's buffer may be reused before the fields are read.
        return self._typed(Batch(idv, buf[: int(offs[-1])], offs), decoded=out is not None)

    def _typed(self, batch: Batch, decoded: bool = False) -> Batch:
        """A TypedBatch where the samples are typed (decoded now when ``decoded``)."""
        if self.schema is None:
            return batch
        return typed_batch(self.schema, batch, decoded)

    @_called_by_every_rank
    def set_backend(self, backend: Union[str, int, Backend]) -> None:
        """Forces "onesided" or "collective", or returns to "auto". Local; takes effect at
        the next fetch and must be the same on every rank: call it on every rank. (Where
        ``mdloader.pyg``'s thread runs an epoch on this loader, the call first stops that
        epoch, which every rank must then do alike.)"""
        try:
            b = Backend.parse(backend)
        except ValueError as err:
            raise MDLError(Status.ERR_INVALID_ARG, str(err)) from None
        check(self._lib.mdl_set_backend(self._handle(), int(b)))

    def stats(self) -> dict:
        """This rank's statistics (mdl_stats_json) as a dict; {} when the library has none."""
        fn = getattr(self._lib, "mdl_stats_json", None)
        if fn is None:
            return {}
        # The statistics may grow between two calls (the prefetch thread counts a step):
        # asked again until they fit, not sized by a first call and then cut short.
        size = 4096
        while True:
            buf = ctypes.create_string_buffer(size)
            n = fn(self._handle(), buf, size)
            if n < size:
                return json.loads(buf.value.decode()) if n else {}
            size = n + 1024

    @_called_by_every_rank
    def job_stats(self) -> dict:
        """Collective: the whole job's statistics (mdl_stats_json_job) as a dict, the same
        on every rank: bytes, samples and seconds over all ranks. Raises MDLError on every
        rank during a sampler epoch (MDL_ERR_STATE)."""
        fn = self._lib.mdl_stats_json_job
        needed = ctypes.c_size_t(0)
        buf = ctypes.create_string_buffer(4096)
        check(fn(self._handle(), buf, len(buf), ctypes.byref(needed)))
        if needed.value >= len(buf):
            # The same length on every rank: every rank makes this second call.
            buf = ctypes.create_string_buffer(needed.value + 1)
            check(fn(self._handle(), buf, len(buf), ctypes.byref(needed)))
        return json.loads(buf.value.decode())

    # -- the library's built-in sampler ----------------------------------------------------
    @property
    def has_sampler(self) -> bool:
        """Whether the library has the built-in sampler (mdl_epoch_begin ...)."""
        return hasattr(self._lib, "mdl_epoch_begin")

    def _sampler_fn(self, name: str):
        if not self.has_sampler:
            raise MDLError(Status.ERR_STATE, f"{_lib.library_path()} has no built-in sampler ({name})")
        return getattr(self._lib, name)

    @_called_by_every_rank
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
        batches of batch_size (the last may be smaller; with drop_last only full batches
        are taken, see :meth:`epoch_steps`), fetched ahead when
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
        try:
            args = (
                uint(seed, "seed"),
                uint(epoch, "epoch"),
                uint(batch_size, "batch_size", lo=1),
                int(bool(shuffle)),
                int(bool(drop_last)),
            )
            start_step = uint(start_step, "start_step")
        except Exception as err:
            # Collective: batch_size 0 makes mdl_epoch_begin fail on every rank.
            begin(h, 0, 0, 0, 0, 0)
            add_note(err, FAILED_EVERYWHERE)
            raise
        check(begin(h, *args))
        # drop_last means full batches only, as everywhere in Python: past them the epoch
        # is ended by a seek to its end, so that the short last batch is never taken
        # (with prefetch, the library's thread may have fetched it already).
        yield from self._run_epoch(self._library_steps(args[2], bool(args[4])),
                                   self.epoch_steps(args[2], bool(args[4])), start_step)

    @_called_by_every_rank
    def epoch_of_batches(self, batches: Iterable[Iterable[int]], *, start_step: int = 0) -> Iterator[Batch]:
        """Collective. An epoch of this rank's own batches (mdl_epoch_begin_ids): any
        sampler's order (torch's ``BatchSampler`` over a ``DistributedSampler``, a
        weighted sampler), each rank its own, **every rank the same number of batches**.
        It runs as :meth:`epoch` does: each step agreed ahead (no step waits in a
        blocking collective), fetched ahead with :meth:`set_prefetch`, yielded as
        zero-copy views valid until the next batch is taken.

        batches: the whole epoch's batches of global ids, none empty, taken when the
        iteration starts (a list is built; 8 bytes per id). start_step: resume there
        (mdl_epoch_seek).

        A bad id (negative, not an integer, beyond the samples), an empty batch or a
        different number of batches on any rank fails the call on every rank (MDLError; ERR_REMOTE on the
        ranks that were not at fault); a running epoch stays where it was.
        """
        begin = self._sampler_fn("mdl_epoch_begin_ids")
        h = self._handle()
        try:
            parts = [batch_ids(k, batch) for k, batch in enumerate(batches)]
            problem = next((p for _, p in parts if p), "")
            ids = np.concatenate([a for a, _ in parts]) if parts else np.zeros(0, dtype=np.uint64)
            bounds = np.zeros(len(parts) + 1, dtype=np.uint64)
            np.cumsum([a.size for a, _ in parts], out=bounds[1:])
            start_step = uint(start_step, "start_step")
        except Exception as err:
            # Collective: offsets that do not start at 0 make every rank fail.
            bad_bounds = np.ones(1, dtype=np.uint64)
            begin(h, None, bad_bounds.ctypes.data, 0)
            add_note(err, FAILED_EVERYWHERE)
            raise
        status = begin(h, pointer(ids), bounds.ctypes.data, len(parts))
        if status != 0:
            check(status, problem if status == Status.ERR_OUT_OF_RANGE else "")
        yield from self._run_epoch(len(parts), len(parts), start_step)

    def _run_epoch(self, steps: int, last: int, start_step: int) -> Iterator[Batch]:
        """The epoch just begun in the library (`steps` steps), from `start_step`, ended
        after `last` batches."""
        # The library runs one epoch per loader: a second epoch (another sampler or
        # iterator) replaces this one, whose generator must then stop, not go on with
        # the other's batches.
        mine = self._epoch_owner = object()
        self._epoch_steps = steps
        if start_step:
            self.seek(start_step)
        return self._epoch_batches(mine, last, start_step)

    def _epoch_batches(self, mine: object, last: int, step: int) -> Iterator[Batch]:
        h = self._handle()
        next_batch = self._lib.mdl_next_batch
        ids_p = _lib.c_u64_p()
        offs_p = _lib.c_u64_p()
        data_p = ctypes.c_void_p()
        n = ctypes.c_size_t()
        refs = (ctypes.byref(ids_p), ctypes.byref(data_p), ctypes.byref(offs_p), ctypes.byref(n))
        while True:
            if self._epoch_owner is not mine:
                raise EpochTakenOver()
            if step == last < self._epoch_steps:
                self.seek(self._epoch_steps)
            check(next_batch(h, *refs))
            step += 1
            count = n.value
            if count == 0:
                self._epoch_steps = self._epoch_owner = None
                return
            ids = np.ctypeslib.as_array(ids_p, (count,)).copy()
            offs = np.ctypeslib.as_array(offs_p, (count + 1,)).copy()
            total = int(offs[-1])
            if total:
                data = np.ctypeslib.as_array(ctypes.cast(data_p, ctypes.POINTER(ctypes.c_uint8)), (total,))
                data.flags.writeable = False
            else:
                data = np.zeros(0, dtype=np.uint8)
            # Typed batches are decoded before the library reuses the memory.
            yield self._typed(Batch(ids, data, offs), decoded=True)

    @_called_by_every_rank
    def end_epoch(self) -> None:
        """Collective. Ends the built-in sampler's epoch in progress (after stopping
        early), so that :meth:`fetch` may be used again. No-op when none is open."""
        self._epoch_owner = None
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
        check(status)

    def epoch_steps(self, batch_size: int, drop_last: bool = False) -> int:
        """Batches of an epoch on every rank (the same everywhere), as :meth:`epoch`,
        :class:`mdloader.DataLoader` and ``mdloader.torch`` yield them: with drop_last,
        every rank's share is floor(N / P) and only full batches are taken (PyTorch's
        DistributedSampler and BatchSampler, each with drop_last); without, the share is
        ceil(N / P) (padded by wrapping around) and the last batch may be smaller."""
        batch_size = uint(batch_size, "batch_size", lo=1)
        total, ranks = self.num_samples, self.size
        if drop_last:
            return total // ranks // batch_size
        per_rank = -(-total // ranks)
        return -(-per_rank // batch_size)

    def _library_steps(self, batch_size: int, drop_last: bool) -> int:
        """Steps of the C sampler's epoch, whose drop_last drops only the uneven tail
        across ranks and keeps a short last batch."""
        total, ranks = self.num_samples, self.size
        per_rank = total // ranks if drop_last else -(-total // ranks)
        return -(-per_rank // batch_size)

    @_called_by_every_rank
    def seek(self, step: int) -> None:
        """Collective. The next batch of the current built-in epoch is step ``step``
        (0-based), exactly as an uninterrupted run (resuming from a checkpoint).

        A step that is not a non-negative integer raises here (TypeError, ValueError) and
        fails the call on every other rank too (MDLError(ERR_REMOTE)); the epoch stays
        where it was."""
        seek, h = self._sampler_fn("mdl_epoch_seek"), self._handle()
        try:
            step = uint(step, "step")
        except Exception as err:
            # Collective: a step past any epoch's end makes mdl_epoch_seek fail on every rank.
            seek(h, U64_MAX)
            add_note(err, FAILED_EVERYWHERE)
            raise
        check(seek(h, step))

    @_called_by_every_rank
    def set_prefetch(self, depth: int) -> None:
        """Batches the built-in sampler fetches ahead on a library thread (0: none).
        Local, the same on every rank (call it on every rank: where ``mdloader.pyg``'s
        thread runs an epoch on this loader, the call first stops that epoch); needs
        MPI_THREAD_MULTIPLE (mpi4py's default).

        TypeError for a non-integer, ValueError for a negative depth (before calling the
        library); a depth beyond the library's limit (MDL_MAX_PREFETCH, 64) is
        MDLError(ERR_INVALID_ARG)."""
        fn, h = self._sampler_fn("mdl_set_prefetch"), self._handle()
        d = integer(depth, "prefetch depth")
        if d < 0:
            raise ValueError(f"prefetch depth = {d} is negative (0 is no prefetch)")
        if d > U32_MAX:  # ctypes would wrap it; the library refuses anything above 64 anyway
            raise MDLError(Status.ERR_INVALID_ARG, f"mdl_set_prefetch: depth {d} is beyond the library's limit (64)")
        check(fn(h, d))

    def batches(self, batch_size: int, **kwargs) -> "Any":
        """A :class:`mdloader.DataLoader` over this loader (see there for the arguments)."""
        return DataLoader(self, batch_size, **kwargs)

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"rank {self.rank}/{self.size}"
        return f"<mdloader.Loader {state}>"


def _refuse_torchrun(MPI: Any) -> None:
    """torchrun (or another launcher of torch's) started more processes than the MPI job
    has: each process is then an MPI job of its own, and every rank would load only
    its own data, with no error. Local: each such process sees it alike."""
    world = os.environ.get("WORLD_SIZE", "")
    if world.isdigit() and int(world) > MPI.COMM_WORLD.Get_size():
        raise RuntimeError(
            f"mdloader: WORLD_SIZE={world} (torchrun?) but MPI_COMM_WORLD has {MPI.COMM_WORLD.Get_size()} "
            f"rank(s): each process is an MPI job of its own. Launch with MPI instead: "
            f"mpirun -n {world} python -m mpi4py your_script.py (and start torch.distributed from the MPI "
            f"rank and size, see the README)")


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
            f"(e.g. target/{running}/release/libmdloader.so), or install the wheel built for it "
            f"(scripts/build-wheel.sh {running})."
        )
