"""torch_geometric graphs in, ``torch_geometric.data.Batch`` out.

    from mdloader.pyg import DistDataset, DataLoader

    dataset = DistDataset(my_graphs, "trainset", comm)          # torch_geometric Data objects
    loader = DataLoader(dataset, batch_size=64, shuffle=True)   # the library's sampler
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:                                    # torch_geometric.data.Batch
            out = model(batch.z, batch.pos, batch.batch)

Each ``Data`` is stored as a typed record (:mod:`mdloader.typed`: raw array bytes, no
pickle) with two facts per attribute that torch_geometric's batching needs and that are
agreed across ranks with the schema: the concatenation dimension (``Data.__cat_dim__``)
and whether the attribute is incremented by the graph's node count (``Data.__inc__``:
``edge_index`` and other ``*index*`` attributes); each graph's node count is stored
too. The graphs' class is agreed as well (every graph must be of one ``Data`` class,
whose ``__cat_dim__`` cuts a batch back into graphs): a rank that holds no graph
imports it by its module and qualified name. A batch is then built from the fetched
fields with vectorised numpy, equal to ``Batch.from_data_list`` of the same graphs
(``batch``, ``ptr``, the increments, and the slice and increment dictionaries that
``get_example`` and ``to_data_list`` use). bfloat16 tensors, which numpy lacks, are
stored as their raw 16-bit patterns and come back bit for bit (not as an attribute
incremented by the node count).

HydraGNN users: ``DistDataset(data, label, comm, ddstore_width=..., local=...,
var_config=..., ddstore_store_per_sample=...)`` takes HydraGNN's arguments and has the
attributes its trainer reads (``ddstore_comm``, ``dataset_name``: see
:mod:`mdloader.pyg_hydragnn`). It
also works under torch_geometric's own ``DataLoader`` with a ``DistributedSampler``
(one collective fetch per batch through ``__getitems__``), and :class:`DataLoader` here
is the fast path (prefetch, steps agreed ahead, vectorised collate), with the library's
sampler or the user's own (``sampler=DistributedSampler(...)``, ``batch_sampler=``).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import sys
import warnings
from typing import Any, Iterable, Iterator, Optional

import numpy as np
import torch
from torch_geometric.data import Batch, Data

from . import pyg_fast, pyg_hydragnn
from .args import NO_SUCH_ID
from .background import in_background
from .batches import agreed_batches
from .budget import agreed_budget_sampler, other_ranks_agreeing
from .errors import EpochTakenOver, MDLError, Status
from .loader import Loader
from .open_epoch import HoldsOpenEpoch
from .typed import agree_schema, encode

__all__ = ["DistDataset", "DataLoader", "collate"]

NUM_NODES = "__num_nodes__"  # hidden field: each graph's node count (-1: not known)
# Kinds of attribute. numpy has no bfloat16: such a tensor is stored as its raw 16-bit
# patterns (int16) and viewed back as bfloat16, bit for bit.
TENSOR, BFLOAT16, NUMBER, EXPLICIT_NUM_NODES = "tensor", "bfloat16", "number", "num_nodes"


def _attribute(data: Data, key: str, value: Any, nodes: Optional[int]) -> tuple:
    """(array, kind, cat_dim, incremented) of one attribute of ``data``, a graph of
    ``nodes`` nodes (torch_geometric's inference)."""
    if key == "num_nodes":
        return np.asarray(int(value), dtype=np.int64), EXPLICIT_NUM_NODES, 0, False
    if isinstance(value, torch.Tensor):
        if value.is_sparse or value.layout != torch.strided:
            raise TypeError(f"attribute {key!r}: sparse tensors are not supported")
        plain = value.detach().cpu().resolve_neg().resolve_conj()
        kind = BFLOAT16 if plain.dtype == torch.bfloat16 else TENSOR
        array = (plain.view(torch.int16) if kind == BFLOAT16 else plain).numpy()
        cat = data.__cat_dim__(key, value) if value.dim() else 0
    elif isinstance(value, (bool, int, float)):
        # As torch_geometric batches numbers: torch.tensor of the list.
        array = torch.tensor(value).numpy()
        kind, cat = NUMBER, 0
    else:
        raise TypeError(f"attribute {key!r}: a {type(value).__name__} is neither a tensor nor a number "
                        "(graphs are stored as raw array bytes, no pickle)")
    if not isinstance(cat, int):
        raise TypeError(f"attribute {key!r}: concatenation dimension {cat!r} is not supported")
    inc = data.__inc__(key, value)
    inc = int(inc) if not isinstance(inc, torch.Tensor) else int(inc.reshape(-1)[0]) if inc.numel() == 1 else None
    if inc is None or (inc != 0 and inc != nodes):
        raise TypeError(f"attribute {key!r}: its increment ({inc!r}) is neither 0 nor the graph's node count "
                        f"({nodes}); mdloader.pyg supports only those two (not yet torch_geometric's max + 1 for "
                        "*batch* attributes, nor custom __inc__ rules)")
    if kind == BFLOAT16 and inc:
        # Adding node counts to the stored bit patterns would not add them to the values.
        raise TypeError(f"attribute {key!r}: a bfloat16 attribute incremented by the node count (an index) is "
                        "not supported")
    # A graph without nodes cannot tell whether the attribute is incremented (0 either
    # way): None, settled by the other graphs.
    incremented = None if not nodes else inc == nodes
    return array, kind, cat % max(array.ndim, 1), incremented


def _records(graphs: list) -> tuple:
    """(mappings of arrays, per-attribute facts, which are incremented) of ``graphs``;
    every graph must be of one class and have the same attributes and facts."""
    records, facts, settled = [], None, {}
    for i, data in enumerate(graphs):
        if not isinstance(data, Data):
            raise TypeError(f"graph {i} is a {type(data).__name__}, not a torch_geometric.data.Data")
        if type(data) is not type(graphs[0]):
            raise ValueError(f"graph {i} is a {_dotted(_class_name(type(data)))}, graph 0 a "
                             f"{_dotted(_class_name(type(graphs[0])))}: every graph must be of one class (it says "
                             "how a batch is cut back into graphs)")
        record, mine = {}, []
        nodes = data.num_nodes  # inferred from the attributes: once per graph
        for key in data.keys():
            array, kind, cat, inc = _attribute(data, key, data[key], nodes)
            record[key] = array
            mine.append((key, kind, cat))
            if inc is not None and settled.setdefault(key, inc) != inc:
                raise ValueError(f"graph {i}: attribute {key!r} is incremented by the node count in some graphs "
                                 "and not in others")
        if facts is None:
            facts = tuple(mine)
        elif sorted(facts) != sorted(mine):
            raise ValueError(f"graph {i}'s attributes {sorted(mine)} differ from graph 0's {sorted(facts)}")
        # As torch_geometric: a graph gets `batch` and `ptr` only where its node count
        # can be inferred from its attributes.
        if not data._store.can_infer_num_nodes:
            nodes = None
        record[NUM_NODES] = np.asarray(-1 if nodes is None else nodes, dtype=np.int64)
        records.append(record)
    # Whether each attribute is incremented: None where no graph here could tell.
    return records, facts, {key: settled.get(key) for key, _, _ in facts or ()}


def agree_increments_and_class(comm: Any, incremented: dict, mine: Any) -> tuple:
    """Collective (one allgather): ValueError on every rank where ranks disagree on
    whether an attribute is incremented by the node count (``incremented``: key -> bool,
    or None where this rank's graphs cannot tell); otherwise (key -> incremented, as
    the ranks that could tell said; the graphs' class, agreed from the ranks that have
    graphs: ``mine`` is None on a rank without)."""
    everyone = comm.allgather((incremented, None if mine is None else _class_name(mine)))
    settled: dict = {}
    for theirs, _ in everyone:
        for key, inc in theirs.items():
            if inc is not None and settled.setdefault(key, inc) != inc:
                raise ValueError(f"register_shard: attribute {key!r} is incremented by the node count on some "
                                 "ranks and not on others")
    return settled, _agreed_class(comm, [name for _, name in everyone], mine)


def register_graphs(loader: Loader, graphs: Any, problem: str = "") -> tuple:
    """Collective: register this rank's graphs; the (schema, facts, graphs' class) agreed
    by all ranks. ``problem``: why this rank has no graphs to give (any failure before,
    agreed here, so that every rank raises together)."""
    schema = facts = None
    facts_here, records = False, []
    incremented: dict = {}
    data, offsets = np.zeros(0, dtype=np.uint8), np.zeros(1, dtype=np.uint64)
    if not problem:
        try:
            records, facts, incremented = _records(graphs)
            facts_here = facts is not None
            cat_dims = {key: cat for key, _, cat in facts or ()}
            schema, data, offsets = encode(records, cat_dims)
        except Exception as err:  # noqa: BLE001 - any failure here is agreed, not raised alone
            problem = f"{type(err).__name__}: {err}"
            schema = facts = None
    mine = type(graphs[0]) if facts is not None else None  # None: no graphs here
    # The facts are compared in key order: graphs of different ranks may list them
    # in different orders.
    schema, facts = agree_schema(loader.comm, schema, problem, None if facts is None else sorted(facts))
    # Whether an attribute is incremented, from the ranks whose graphs could tell (a
    # graph without nodes cannot); the same gathered facts give every rank one answer.
    # The graphs' class too: it cuts a batch back into graphs (Data.__cat_dim__ in
    # to_data_list), so a rank without graphs must use the others'.
    settled, data_class = agree_increments_and_class(loader.comm, incremented, mine)
    loader.register_shard(data, offsets, align=8)
    loader.schema = schema
    # This rank's graphs' node counts, as registered (8 bytes a graph it holds); the
    # whole dataset's are gathered only when asked (DistDataset.get_node_counts): a table
    # of 8 bytes a graph on every rank, 0.8 GB at 10^8 graphs, is not every job's.
    loader.own_node_counts = (np.fromiter((int(r[NUM_NODES]) for r in records), np.int64, len(records))
                              if facts_here else None)
    return schema, tuple((key, kind, cat, settled.get(key, False)) for key, kind, cat in facts), data_class


def _class_name(cls: type) -> tuple:
    """(module, qualified name) of a class: what another rank imports it by."""
    return cls.__module__, cls.__qualname__


def _dotted(name: tuple) -> str:
    return ".".join(name)


def _agreed_class(comm: Any, names: list, mine: Optional[type]) -> type:
    """The one class of every rank's graphs (``names``: each rank's (module, qualified
    name), None for a rank without graphs); ``mine``: this rank's, None where it has no
    graphs and imports the class by its name. Every rank raises the same ValueError
    when the ranks' classes differ or when a rank cannot import it (one allgather more,
    only where a rank has no graphs)."""
    present = [(rank, name) for rank, name in enumerate(names) if name is not None]
    first_rank, first = present[0]  # some rank has graphs (agree_schema)
    for rank, name in present:
        if name != first:
            raise ValueError(f"register_shard: the graphs' classes differ across ranks: rank {first_rank}'s are "
                             f"{_dotted(first)}, rank {rank}'s {_dotted(name)}; every graph must be of one class "
                             "(it says how a batch is cut back into graphs)")
    if len(present) == len(names):
        return mine
    problem = ""
    if mine is None:
        try:
            mine = _import_class(first)
        except Exception as err:  # noqa: BLE001 - agreed below, not raised alone
            problem = f"{type(err).__name__}: {err}"
    for rank, why in enumerate(comm.allgather(problem)):
        if why:
            raise ValueError(f"register_shard: rank {rank} holds no graphs and cannot import their class "
                             f"{_dotted(first)} ({why}); define it at the top level of a module that every rank "
                             "can import")
    return mine


def _import_class(name: tuple) -> type:
    """The Data subclass named (module, qualified name), imported."""
    module, qualname = name
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)  # a class defined in a function ("<locals>") is not found
    if not (isinstance(found, type) and issubclass(found, Data)):
        raise TypeError(f"{_dotted(name)} is not a torch_geometric.data.Data class")
    return found


def collate(fields: Any, facts: tuple, follow_batch: Iterable[str] = (), exclude_keys: Iterable[str] = (),
            data_class: type = Data) -> Batch:
    """A ``torch_geometric.data.Batch`` equal to ``Batch.from_data_list`` of the graphs
    whose fields (:class:`mdloader.typed.TypedFields`) are given, built without a loop
    over graphs; ``data_class``: the graphs' class (a ``Data`` subclass with its own
    ``__cat_dim__`` separates its batches with it)."""
    follow, exclude = set(follow_batch or ()), set(exclude_keys or ())
    nodes = fields.values[NUM_NODES]
    graphs = nodes.shape[0]
    first_node = np.cumsum(nodes) - nodes
    out = copy.copy(_empty_batch(data_class))
    store = out._store
    slice_dict, inc_dict = {}, {}
    for key, kind, cat, incremented in facts:
        if key in exclude or key == "ptr":  # torch_geometric makes its own ptr
            continue
        value, counts = fields.values[key], fields.counts[key]
        if kind == EXPLICIT_NUM_NODES:
            store._num_nodes = value.tolist()
            store.num_nodes = int(value.sum())
            continue
        if incremented:
            shift = np.repeat(first_node, counts).astype(value.dtype, copy=False)
            shape = [1] * value.ndim
            shape[cat] = -1
            value = value + shift.reshape(shape)
        slices = np.zeros(graphs + 1, dtype=np.int64)
        np.cumsum(counts, out=slices[1:])
        tensor = torch.from_numpy(np.ascontiguousarray(value))
        store[key] = tensor.view(torch.bfloat16) if kind == BFLOAT16 else tensor
        slice_dict[key] = torch.from_numpy(slices)
        inc_dict[key] = torch.from_numpy(first_node.copy() if incremented else np.zeros(graphs, dtype=np.int64))
        if key in follow:
            store[f"{key}_batch"] = torch.from_numpy(np.repeat(np.arange(graphs, dtype=np.int64), counts))
            store[f"{key}_ptr"] = torch.from_numpy(slices.copy())
    if graphs and nodes.min() >= 0:
        store.batch = torch.from_numpy(np.repeat(np.arange(graphs, dtype=np.int64), nodes))
        ptr = np.zeros(graphs + 1, dtype=np.int64)
        np.cumsum(nodes, out=ptr[1:])
        store.ptr = torch.from_numpy(ptr)
    out._num_graphs = graphs
    out._slice_dict = slice_dict
    out._inc_dict = inc_dict
    return out


@functools.lru_cache(maxsize=8)
def _empty_batch(data_class: type) -> Batch:
    """An empty batch of ``data_class``, copied for each new batch: making one through
    its class (torch_geometric inspects the class's signature every time) costs more
    than the rest of a QM9 batch's collate."""
    return Batch(_base_cls=data_class)


class DistDataset(HoldsOpenEpoch, torch.utils.data.Dataset):
    """torch_geometric graphs held by the ranks of ``comm`` (HydraGNN's ``DistDataset``
    arguments).

    data: the graphs, all of one ``Data`` class (a subclass: defined at the top level
    of a module, which a rank that holds no graph imports to cut batches as the others
    do). With ``local=False`` every rank passes the whole dataset (or the same indexable
    view of it) and keeps its share; with ``local=True`` each rank passes only its own
    graphs (possibly none). label: a name (for messages). ddstore_width: groups of that
    many consecutive ranks (default all of ``comm``), HydraGNN's ``ddstore_comm``: with
    ``local=False`` each group holds one full copy (replica groups; fetches read only the
    rank's own group); with ``local=True`` each group's dataset is its own ranks' graphs,
    in rank order. ``var_config``, ``ddstore_store_per_sample`` and ``dataset_name``
    tagging as HydraGNN's (:mod:`mdloader.pyg_hydragnn`). Bad or differing arguments
    raise on every rank.

    ``dataset[i]`` is graph i (a collective fetch: every rank must ask for one graph at
    the same time); ``dataset.__getitems__(ids)``, what torch's DataLoader calls with a
    batch of a sampler, fetches them in one collective call. Fetches are the main
    process's: torch worker processes (``num_workers >= 1``) cannot make them.
    """

    def _set_hydragnn_attributes(self, width: int, local: bool, var_config: Optional[dict],
                                 ddstore_store_per_sample: bool) -> None:
        """HydraGNN's attributes: its trainer and examples read them (create_dataloaders'
        group=trainset.ddstore_comm gives DistributedSampler the group's ranks).
        Collective over ``self.comm`` (a split)."""
        rank = self.comm.Get_rank()
        self.ddstore_width, self.local = width, local
        self.ddstore_comm = self.comm.Split(rank // width, rank)
        self.ddstore_comm_rank, self.ddstore_comm_size = self.ddstore_comm.Get_rank(), self.ddstore_comm.Get_size()
        self.var_config, self.ddstore_store_per_sample = var_config, ddstore_store_per_sample
        self.dataset_name = None  # HydraGNN's tagging (mdloader.pyg_hydragnn.name_tag)

    def __init__(self, data: Any, label: str = "dataset", comm: Any = None, ddstore_width: Optional[int] = None,
                 local: bool = False, var_config: Optional[dict] = None, ddstore_store_per_sample: bool = True):
        from mpi4py import MPI

        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.label = label
        width = pyg_hydragnn.agree_arguments(self.comm, label, ddstore_width, local, var_config,
                                             ddstore_store_per_sample)
        self._set_hydragnn_attributes(width, local, var_config, ddstore_store_per_sample)
        # local=True with groups: one dataset per group (its ranks' graphs), on the
        # group's communicator; otherwise one dataset, a full copy per group.
        grouped = local and width < self.comm.Get_size()
        self.loader = Loader(self.ddstore_comm if grouped else self.comm,
                             group_size=None if local or width == self.comm.Get_size() else width)
        update, problem = pyg_hydragnn.var_config_updates(var_config, ddstore_store_per_sample)
        mine = None
        if not problem:
            try:
                mine = list(data) if local else [data[i] for i in self.loader.replica_part(len(data))]
                mine = [update(graph) for graph in mine] if update else mine
            except Exception as err:  # noqa: BLE001 - agreed in register_graphs
                problem = f"{type(err).__name__}: {err}"
        failure = None
        try:
            # data_class: the graphs' class (a Data subclass may concatenate its own
            # way), agreed: a rank without graphs imports the others'.
            self.schema, self.facts, self.data_class = register_graphs(self.loader, mine,
                                                                       f"{label}: {problem}" if problem else "")
        except (TypeError, ValueError) as err:
            failure = err
        if grouped:
            # Registration agreed within the group only: the other groups must raise too.
            everyone = self.comm.allgather("" if failure is None else f"{type(failure).__name__}: {failure}")
            bad = next((r for r, why in enumerate(everyone) if why), None)
            if bad is not None and failure is None:
                failure = ValueError(f"{label}: registration failed in another group, on rank {bad}: {everyone[bad]}")
        if failure is not None:
            self.loader.close()  # raised on every rank alike: closing is collective
            self._free_ddstore_comm()
            raise failure

    def __len__(self) -> int:
        return self.loader.num_samples if self.loader is not None else self._num_samples

    def __getstate__(self) -> dict:
        """What a worker process gets: no loader (MPI stays in the main process); a fetch
        there is the clear error of :meth:`_fetch`."""
        return {**self.__dict__, "loader": None, "comm": None, "ddstore_comm": None, "_open_epoch": None,
                "_num_samples": len(self)}

    def len(self) -> int:
        return len(self)

    def _fetch(self, ids: Any, call: str = "__getitems__") -> Batch:
        if torch.utils.data.get_worker_info() is not None or self.loader is None:
            raise RuntimeError(f"{self.label}: a fetch is a collective MPI call, which torch's worker processes "
                               "cannot make: use num_workers=0, or mdloader.pyg.DataLoader")
        tag, problem = pyg_hydragnn.name_tag(self)
        with self._named(call):
            self._close_open_epoch()
            try:
                # A tag that cannot be made fails the fetch on every rank: an id no
                # loader has (the others raise MDLError(ERR_REMOTE)).
                fetched = self.loader.fetch([NO_SUCH_ID] if problem else np.asarray(ids, dtype=np.int64))
            except MDLError as err:
                if problem and err.status == Status.ERR_OUT_OF_RANGE:
                    raise ValueError(f"dataset {self.label!r}: {problem}") from None
                raise
        return self._collate(fetched.fields, tag)

    def _collate(self, fields: Any, tag: Optional[torch.Tensor], follow_batch: Iterable[str] = (),
                 exclude_keys: Iterable[str] = ()) -> Batch:
        """The batch of the fetched ``fields``, tagged with ``dataset_name`` where set."""
        return pyg_hydragnn.tagged(collate(fields, self.facts, follow_batch, exclude_keys, self.data_class), tag)

    def name_tag(self) -> Optional[torch.Tensor]:
        """Collective (one allgather): the ``dataset_name`` tag of this dataset's graphs
        (None: untagged), ValueError on every rank where a rank cannot make it."""
        tag, problem = pyg_hydragnn.name_tag(self)
        for rank, why in enumerate(self.loader.comm.allgather(problem)):
            if why:
                raise ValueError(f"dataset {self.label!r}: on rank {rank}: {why}")
        return tag

    @contextlib.contextmanager
    def _named(self, call: str) -> Iterator[None]:
        """The library's errors inside ``call`` as this dataset's: its label and the call
        the user's code made (torch_geometric's DataLoader makes ``__getitems__``), before
        the library's own text, which names its call (and, where ranks are in different
        calls, the other rank's)."""
        try:
            yield
        except MDLError as err:
            if type(err) is not MDLError:  # EpochTakenOver and the like say it already
                raise
            raise MDLError(err.status, f"dataset {self.label!r}: {err.message}", call=f"DistDataset.{call}") from None

    def get(self, idx: int) -> Data:
        return self[idx]

    def __getitem__(self, idx: int) -> Data:
        return self._fetch([idx], "__getitem__").get_example(0)

    def __getitems__(self, ids: list) -> list:
        """The graphs of ``ids``, fetched and collated by the library in one call. To
        torch_geometric's ``DataLoader`` (its ``Collater``, called by torch's fetcher) a
        list of one item, the whole batch, which the ``Collater`` takes over instead of
        gluing graphs together (:mod:`mdloader.pyg_fast`); to any other caller one
        ``Data`` per id."""
        batch = self._fetch(ids, "__getitems__")
        if pyg_fast.collated_whole(sys._getframe(1)):
            return pyg_fast.for_collater(batch)
        return batch.to_data_list()

    def get_node_counts(self) -> np.ndarray:
        """Every graph's node count (int64, by id; -1 where torch_geometric could not
        infer it), as registration stored it: no payload read, no Data object.
        Collective the first time (one ``Allgatherv`` of 8 bytes a graph: every rank
        calls it, as a node-budget sampler built on every rank does), kept after."""
        if getattr(self, "_node_counts", None) is None:
            self._node_counts = pyg_fast.gather_node_counts(self.loader, self.loader.own_node_counts)
        return self._node_counts

    def close(self) -> None:
        """Collective: end any open epoch, free the loader and ``ddstore_comm``. Where
        another rank is in a different call (``Status.ERR_CALL_MISMATCH``) nothing is
        done: close again once every rank does."""
        with self._named("close"):
            self._close_open_epoch()
            self.loader.close()
        self._free_ddstore_comm()

    def _free_ddstore_comm(self) -> None:
        """Collective over ``comm``: free the ``ddstore_comm`` split made for HydraGNN
        (once; it is MPI's ``COMM_NULL`` after)."""
        from mpi4py import MPI

        group = getattr(self, "ddstore_comm", None)
        if group is not None and group != MPI.COMM_NULL:
            group.Free()


class DataLoader:
    """Batches of a :class:`DistDataset` as ``torch_geometric.data.Batch``, through the
    library's sampler (every epoch a permutation of all graphs from (seed, epoch), split
    over all ranks as torch's ``DistributedSampler``), fetched ``prefetch`` batches ahead
    on a library thread and collated with vectorised numpy.

    sampler / batch_sampler: the user's own order instead (torch's
    ``DistributedSampler``, a weighted sampler, HydraGNN's): each epoch's batches (of
    ``batch_size`` ids of ``sampler``, the last one kept unless ``drop_last``; or
    ``batch_sampler``'s) are handed to the library whole
    (:meth:`mdloader.Loader.epoch_of_batches`) and run as its own sampler's epoch, with
    the same prefetch and no blocking collective per step. Every rank must then have
    the same number of batches (``DistributedSampler`` does); ``shuffle`` and ``seed``
    are the sampler's business. ``set_epoch`` is passed on to the sampler.

    node_budget, max_graphs: batches of at most ``node_budget`` nodes (and ``max_graphs``
    graphs) instead of ``batch_size`` graphs, planned from ``dataset.get_node_counts()``
    by :class:`mdloader.budget.NodeBudgetBatchSampler` (the same plan on every rank from
    ``seed`` and the epoch, ``shuffle`` as said there; the batches of a step of similar
    cost; every rank as many steps, padded with the plan's first batches or, with
    ``drop_last``, cut) and run as a user's batch sampler's epoch. The constructor is
    then collective: a budget that is not a positive integer, a graph above it, or
    arguments that differ across ranks raise on every rank.

    ``len(loader)`` is this rank's number of batches per epoch. With the library's
    sampler it is the same on every rank. With the user's sampler it is the sampler's
    (``len(sampler) / batch_size``, rounded as ``drop_last`` says, or
    ``len(batch_sampler)``), which may differ across ranks (a sampler of uneven shares:
    3 batches on one rank, 2 on another); ``iter`` then raises ValueError on every
    rank, naming each rank's count, before any batch is fetched.
    ``set_epoch(e)`` as torch's sampler. Leaving a loop early is fine: the next
    ``iter`` (this loader's or another's on the same dataset) ends the epoch left open.
    ``follow_batch`` and ``exclude_keys`` as torch_geometric's ``DataLoader``.

    num_workers, persistent_workers: torch's arguments, accepted (HydraGNN's
    ``create_dataloaders`` passes them) and not used: no worker process is started, the
    library's prefetch thread and the loader's collate thread (``prefetch``,
    ``collate_ahead``) do that work. pin_memory: each batch's tensors are pinned on the
    loader's thread, ready for ``batch.to(device, non_blocking=True)``, where an
    accelerator is available (as torch's ``DataLoader``; ``loader.pin_memory`` is False
    otherwise).

    :meth:`state_dict` / :meth:`load_state_dict` resume mid-epoch as torchdata's
    ``StatefulDataLoader``: the state says how many batches of which epoch the loop
    has taken, and after ``load_state_dict`` the next ``iter`` yields exactly the
    batches an uninterrupted run would have yielded after them.

    collate_ahead: batches fetched and collated on a thread of the loader's own, ahead
    of the training loop (default 2; 0: in the loop), so that the loop only takes
    finished batches (:func:`mdloader.background.in_background`: the same number of
    batches taken on every rank however early a loop stops). Like ``prefetch``, it needs
    MPI_THREAD_MULTIPLE (mpi4py's default); below it the loader warns and uses 0, on
    every rank (agreed at the first ``iter``: a rank with the thread takes batches ahead
    that the others would not ask for).

    start_ahead: with the library's sampler and ``collate_ahead``, an epoch that ran to
    its end starts the next one at once on that thread (its first batches are then
    fetched and collated while the script validates, logs or checkpoints, instead of in
    the next loop's first ``next``). The next epoch is taken to be ``e + 1`` where the
    script calls ``set_epoch``, else ``e`` again (torch's sampler repeats its order
    without ``set_epoch``). Any other next use of the dataset (a different epoch or
    setting, another loader, ``dataset[i]``, a collective call on ``dataset.loader``
    such as ``job_stats()``) ends the epoch started ahead first, on every rank alike: a
    wrong guess costs the batches taken ahead, nothing else. Default True.

    Such a use in the middle of a loop ends that loop's epoch too (the loader's thread
    makes collective calls, which must not meet the script's in a different order on
    another rank); the loop then raises :class:`mdloader.EpochTakenOver` at its next
    batch instead of ending as if the epoch were complete.
    """

    def __init__(self, dataset: DistDataset, batch_size: int = 1, shuffle: bool = False, *, seed: int = 0,
                 drop_last: bool = False, follow_batch: Optional[list] = None, exclude_keys: Optional[list] = None,
                 prefetch: int = 2, collate_ahead: int = 2, sampler: Any = None, batch_sampler: Any = None,
                 start_ahead: bool = True, num_workers: int = 0, pin_memory: bool = False,
                 persistent_workers: bool = False, node_budget: Optional[int] = None,
                 max_graphs: Optional[int] = None, **unsupported: Any):
        if sampler is not None and batch_sampler is not None:
            raise TypeError("mdloader.pyg.DataLoader: pass sampler= or batch_sampler=, not both")
        if shuffle and (sampler is not None or batch_sampler is not None) and node_budget is None:
            raise TypeError("mdloader.pyg.DataLoader: shuffle=True with a sampler: the sampler draws the order "
                            "(as in torch's DataLoader, the two exclude each other)")
        if unsupported:
            raise TypeError(f"mdloader.pyg.DataLoader: unsupported arguments {sorted(unsupported)} "
                            "(fetching and collating happen in the library's thread and this process)")
        if node_budget is None and max_graphs is not None:
            raise TypeError("mdloader.pyg.DataLoader: max_graphs caps the graphs of a node-budget batch: pass "
                            "node_budget= too")
        conflict = ""
        if node_budget is not None and (sampler is not None or batch_sampler is not None or batch_size != 1):
            # Raised by the agreement, on every rank (the others are in its collective).
            conflict = ("node_budget= makes the batches (mdloader.budget): pass no batch_size, sampler or "
                        "batch_sampler with it")
        self.dataset = dataset
        self.node_budget, self.max_graphs = node_budget, max_graphs
        if node_budget is not None:
            # Collective: the arguments agreed, then every graph's node count gathered.
            batch_sampler = agreed_budget_sampler(
                dataset.loader.comm, dataset.get_node_counts, node_budget, max_graphs=max_graphs, seed=seed,
                shuffle=shuffle, drop_last=drop_last, caller="mdloader.pyg.DataLoader", conflict=conflict)
        # torch's worker arguments (HydraGNN passes them): accepted, the library's threads
        # do the work (mdloader.pyg_fast.loader_arguments).
        self.num_workers, self.persistent_workers, self.pin_memory = pyg_fast.loader_arguments(
            num_workers, persistent_workers, pin_memory)
        self.batch_size = batch_size
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self.follow_batch, self.exclude_keys = follow_batch or [], exclude_keys or []
        # As asked, the same on every rank: the library agrees whether any rank cannot
        # run its prefetch thread (a depth lowered here would differ across ranks).
        self.prefetch = prefetch
        _threads_allowed(prefetch, "prefetch")
        self.collate_ahead = _threads_allowed(collate_ahead, "collate_ahead")
        self._collate_ahead_agreed = False
        self.start_ahead = start_ahead
        self.epoch = 0
        self._epoch_was_set = False  # set_epoch called since the last iter
        self._ahead: Optional[tuple] = None  # (its settings, its batches): the epoch started ahead
        self._step = 0  # batches of self.epoch the loop has taken
        self._resume: Optional[tuple] = None  # (epoch, step) of load_state_dict, for the next iter

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self._step = 0
        self.epoch = epoch
        self._epoch_was_set = True
        self._pass_epoch_on(epoch)

    def _pass_epoch_on(self, epoch: int) -> None:
        for user_sampler in (self.sampler, self.batch_sampler, getattr(self.batch_sampler, "sampler", None)):
            if hasattr(user_sampler, "set_epoch"):
                user_sampler.set_epoch(epoch)

    def _own_sampler(self) -> bool:
        """Whether the library's sampler draws the order (no sampler of the user's)."""
        return self.sampler is None and self.batch_sampler is None

    def state_dict(self) -> dict:
        """Where the run stands, as torchdata's ``StatefulDataLoader`` says it: the epoch
        and the number of its batches the loop has taken (those the loader's thread
        collated ahead are not counted), with what the order depends on, to check the
        resumed run. Plain values (``json``, ``torch.save``); local, the same on every
        rank. Taken after an epoch's last batch, it resumes with nothing left of that
        epoch: the next ``set_epoch`` gives the next one whole."""
        return {
            "epoch": self.epoch,
            "step": self._step,
            "sampler": "library" if self._own_sampler() else "user",
            "batch_size": self.batch_size,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "drop_last": self.drop_last,
            "num_samples": len(self.dataset),
            "ranks": self.dataset.loader.comm.Get_size(),
            "node_budget": self.node_budget,
            "max_graphs": self.max_graphs,
        }

    def load_state_dict(self, state: dict) -> None:
        """Collective (one allgather). The next ``iter`` resumes ``state``'s epoch at its
        next batch, exactly as the uninterrupted run would have gone on (the library
        seeks there: the batches before are not fetched); the epochs after it are whole.
        The epoch is passed on to the user's sampler (``set_epoch``), whose order of the
        epoch must be the saved run's (torch's ``DistributedSampler``: from its seed and
        epoch). A state that does not fit this run (another batch size, seed, dataset
        length, number of ranks, a step past the epoch's end) or that differs across
        ranks raises ValueError on every rank, naming what differs."""
        position, problem = None, ""
        try:
            position = self._position_of(state)
        except (TypeError, ValueError) as err:
            problem = str(err)
        everyone = self.dataset.loader.comm.allgather((position, problem))
        for rank, (_, why) in enumerate(everyone):
            if why:
                raise ValueError(f"mdloader.pyg.DataLoader.load_state_dict: on rank {rank}: {why}")
        for rank, (theirs, _) in enumerate(everyone):
            if theirs != everyone[0][0]:
                raise ValueError(f"mdloader.pyg.DataLoader.load_state_dict: the states differ across ranks (epoch, "
                                 f"step): rank 0's {everyone[0][0]}, rank {rank}'s {theirs}; load the same run's "
                                 "state on every rank")
        self.epoch, self._step = position
        self._resume = position
        self._pass_epoch_on(self.epoch)

    def _position_of(self, state: dict) -> tuple:
        """(epoch, step) of a state of :meth:`state_dict`, checked against this run."""
        current = self.state_dict()
        # (A state saved before node budgets has neither key: it had none.)
        state = {"node_budget": None, "max_graphs": None, **state}
        missing = sorted(set(current) - set(state))
        if missing:
            raise ValueError(f"the state has no {', '.join(missing)}: not one of DataLoader.state_dict()")
        for key in ("sampler", "batch_size", "shuffle", "seed", "drop_last", "num_samples", "ranks", "node_budget",
                    "max_graphs"):
            if state[key] != current[key]:
                raise ValueError(f"{key} was {state[key]!r} in the saved run, is {current[key]!r} in this one")
        epoch, step = _count(state["epoch"], "epoch"), _count(state["step"], "step")
        if self._own_sampler() and step > len(self):
            raise ValueError(f"step {step} is past the epoch's {len(self)} batches")
        return epoch, step

    def __len__(self) -> int:
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        if self.sampler is not None:
            whole, rest = divmod(len(self.sampler), self.batch_size)
            return whole + (1 if rest and not self.drop_last else 0)
        return self.dataset.loader.epoch_steps(self.batch_size, self.drop_last)

    def __iter__(self) -> Iterator[Batch]:
        self._agree_collate_ahead()
        tag = self.dataset.name_tag()
        settings = self._settings(self.epoch)
        resume, self._resume = self._resume, None
        start = resume[1] if resume is not None and resume[0] == self.epoch else 0
        advancing, self._epoch_was_set = self._epoch_was_set, False
        ahead, self._ahead = self._ahead, None
        # An epoch started ahead starts at its first batch.
        if not start and ahead is not None and ahead[0] == settings and self.dataset._open_epoch is ahead[1]:
            batches, advancing = ahead[1], ahead[2]
        else:
            # An epoch left open by a loop that stopped early (this loader's or another's
            # on the same dataset), or started ahead for other settings, ends here, on
            # every rank alike: its thread first.
            self.dataset._close_open_epoch()
            batches = self._start(self.epoch, advancing, start, tag)
        self._step = start
        return self._one_epoch(batches, self.epoch + 1 if advancing else self.epoch, advancing, start)

    def _agree_collate_ahead(self) -> None:
        """The smallest ``collate_ahead`` of all ranks, once (collective, as ``iter`` is):
        where one rank lowered it to 0 for its thread level, every rank must."""
        if self._collate_ahead_agreed:
            return
        # An allgather, tagged as the node-budget agreement's is: a rank given a
        # node_budget (where this one was not) is in that agreement, and both sides raise.
        tag = "mdloader.pyg.DataLoader iter"
        gathered = self.dataset.loader.comm.allgather((tag, self.collate_ahead))
        elsewhere = other_ranks_agreeing(gathered, tag)
        if elsewhere:
            raise ValueError(f"mdloader.pyg.DataLoader: rank(s) {elsewhere} are in another collective call (building "
                             f"a DataLoader with node_budget=) while rank {self.dataset.loader.comm.Get_rank()} "
                             "iterates one without: pass the same node-budget arguments on every rank")
        everyone = min(item[1] for item in gathered)
        if everyone < self.collate_ahead:
            warnings.warn(f"mdloader.pyg.DataLoader: collate_ahead={everyone} (another rank's MPI was initialised "
                          "without MPI_THREAD_MULTIPLE; every rank must take the same batches)", RuntimeWarning,
                          stacklevel=3)
        self.collate_ahead = everyone
        self._collate_ahead_agreed = True

    def _settings(self, epoch: int) -> tuple:
        """What an epoch's batches depend on."""
        return (epoch, self.batch_size, self.shuffle, self.seed, self.drop_last, self.prefetch, self.collate_ahead,
                tuple(self.follow_batch), tuple(self.exclude_keys), self.sampler, self.batch_sampler,
                self.dataset.dataset_name, id(getattr(self.dataset, "dataset_name_dict", None)))

    def _start(self, epoch: int, advancing: bool, start: int, tag: Optional[torch.Tensor]) -> Iterator:
        """The batches from ``epoch``'s batch ``start`` on, on the loader's thread where
        there is one; with ``start_ahead``, epoch after epoch (see :meth:`_epochs`)."""
        users = None if self._own_sampler() else self._users_batches(start)
        if self.collate_ahead and self.start_ahead and users is None:
            batches = in_background(self._epochs(epoch, advancing, start, tag), self.collate_ahead)
        elif self.collate_ahead:
            batches = in_background(self._batches(epoch, start, tag, users), self.collate_ahead)
        else:
            batches = self._batches(epoch, start, tag, users)
        self.dataset._hold_open_epoch(batches)
        return batches

    def _epochs(self, epoch: int, advancing: bool, start: int, tag: Optional[torch.Tensor]) -> Iterator:
        """The epochs' batches one after the other, each epoch followed by
        ``_EPOCH_END``, for the loader's thread: it goes on into the next epoch (``epoch +
        1`` where the script calls ``set_epoch``, else the same) while the script
        validates or logs, within the thread's usual ``collate_ahead`` items ahead, and
        the next ``iter`` takes up where it stands. Starting a thread there instead cost
        the loop's last ``next`` 0.5-4 ms (QM9 SchNet). The first epoch from its batch
        ``start``, the others whole."""
        while True:
            yield from self._batches(epoch, start, tag)
            yield _EPOCH_END
            epoch, start = epoch + 1 if advancing else epoch, 0

    def _one_epoch(self, batches: Iterator, next_epoch: int, advancing: bool, taken: int) -> Iterator[Batch]:
        """The loop's batches of one epoch, from its batch ``taken``."""
        for batch in batches:
            if batch is _EPOCH_END:
                # The epoch ran to its end, on every rank alike (every rank has the same
                # number of batches); the thread is in the next one unless another use
                # of the dataset ended it (the iteration stops there too).
                if self.dataset._open_epoch is batches:
                    self._ahead = (self._settings(next_epoch), batches, advancing)
                return
            taken += 1
            self._step = taken
            yield batch
        if self.dataset._open_epoch is not batches and taken < self._batches_per_epoch():
            # Another use of the dataset ended this epoch (its thread stopped) before
            # its end, which a loop must not take for one. (Stopped after its last
            # batch, the thread may have dropped only the end's marker.)
            raise EpochTakenOver()

    def _batches_per_epoch(self) -> float:
        try:
            return len(self)
        except TypeError:  # a batch sampler without a length
            return float("inf")

    def _users_batches(self, start: int) -> list:
        """This epoch's batches of the user's sampler, their number agreed
        (:func:`mdloader.batches.agreed_batches`); a resumed step past them raises
        ValueError on every rank."""
        # A node-budget plan is every rank's from (seed, epoch): its epoch agreed, as the
        # library's sampler agrees its own (a rank-differing set_epoch took batches of
        # two plans: graphs twice and graphs missed, without an error).
        budget_epoch = self.batch_sampler.epoch if self.node_budget is not None else None
        batches = agreed_batches(self.dataset.loader.comm, self._take_users_batches, "mdloader.pyg.DataLoader",
                                 "use torch's DistributedSampler (it gives every rank as many samples), or "
                                 "drop_last=True where the ranks' samples differ by less than a batch",
                                 same=budget_epoch, same_what="node-budget sampler's epoch (set_epoch)")
        if start > len(batches):
            raise ValueError(f"mdloader.pyg.DataLoader: the state loaded resumes at batch {start}, past this epoch's "
                             f"{len(batches)} batches")
        return batches

    def _take_users_batches(self) -> list:
        if self.batch_sampler is not None:
            return list(self.batch_sampler)
        ids = np.fromiter(iter(self.sampler), dtype=np.int64)
        cut = len(ids) - len(ids) % self.batch_size if self.drop_last else len(ids)
        return [ids[k:k + self.batch_size] for k in range(0, cut, self.batch_size)]

    def _batches(self, epoch_number: int, start: int, tag: Optional[torch.Tensor],
                 users: Optional[list] = None) -> Iterator[Batch]:
        """The batches of the library's epoch ``epoch_number``, or of the user's sampler's
        ``users``, from batch ``start`` on, tagged with ``dataset_name`` where ``tag``."""
        loader = self.dataset.loader
        loader.set_prefetch(self.prefetch)
        if users is None:
            epoch = loader.epoch(self.batch_size, seed=self.seed, epoch=epoch_number, shuffle=self.shuffle,
                                 drop_last=self.drop_last, start_step=start)
        else:
            epoch = loader.epoch_of_batches(users, start_step=start)
        for fetched in epoch:
            batch = self.dataset._collate(fetched.fields, tag, self.follow_batch, self.exclude_keys)
            yield batch.pin_memory() if self.pin_memory else batch  # on the loader's thread


#: Marks the end of an epoch in :meth:`DataLoader._epochs`.
_EPOCH_END = object()

def _count(value: Any, what: str) -> int:
    """A state's count: a non-negative integer (ValueError otherwise)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{what} must be a non-negative integer, not {value!r}")
    return int(value)


def _threads_allowed(depth: int, what: str) -> int:
    """``depth``, or 0 with a warning where MPI was not initialised with
    MPI_THREAD_MULTIPLE (the library's prefetch thread and the collate thread call MPI)."""
    from mpi4py import MPI

    if depth and MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        warnings.warn(f"mdloader.pyg.DataLoader: MPI was initialised without MPI_THREAD_MULTIPLE, so {what}=0 "
                      "(no thread may call MPI); mpi4py's default level is MULTIPLE", RuntimeWarning, stacklevel=3)
        return 0
    return depth
