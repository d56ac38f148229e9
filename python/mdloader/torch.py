"""MDLoader behind PyTorch's own ``torch.utils.data.DataLoader``.

Two objects replace a dataset and a batch sampler; the DataLoader call stays torch's::

    ds = mdloader.torch.ShardDataset(ld)                                        # was: ds = MyDataset(...)
    sampler = mdloader.torch.DistributedBatchSampler(ds, 128, seed=0, drop_last=True)  # was: BatchSampler(DistributedSampler(ds, ...), ...)
    loader = torch.utils.data.DataLoader(ds, batch_sampler=sampler, collate_fn=collate, num_workers=1)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for batch in loader:
            ...

How the work is split, and why:

- The **batch sampler** runs the library's epoch (``Loader.epoch``: its permutation and
  split, its prefetch thread): each step it takes the next batch, one collective call,
  and yields a :class:`Fetched` batch (the ids, with their bytes attached). torch
  iterates a batch sampler in the process and thread that iterates the DataLoader, in
  order, so every rank makes the same collective calls in the same order from one
  thread; nothing else calls the library.
- ``ShardDataset.__getitems__`` (which torch calls with each yielded batch) turns those
  bytes into per-sample tensors without copying (:class:`Samples`), and ``collate_fn``
  builds the batch. With ``num_workers >= 1`` torch runs both in its worker processes,
  off the training thread and overlapped with the step (the workers only decode bytes:
  they never call MPI nor the library); ``prefetch_factor``, ``persistent_workers`` and
  ``pin_memory`` mean what they mean in torch.
- A batch's bytes are copied once out of the library's buffer (which the library reuses
  at its next step) into memory of the batch's own, aligned to 64 bytes: tensors made
  from it are writable, need no copy, and outlive the step.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, Iterator, Optional

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from .background import in_background
from .args import integer, uint
from .batch import Batch, aligned_empty, sample_at
from .errors import EpochTakenOver
from .loader import Loader

__all__ = ["BackgroundLoader", "DistributedBatchSampler", "Fetched", "FetchingBatchSampler", "Samples", "ShardDataset"]

# Every batch copied out of the library starts at a multiple of this (a cache line):
# with register_shard(align=...) every sample then does too.
_BATCH_ALIGN = 64


class Fetched(Sequence):
    """One step's batch as the batch sampler yields it: a sequence of the global ids
    (what torch expects of a batch sampler) that carries their bytes, so that the
    dataset needs no communication. Pickles with its bytes (for torch's workers)."""

    __slots__ = ("ids", "data", "offsets", "epoch", "step")

    def __init__(self, ids: np.ndarray, data: np.ndarray, offsets: np.ndarray, epoch: int, step: int):
        self.ids = ids
        self.data = data
        self.offsets = offsets
        self.epoch = epoch
        self.step = step

    @classmethod
    def copy_of(cls, batch: Batch, epoch: int, step: int) -> "Fetched":
        data = aligned_empty(batch.nbytes, _BATCH_ALIGN)
        data[:] = batch.data[: batch.nbytes]
        return cls(batch.ids.astype(np.int64), data, batch.offsets.astype(np.int64), epoch, step)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, k):  # type: ignore[override]
        return self.ids[k].tolist() if isinstance(k, slice) else int(self.ids[k])

    def __reduce__(self):
        # numpy pickles a view by copying it: the copy in the worker is aligned again
        return (_rebuild_fetched, (self.ids, bytes(self.data), self.offsets, self.epoch, self.step))

    def __repr__(self) -> str:
        return f"Fetched(epoch {self.epoch}, step {self.step}: {len(self)} samples, {self.data.size} bytes)"


def _rebuild_fetched(ids, raw: bytes, offsets, epoch, step) -> Fetched:
    data = aligned_empty(len(raw), _BATCH_ALIGN)
    data[:] = np.frombuffer(raw, dtype=np.uint8)
    return Fetched(ids, data, offsets, epoch, step)


class Samples(Sequence):
    """The samples of one batch as ``ShardDataset.__getitems__`` returns them.

    ``samples[k]`` is sample k as a uint8 tensor, ``samples.view(k, dtype)`` the same
    bytes as another dtype; both are zero-copy and writable. A vectorised collate reads
    the whole batch at once: ``data`` (uint8 tensor, samples back to back, 64-byte
    aligned), ``offsets`` (int64 tensor, n + 1 entries: sample k is
    ``data[offsets[k]:offsets[k+1]]``) and ``ids`` (int64 tensor of global ids).
    """

    __slots__ = ("_array", "_offsets", "data", "offsets", "ids")

    def __init__(self, array: np.ndarray, offsets: np.ndarray, ids: np.ndarray):
        self._array = array
        self._offsets = offsets
        self.data = torch.from_numpy(array)
        self.offsets = torch.from_numpy(offsets)
        self.ids = torch.from_numpy(ids)

    @property
    def array(self) -> np.ndarray:
        """The batch's bytes as a numpy uint8 array (the memory ``data`` shares)."""
        return self._array

    @property
    def np_offsets(self) -> np.ndarray:
        return self._offsets

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, k):  # type: ignore[override]
        return sample_at(self, k, self.data, self._offsets, "sample")

    def view(self, k: int, dtype: torch.dtype) -> torch.Tensor:
        """Sample k's bytes as a tensor of dtype (zero copy; its size must be a multiple
        of the item size)."""
        return self[k].view(dtype)

    def __repr__(self) -> str:
        return f"Samples({len(self)} samples, {self._array.size} bytes)"


class ShardDataset(Dataset):
    """A map-style dataset over a :class:`mdloader.Loader` with its shard registered:
    ``len`` is the number of samples over all ranks, indices are global ids.

    Batches come through ``__getitems__``, which torch's DataLoader calls with each
    batch of the batch sampler: given a :class:`Fetched` batch of
    :class:`DistributedBatchSampler` it decodes nothing and copies nothing, and returns
    :class:`Samples`. Given plain ids (another batch sampler) it fetches them in one
    collective call, which is then the caller's to keep in step on every rank (and is
    refused in a worker process, which must not use MPI). A single ``ds[i]`` is refused:
    a fetch is collective, one sample at a time would be one collective call per sample.
    """

    def __init__(self, loader: Loader):
        self.loader = loader
        self._num_samples = None  # a worker process's copy: the loader's count, without the loader

    def __len__(self) -> int:
        return self.loader.num_samples if self.loader is not None else self._num_samples

    def __getstate__(self) -> dict:
        """What a worker process gets (spawn, forkserver): no loader (ctypes handles and
        MPI stay in the main process); the batches it is handed carry their bytes."""
        return {"loader": None, "_num_samples": len(self)}

    def __getitem__(self, index):
        raise TypeError(
            "mdloader.torch.ShardDataset fetches whole batches (collective): use it with "
            "DataLoader(ds, batch_sampler=mdloader.torch.DistributedBatchSampler(ds, ...)), "
            "or call ds.__getitems__(ids) on every rank"
        )

    def __getitems__(self, index) -> Samples:
        if isinstance(index, Fetched):
            return Samples(index.data, index.offsets, index.ids)
        if isinstance(index, (list, tuple)) and index and isinstance(index[0], Fetched):
            # torch wrapped the batch sampler in a BatchSampler of its own (sampler=):
            # its batches arrive as items, while the library's epoch is open.
            raise TypeError("mdloader.torch.DistributedBatchSampler was passed as sampler=; it yields whole "
                            "batches: pass it as batch_sampler= (DataLoader(ds, batch_sampler=sampler, ...))")
        if torch.utils.data.get_worker_info() is not None or self.loader is None:
            raise RuntimeError(
                "ShardDataset got plain ids in a DataLoader worker process, which cannot fetch (MPI): "
                "use batch_sampler=mdloader.torch.DistributedBatchSampler(ds, ...), which fetches in the main process"
            )
        batch = self.loader.fetch(index)
        fetched = Fetched.copy_of(batch, epoch=-1, step=-1)
        return Samples(fetched.data, fetched.offsets, fetched.ids)


class DistributedBatchSampler(Sampler):
    """The library's epoch as torch's batch sampler: each rank's batches of one epoch, in
    the library's order (the same permutation and split as ``Loader.epoch``, C and
    Fortran; one order for one seed), fetched ahead by the library's prefetch thread.

    dataset: a :class:`ShardDataset` (or the :class:`mdloader.Loader` itself).
    batch_size: samples per rank per step. shuffle, seed: the epoch's permutation, drawn
    from (seed, epoch). drop_last: as torch's DistributedSampler and BatchSampler both
    with drop_last: each rank's share is floor(N / P) and only full batches are taken;
    without it the share is ceil(N / P) (padded by wrapping around) and the last batch
    may be smaller. Every rank has the same number of steps. prefetch: batches the
    library fetches ahead on its thread (0 .. 64; needs MPI_THREAD_MULTIPLE).

    Collective construction: the arguments are compared across ranks (one allgather) and
    a bad or differing value raises ValueError on every rank, naming it.

    :meth:`set_epoch` as torch's DistributedSampler (call it before each epoch;
    iterating does not advance the epoch). :meth:`state_dict` / :meth:`load_state_dict`
    resume mid-epoch exactly as an uninterrupted run.
    """

    def __init__(
        self,
        dataset: ShardDataset | Loader,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        prefetch: int = 2,
    ):
        self.loader = dataset.loader if isinstance(dataset, ShardDataset) else dataset
        if not isinstance(self.loader, Loader):
            raise TypeError(f"dataset must be a ShardDataset or an mdloader.Loader, not {type(dataset).__name__}")
        settings = self._agree(batch_size=batch_size, seed=seed, shuffle=shuffle, drop_last=drop_last,
                               prefetch=prefetch)
        self.batch_size = settings["batch_size"]
        self.seed = settings["seed"]
        self.shuffle = settings["shuffle"]
        self.drop_last = settings["drop_last"]
        self.prefetch = settings["prefetch"]
        self.epoch = 0
        self._step = 0  # batches of self.epoch handed out so far
        self._resume: Optional[tuple[int, int]] = None  # (epoch, step) from load_state_dict

    def _agree(self, **given: Any) -> dict:
        """The arguments, checked here and compared with every rank's."""
        checks = {
            "batch_size": lambda v: uint(v, "batch_size", lo=1),
            "seed": lambda v: uint(v, "seed"),
            "prefetch": lambda v: uint(v, "prefetch", hi=64),
            "shuffle": _boolean("shuffle"),
            "drop_last": _boolean("drop_last"),
        }
        mine, problem = {}, ""
        for name, check in checks.items():
            try:
                mine[name] = check(given[name])
            except (TypeError, ValueError) as err:
                problem = problem or str(err)
        comm = self.loader.comm
        everyone = comm.allgather((mine, problem))
        for rank, (_, p) in enumerate(everyone):
            if p:
                raise ValueError(f"DistributedBatchSampler: on rank {rank}: {p}")
        for name in checks:
            values = [v[name] for v, _ in everyone]
            if len(set(values)) > 1:
                first = values[0]
                other = next(r for r, v in enumerate(values) if v != first)
                raise ValueError(
                    f"DistributedBatchSampler: {name} differs across ranks (rank 0: {first!r}, rank {other}: "
                    f"{values[other]!r}); every rank must pass the same value"
                )
        return mine

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose permutation the next iteration takes (as torch's
        DistributedSampler); must be the same on every rank (the library checks)."""
        epoch = uint(epoch, "epoch")
        if epoch != self.epoch:
            self._step = 0
        self.epoch = epoch

    def __len__(self) -> int:
        return self.loader.epoch_steps(self.batch_size, self.drop_last)

    def __iter__(self) -> Iterator[Fetched]:
        epoch, start = self.epoch, 0
        if self._resume is not None and self._resume[0] == epoch:
            start = self._resume[1]
        self._resume = None
        self._step = start
        self.loader.set_prefetch(self.prefetch)
        batches = self.loader.epoch(self.batch_size, seed=self.seed, epoch=epoch, shuffle=self.shuffle,
                                    drop_last=self.drop_last, start_step=start)
        for batch in batches:
            fetched = Fetched.copy_of(batch, epoch, self._step)
            self._step += 1
            yield fetched

    def state_dict(self, step: Optional[int] = None) -> dict:
        """Where the run stands: the epoch and the number of its batches handed out. With
        ``num_workers=0`` that is the number the training loop has seen; torch's worker
        processes take batches ahead, so there pass ``step``, the batches of this epoch
        the loop has consumed. The settings are kept to check the resumed run."""
        done = self._step if step is None else uint(step, "step")
        return {
            "epoch": self.epoch,
            "step": done,
            "batch_size": self.batch_size,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "num_samples": self.loader.num_samples,
            "ranks": self.loader.size,
        }

    def load_state_dict(self, state: dict) -> None:
        """The next iteration resumes at ``state``'s epoch and step, exactly as the
        uninterrupted run would have continued (the library seeks there: the skipped
        batches are not fetched). The settings and dataset must be those of the saved
        run (ValueError naming the first that differs)."""
        current = self.state_dict()
        for key in ("batch_size", "seed", "shuffle", "drop_last", "num_samples", "ranks"):
            if state.get(key) != current[key]:
                raise ValueError(f"load_state_dict: {key} was {state.get(key)!r}, is {current[key]!r} in this run")
        epoch, step = uint(state["epoch"], "epoch"), uint(state["step"], "step")
        if step > len(self):
            raise ValueError(f"load_state_dict: step {step} is past the epoch's {len(self)} steps")
        self.epoch, self._step = epoch, step
        self._resume = (epoch, step)


class FetchingBatchSampler(Sampler):
    """Any batch sampler of the user's (torch's ``BatchSampler`` over a
    ``DistributedSampler``, a weighted sampler, HydraGNN's order) behind the library:
    at each iteration its whole epoch of batches is handed to the library
    (:meth:`mdloader.Loader.epoch_of_batches`), which runs it as its own sampler's
    epoch: every step agreed ahead (no step waits in a blocking collective) and
    ``depth`` batches fetched ahead on the library's thread. The batches reach the
    DataLoader as :class:`Fetched` batches that carry their bytes, so that
    ``num_workers >= 1`` works (workers only collate)::

        batches = BatchSampler(DistributedSampler(ds, seed=0), 64, drop_last=True)
        loader = DataLoader(ds, batch_sampler=FetchingBatchSampler(batches, ds), collate_fn=collate,
                            num_workers=2)

    Every rank's sampler must give the same number of batches, none empty (checked: an
    MDLError on every rank otherwise). Other uses of the same Loader in the middle of
    the epoch (a validation loader, a plain fetch) end the library's epoch; the next
    batch begins it again where it stood. Prefetch needs MPI_THREAD_MULTIPLE (mpi4py's
    default); where any rank has less, every rank fetches each batch when torch asks
    for it (agreed by the library; this rank warns). ``set_epoch`` is passed on to the
    wrapped sampler's sampler, as torch's ``DistributedSampler`` wants it.
    """

    def __init__(self, batch_sampler: Any, dataset: "ShardDataset", depth: int = 2):
        from mpi4py import MPI

        self.batch_sampler = batch_sampler
        self.dataset = dataset
        # Passed on as asked, the same on every rank: the library agrees whether any
        # rank cannot run its prefetch thread (a depth lowered here would differ).
        self.depth = uint(depth, "depth", hi=64)
        if self.depth and MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            warnings.warn("FetchingBatchSampler: MPI was initialised without MPI_THREAD_MULTIPLE: batches are "
                          "fetched when asked for, not ahead", RuntimeWarning, stacklevel=2)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        inner = getattr(self.batch_sampler, "sampler", None)
        for target in (self.batch_sampler, inner):
            if hasattr(target, "set_epoch"):
                target.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[Fetched]:
        loader = self.dataset.loader
        batches = list(self.batch_sampler)
        step = 0
        while True:
            loader.set_prefetch(self.depth)
            try:
                for batch in loader.epoch_of_batches(batches, start_step=step):
                    fetched = Fetched.copy_of(batch, self.epoch, step)
                    step += 1
                    yield fetched
                return
            except EpochTakenOver:
                continue  # on every rank at this step: begin again here


def _boolean(what: str):
    def check(value: Any) -> bool:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        if integer(value, what) in (0, 1):
            return bool(value)
        raise ValueError(f"{what} must be a bool, got {value!r}")

    return check


class BackgroundLoader:
    """Iterates a DataLoader on a thread of its own, up to ``depth`` batches ahead of the
    training loop: sampling (the collective fetch), ``__getitems__`` and ``collate_fn``
    all run there, overlapped with the step, and the loop only takes finished batches::

        loader = mdloader.torch.BackgroundLoader(DataLoader(ds, batch_sampler=sampler, collate_fn=collate))

    A thread rather than torch's worker processes: a batch then crosses no process
    boundary (worker processes hand every tensor over through shared memory, several ms
    per batch measured here), at the price of sharing the interpreter's lock with the
    loop (numpy and torch release it while they compute). The thread is the only one
    that calls the sampler's loader, and stopping early is safe: see
    :func:`mdloader.background.in_background`.
    """

    def __init__(self, dataloader, depth: int = 2):
        self.dataloader = dataloader
        self.depth = uint(depth, "depth", lo=1)
        self._consumed = 0  # batches of the current epoch the loop has taken

    def __len__(self) -> int:
        return len(self.dataloader)

    def __iter__(self):
        from mpi4py import MPI

        if MPI.Is_initialized() and MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            raise RuntimeError("BackgroundLoader calls MPI (the sampler's fetch) from its thread, which needs "
                               "MPI_THREAD_MULTIPLE (mpi4py's default); MPI was initialised with less: iterate the "
                               "DataLoader itself")
        sampler = self._sampler()
        resume = sampler._resume if sampler is not None else None
        self._consumed = resume[1] if resume is not None and resume[0] == sampler.epoch else 0
        for batch in in_background(self.dataloader, self.depth):
            self._consumed += 1
            yield batch

    def _sampler(self) -> Optional["DistributedBatchSampler"]:
        sampler = getattr(self.dataloader, "batch_sampler", None)
        return sampler if isinstance(sampler, DistributedBatchSampler) else None

    def state_dict(self) -> dict:
        """The sampler's state at the batches the loop has taken (the thread takes
        ``depth`` ahead, which the sampler's own count includes): resuming from it
        continues exactly after the last batch the loop saw."""
        sampler = self._sampler()
        if sampler is None:
            raise TypeError("BackgroundLoader.state_dict needs a DataLoader whose batch_sampler is "
                            "mdloader.torch.DistributedBatchSampler")
        return sampler.state_dict(step=self._consumed)
