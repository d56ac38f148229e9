"""Epochs of shuffled batches over a Loader, the way a PyTorch training loop reads data.

:class:`DistributedSampler` splits a (shuffled) epoch of global ids across ranks like
``torch.utils.data.distributed.DistributedSampler``; :class:`DataLoader` (alias
:class:`BatchIterator`) cuts this rank's share into batches and fetches each with
:meth:`mdloader.Loader.fetch`, yielding :class:`mdloader.Batch` objects (or whatever
``collate_fn`` makes of them)::

    loader = mdloader.DataLoader(ld, batch_size=32, shuffle=True, seed=42, drop_last=True)
    for epoch in range(epochs):
        loader.set_epoch(epoch)          # optional: each full pass advances the epoch
        for batch in loader:
            ...                          # batch[k]: zero-copy uint8 view of sample k

Every rank gets the same number of batches of the same sizes, so the collective fetch
is called the same number of times everywhere (required by the library).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterator, Optional

import numpy as np

from .loader import Batch, Loader, _id_array, _integer, _uint

__all__ = ["DistributedSampler", "DataLoader", "BatchIterator"]


class DistributedSampler:
    """The global ids of one rank for one epoch.

    shuffle: a fresh permutation of all ids every epoch, from ``seed + epoch`` (the same
    on every rank, so the ranks' shares are disjoint). drop_last=False pads the epoch by
    repeating ids from its start so that it divides evenly among the ranks (every rank
    gets ceil(N / P) ids); drop_last=True drops the tail instead (floor(N / P) each).
    Rank r takes positions r, r + P, r + 2P, ... of the epoch (as PyTorch does).
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
        num_replicas = _uint(num_replicas, "num_replicas", lo=1)
        rank = _integer(rank, "rank")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not in [0, {num_replicas})")
        self.total = _uint(num_samples, "num_samples")
        self.num_replicas = num_replicas
        self.rank = rank
        self.shuffle = shuffle
        self.seed = _uint(seed, "seed")  # numpy's PCG64 takes non-negative seeds; so does the library
        self.drop_last = drop_last
        self.epoch = 0
        if drop_last:
            self.per_rank = self.total // self.num_replicas
        else:
            self.per_rank = math.ceil(self.total / self.num_replicas) if self.total else 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = _uint(epoch, "epoch")

    def __len__(self) -> int:
        return self.per_rank

    def epoch_order(self) -> np.ndarray:
        """All ids of the current epoch, in visiting order (before the split)."""
        if self.shuffle:
            rng = np.random.Generator(np.random.PCG64([self.seed, self.epoch]))
            order = rng.permutation(self.total).astype(np.int64)
        else:
            order = np.arange(self.total, dtype=np.int64)
        wanted = self.per_rank * self.num_replicas
        if wanted <= order.size:
            return order[:wanted]
        return np.resize(order, wanted)  # pads by repeating from the start

    def indices(self) -> np.ndarray:
        """This rank's ids for the current epoch."""
        return self.epoch_order()[self.rank :: self.num_replicas]

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices().tolist())


class DataLoader:
    """Batches of this rank's share of each epoch, fetched through a Loader.

    loader: a :class:`mdloader.Loader` with its shard registered. batch_size: samples per
    rank per step. shuffle, seed, drop_last: as :class:`DistributedSampler` (drop_last
    also drops the last, incomplete batch). collate_fn: applied to each
    :class:`mdloader.Batch` before it is yielded (e.g. decoding records into tensors).
    reuse_buffer: fetch every batch into one buffer that is grown as needed (the views
    of a batch are then valid only until the next batch is fetched).
    sampler: "python" (default: :class:`DistributedSampler` here, each batch fetched with
    :meth:`Loader.fetch` into memory of its own) or "library": the library's built-in
    sampler (:meth:`Loader.epoch`): the same order as C and Fortran programs get for the
    same seed and epoch, batches fetched ahead on a library thread when ``prefetch`` > 0,
    and batches that are views of the library's memory, valid until the next batch.

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
        sampler: str = "python",
        prefetch: int = 0,
    ):
        # Checked here, where the loader is built (a local call), not at the first
        # collective fetch, where one rank raising alone would leave the others waiting.
        batch_size = _uint(batch_size, "batch_size", lo=1)
        prefetch = _uint(prefetch, "prefetch", hi=2**32 - 1)
        if sampler not in ("python", "library"):
            raise ValueError(f"sampler must be 'python' or 'library', not {sampler!r}")
        if sampler == "library" and (num_replicas is not None or rank is not None):
            raise ValueError("the library's sampler splits over the loader's communicator: no num_replicas/rank")
        if prefetch and sampler != "library":
            raise ValueError("prefetch needs sampler='library'")
        self.sampler_kind = sampler
        self.prefetch = prefetch
        self.shuffle = shuffle
        self.seed = _uint(seed, "seed")
        self.loader = loader
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.collate_fn = collate_fn
        self.reuse_buffer = reuse_buffer
        self.sampler = DistributedSampler(
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
        if self.sampler_kind == "library":
            yield from self._iter_library()
            return
        ids = self.sampler.indices()
        steps = len(self)
        for step in range(steps):
            chunk = ids[step * self.batch_size : (step + 1) * self.batch_size]
            out = None
            if self.reuse_buffer:
                need = self.loader._batch_bytes(_id_array(chunk)[0])
                if self._buffer is None or self._buffer.size < need:
                    self._buffer = np.empty(max(need, 1), dtype=np.uint8)
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
            if self.drop_last and len(batch) < self.batch_size:
                continue  # the last, incomplete batch: still taken (collective), not yielded
            yield self.collate_fn(batch) if self.collate_fn is not None else batch
        self.sampler.set_epoch(self.sampler.epoch + 1)


BatchIterator = DataLoader
