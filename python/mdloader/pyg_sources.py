"""``mdloader.pyg.DistDataset`` straight from HydraGNN's dataset files, each rank
reading only its part (:mod:`mdloader.sources`), never holding a ``Data`` per graph of
its shard:

    from mdloader.pyg_sources import from_adios, from_pickle

    trainset = from_adios("dataset.bp", "trainset", comm)          # HydraGNN's AdiosWriter files
    trainset = from_pickle("dataset/pickle", "trainset", comm)     # its SimplePickleWriter files

instead of ``DistDataset(AdiosDataset(path, "trainset", comm), "trainset", comm)``,
which reads graph by graph into a list of ``Data`` on every rank before registering.
The graphs are those HydraGNN's ``AdiosDataset[i]`` / ``SimplePickleDataset[i]`` give
(``dataset_name`` tag included; without ``var_config``), and the dataset is the same
``DistDataset`` (loaders, ``get_node_counts``, ``ddstore_width``). A bad file (missing,
truncated, a variable missing, ranks seeing different files) raises
:class:`mdloader.sources.SourceError` on every rank.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.data.storage import N_KEYS

from . import pyg
from .loader import Loader
from .sources_adios import HYDRAGNN_DATASET_NAMES, AdiosPart
from .sources_agree import agree_fingerprint, agree_problems
from .sources_pickle import PicklePart
from .sources_records import field_of, record_sizes, write_records
from .typed import Field, Schema, encode

__all__ = ["from_adios", "from_pickle"]

# torch_geometric infers a graph's node count from these attributes (Data.num_nodes);
# a graph with none of them has no node count (NUM_NODES -1), as in mdloader.pyg.
_CAN_INFER = {"num_nodes", "x", "pos", "batch", "adj", "adj_t", "edge_index", "face"}


def from_adios(path: str, label: str, comm: Any = None, *, ddstore_width: Optional[int] = None,
               keys: Optional[list] = None, chunk: int = 65536) -> pyg.DistDataset:
    """Collective. A :class:`mdloader.pyg.DistDataset` of the graphs ``label`` of
    HydraGNN's ADIOS2 dataset ``path``; each rank reads its part (of its replica group's
    copy with ``ddstore_width``), ``chunk`` graphs at a time. ``keys``: only these
    attributes (HydraGNN's ``keys=``). The file's ``pna_deg``, ``minmax_node_feature``,
    ``minmax_graph_feature`` and ``dataset_name`` become the dataset's attributes, as on
    HydraGNN's ``AdiosDataset``."""
    what = f"from_adios({path!r}, {label!r})"

    def read(loader: Loader, comm: Any) -> tuple:
        part, problem = None, ""
        try:
            part = AdiosPart(path, label, keys)
        except Exception as err:  # noqa: BLE001 - agreed: every rank raises it
            problem = _why(err)
        agree_problems(comm, problem, what)
        try:
            agree_fingerprint(comm, _fingerprint(part, what, comm), what)
            encoded, extra, problem = None, {}, ""
            try:
                extra = _adios_attributes(part)
                encoded = _encode_adios(part, loader.replica_part(part.ndata), extra.get("dataset_name"), chunk)
            except Exception as err:  # noqa: BLE001 - agreed
                problem = _why(err)
            agree_problems(comm, problem, what)
            return encoded, extra
        finally:
            part.close()

    return _dataset(label, comm, ddstore_width, read)


def from_pickle(basedir: str, label: str, comm: Any = None, *, ddstore_width: Optional[int] = None,
                chunk: int = 4096) -> pyg.DistDataset:
    """Collective. A :class:`mdloader.pyg.DistDataset` of the graphs ``label`` of
    HydraGNN's pickle dataset in ``basedir``; each rank unpickles its part's files,
    ``chunk`` graphs at a time, encoding each chunk before the next is read. The
    metadata's attributes (``pna_deg``, ...) and ``minmax_*`` become the dataset's."""
    what = f"from_pickle({basedir!r}, {label!r})"

    def read(loader: Loader, comm: Any) -> tuple:
        part, problem = None, ""
        try:
            part = PicklePart(basedir, label)
        except Exception as err:  # noqa: BLE001 - agreed
            problem = _why(err)
        agree_problems(comm, problem, what)
        agree_fingerprint(comm, _fingerprint(part, what, comm), what)
        extra = {"minmax_node_feature": part.minmax_node_feature, "minmax_graph_feature": part.minmax_graph_feature,
                 **part.attrs}
        encoded, problem = None, ""
        try:
            encoded = _encode_pickle(part, loader.replica_part(part.ndata), extra.get("dataset_name"), chunk)
        except Exception as err:  # noqa: BLE001 - agreed
            problem = _why(err)
        agree_problems(comm, problem, what)
        return encoded, extra

    return _dataset(label, comm, ddstore_width, read)


def _fingerprint(part: Any, what: str, comm: Any) -> tuple:
    """The part's fingerprint; a file gone or unreadable since it was opened (a stat
    that fails on one rank) is agreed too."""
    mine, problem = None, ""
    try:
        mine = part.fingerprint()
    except OSError as err:
        problem = _why(err)
    agree_problems(comm, problem, what)
    return mine


def _why(err: BaseException) -> str:
    return str(err) if isinstance(err, ValueError) else f"{type(err).__name__}: {err}"


def _dataset(label: str, comm: Any, ddstore_width: Optional[int], read: Any) -> pyg.DistDataset:
    """The dataset of what ``read(loader, comm)`` encodes, registered as
    :func:`mdloader.pyg.register_graphs` registers a list of graphs (the same schema,
    facts and agreement), and made a ``DistDataset`` as its constructor makes one."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD if comm is None else comm
    width = comm.Get_size() if ddstore_width is None else ddstore_width
    loader = Loader(comm, group_size=None if width == comm.Get_size() else width)
    try:
        encoded, extra = read(loader, comm)
        schema, facts, data_class = _register(loader, comm, encoded)
    except (TypeError, ValueError):
        loader.close()  # raised on every rank alike: closing is collective
        raise
    dataset = pyg.DistDataset.__new__(pyg.DistDataset)
    dataset.comm, dataset.label, dataset.loader = comm, label, loader
    dataset.schema, dataset.facts, dataset.data_class = schema, facts, data_class
    # The attributes HydraGNN's trainer reads, as the constructor sets them (a file's
    # dataset is one copy per group, as local=False). Its dataset_name stays None: the
    # file's name has tagged the graphs at registration already.
    dataset._set_hydragnn_attributes(width, False, None, True)
    for name, value in extra.items():
        if not hasattr(dataset, name):
            setattr(dataset, name, value)
    return dataset


class _Encoded:
    """A rank's part as records, with what registration agrees on. ``facts`` None: the
    rank has no graph."""

    def __init__(self, schema, facts, incremented, data_class, data, offsets, node_counts):
        self.schema, self.facts, self.incremented, self.data_class = schema, facts, incremented, data_class
        self.data, self.offsets, self.node_counts = data, offsets, node_counts


def _register(loader: Loader, comm: Any, encoded: _Encoded) -> tuple:
    """Collective: register the part; (schema, facts, graphs' class) agreed by every
    rank, as :func:`mdloader.pyg.register_graphs` does."""
    from .typed import agree_schema

    facts = None if encoded.facts is None else sorted(encoded.facts)
    schema, facts = agree_schema(comm, encoded.schema, "", facts)
    mine = encoded.data_class if encoded.facts is not None else None
    settled, data_class = pyg.agree_increments_and_class(comm, encoded.incremented, mine)
    loader.register_shard(encoded.data, encoded.offsets, align=8)
    loader.schema = schema
    loader.own_node_counts = encoded.node_counts if encoded.facts is not None else None
    return schema, tuple((key, kind, cat, settled.get(key, False)) for key, kind, cat in facts), data_class


def _tag(name: Any) -> Optional[int]:
    """HydraGNN's code of a dataset name (its ``__getitem__`` tags every graph with
    ``[[code]]``), None where there is no name."""
    if name is None:
        return None
    return HYDRAGNN_DATASET_NAMES.index(name) if name in HYDRAGNN_DATASET_NAMES else -1


def _adios_attributes(part: AdiosPart) -> dict:
    """The attributes HydraGNN's ``AdiosDataset`` takes from the file, shaped as it
    shapes them."""
    out = {"dataset_name": part.attribute("dataset_name")}
    for name in ("minmax_graph_feature", "minmax_node_feature"):
        if part.attribute(name) is not None:
            out[name] = part.attribute(name).reshape((2, -1))
    if part.attribute("pna_deg") is not None:
        out["pna_deg"] = part.attribute("pna_deg")
    return out


def _encode_pickle(part: PicklePart, ids: range, dataset_name: Any, chunk: int) -> _Encoded:
    """This rank's graphs, unpickled ``chunk`` at a time and encoded as
    :func:`mdloader.pyg.register_graphs` encodes a list of graphs."""
    code = _tag(dataset_name)
    pieces, sizes, nodes = [], [], []
    schema = facts = data_class = None
    incremented: dict = {}
    for graphs in part.chunks(ids, chunk):
        if code is not None:
            for data in graphs:
                data.dataset_name = torch.tensor([[code]])
        records, mine, inc = pyg._records(graphs)
        if facts is None:
            facts, data_class = mine, type(graphs[0])
        elif sorted(mine) != sorted(facts) or type(graphs[0]) is not data_class:
            raise ValueError(f"graphs {ids[0] + len(nodes)}..: their attributes or class differ from the first "
                             f"graphs' ({sorted(mine)} vs {sorted(facts)})")
        for key, value in inc.items():
            if value is not None and incremented.setdefault(key, value) != value:
                raise ValueError(f"attribute {key!r} is incremented by the node count in some graphs and not others")
        cat_dims = {key: cat for key, _, cat in facts}
        schema_here, data, offsets = encode(records, cat_dims)
        if schema is not None and schema_here != schema:
            raise ValueError(f"graphs {ids[0] + len(nodes)}..: schema {schema_here} differs from {schema}")
        schema = schema_here
        pieces.append(data)
        sizes.append(np.diff(offsets))
        nodes.append(np.fromiter((int(r[pyg.NUM_NODES]) for r in records), np.int64, len(records)))
    return _joined(schema, facts, incremented, data_class, pieces, sizes, nodes)


def _joined(schema, facts, incremented, data_class, pieces, sizes, nodes) -> _Encoded:
    offsets = np.zeros(sum(len(s) for s in sizes) + 1, dtype=np.uint64)
    if sizes:
        np.cumsum(np.concatenate(sizes), out=offsets[1:])
    data = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint8)
    counts = np.concatenate(nodes) if nodes else np.zeros(0, dtype=np.int64)
    return _Encoded(schema, facts, {k: incremented.get(k) for k, _, _ in facts or ()}, data_class, data, offsets,
                    counts)


def _encode_adios(part: AdiosPart, ids: range, dataset_name: Any, chunk: int) -> _Encoded:
    """This rank's graphs as records, written column by column into one buffer sized
    from the file's counts before any payload is read."""
    for k in part.keys:
        if part.dtype[k] == np.uint8:
            raise TypeError(f"key {k!r} is uint8, which HydraGNN's AdiosDataset reads as a string; a typed record "
                            "holds arrays only: leave it out with keys=[...]")
        if k in ("num_nodes", "adj", "adj_t") or "batch" in k:
            raise TypeError(f"key {k!r}: a graph attribute that changes how torch_geometric counts nodes or "
                            "increments is not supported from ADIOS files")
    lengths = part.lengths(ids.start, len(ids))
    n = len(ids)
    if n == 0:
        return _Encoded(None, None, {}, Data, np.zeros(0, dtype=np.uint8), np.zeros(1, dtype=np.uint64), None)
    code = _tag(dataset_name)
    keys = list(part.keys)
    # torch_geometric's concatenation dimension of each attribute (Data.__cat_dim__),
    # from a sample of its shape; each graph's length along it.
    cats, along = {}, {}
    for k in keys:
        shape = list(part.shape[k])
        cats[k] = Data().__cat_dim__(k, torch.empty([0] * len(shape))) % len(shape)
        along[k] = lengths[k][0] if cats[k] == part.vdim[k] else np.full(n, shape[cats[k]], dtype=np.int64)
    node_counts, from_edges = _node_counts(keys, along, n)
    fields = {k: field_of(k, part.dtype[k], _sample_shape(part, k, lengths[k][0]), cats[k]) for k in keys}
    fields[pyg.NUM_NODES] = Field(pyg.NUM_NODES, np.dtype(np.int64), (), None)
    counts = {**along, pyg.NUM_NODES: np.ones(n, dtype=np.int64)}
    if code is not None:
        fields["dataset_name"] = Field("dataset_name", np.dtype(np.int64), (1,), 0)
        counts["dataset_name"] = np.ones(n, dtype=np.int64)
    schema = Schema(tuple(fields[name] for name in sorted(fields)))
    matrix = np.stack([counts[f.name] for f in schema.fields], axis=1)
    offsets = np.zeros(n + 1, dtype=np.uint64)
    np.cumsum(record_sizes(schema.fields, matrix), out=offsets[1:])
    data = np.zeros(int(offsets[-1]), dtype=np.uint8)
    facts = incremented = None
    done = 0
    for columns in part.chunks(lengths, chunk):
        rows = {k: columns.rows(k, cats[k])[0] for k in keys}
        if from_edges:  # no x, pos or *node* attribute: torch_geometric's edge_index.max() + 1
            node_counts[done:done + columns.n] = _max_plus_one(rows[from_edges], along[from_edges][done:done + columns.n])
        here = slice(done, done + columns.n)
        rows[pyg.NUM_NODES] = node_counts[here]
        if code is not None:
            rows["dataset_name"] = np.full((columns.n, 1), code, dtype=np.int64)
        if facts is None:
            facts, incremented = _facts(keys, cats, rows, along, node_counts, code)
        write_records(data, offsets[:-1][here].astype(np.int64), schema.fields, matrix[here],
                      [rows[f.name] for f in schema.fields])
        done += columns.n
    return _Encoded(schema, facts, incremented, Data, data, offsets, node_counts)


def _sample_shape(part: AdiosPart, key: str, lengths: np.ndarray) -> tuple:
    """One graph's shape of ``key``: the global shape with the graph's length along the
    file's varying dimension (the same for every graph where that is not the
    concatenation dimension, see :meth:`mdloader.sources_columns.Columns.rows`)."""
    shape = list(part.shape[key])
    shape[part.vdim[key]] = int(lengths[0])
    return tuple(shape)


def _node_counts(keys: list, along: dict, n: int) -> tuple:
    """(each graph's node count, the key it must be computed from while reading or "")
    as torch_geometric's ``Data.num_nodes`` infers it for attributes set in ``keys``'
    order: the length of the first of ``x``, ``pos``, ... (N_KEYS), else of the first
    attribute named ``*node*``, else ``edge_index.max() + 1`` (or ``face``'s); -1 where
    it cannot (``Data._store.can_infer_num_nodes`` false)."""
    for chosen in ([k for k in keys if k in N_KEYS], [k for k in keys if "node" in k]):
        if chosen:
            return along[chosen[0]].astype(np.int64), ""
    for k in ("edge_index", "face"):
        if k in keys:
            return np.zeros(n, dtype=np.int64), k
    return np.full(n, -1, dtype=np.int64), ""


def _max_plus_one(rows: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per graph, the largest value of its rows + 1 (0 for a graph without rows)."""
    out = np.zeros(len(lengths), dtype=np.int64)
    flat = rows.reshape(len(rows), -1).max(axis=1) if rows.size else np.zeros(0, dtype=np.int64)
    has = lengths > 0
    if has.any():
        starts = (np.cumsum(lengths) - lengths)[has]
        out[has] = np.maximum.reduceat(flat, starts) + 1
    return out


def _facts(keys: list, cats: dict, rows: dict, along: dict, node_counts: np.ndarray, code: Optional[int]) -> tuple:
    """(facts, incremented) of the attributes, as :func:`mdloader.pyg.register_graphs`
    finds them: from one graph of the chunk made a ``Data`` the way HydraGNN's
    ``AdiosDataset.get`` makes it (one graph, not one per graph), preferably one with
    nodes (a graph without cannot tell what is incremented). Its node count must be the
    one computed for all graphs without a ``Data``: a check of that computation."""
    with_nodes = np.flatnonzero(node_counts[:len(rows[pyg.NUM_NODES])] > 0)
    j = int(with_nodes[0]) if with_nodes.size else 0
    probe = Data()
    for k in keys:
        first = int(along[k][:j].sum())
        probe[k] = torch.tensor(np.moveaxis(rows[k][first:first + int(along[k][j])], 0, cats[k]))
    if code is not None:
        probe.dataset_name = torch.tensor([[code]])
    records, facts, incremented = pyg._records([probe])
    if int(records[0][pyg.NUM_NODES]) != int(node_counts[j]):
        raise RuntimeError(f"mdloader.pyg_sources: graph {j}'s node count is {int(node_counts[j])} here, "
                           f"{int(records[0][pyg.NUM_NODES])} to torch_geometric (a bug: please report it)")
    return facts, incremented
