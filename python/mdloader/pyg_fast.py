"""The one-line switch as the fast path: a batch that torch_geometric's ``Collater``
takes over whole.

HydraGNN builds its loaders itself (``hydragnn.preprocess.create_dataloaders``:
torch_geometric's ``DataLoader`` over a ``DistributedSampler``), so a HydraGNN user who
switches only ``DistDataset`` gets torch's fetch path: ``_MapDatasetFetcher.fetch``
(torch/utils/data/_utils/fetch.py, ``data = self.dataset.__getitems__(index)`` then
``self.collate_fn(data)``), whose ``collate_fn`` is torch_geometric's ``Collater``
(torch_geometric/loader/dataloader.py: ``Batch.from_data_list(batch)`` when
``batch[0]`` is a ``BaseData``). Returning ``batch.to_data_list()`` there cut the
vectorised batch into per-graph ``Data`` objects only for ``Batch.from_data_list`` to
glue them back together, a Python loop over graphs and attributes each step (most of
the step at QM9's sizes).

What ``Batch.from_data_list`` does with a list of one ``Data`` (torch_geometric/data/
batch.py ``from_data_list`` and data/collate.py ``collate``), and what this module uses
of it, through the hooks torch_geometric gives a ``Data`` class of its own (nothing of
torch or torch_geometric is patched):

- the batch it returns is ``cls(_base_cls=type(data_list[0]))``, which for a class
  that is already a ``Batch`` subclass is an instance of that very class
  (``DynamicInheritance.__call__``): :func:`handover_class`, a subclass of the
  graphs' own ``DataBatch`` class;
- it calls ``out.stores_as(data_list[0])`` before collating: there the new batch takes
  over the storage of the batch the library collated (every field, ``batch``, ``ptr``),
  and the handed-over one keeps an empty storage, so that the loop over attributes
  that follows has nothing to concatenate (``add_batch`` is off: the element is a
  ``Batch``);
- it then sets ``_num_graphs`` to the list's length and ``_slice_dict`` /
  ``_inc_dict`` to what it collated (1, nothing): the class's properties of those names
  (``Data.__setattr__`` honours a class's property setters) put the library's own
  values in their place, once, and after the last of them the batch becomes a plain
  batch of the graphs' class (the same class ``Batch.from_data_list`` gives).

The Collater's result is then the library's batch, equal to ``Batch.from_data_list``
of the same graphs, field by field and in its slice and increment dictionaries, at the
cost of one ``Data`` construction instead of a loop over graphs.

The batch is handed over only to that one consumer (:func:`collated_whole`): torch's
map-style fetcher calling ``__getitems__`` directly, with torch_geometric's own
``Collater`` as its ``collate_fn`` and neither ``follow_batch`` nor ``exclude_keys``
(the library's batch has no ``*_batch`` vectors and excludes nothing). Anyone else
(a ``collate_fn`` of one's own, ``DenseDataLoader``, ``DataListLoader``, a wrapper
dataset that concatenates the graphs of several ``__getitems__``, a ``Subset``) gets
the graphs, one ``Data`` per id, as torch's ``__getitems__`` contract says: a hand-over
anywhere else would be taken for one graph, or emptied beside others.
"""

from __future__ import annotations

import functools
from types import FrameType
from typing import Any, Optional

import numpy as np
from torch.utils.data._utils.fetch import _MapDatasetFetcher
from torch_geometric.data import Batch
from torch_geometric.loader.dataloader import Collater
from torch_geometric.data.storage import GlobalStorage

__all__ = ["handover_class", "for_collater", "collated_whole", "gather_node_counts", "RESTATED"]

#: What ``Batch.from_data_list`` sets after collating, in this order.
RESTATED = ("_num_graphs", "_slice_dict", "_inc_dict")

_HANDOVER = "_mdl_handover"  # on a batch the Collater may take over: its class' plain batch class
_PENDING = "_mdl_pending"  # on the batch taking over: the values RESTATED still to put back


@functools.lru_cache(maxsize=8)
def handover_class(plain: type) -> type:
    """The subclass of ``plain`` (a ``Batch`` class: ``DataBatch`` or the batch class of a
    ``Data`` subclass) whose batches torch_geometric's ``Collater`` takes over whole.

    Its bases are ``plain``'s own, ``(Batch, data_class)``: ``get_example`` and
    ``to_data_list`` cut graphs of ``data_class`` (``__bases__[-1]``), and a pickled
    batch comes back as a plain one (``Batch.__reduce__``)."""

    def stores_as(self: Any, data: Any) -> Any:
        handover = data.__dict__.pop(_HANDOVER, None) if type(data) is type(self) else None
        if handover is None:
            return plain.stores_as(self, data)
        store = data.__dict__["_store"]
        self.__dict__["_store"] = store
        store._parent = self  # a weak reference (BaseStorage.__setattr__)
        data.__dict__["_store"] = GlobalStorage(_parent=data)  # nothing left to concatenate
        self.__dict__[_PENDING] = {name: store.__dict__[name] for name in RESTATED if name in store.__dict__}
        self.__dict__["_mdl_plain"] = handover
        return self

    def restated(name: str) -> property:
        def get(self: Any) -> Any:
            return getattr(self._store, name)

        def put(self: Any, value: Any) -> None:
            pending = self.__dict__.get(_PENDING)
            if pending is not None and name in pending:
                value = pending.pop(name)  # the library's, not the one-element list's
            setattr(self._store, name, value)
            if pending is not None and not pending:
                # Taken over: from here on an ordinary batch of the graphs' class.
                del self.__dict__[_PENDING]
                object.__setattr__(self, "__class__", self.__dict__.pop("_mdl_plain"))

        return property(get, put)

    namespace = {"__module__": __name__, "__qualname__": f"Collated{plain.__name__}", "stores_as": stores_as}
    namespace.update({name: restated(name) for name in RESTATED})
    return type(plain)(f"Collated{plain.__name__}", plain.__bases__, namespace)


def for_collater(batch: Batch) -> list:
    """What ``DistDataset.__getitems__`` returns: a list of one item, ``batch`` (the
    library's collated batch of the ids asked), which torch_geometric's ``Collater``
    (``Batch.from_data_list``) takes over whole, once. Until then it is a complete
    batch in its own right."""
    plain = type(batch)
    # Not batch.__class__ = ...: Data.__setattr__ would put that in the batch's storage.
    object.__setattr__(batch, "__class__", handover_class(plain))
    batch.__dict__[_HANDOVER] = plain
    return [batch]


def collated_whole(caller: Optional[FrameType]) -> bool:
    """Whether the frame that called ``__getitems__`` is torch's map-style fetcher whose
    ``collate_fn`` is torch_geometric's ``Collater`` with neither ``follow_batch`` nor
    ``exclude_keys``: the one consumer that takes a batch over whole (see the module's
    doc). The fetcher's own ``self`` is read from its frame: nothing else tells a
    dataset who asks."""
    fetcher = caller.f_locals.get("self") if caller is not None else None
    collate_fn = getattr(fetcher, "collate_fn", None)
    return (isinstance(fetcher, _MapDatasetFetcher) and type(collate_fn) is Collater
            and not collate_fn.follow_batch and not collate_fn.exclude_keys)


def gather_node_counts(loader: Any, mine: Any) -> np.ndarray:
    """Collective: every graph's node count by id (int64), from each rank's counts of the
    graphs it registered (``mine``; None or empty where it holds none): the counts of
    the ranks of this rank's replica group, in rank order (ids are numbered so), one
    ``Allgatherv`` of 8 bytes a graph."""
    from mpi4py import MPI

    comm = loader.comm
    mine = np.ascontiguousarray(np.zeros(0, np.int64) if mine is None else mine, dtype=np.int64)
    group = loader.replica
    lengths = comm.allgather((group.group, len(mine)))
    sizes = np.array([n for _, n in lengths], dtype=np.int64)
    every = np.empty(int(sizes.sum()), dtype=np.int64)
    displs = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1], out=displs[1:])
    comm.Allgatherv(mine, [every, sizes, displs, MPI.INT64_T])
    ours = [rank for rank, (g, _) in enumerate(lengths) if g == group.group]
    out = np.concatenate([every[displs[r]:displs[r] + sizes[r]] for r in ours]) if ours else every[:0]
    out.setflags(write=False)
    return out


def loader_arguments(num_workers: Any, persistent_workers: Any, pin_memory: Any) -> tuple:
    """(num_workers, persistent_workers, pin_memory) of ``mdloader.pyg.DataLoader``, as
    torch's ``DataLoader`` checks them; pin_memory only where an accelerator can use
    pinned memory (torch's own loader skips pinning there too)."""
    import torch

    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
        raise ValueError(f"mdloader.pyg.DataLoader: num_workers must be a non-negative integer, not {num_workers!r}")
    if persistent_workers and num_workers == 0:
        raise ValueError("mdloader.pyg.DataLoader: persistent_workers option needs num_workers > 0 (as torch's "
                         "DataLoader)")
    accelerator = getattr(torch, "accelerator", None)
    available = accelerator.is_available() if accelerator is not None else torch.cuda.is_available()
    return num_workers, bool(persistent_workers), bool(pin_memory) and available
