"""Epochs of shuffled batches over a Loader, the way a PyTorch training loop reads data.

:class:`DistributedSampler` splits a (shuffled) epoch of global ids across ranks like
``torch.utils.data.distributed.DistributedSampler``; :class:`DataLoader` (alias
:class:`BatchIterator`) cuts this rank's share into batches, fetched by the library's
own sampler (:meth:`mdloader.Loader.epoch`, steps agreed ahead) or one
:meth:`mdloader.Loader.fetch` per step, yielding :class:`mdloader.Batch` objects (or
whatever ``collate_fn`` makes of them)::

    loader = mdloader.DataLoader(ld, batch_size=32, shuffle=True, seed=42, drop_last=True)
    for epoch in range(epochs):
        loader.set_epoch(epoch)          # optional: each full pass advances the epoch
        for batch in loader:
            ...                          # batch[k]: a uint8 view of sample k in the batch's memory

Every rank gets the same number of batches of the same sizes, so the collective steps
are made the same number of times everywhere (required by the library).
"""

from __future__ import annotations

import ctypes
import math
import warnings
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Union

import numpy as np

from . import _lib
from .background import every_rank_allows_threads, in_background
from .args import id_array, integer, uint
from .batch import Batch, aligned_empty
from .errors import EpochTakenOver, check
from .typed import typed_batch

if TYPE_CHECKING:  # for the annotations only: mdloader.loader imports this module (Loader.batches)
    from .loader import Loader

__all__ = ["DistributedSampler", "DataLoader", "BatchIterator", "epoch_ids"]


def epoch_ids(
    num_samples: int,
    num_replicas: int,
    rank: int,
    *,
    seed: int,
    epoch: int,
    shuffle: bool,
    drop_last: bool,
    batch_size: int,
    step: int,
) -> np.ndarray:
    """Rank ``rank``'s ids at ``step`` of the library's epoch (mdl_epoch_ids): the one
    definition of the order, shared with the built-in sampler, C and Fortran."""
    lib = _lib.load_library()
    fn = getattr(lib, "mdl_epoch_ids", None)
    if fn is None:
        raise RuntimeError(f"{_lib.library_path()} has no mdl_epoch_ids: rebuild the library")
    out = np.empty(min(batch_size, num_samples), dtype=np.uint64)  # a step holds at most this many
    n = ctypes.c_size_t()
    check(fn(num_samples, num_replicas, rank, seed, epoch, batch_size, int(bool(shuffle)), int(bool(drop_last)),
              step, out.ctypes.data if out.size else None, out.size, ctypes.byref(n)))
    return out[: n.value].astype(np.int64)


class DistributedSampler:
    """The global ids of one rank for one epoch, in the library's order.

    The order is the built-in sampler's (``Loader.epoch``, ``mdl_next_batch`` in C and
    Fortran): a permutation of all ids drawn from ``(seed, epoch)`` (the identity
    without shuffle), the same on every rank. The split is PyTorch's
    ``DistributedSampler``: drop_last=False pads the epoch by wrapping around so that
    every rank gets ceil(N / P) ids; drop_last=True drops the tail instead (floor(N / P)
    each). Rank r takes positions r, r + P, r + 2P, ... of the epoch.
    """

    def __init__(
        self,
        num_samples: int,
        num_replicas: int,
        rank: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ):
        num_replicas = uint(num_replicas, "num_replicas", lo=1)
        rank = integer(rank, "rank")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not in [0, {num_replicas})")
        self.total = uint(num_samples, "num_samples")
        self.num_replicas = num_replicas
        self.rank = rank
        self.shuffle = shuffle
        self.seed = uint(seed, "seed")
        self.drop_last = drop_last
        self.epoch = 0
        if drop_last:
            self.per_rank = self.total // self.num_replicas
        else:
            self.per_rank = math.ceil(self.total / self.num_replicas) if self.total else 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = uint(epoch, "epoch")

    def __len__(self) -> int:
        return self.per_rank

    def indices(self) -> np.ndarray:
        """This rank's ids for the current epoch (one step of the whole share)."""
        return epoch_ids(self.total, self.num_replicas, self.rank, seed=self.seed, epoch=self.epoch,
                         shuffle=self.shuffle, drop_last=self.drop_last, batch_size=max(self.per_rank, 1), step=0)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices().tolist())


class DataLoader:
    """Batches of this rank's share of each epoch, fetched through a Loader.

    loader: a :class:`mdloader.Loader` with its shard registered. batch_size: samples per
    rank per step. shuffle, seed, drop_last: as :class:`DistributedSampler` (drop_last
    also drops the last, incomplete batch). collate_fn: applied to each
    :class:`mdloader.Batch` before it is yielded (e.g. decoding records into tensors).
    reuse_buffer: False (default): every batch in memory of its own, valid for as long
    as it is kept. True: a batch is valid only until the next one is taken, and costs
    no allocation: the Python sampler fetches every batch into one buffer grown as
    needed, the library's yields views of the library's own memory (no copy).

    sampler: the order is the same whichever runs it (the library's, one order for a
    seed and epoch, as C and Fortran programs get), and so are the batches; they differ
    in how a step is fetched.

    - "library" (the default where it can run): the library's built-in sampler
      (:meth:`Loader.epoch`): every step agreed a few steps ahead, so that no step waits
      in a blocking collective for the slowest rank; ``prefetch`` > 0 also fetches that
      many batches ahead on a library thread. With a training step between batches
      it measured faster per step than "python" (``benches/python_sampler``, 2 ranks:
      4-7x under Open MPI on a loaded machine, 1.4-1.5x under MPICH); in a loop that
      does nothing but read it was slower (1.4-2x at batch 64: "python" or
      ``reuse_buffer=True`` there). The epoch is the Loader's one epoch: a :meth:`Loader.fetch`, :meth:`Loader.end_epoch`
      or another epoch begun on the same Loader during the loop ends it, and the loop
      then raises :class:`mdloader.EpochTakenOver`; :meth:`Loader.job_stats` and
      :meth:`Loader.set_backend` are refused inside it (MDLError); a loop that stops
      early leaves it open until the next ``iter``, fetch or :meth:`Loader.end_epoch`.
    - "python": :class:`DistributedSampler` here, each batch fetched with one blocking
      :meth:`Loader.fetch`, which may be mixed with any other use of the Loader. The
      default until 2026-12-06, and still where ``num_replicas`` or ``rank`` is given
      (the library's sampler splits over the loader's communicator) or the library
      has no built-in sampler; pass it to interleave other fetches with the loop.
    - a :class:`DistributedSampler`: "python" with that sampler.

    num_workers: 0 (default) fetches and collates on the calling thread; 1 or more runs
    both on one background thread (threads, not processes: the fetch is an MPI call),
    ``prefetch_factor`` batches ahead (default 2), overlapped with the caller's step;
    that thread makes every collective call of the iteration; it needs
    MPI_THREAD_MULTIPLE on every rank (agreed at the first ``iter``; below it every rank
    warns and runs on the calling thread). persistent_workers is
    accepted with num_workers > 0, as in torch (the thread lives for one epoch; there is
    no state to keep). pin_memory=True is refused: numpy batches cannot be pinned (torch's
    DataLoader over ``mdloader.torch`` pins). For PyTorch, prefer ``mdloader.torch``.

    Iterating makes one pass over the current epoch and then advances the epoch, so
    ``for epoch in range(E): for batch in loader: ...`` sees a new shuffle each time;
    :meth:`set_epoch` sets it explicitly (as with PyTorch's DistributedSampler).
    """

    def __init__(
        self,
        loader: Loader,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        collate_fn: Optional[Callable[[Batch], Any]] = None,
        reuse_buffer: bool = False,
        num_replicas: Optional[int] = None,
        rank: Optional[int] = None,
        sampler: Union[str, DistributedSampler, None] = None,
        prefetch: int = 0,
        num_workers: int = 0,
        prefetch_factor: Optional[int] = None,
        persistent_workers: bool = False,
        pin_memory: bool = False,
    ):
        # Checked here, where the loader is built (a local call), not at the first
        # collective fetch, where one rank raising alone would leave the others waiting.
        batch_size = uint(batch_size, "batch_size", lo=1)
        prefetch = uint(prefetch, "prefetch", hi=2**32 - 1)
        self.num_workers = uint(num_workers, "num_workers")
        self._threads_allowed: Optional[bool] = None  # agreed at the first iter
        # torch's own rules for these two
        if prefetch_factor is not None and not self.num_workers:
            raise ValueError("prefetch_factor needs num_workers > 0 (as in torch's DataLoader)")
        if persistent_workers and not self.num_workers:
            raise ValueError("persistent_workers needs num_workers > 0 (as in torch's DataLoader)")
        self.ahead = uint(prefetch_factor if prefetch_factor is not None else 2, "prefetch_factor", lo=1)
        if pin_memory:
            raise ValueError(
                "pin_memory: mdloader.DataLoader yields numpy batches, which cannot be pinned; use torch's "
                "DataLoader over mdloader.torch.ShardDataset (pin_memory works there as in torch)"
            )
        if self.num_workers and reuse_buffer:
            raise ValueError("reuse_buffer cannot be used with num_workers > 0 (batches are taken ahead)")
        if isinstance(sampler, DistributedSampler):
            given, sampler = sampler, "python"
        else:
            given = None
        if sampler is None:
            split_here = num_replicas is not None or rank is not None
            sampler = "library" if loader.has_sampler and not split_here else "python"
        if sampler not in ("python", "library"):
            raise ValueError(f"sampler must be 'python', 'library' or a mdloader.DistributedSampler, not {sampler!r}")
        if sampler == "library" and (num_replicas is not None or rank is not None):
            raise ValueError("the library's sampler splits over the loader's communicator: no num_replicas/rank")
        if prefetch and sampler != "library":
            raise ValueError("prefetch needs sampler='library'")
        self.sampler_kind = sampler
        self.prefetch = prefetch
        self.shuffle = shuffle
        self.seed = uint(seed, "seed")
        self.loader = loader
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.collate_fn = collate_fn
        self.reuse_buffer = reuse_buffer
        self.sampler = given or DistributedSampler(
            loader.num_samples,
            loader.size if num_replicas is None else num_replicas,
            loader.rank if rank is None else rank,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
        )
        self._buffer: Optional[np.ndarray] = None

    @property
    def epoch(self) -> int:
        return self.sampler.epoch

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        if self.num_workers and self._threads_allowed is None:
            self._threads_allowed = every_rank_allows_threads(self.loader.comm)
            if not self._threads_allowed:
                warnings.warn("mdloader.DataLoader: num_workers runs on the calling thread: MPI was initialised "
                              "without MPI_THREAD_MULTIPLE on some rank, and the worker thread calls MPI",
                              RuntimeWarning, stacklevel=2)
        if self.num_workers and self._threads_allowed:
            batches = in_background(self._batches(), self.ahead)
            return self._held(batches) if self.sampler_kind == "library" else batches
        return self._batches()

    def _held(self, batches: Any) -> Iterator[Any]:
        """The library's epoch run on ``batches``' thread: a collective call the script
        makes on the Loader meanwhile (a fetch, another epoch, ``job_stats``) stops the
        thread and ends the epoch first, on every rank alike
        (:meth:`Loader.epoch_on_thread`), where it would otherwise meet the thread's
        steps in a different order on each rank; the loop then raises
        :class:`mdloader.EpochTakenOver` instead of ending as if the epoch had."""
        stopped = []

        def stop() -> None:
            stopped.append(True)
            self.loader.epoch_on_thread(None)
            batches.close()
            self.loader.end_epoch()

        self.loader.epoch_on_thread(batches.thread, stop)
        return self._whole(batches, stopped)

    def _whole(self, batches: Any, stopped: list) -> Iterator[Any]:
        taken = 0
        for batch in batches:
            taken += 1
            yield batch
        if stopped and taken < len(self):
            raise EpochTakenOver()
        self.loader.epoch_on_thread(None)

    def _batches(self) -> Iterator[Any]:
        if self.sampler_kind == "library":
            yield from self._iter_library()
            return
        ids = self.sampler.indices()
        steps = len(self)
        for step in range(steps):
            chunk = ids[step * self.batch_size : (step + 1) * self.batch_size]
            out = None
            if self.reuse_buffer:
                need = self.loader._batch_bytes(id_array(chunk)[0])
                if self._buffer is None or self._buffer.size < need:
                    self._buffer = aligned_empty(max(need, 1), self.loader._out_align())
                out = self._buffer
            batch = self.loader.fetch(chunk, out=out)
            yield self.collate_fn(batch) if self.collate_fn is not None else batch
        self.sampler.set_epoch(self.sampler.epoch + 1)

    def _iter_library(self) -> Iterator[Any]:
        self.loader.set_prefetch(self.prefetch)
        batches = self.loader.epoch(
            self.batch_size, seed=self.seed, epoch=self.epoch, shuffle=self.shuffle, drop_last=self.drop_last
        )
        for batch in batches:
            if not self.reuse_buffer:
                # The library reuses its memory at its next step; a batch kept longer (or
                # taken ahead by num_workers) must be copied out of it.
                batch = self._own_copy(batch)
            yield self.collate_fn(batch) if self.collate_fn is not None else batch
        self.sampler.set_epoch(self.sampler.epoch + 1)

    def _own_copy(self, batch: Batch) -> Batch:
        """The batch in memory of its own, aligned as :meth:`Loader.fetch`'s buffers are."""
        data = aligned_empty(batch.data.size, self.loader._out_align())
        data[:] = batch.data
        owned = Batch(batch.ids, data, batch.offsets)
        schema = getattr(batch, "schema", None)
        return owned if schema is None else typed_batch(schema, owned)


BatchIterator = DataLoader
