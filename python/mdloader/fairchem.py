"""fairchem (``fairchem-core`` 2.x) structures held in memory across the MPI ranks,
served as fairchem ``AtomicData`` batches.

In a fairchem config, the two lines a user changes::

    format: mdloader.fairchem.DistAseDBDataset        # was: ase_db
    _target_: mdloader.fairchem.get_dataloader        # was: fairchem.core.components.common.dataloader_builder.get_dataloader

In a script::

    from mdloader.fairchem import DistAseDBDataset, get_dataloader
    dataset = DistAseDBDataset({"src": "train/", "a2g_args": {"r_energy": True, "r_forces": True}})
    loader = get_dataloader(dataset, partial(MaxAtomDistributedBatchSampler, max_atoms=350, seed=0))
    for epoch in range(epochs):
        loader.batch_sampler.set_epoch_and_start_iteration(epoch, 0)
        for batch in loader:                      # fairchem AtomicData
            ...

:class:`DistAseDBDataset` takes ``AseDBDataset``'s config: every rank opens the files
(listing their rows, reading none) and reads only its own part, through fairchem's
``AseDBDataset`` (so the structures are what fairchem makes of them), into its shard:
typed records (:mod:`mdloader.fairchem_records`: raw arrays, no pickle), the schema
agreed across ranks. ``DistAseDBDataset.from_atoms`` takes each rank's own ``ase.Atoms``.
``get_metadata("natoms", ...)``, ``metadata_hasattr``, ``indices`` and ``len`` are
served from memory, the same on every rank, without reading a structure.

:func:`get_dataloader` is fairchem's ``get_dataloader`` (``batch_sampler_fn(dataset,
num_replicas, rank)``, ``collate_fn``) with the library underneath: each epoch the
sampler's batches (fairchem's ``MaxAtomDistributedBatchSampler``, its
``BalancedBatchSampler``, :class:`mdloader.fairchem_samplers.MaxAtomBatchSampler`) are
handed to the library whole and fetched ahead (no blocking collective per step), and
collated on a thread into the batch ``atomicdata_list_to_batch`` makes, without a loop
over structures.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterable, Iterator, Optional

import numpy as np
import torch
from fairchem.core.datasets.atomic_data import AtomicData

from .background import every_rank_allows_threads, in_background
from .batches import agreed_batches
from .fairchem_records import collate, examples, facts_and_records
from .fairchem_samplers import MaxAtomBatchSampler
from .fairchem_sources import AseDBPart, structures_of_atoms
from .errors import EpochTakenOver
from .loader import Loader
from .open_epoch import HoldsOpenEpoch
from .typed import agree_schema, encode

__all__ = ["DistAseDBDataset", "DataLoader", "get_dataloader", "MaxAtomBatchSampler"]


class DistAseDBDataset(HoldsOpenEpoch, torch.utils.data.Dataset):
    """In place of fairchem's ``AseDBDataset``: its ``config`` (``src``: a file, a
    folder, a glob or a list of them; ``a2g_args``, ``connect_args``, ``select_args``,
    ``transforms``, ``key_mapping``, ``metadata_path``), read once, each rank its own
    rows, and held in memory by the ranks of ``comm`` (default ``MPI.COMM_WORLD``).
    Collective. Structure ``i`` is row ``i`` of fairchem's ``AseDBDataset`` over the same
    config.

    The atom counts come from the files' ``metadata.npz`` (as fairchem reads it; each
    rank checks its rows against it) or, without one, from the structures read.

    ``dataset[i]`` and ``dataset.__getitems__(ids)`` fetch (collective: every rank asks
    at the same time, as torch's ``DataLoader`` with ``num_workers=0`` does on every
    rank); :func:`get_dataloader` is the fast path."""

    def __init__(self, config: dict, comm: Any = None):
        self.config = dict(config)
        part, problem, structures, natoms_all = None, "", None, None
        self._start(comm)
        try:
            part = AseDBPart(self.config)
            total = part.total
        except Exception as err:  # noqa: BLE001 - agreed below, raised on every rank
            problem, total = f"{type(err).__name__}: {err}", -1
        totals = self.comm.allgather((total, problem))
        self._raise_first(totals, "DistAseDBDataset")
        if len(set(t for t, _ in totals)) > 1:
            each = ", ".join(f"rank {r}: {t}" for r, (t, _) in enumerate(totals))
            self._fail(f"DistAseDBDataset: the ranks see different numbers of structures in {config.get('src')!r} "
                       f"({each}); every rank must see the same files")
        try:
            mine = self.loader.replica_part(total)
            structures = part.read(mine)
            natoms_all = part.natoms()
        except Exception as err:  # noqa: BLE001 - agreed in _register
            problem = f"{type(err).__name__}: {err}"
        finally:
            part.close()
        self._register(structures, problem, natoms_all)

    @classmethod
    def from_atoms(cls, atoms: Iterable[Any], comm: Any = None, *, a2g_args: Optional[dict] = None,
                   transform: Optional[Callable[[AtomicData], AtomicData]] = None,
                   config: Optional[dict] = None) -> "DistAseDBDataset":
        """Collective: each rank's own ``ase.Atoms`` (its part of the dataset; ids
        follow rank order), made ``AtomicData.from_ase(atoms, **a2g_args)`` and then
        ``transform(data)`` where given (e.g. fairchem's ``common_transform`` with a
        ``dataset_name``). ``config``: what ``dataset.config`` says (fairchem's
        ``Subset`` copies it)."""
        self = cls.__new__(cls)
        self.config = dict(config or {"a2g_args": a2g_args or {}})
        self._start(comm)
        structures, problem = None, ""
        try:
            structures = structures_of_atoms(atoms, a2g_args, transform)
        except Exception as err:  # noqa: BLE001 - agreed in _register
            problem = f"{type(err).__name__}: {err}"
        self._register(structures, problem, None)
        return self

    # -- registration (collective) -------------------------------------------------------
    def _start(self, comm: Any) -> None:
        from mpi4py import MPI

        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.loader = Loader(self.comm)

    def _raise_first(self, everyone: list, what: str) -> None:
        """Every rank raises the first rank's problem (``everyone``: each rank's
        (value, problem)), the loader closed first (collective, as the raise is)."""
        for rank, (_, why) in enumerate(everyone):
            if why:
                self._fail(f"{what}: on rank {rank}: {why}")

    def _fail(self, message: str) -> None:
        self.loader.close()
        raise ValueError(message)

    def _register(self, structures: Optional[list], problem: str, natoms_all: Optional[np.ndarray]) -> None:
        """Registers this rank's structures, their schema and facts agreed, and settles
        every structure's atom count on every rank."""
        schema = facts = None
        data, offsets = np.zeros(0, dtype=np.uint8), np.zeros(1, dtype=np.uint64)
        natoms_mine = np.zeros(0, dtype=np.int64)
        if not problem:
            try:
                facts, records, cat_dims = facts_and_records(structures)
                schema, data, offsets = encode(records, cat_dims)
                natoms_mine = np.array([int(r["natoms"].reshape(-1)[0]) for r in records], dtype=np.int64)
            except Exception as err:  # noqa: BLE001 - agreed just below
                problem, schema, facts = f"{type(err).__name__}: {err}", None, None
        try:
            schema, facts = agree_schema(self.comm, schema, problem, facts)
        except ValueError as err:
            self._fail(f"DistAseDBDataset: {err}")
        self.schema, self.facts = schema, facts
        self.loader.register_shard(data, offsets, align=8)
        self.loader.schema = schema
        counts = self.comm.allgather(natoms_mine.size)
        gathered = np.empty(sum(counts), dtype=np.int64)
        self.comm.Allgatherv(natoms_mine, [gathered, counts])
        if natoms_all is not None:
            # The files' metadata must say what the rows hold, all of them: every rank
            # holds the whole array, and one that read another copy of the files (a
            # stale node-local one) is told so wherever its rows' counts differ.
            wrong = "" if natoms_all.shape == gathered.shape and np.array_equal(natoms_all, gathered) else "metadata.npz"
            for rank, why in enumerate(self.comm.allgather(wrong)):
                if why:
                    self._fail(f"DistAseDBDataset: on rank {rank}: the atom counts of metadata.npz differ from the "
                               f"structures read from {self.config.get('src')!r} (or count another number of "
                               "structures); write it again for these files")
        self._metadata = {"natoms": gathered}
        self.num_samples = int(gathered.size)

    # -- what fairchem reads -------------------------------------------------------------
    def __len__(self) -> int:
        return self.num_samples

    @property
    def indices(self) -> np.ndarray:
        return np.arange(self.num_samples, dtype=int)

    def metadata_hasattr(self, attr: str) -> bool:
        return attr in self._metadata

    def get_metadata(self, attr: str, idx: Any) -> Any:
        """As fairchem's ``BaseDataset.get_metadata``: a list of ids gives a list (fairchem's
        ``Subset`` passes a list of one list and takes its first element), an array or an
        id what indexing gives; ``None`` for an attribute not held. Vectorised."""
        if attr not in self._metadata:
            return None
        values = self._metadata[attr]
        if isinstance(idx, list):
            return list(values[np.asarray(idx, dtype=np.int64)])
        return values[idx]

    # -- fetches (collective) ----------------------------------------------------------------
    def _fetch(self, ids: Any) -> AtomicData:
        if torch.utils.data.get_worker_info() is not None:
            raise RuntimeError("DistAseDBDataset: a fetch is a collective MPI call, which torch's worker processes "
                               "cannot make: use num_workers=0, or mdloader.fairchem.get_dataloader")
        self._close_open_epoch()
        fetched = self.loader.fetch(np.asarray(ids, dtype=np.int64).reshape(-1))
        return collate(fetched.fields, self.facts)

    def __getitem__(self, idx: int) -> AtomicData:
        return examples(self._fetch([idx]), self.facts)[0]

    def __getitems__(self, ids: list) -> list:
        return examples(self._fetch(ids), self.facts)

    def close(self) -> None:
        """Collective: end any open epoch and free the loader."""
        self._close_open_epoch()
        self.loader.close()


# -- the loader ------------------------------------------------------------------------------


def get_dataloader(dataset: Any, batch_sampler_fn: Callable, collate_fn: Optional[Callable] = None,
                   num_workers: int = 0, **loader_args: Any) -> "DataLoader":
    """fairchem's ``get_dataloader`` with the library underneath: ``batch_sampler_fn(
    dataset=, num_replicas=, rank=)`` (the ranks of the dataset's communicator, which
    must be torch.distributed's where it is initialised), ``collate_fn`` fairchem's
    (``data_list_collater``, ``mt_collater_adapter(...)``: built vectorised; any
    other: called with the structures) or None (``atomicdata_list_to_batch``).
    ``dataset``: a :class:`DistAseDBDataset`, or fairchem's ``Subset`` or one-dataset
    ``ConcatDataset`` of one (``create_concat_dataset`` with ``format:
    mdloader.fairchem.DistAseDBDataset``). ``num_workers``: fetching and collating run
    on the loader's own thread, never in worker processes; it is accepted and not
    used. ``loader_args``: :class:`DataLoader`'s ``prefetch`` and ``collate_ahead``."""
    base, _, _ = _resolve(dataset)
    ranks, rank = base.comm.Get_size(), base.comm.Get_rank()
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        theirs = (torch.distributed.get_world_size(), torch.distributed.get_rank())
        if theirs != (ranks, rank):
            raise ValueError(f"mdloader.fairchem.get_dataloader: torch.distributed runs {theirs[0]} ranks (this one "
                             f"{theirs[1]}), the dataset's MPI communicator {ranks} (this one {rank}); launch "
                             "with mpirun and take DDP's rank and world size from MPI")
    batch_sampler = batch_sampler_fn(dataset=dataset, num_replicas=ranks, rank=rank)
    return DataLoader(dataset, batch_sampler, collate_fn, **loader_args)


class DataLoader:
    """fairchem ``AtomicData`` batches of a :class:`DistAseDBDataset` (or fairchem's
    ``Subset`` or one-dataset ``ConcatDataset`` of one) in the order of
    ``batch_sampler`` (any sampler of batches with ``len``; its
    ``set_epoch_and_start_iteration``, which fairchem's trainer calls on
    ``loader.batch_sampler``, is the sampler's own).

    At each ``iter`` the sampler's batches of the epoch are taken whole (their number
    agreed across ranks: a sampler that gives the ranks different numbers, or fails on
    one, raises ValueError on every rank) and run as the library's epoch
    (:meth:`mdloader.Loader.epoch_of_batches`): ``prefetch`` batches fetched ahead on a
    library thread, each step agreed ahead (no blocking collective per step), and
    ``collate_ahead`` batches collated ahead on a thread of this loader (0: in the
    loop). Both need MPI_THREAD_MULTIPLE (mpi4py's default); below it on any rank,
    every rank runs without them."""

    def __init__(self, dataset: Any, batch_sampler: Any, collate_fn: Optional[Callable] = None, *,
                 prefetch: int = 2, collate_ahead: int = 2):
        self.dataset = dataset
        self.batch_sampler = batch_sampler
        self.collate_fn = collate_fn
        self.base, self._global_ids, self._constants = _resolve(dataset)
        self._finish = _finisher(collate_fn, self.base.facts, self._constants)
        self.prefetch, self.collate_ahead = prefetch, collate_ahead
        self._threads: Optional[bool] = None  # every rank allows threads (agreed at the first iter)

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.batch_sampler, "set_epoch"):
            self.batch_sampler.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        # torch's DataLoader draws its workers' base seed from torch's default generator
        # at every iter; drawing it here too leaves a model that draws random numbers
        # (UMA's random edge rotations) the stream it has under fairchem's loader, so
        # that a switched run repeats the run it replaces.
        torch.empty((), dtype=torch.int64).random_()
        if self._threads is None:
            self._threads = every_rank_allows_threads(self.base.comm)
        prefetch = self.prefetch if self._threads else 0
        ahead = self.collate_ahead if self._threads else 0
        # An epoch left open by a loop that stopped early ends here, on every rank alike.
        self.base._close_open_epoch()
        batches = self._agreed_batches()
        self.base.loader.set_prefetch(prefetch)
        made = self._batches(batches)
        if ahead:
            made = in_background(made, ahead)
            self.base._hold_open_epoch(made)
            return self._whole(made, len(batches))
        return made

    def _whole(self, made: Any, count: int) -> Iterator[Any]:
        """The thread's batches, or :class:`mdloader.EpochTakenOver` where another use
        of the dataset (``dataset[i]``, a second loader's loop) stopped the thread before
        the epoch's end: the loop must not take that for the end of the epoch."""
        taken = 0
        for batch in made:
            taken += 1
            yield batch
        if taken < count and self.base._open_epoch is not made:
            raise EpochTakenOver()

    def _agreed_batches(self) -> list:
        """This epoch's batches of the sampler, as global ids of the dataset held, their
        number agreed (:func:`mdloader.batches.agreed_batches`)."""
        return agreed_batches(
            self.base.comm,
            lambda: [self._global_ids[_ids_of(b, len(self._global_ids))] for b in self.batch_sampler],
            "mdloader.fairchem.DataLoader",
            "fairchem's MaxAtomDistributedBatchSampler and mdloader's MaxAtomBatchSampler do",
        )

    def _batches(self, batches: list) -> Iterator[Any]:
        for fetched in self.base.loader.epoch_of_batches(batches):
            yield self._finish(fetched.fields)



def _ids_of(batch: Any, count: int) -> np.ndarray:
    """A sampler's batch as an array of the dataset's ids (IndexError for one outside
    0 .. count - 1: numpy would take a negative one from the end)."""
    given = np.asarray(batch)
    if given.size and (given.dtype.kind not in "iu" or given.ndim != 1):
        # A float, a bool mask or nested lists would be cast into other ids silently.
        raise TypeError(f"a batch must be a flat list of integer ids, not {given.dtype} of shape {given.shape}")
    ids = given.astype(np.int64).reshape(-1)
    if ids.size and (ids.min() < 0 or ids.max() >= count):
        bad = ids[(ids < 0) | (ids >= count)][0]
        raise IndexError(f"id {bad} is not one of the dataset's {count}")
    return ids


def _resolve(dataset: Any) -> tuple:
    """(the DistAseDBDataset underneath, the global id of each of ``dataset``'s ids,
    string attributes every structure gets) through fairchem's ``Subset`` and
    one-dataset ``ConcatDataset``."""
    if isinstance(dataset, DistAseDBDataset):
        return dataset, np.arange(len(dataset), dtype=np.int64), {}
    if isinstance(dataset, torch.utils.data.Subset):
        base, ids, constants = _resolve(dataset.dataset)
        return base, ids[np.asarray(dataset.indices, dtype=np.int64)], constants
    inner = getattr(dataset, "datasets", None)
    if inner is not None and hasattr(dataset, "dataset_names") and hasattr(dataset, "real_sizes"):
        if len(inner) != 1:
            raise ValueError(f"mdloader.fairchem: a ConcatDataset of {len(inner)} datasets "
                             f"({', '.join(dataset.dataset_names)}); one is supported (each DistAseDBDataset is a "
                             "loader of its own, and a batch is fetched from one)")
        base, ids, constants = _resolve(inner[0])
        # As ConcatDataset: a sampling ratio above 1 repeats the dataset (idx % real size),
        # and every structure gets the dataset's name.
        mine = np.arange(len(dataset), dtype=np.int64) % dataset.real_sizes[0]
        return base, ids[mine], {**constants, "dataset_name": dataset.dataset_names[0]}
    raise TypeError(f"mdloader.fairchem: a {type(dataset).__name__} is not a DistAseDBDataset (nor fairchem's "
                    "Subset or one-dataset ConcatDataset of one)")


def _finisher(collate_fn: Optional[Callable], facts: tuple, constants: dict) -> Callable:
    """What makes a loader's batch of fetched fields, as ``collate_fn`` makes it of
    the structures: fairchem's collaters vectorised, any other called with them."""
    from fairchem.core.datasets.collaters.mt_collater import MTCollater
    from fairchem.core.datasets.collaters.simple_collater import data_list_collater

    if collate_fn is None:
        return lambda fields: collate(fields, facts, constants)
    plain = collate_fn.func if isinstance(collate_fn, functools.partial) else collate_fn
    if plain is data_list_collater:
        options = collate_fn.keywords if isinstance(collate_fn, functools.partial) else {}
        return functools.partial(_simple_collated, facts=facts, constants=constants, **options)
    if isinstance(collate_fn, MTCollater):
        return functools.partial(_mt_collated, collater=collate_fn, facts=facts, constants=constants)
    return lambda fields: collate_fn(examples(collate(fields, facts, constants), facts, constants))


def _simple_collated(fields: Any, facts: tuple, constants: dict, otf_graph: bool = False,
                     to_dict: bool = False) -> Any:
    """fairchem's ``data_list_collater``: the batch, with each structure's edge count
    as ``neighbors`` unless ``otf_graph``."""
    batch = collate(fields, facts, constants)
    if not otf_graph and "edge_index" in fields.counts:
        batch.neighbors = torch.from_numpy(fields.counts["edge_index"].copy())
    return dict(batch.items()) if to_dict else batch


def _mt_collated(fields: Any, collater: Any, facts: tuple, constants: dict) -> AtomicData:
    """fairchem's ``MTCollater``: the batch, with every task that a structure's dataset
    does not have set to inf for that structure (its atoms, for an atom-level task)."""
    batch = collate(fields, facts, constants)
    names = np.asarray(batch.dataset if isinstance(batch.dataset, list) else [batch.dataset])
    task_map, tasks = collater.dataset_task_map, collater.task_config
    slices, cumsum, cat_dims, natoms_list = batch.get_batch_stats()
    natoms = batch.natoms
    for task, config in tasks.items():
        lacking = np.array([task not in task_map[name] for name in names.tolist()])
        if not lacking.any():
            continue
        atom_level = config["level"] == "atom"
        dim = list(config["out_spec"]["dim"])
        dtype = getattr(torch, config["out_spec"]["dtype"])
        per_structure = torch.from_numpy(lacking)
        rows = torch.repeat_interleave(per_structure, natoms) if atom_level else per_structure.repeat_interleave(
            dim[0] if dim else 1)
        if task in batch:
            value = batch[task].clone()
            value[rows] = torch.inf
        else:
            if not lacking.all():
                raise ValueError(f"mdloader.fairchem: task {task!r} is stored for some structures only")
            shape = [int(natoms.sum())] + dim if atom_level else [len(names) * (dim[0] if dim else 1)] + dim[1:]
            value = torch.full(shape, torch.inf, dtype=dtype)
            counts = natoms.tolist() if atom_level else [dim[0] if dim else 1] * len(names)
            slices[task] = np.concatenate([[0], np.cumsum(counts)]).tolist()
            cumsum[task] = [0] * (len(names) + 1)
            cat_dims[task] = 0
        batch[task] = value
    batch.assign_batch_stats(slices, cumsum, cat_dims, natoms_list)
    return batch
