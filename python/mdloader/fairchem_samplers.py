"""A max-atoms batch sampler of MDLoader's own, in the role of fairchem's
``MaxAtomDistributedBatchSampler``: the same arguments, the same batches for the same
seed (so a run switched from one to the other sees the same data), without numba and
without a loop over structures (the packing is :func:`mdloader.budget.pack`, shared
with the node-budget batches of :mod:`mdloader.pyg`).

The atom counts come from ``dataset.get_metadata("natoms", ids)``, which
:class:`mdloader.fairchem.DistAseDBDataset` serves from memory (agreed across ranks
at registration), or from ``natoms=`` for any dataset (HydraGNN's node counts).
"""

from __future__ import annotations

import math
from typing import Any, Iterator, Optional

import numpy as np
import torch

from .budget import pack

__all__ = ["MaxAtomBatchSampler", "max_atom_batches"]


def max_atom_batches(natoms: np.ndarray, ids: np.ndarray, max_atoms: int, min_atoms: int = 0) -> list:
    """The batches of ``ids`` (in this order) of at most ``max_atoms`` atoms each, filled
    greedily as fairchem's ``get_batches`` fills them: a structure that does not fit
    starts the next batch, one above ``max_atoms`` is left out, and a batch below
    ``min_atoms`` is dropped. ``natoms``: the atom count of each of ``ids``."""
    if max_atoms <= 0:
        raise ValueError(f"max_atoms = {max_atoms}: it must be positive")
    natoms = np.asarray(natoms, dtype=np.int64).reshape(-1)
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    keep = natoms <= max_atoms
    return [batch.tolist() for batch in pack(natoms[keep], ids[keep], int(max_atoms), min_total=min_atoms)]


class MaxAtomBatchSampler:
    """Batches of at most ``max_atoms`` atoms, split over ``num_replicas`` ranks, with
    fairchem's ``MaxAtomDistributedBatchSampler``'s arguments and meaning: the batches
    are drawn once from a permutation by ``seed``; each epoch shuffles their order by
    ``seed + epoch`` (``shuffle``), pads to a multiple of the ranks by repeating the
    first (or, ``drop_last``, cuts the tail), and gives this ``rank`` every
    ``num_replicas``-th. ``set_epoch_and_start_iteration(epoch, step)`` resumes at that
    step of that epoch. ``natoms``: the atom counts, where ``dataset`` does not serve
    ``get_metadata("natoms", ids)``."""

    def __init__(self, dataset: Any, max_atoms: int, num_replicas: int, rank: int, seed: int = 0,
                 shuffle: bool = True, drop_last: bool = False, min_atoms: int = 0,
                 natoms: Optional[np.ndarray] = None):
        if not 0 <= rank < num_replicas:
            raise ValueError(f"MaxAtomBatchSampler: rank {rank} is not within num_replicas = {num_replicas}")
        self.dataset, self.max_atoms, self.min_atoms = dataset, max_atoms, min_atoms
        self.num_replicas, self.rank = num_replicas, rank
        self.seed, self.shuffle, self.drop_last = seed, shuffle, drop_last
        self.epoch, self.start_iter = 0, 0
        order = np.random.default_rng(seed).permutation(len(dataset))
        counts = natoms[order] if natoms is not None else _natoms_of(dataset, order)
        self.all_batches = max_atom_batches(counts, order, max_atoms, min_atoms)
        if len(self.all_batches) < num_replicas:
            raise ValueError(f"MaxAtomBatchSampler: {len(self.all_batches)} batches of at most {max_atoms} atoms "
                             f"for {num_replicas} ranks: fewer batches than ranks")
        whole = len(self.all_batches)
        if drop_last and whole % num_replicas:
            self.num_samples = math.ceil((whole - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(whole / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def set_epoch_and_start_iteration(self, epoch: int, start_iter: int) -> None:
        self.epoch, self.start_iter = epoch, start_iter

    def __iter__(self) -> Iterator[list]:
        whole = len(self.all_batches)
        if self.shuffle:
            # torch's generator, as fairchem's sampler: the same order for the same seed
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(whole, generator=g).numpy()
        else:
            order = np.arange(whole)
        if self.drop_last:
            order = order[: self.total_size]
        else:
            order = np.resize(order, self.total_size)  # repeats from the start, as fairchem pads
        mine = order[self.rank: self.total_size: self.num_replicas]
        if not self.start_iter < len(mine):
            raise ValueError(f"MaxAtomBatchSampler: start iteration {self.start_iter} is not within this epoch's "
                             f"{len(mine)} batches")
        return iter([self.all_batches[k] for k in mine[self.start_iter:]])


def _natoms_of(dataset: Any, ids: np.ndarray) -> np.ndarray:
    counts = dataset.get_metadata("natoms", ids)
    if counts is None:
        raise ValueError(f"MaxAtomBatchSampler: the {type(dataset).__name__} serves no 'natoms' metadata; pass "
                         "natoms= (every structure's atom count)")
    return np.asarray(counts, dtype=np.int64).reshape(-1)
