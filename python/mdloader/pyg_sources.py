"""``mdloader.pyg.DistDataset`` straight from HydraGNN's dataset files, each rank
reading only its part (:mod:`mdloader.sources`), never holding a ``Data`` per graph of
its shard:

    from mdloader.pyg_sources import from_adios, from_pickle

    trainset = from_adios("dataset.bp", "trainset", comm)          # HydraGNN's AdiosWriter files
    trainset = from_pickle("dataset/pickle", "trainset", comm)     # its SimplePickleWriter files
    trainset = from_adios(["a.bp", "b.bp"], "trainset", comm)      # its AdiosMultiDataset

instead of ``DistDataset(AdiosDataset(path, "trainset", comm), "trainset", comm)``,
which reads graph by graph into a list of ``Data`` on every rank before registering.
The graphs are those HydraGNN's ``AdiosDataset[i]`` / ``SimplePickleDataset[i]`` give
(``dataset_name`` tag and ``var_config`` updates included), and the dataset is the same
``DistDataset`` (loaders, ``get_node_counts``, ``ddstore_width``). A bad file (missing,
truncated, a variable missing, ranks seeing different files) raises
:class:`mdloader.sources.SourceError` on every rank.
"""

from __future__ import annotations

import hashlib
from typing import Any, Optional

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.data.storage import N_KEYS

from . import pyg, pyg_hydragnn
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


def from_adios(path: Any, label: str, comm: Any = None, *, ddstore_width: Optional[int] = None,
               keys: Optional[list] = None, var_config: Optional[dict] = None, chunk: int = 65536,
               subset_istart: Optional[int] = None, subset_iend: Optional[int] = None,
               tag_files: bool = False) -> pyg.DistDataset:
    """Collective. A :class:`mdloader.pyg.DistDataset` of the graphs ``label`` of
    HydraGNN's ADIOS2 dataset ``path``; each rank reads its part (of its replica group's
    copy with ``ddstore_width``), ``chunk`` graphs at a time. ``keys``: only these
    attributes (HydraGNN's ``keys=``). The file's ``pna_deg``, ``minmax_node_feature``,
    ``minmax_graph_feature`` and ``dataset_name`` become the dataset's attributes, as on
    HydraGNN's ``AdiosDataset``. ``var_config``: HydraGNN's updates applied to every
    graph, as its ``AdiosDataset(..., var_config=...)`` applies them to every graph it
    returns (the graphs are then made one by one, a chunk at a time: slower than
    columns). Keys stored as ``uint8`` (HydraGNN's writer stores a ``str`` attribute so)
    come back as uint8 tensors: ``bytes(graph.smiles.numpy()).decode()``.

    ``path`` a list of files: HydraGNN's ``AdiosMultiDataset(paths, label, comm)``, the
    files' graphs one after the other in the list's order (their keys, dtypes and shapes
    must agree: ``keys=`` picks common ones), untagged as ``AdiosMultiDataset`` returns
    them (HydraGNN's multi-branch models then send them all to branch 0); no file's
    attributes become the dataset's (``AdiosMultiDataset`` has none). ``tag_files=True``
    tags each graph with its own file's ``dataset_name`` instead, as each file's
    ``AdiosDataset`` would (a file without one: untagged, and then every file must be
    without; a name outside HydraGNN's table tags -1, which a multi-branch model has no
    branch for).

    ``subset_istart``, ``subset_iend``: the dataset is graphs ``subset_istart`` to
    ``subset_iend - 1`` only, graph i being file graph ``subset_istart + i``, as
    HydraGNN's ``AdiosDataset(..., subset_istart=, subset_iend=)``; with several files
    that range of every file, one file after the other, as ``AdiosMultiDataset(paths,
    label, comm, subset_istart=, subset_iend=)`` passes them to each file's
    ``AdiosDataset``; only those graphs are read."""
    paths = [path] if isinstance(path, (str, bytes)) or hasattr(path, "__fspath__") else list(path)
    what = f"from_adios({path!r}, {label!r})"

    def read(loader: Loader, comm: Any, update: Any) -> tuple:
        parts, problem = [], ""
        try:
            _check_chunk(chunk)
            if keys is not None and not list(keys):
                raise ValueError("keys=[] selects no attribute: pass None (every key) or the keys to read")
            for one in paths:
                parts.append(AdiosPart(one, label, keys))
        except Exception as err:  # noqa: BLE001 - agreed: every rank raises it
            problem = _why(err)
        try:
            agree_problems(comm, problem, what)
            agree_fingerprint(comm, tuple(_fingerprint(part, what, comm) for part in parts), what)
            # Each file's graphs in the dataset (AdiosMultiDataset gives every file's
            # AdiosDataset the same subset), a range of the file's ids; ``ids``: this
            # rank's part of them, one file after the other.
            ndata = [part.ndata for part in parts]
            subset = _agreed_subset(comm, what, min(ndata, default=0),
                                    lambda total: _adios_subset(subset_istart, subset_iend, total, len(parts)))
            windows = [range(n) if subset is None else subset for n in ndata]
            ids = loader.replica_part(sum(len(window) for window in windows))
            encoded, extra, problem = None, {}, ""
            try:
                tagged = len(parts) == 1 or bool(tag_files)
                names = [part.attribute("dataset_name") if tagged else None for part in parts]
                _same_layout(parts, names)
                extra = _adios_attributes(parts[0]) if len(parts) == 1 else {}
                pieces, first = [], 0
                for part, name, window in zip(parts, names, windows):
                    # This rank's graphs that lie in this file, as the file's own ids.
                    n = len(window)
                    mine = window[min(max(ids.start - first, 0), n):min(max(ids.stop - first, 0), n)]
                    first += n
                    if update is None:
                        pieces.append(_encode_adios(part, mine, name, chunk))
                    else:
                        pieces.append(_encode_graphs(_adios_graphs(part, mine, chunk), mine, name, update))
                encoded = _concatenated(pieces, paths)
            except Exception as err:  # noqa: BLE001 - agreed
                problem = _why(err)
            agree_problems(comm, problem, what)
            return encoded, extra
        finally:
            for part in parts:
                part.close()

    return _dataset(label, comm, ddstore_width, var_config, what, read)


def _same_layout(parts: list, names: list) -> None:
    """ValueError, the same on every rank (every rank opened every file), where the files
    of one dataset differ in keys, dtypes, dimensions or in having a dataset_name."""
    def layout(part: AdiosPart, name: Any) -> tuple:
        return (tuple(sorted((k, part.dtype[k].str, len(part.shape[k])) for k in part.keys)),
                "dataset_name" if name is not None else "no dataset_name")

    first = layout(parts[0], names[0])
    for part, name in zip(parts[1:], names[1:]):
        if layout(part, name) != first:
            raise ValueError(f"{part.path}'s graphs differ from {parts[0].path}'s: {layout(part, name)} vs {first} "
                             "(the files of one dataset must have the same keys, dtypes and dimensions, and all or "
                             "none a dataset_name: keys=[...] picks common keys)")


def _concatenated(pieces: list, paths: list) -> "_Encoded":
    """One rank's part made of the parts of several files, one after the other; their
    schema and facts must be the same (ValueError naming the files otherwise)."""
    full = [(piece, where) for piece, where in zip(pieces, paths) if piece.facts is not None]
    if len(pieces) == 1 or not full:
        return pieces[0]
    (base, base_path), incremented = full[0], dict(full[0][0].incremented)
    for piece, where in full[1:]:
        if piece.schema != base.schema or sorted(piece.facts) != sorted(base.facts):
            raise ValueError(f"{where}'s graphs differ from {base_path}'s: {piece.schema} vs {base.schema} (the files "
                             "of one dataset must have the same keys, dtypes and shapes, dataset_name included: "
                             "keys=[...] picks common keys)")
        for key, value in piece.incremented.items():
            if value is None:
                continue
            if incremented.get(key) is None:
                incremented[key] = value
            elif incremented[key] != value:
                raise ValueError(f"attribute {key!r} is incremented by the node count in {where} and not in "
                                 f"{base_path}")
    offsets = np.zeros(1 + sum(len(p.offsets) - 1 for p, _ in full), dtype=np.uint64)
    done, end = 0, 0
    for piece, _ in full:
        n = len(piece.offsets) - 1
        offsets[done + 1:done + n + 1] = piece.offsets[1:] + np.uint64(end)
        done, end = done + n, end + int(piece.offsets[-1])
    return _Encoded(base.schema, base.facts, incremented, base.data_class,
                    np.concatenate([p.data for p, _ in full]), offsets,
                    np.concatenate([p.node_counts for p, _ in full]))


def from_pickle(basedir: str, label: str, comm: Any = None, *, ddstore_width: Optional[int] = None,
                var_config: Optional[dict] = None, chunk: int = 4096, subset: Any = None) -> pyg.DistDataset:
    """Collective. A :class:`mdloader.pyg.DistDataset` of the graphs ``label`` of
    HydraGNN's pickle dataset in ``basedir``; each rank unpickles its part's files,
    ``chunk`` graphs at a time, encoding each chunk before the next is read. The
    metadata's attributes (``pna_deg``, ...) and ``minmax_*`` become the dataset's.
    ``var_config``: HydraGNN's updates applied to every graph, as its
    ``SimplePickleDataset(..., var_config=...)`` applies them. ``subset``: the ids of
    the graphs the dataset holds, in its order (graph i is file sample ``subset[i]``),
    as HydraGNN's ``SimplePickleDataset(..., subset=...)``; only those files are read."""
    what = f"from_pickle({basedir!r}, {label!r})"

    def read(loader: Loader, comm: Any, update: Any) -> tuple:
        part, problem = None, ""
        try:
            _check_chunk(chunk)
            part = PicklePart(basedir, label)
        except Exception as err:  # noqa: BLE001 - agreed
            problem = _why(err)
        agree_problems(comm, problem, what)
        agree_fingerprint(comm, _fingerprint(part, what, comm), what)
        extra = {"minmax_node_feature": part.minmax_node_feature, "minmax_graph_feature": part.minmax_graph_feature,
                 **part.attrs}
        ids = _part_of_subset(loader, comm, what, part.ndata, lambda total: _pickle_subset(subset, total))
        encoded, problem = None, ""
        try:
            encoded = _encode_graphs(part.chunks(ids, chunk), ids, extra.get("dataset_name"), update)
        except Exception as err:  # noqa: BLE001 - agreed
            problem = _why(err)
        agree_problems(comm, problem, what)
        return encoded, extra

    return _dataset(label, comm, ddstore_width, var_config, what, read)


def _check_chunk(chunk: Any) -> None:
    """ValueError unless ``chunk`` (graphs read at a time) is a positive integer (a
    negative one read no graph at all and left the records unwritten)."""
    if isinstance(chunk, (bool, np.bool_)) or not isinstance(chunk, (int, np.integer)) or chunk <= 0:
        raise ValueError(f"chunk must be a positive integer (graphs read at a time), not {chunk!r}")


def _adios_subset(istart: Any, iend: Any, total: int, files: int = 1) -> Any:
    """The graphs of ``AdiosDataset(subset_istart=, subset_iend=)`` as a range of each
    file's ids (None without either: every graph); ValueError where the bounds are not a
    range of the file's (``total``: its graphs; with several ``files``, the fewest any of
    them has)."""
    if istart is None and iend is None:
        return None
    for name, value in (("subset_istart", istart), ("subset_iend", iend)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"{name} must be an integer (with the other one), not {value!r}")
    if not 0 <= istart < iend <= total:
        of = f"the {total} graphs" if files == 1 else \
            f"every file's graphs (the smallest of the {files} files has {total}: the range is taken in each)"
        raise ValueError(f"subset_istart = {istart}, subset_iend = {iend}: not a range of {of} holding one at least")
    return range(int(istart), int(iend))


def _pickle_subset(subset: Any, total: int) -> Any:
    """The graphs of ``SimplePickleDataset(subset=)`` as an int64 array (a range of all
    without one); ValueError where one is not an id of the dataset's."""
    if subset is None:
        return range(total)
    ids = np.asarray(subset)
    if ids.ndim != 1 or not (ids.size == 0 or np.issubdtype(ids.dtype, np.integer)):
        raise ValueError(f"subset must be a list of graph ids (integers), not {type(subset).__name__} of "
                         f"{ids.dtype} with shape {ids.shape}")
    ids = ids.astype(np.int64)
    if ids.size == 0:
        raise ValueError("the subset holds no graph")
    if (ids.min() < 0 or ids.max() >= total):
        bad = int(ids[(ids < 0) | (ids >= total)][0])
        raise ValueError(f"subset holds {bad}, not an id of the {total} graphs")
    return ids


def _part_of_subset(loader: Loader, comm: Any, what: str, total: int, make: Any) -> Any:
    """Collective (two allgathers): this rank's part of the dataset's graphs as ids of
    the files' (``make(total)``: all of them, or the user's subset), once every rank
    found its subset good and the same as every other rank's; ValueError with the same
    text on every rank otherwise."""
    subset = _agreed_subset(comm, what, total, make)
    mine = loader.replica_part(len(subset))
    return subset[mine.start:mine.stop]


def _agreed_subset(comm: Any, what: str, total: int, make: Any) -> Any:
    """Collective (two allgathers): ``make(total)`` (None: no subset), once every rank
    found its subset good and the same as every other rank's (see :func:`_part_of_subset`)."""
    subset, problem = None, ""
    try:
        subset = make(total)
    except ValueError as err:
        problem = str(err)
    bad = [(rank, why) for rank, why in enumerate(comm.allgather(problem)) if why]
    if bad:
        raise ValueError(f"{what}: " + "; ".join(f"rank {rank}: {why}" for rank, why in bad[:4]))
    if subset is None:
        digest = ("all",)
    elif isinstance(subset, range):
        digest = ("range", subset.start, subset.stop)
    else:
        digest = ("ids", len(subset), hashlib.sha1(subset.tobytes()).hexdigest())
    everyone = comm.allgather(digest)
    differ = [rank for rank, theirs in enumerate(everyone) if theirs != everyone[0]]
    if differ:
        raise ValueError(f"{what}: the subset differs across ranks: rank 0's {everyone[0][:2]}, rank {differ[0]}'s "
                         f"{everyone[differ[0]][:2]} (every rank must pass the same graphs)")
    return subset


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


def _dataset(label: str, comm: Any, ddstore_width: Optional[int], var_config: Optional[dict], what: str,
             read: Any) -> pyg.DistDataset:
    """The dataset of what ``read(loader, comm, update)`` encodes (``update``: HydraGNN's
    ``var_config`` updates, a function of one graph, or None), registered as
    :func:`mdloader.pyg.register_graphs` registers a list of graphs (the same schema,
    facts and agreement), and made a ``DistDataset`` as its constructor makes one."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD if comm is None else comm
    # The arguments as DistDataset checks them (agreed: a bad one raises on every rank);
    # var_config applied, as DistDataset(graphs, var_config=..., ddstore_store_per_sample=False).
    width = pyg_hydragnn.agree_arguments(comm, what, ddstore_width, False, var_config, False)
    update, problem = pyg_hydragnn.var_config_updates(var_config, False)
    agree_problems(comm, problem, what)
    loader = Loader(comm, group_size=None if width == comm.Get_size() else width)
    try:
        encoded, extra = read(loader, comm, update)
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
    dataset._set_hydragnn_attributes(width, False, var_config, var_config is None)
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


def _encode_graphs(chunks: Any, ids: range, dataset_name: Any, update: Any) -> _Encoded:
    """This rank's graphs ``ids``, given as lists of ``Data`` a chunk at a time (``chunks``),
    each updated by ``update`` (HydraGNN's ``var_config``, or None), tagged and encoded
    as :func:`mdloader.pyg.register_graphs` encodes a list of graphs, then dropped."""
    code = _tag(dataset_name)
    pieces, sizes, nodes = [], [], []
    schema = facts = data_class = None
    incremented: dict = {}
    for graphs in chunks:
        if update is not None:
            graphs = [update(data) for data in graphs]
        if code is not None:
            for data in graphs:
                data.dataset_name = torch.tensor([[code]])
        records, mine, inc = pyg._records(graphs)
        if facts is None:
            facts, data_class = mine, type(graphs[0])
        elif sorted(mine) != sorted(facts) or type(graphs[0]) is not data_class:
            raise ValueError(f"graphs {ids[sum(map(len, nodes))]}..: their attributes or class differ from the first "
                             f"graphs' ({sorted(mine)} vs {sorted(facts)})")
        for key, value in inc.items():
            if value is not None and incremented.setdefault(key, value) != value:
                raise ValueError(f"attribute {key!r} is incremented by the node count in some graphs and not others")
        cat_dims = {key: cat for key, _, cat in facts}
        schema_here, data, offsets = encode(records, cat_dims)
        if schema is not None and schema_here != schema:
            raise ValueError(f"graphs {ids[sum(map(len, nodes))]}..: schema {schema_here} differs from {schema}")
        schema = schema_here
        pieces.append(data)
        sizes.append(np.diff(offsets))
        nodes.append(np.fromiter((int(r[pyg.NUM_NODES]) for r in records), np.int64, len(records)))
    return _joined(schema, facts, incremented, data_class, pieces, sizes, nodes)


def _adios_graphs(part: AdiosPart, ids: range, chunk: int) -> Any:
    """This rank's graphs of an ADIOS file as lists of ``Data``, ``chunk`` at a time, each
    made as HydraGNN's ``AdiosDataset.get`` makes it (its keys in the file's order, each
    a tensor of the graph's slice; a uint8 key stays a uint8 tensor)."""
    _check_adios_keys(part)
    for columns in part.chunks(part.lengths(ids.start, len(ids)), chunk):
        split = {k: np.split(columns.values[k], np.cumsum(columns.counts[k])[:-1], axis=columns.axis[k])
                 for k in columns.keys}
        graphs = []
        for i in range(columns.n):
            data = Data()
            for k in columns.keys:
                data[k] = torch.tensor(split[k][i])
            graphs.append(data)
        yield graphs


def _check_adios_keys(part: AdiosPart) -> None:
    for k in part.keys:
        if k in ("num_nodes", "adj", "adj_t") or "batch" in k:
            raise TypeError(f"key {k!r}: a graph attribute that changes how torch_geometric counts nodes or "
                            "increments is not supported from ADIOS files")


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
    _check_adios_keys(part)
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
