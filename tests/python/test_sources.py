"""mdloader.pyg_sources: DistDataset straight from HydraGNN's ADIOS2 and pickle files.

The files are written here in HydraGNN's layouts (tests/python/hydragnn_files.py) and
the graphs that come out are compared, field by field, with what HydraGNN's
``AdiosDataset[i]`` / ``SimplePickleDataset[i]`` give (read here the way its code reads
them). Bad files must end in the same clear error on every rank. Without the adios2
package the ADIOS tests skip, saying so; the pickle tests run regardless.
"""

import importlib.util
import os
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (MDL_SKIP_TORCH)")
pytest.importorskip("torch_geometric", reason="torch_geometric is not installed")

from hydragnn_files import adios_graph, molecules, pickle_graph, write_adios, write_pickle  # noqa: E402
from test_pyg_hydragnn import fake_hydragnn  # noqa: E402,F401 - a fixture

needs_adios = pytest.mark.skipif(importlib.util.find_spec("adios2") is None,
                                 reason="the adios2 package is not installed in this environment (pip install adios2)")


@pytest.fixture
def shared(comm, tmp_path):
    """A folder every rank sees (rank 0's), emptied."""
    where = comm.bcast(str(tmp_path) if comm.rank == 0 else None, root=0)
    yield where
    comm.Barrier()


def on_rank0(comm, write):
    if comm.rank == 0:
        write()
    comm.Barrier()


def assert_same_graph(got, want, what):
    assert sorted(got.keys()) == sorted(want.keys()), what
    for key in want.keys():
        a, b = got[key], want[key]
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), f"{what}: {key}: {a} != {b}"


def every_graph(dataset):
    return dataset._fetch(list(range(len(dataset)))).to_data_list()


@needs_adios
@pytest.mark.parametrize("chunk", [5, 65536])
def test_adios_graphs_are_hydragnns(comm, shared, chunk):
    from mdloader.pyg_sources import from_adios

    path = os.path.join(shared, "qm9.bp")
    graphs = molecules(37, seed=1)
    on_rank0(comm, lambda: write_adios(path, {"trainset": graphs, "valset": graphs[:3]},
                                       {"dataset_name": "qm7x", "pna_deg": np.arange(6),
                                        "minmax_node_feature": np.arange(4.0)}, writers=3))
    dataset = from_adios(path, "trainset", comm, chunk=chunk)
    try:
        assert len(dataset) == 37
        for i, got in enumerate(every_graph(dataset)):
            assert_same_graph(got, adios_graph(path, "trainset", i), f"graph {i}")
        # What registration would have made of HydraGNN's own graphs, node counts included.
        counts = dataset.get_node_counts()
        assert counts.tolist() == [g.num_nodes for g in graphs]
        # The file's dataset_name tags the graphs at registration (compared above); the
        # dataset's own dataset_name (tagging at fetch, with a dataset_name_dict) stays unset.
        assert dataset.pna_deg.tolist() == list(range(6)) and dataset.dataset_name is None
        assert dataset.minmax_node_feature.shape == (2, 2)
    finally:
        dataset.close()


@needs_adios
def test_adios_records_are_byte_for_byte_registers(comm, shared):
    """The column writer makes exactly the bytes mdloader.pyg's per-graph path makes."""
    from mdloader import pyg
    from mdloader.pyg_sources import _encode_adios
    from mdloader.sources import AdiosPart
    from mdloader.typed import encode

    path = os.path.join(shared, "bytes.bp")
    graphs = molecules(23, seed=2)
    on_rank0(comm, lambda: write_adios(path, {"trainset": graphs}))
    part = AdiosPart(path, "trainset")
    try:
        ours = _encode_adios(part, range(4, 23), None, chunk=6)
    finally:
        part.close()
    records, facts, _ = pyg._records([adios_graph(path, "trainset", i) for i in range(4, 23)])
    schema, data, offsets = encode(records, {key: cat for key, _, cat in facts})
    assert ours.schema == schema and sorted(ours.facts) == sorted(facts)
    assert np.array_equal(ours.offsets, offsets) and np.array_equal(ours.data, data)


@needs_adios
def test_adios_equal_lengths_along_another_dimension(comm, shared):
    """Where no dimension varies HydraGNN concatenates along 0, even edge_index [2, m]."""
    from mdloader.pyg_sources import from_adios
    from torch_geometric.data import Data

    graphs = [Data(x=torch.full((3, 1), float(i)), edge_index=torch.tensor([[0, 1], [1, 2 - i % 2]])) for i in range(6)]
    path = os.path.join(shared, "even.bp")
    on_rank0(comm, lambda: write_adios(path, {"trainset": graphs}))
    dataset = from_adios(path, "trainset", comm)
    try:
        for i, got in enumerate(every_graph(dataset)):
            assert_same_graph(got, graphs[i], f"graph {i}")
    finally:
        dataset.close()


@pytest.mark.parametrize("use_subdir", [False, True])
def test_pickle_graphs_are_hydragnns(comm, shared, use_subdir):
    from mdloader.pyg_sources import from_pickle

    graphs = molecules(29, seed=3)
    on_rank0(comm, lambda: write_pickle(shared, "trainset", graphs, {"pna_deg": np.arange(3), "dataset_name": "mptrj"},
                                        use_subdir=use_subdir, nmax_persubdir=4))
    dataset = from_pickle(shared, "trainset", comm, chunk=4)
    try:
        for i, got in enumerate(every_graph(dataset)):
            assert_same_graph(got, pickle_graph(shared, "trainset", i), f"graph {i}")
        assert dataset.get_node_counts().tolist() == [g.num_nodes for g in graphs]
        assert dataset.pna_deg.tolist() == [0, 1, 2]
    finally:
        dataset.close()


def raises_everywhere(comm, build, *words, same=True):
    """``build()`` raises SourceError on every rank, its text naming ``words`` (the same
    text on every rank where each passed the same path)."""
    from mdloader.sources import SourceError

    with pytest.raises(SourceError) as caught:
        build()
    text = str(caught.value)
    for word in words:
        assert word in text, text
    if same:
        assert len(set(comm.allgather(text))) == 1, "the ranks raised different errors"


@needs_adios
def test_adios_truncated(comm, shared):
    from mdloader.pyg_sources import from_adios

    path = os.path.join(shared, "cut.bp")

    def write_and_cut():
        write_adios(path, {"trainset": molecules(20)})
        data = os.path.join(path, "data.0")
        os.truncate(data, os.path.getsize(data) - 100)

    on_rank0(comm, write_and_cut)
    raises_everywhere(comm, lambda: from_adios(path, "trainset", comm), "truncated", "rank 0", f"rank {comm.size - 1}")


@needs_adios
@pytest.mark.parametrize("victim, size", [("mmd.0", "half"), ("mmd.0", "minus1"), ("md.idx", "zero")])
def test_adios_truncated_metadata(comm, shared, victim, size):
    """A .bp whose meta-metadata (mmd.0) is cut within a record, or whose md.idx is empty
    (an interrupted copy): ADIOS2 2.12's reader died of a segmentation fault on every
    rank. A SourceError on every rank instead, before ADIOS2 opens it."""
    from mdloader.pyg_sources import from_adios

    path = os.path.join(shared, "cutmeta.bp")

    def write_and_cut():
        write_adios(path, {"trainset": molecules(20)})
        where = os.path.join(path, victim)
        whole = os.path.getsize(where)
        os.truncate(where, {"half": whole // 2, "minus1": whole - 1, "zero": 0}[size])

    on_rank0(comm, write_and_cut)
    raises_everywhere(comm, lambda: from_adios(path, "trainset", comm), victim, "rank 0", f"rank {comm.size - 1}")


@needs_adios
def test_adios_data_file_missing(comm, shared):
    """A .bp without its data.0: ADIOS2's close then raised RuntimeError in from_adios'
    cleanup, replacing the agreed SourceError (and skipping the loader's close). The
    SourceError naming data.0 on every rank, and the next dataset builds."""
    from mdloader.pyg_sources import from_adios

    path, good = os.path.join(shared, "nodata.bp"), os.path.join(shared, "good.bp")

    def write():
        write_adios(path, {"trainset": molecules(20)})
        os.remove(os.path.join(path, "data.0"))
        write_adios(good, {"trainset": molecules(20)})

    on_rank0(comm, write)
    raises_everywhere(comm, lambda: from_adios(path, "trainset", comm), "data.0", "rank 0")
    dataset = from_adios(good, "trainset", comm)
    try:
        assert len(dataset) == 20
    finally:
        dataset.close()


@needs_adios
def test_adios_missing_variable(comm, shared):
    from mdloader.pyg_sources import from_adios

    path = os.path.join(shared, "holes.bp")
    on_rank0(comm, lambda: write_adios(path, {"trainset": molecules(20)}, skip=("trainset/pos/variable_offset",)))
    raises_everywhere(comm, lambda: from_adios(path, "trainset", comm), "'trainset/pos/variable_offset' is missing")
    raises_everywhere(comm, lambda: from_adios(path, "testset", comm), "no attribute 'testset/ndata'", "trainset")
    raises_everywhere(comm, lambda: from_adios(os.path.join(shared, "nowhere.bp"), "trainset", comm), "nowhere.bp")


@needs_adios
def test_adios_ranks_see_different_files(comm, tmp_path):
    """Each rank its own file (a node-local copy that differs): refused before anything is
    read, on every rank."""
    from mdloader.pyg_sources import from_adios

    if comm.size < 2:
        pytest.skip("needs 2 ranks")
    path = str(tmp_path / "mine.bp")
    write_adios(path, {"trainset": molecules(10 + comm.rank)}, writers=1)
    comm.Barrier()
    raises_everywhere(comm, lambda: from_adios(path, "trainset", comm), "the ranks see different files", same=False)


@needs_adios
def test_node_local_copies_with_new_mtimes_are_one_dataset(comm, shared, tmp_path):
    """Each rank its own copy of the same files, staged with a plain copy (``cp -r``: new
    mtimes): the same dataset, accepted (the fingerprint held the newest mtime, and every
    rank raised "the ranks see different files" on identical bytes)."""
    import time

    from mdloader.pyg_sources import from_adios, from_pickle

    graphs = molecules(12, seed=2)
    source, pickles = os.path.join(shared, "staged.bp"), os.path.join(shared, "staged")
    on_rank0(comm, lambda: (write_adios(source, {"trainset": graphs}), write_pickle(pickles, "trainset", graphs)))
    time.sleep(0.02 * comm.rank)  # the copies' mtimes differ
    mine, my_pickles = str(tmp_path / "mine.bp"), str(tmp_path / "pickles")
    shutil.copytree(source, mine, copy_function=shutil.copyfile)
    shutil.copytree(pickles, my_pickles, copy_function=shutil.copyfile)
    comm.Barrier()
    for dataset in (from_adios(mine, "trainset", comm), from_pickle(my_pickles, "trainset", comm)):
        try:
            assert len(dataset) == 12
            assert_same_graph(dataset[11], adios_graph(source, "trainset", 11), "graph 11")
        finally:
            dataset.close()


def test_pickle_bad_files(comm, shared, tmp_path):
    from mdloader.pyg_sources import from_pickle

    graphs = molecules(12)

    def damage():
        write_pickle(shared, "trainset", graphs)
        cut = os.path.join(shared, "trainset-11.pkl")  # the last rank's part
        os.truncate(cut, os.path.getsize(cut) // 2)
        os.remove(os.path.join(shared, "trainset-0.pkl"))  # rank 0's
        write_pickle(shared, "valset", graphs)
        os.truncate(os.path.join(shared, "valset-meta.pkl"), 10)

    on_rank0(comm, damage)
    raises_everywhere(comm, lambda: from_pickle(shared, "trainset", comm), "trainset-0.pkl: no such file",
                      "trainset-11.pkl: damaged or truncated")
    raises_everywhere(comm, lambda: from_pickle(shared, "valset", comm), "valset-meta.pkl: damaged or truncated")
    raises_everywhere(comm, lambda: from_pickle(shared, "testset", comm), "testset-meta.pkl: no such file")
    if comm.size > 1:
        mine = str(tmp_path / "own")
        write_pickle(mine, "trainset", graphs[:5 + comm.rank])
        comm.Barrier()
        raises_everywhere(comm, lambda: from_pickle(mine, "trainset", comm), "the ranks see different files", same=False)


# HydraGNN's var_config (its AdiosDataset / SimplePickleDataset apply the updates to every
# graph they return): x's columns [1], y's first column doubled, through the fake
# hydragnn.preprocess of test_pyg_hydragnn (hydragnn is not a test dependency).
FILE_VAR_CONFIG = {"input_node_features": [1], "type": ["graph"], "output_index": [0], "graph_feature_dims": [1],
                   "node_feature_dims": [2]}


def updated(data):
    data = data.clone()
    data.y, data.x = data.y[:, :1] * 2, data.x[:, [1]]
    return data


@pytest.mark.parametrize("source", ["adios", "pickle"])
def test_var_config_from_files_gives_the_batches_of_a_list(comm, shared, fake_hydragnn, source):
    """from_adios / from_pickle with var_config: the same batches as DistDataset of the
    same graphs in a list with var_config applied (ddstore_store_per_sample=False), and
    the graphs HydraGNN's AdiosDataset / SimplePickleDataset(var_config=...) return."""
    from mdloader.pyg import DistDataset
    from mdloader.pyg_sources import from_adios, from_pickle
    from test_pyg import assert_same_batch

    if source == "adios" and importlib.util.find_spec("adios2") is None:
        pytest.skip("the adios2 package is not installed in this environment (pip install adios2)")
    graphs = molecules(21, seed=5)
    attrs = {"dataset_name": "qm7x"}
    if source == "adios":
        path = os.path.join(shared, "vc.bp")
        on_rank0(comm, lambda: write_adios(path, {"trainset": graphs}, attrs))
        theirs = [adios_graph(path, "trainset", i) for i in range(21)]
        ours = from_adios(path, "trainset", comm, var_config=FILE_VAR_CONFIG, chunk=4)
    else:
        on_rank0(comm, lambda: write_pickle(shared, "trainset", graphs, attrs))
        theirs = [pickle_graph(shared, "trainset", i) for i in range(21)]
        ours = from_pickle(shared, "trainset", comm, var_config=FILE_VAR_CONFIG, chunk=4)
    listed = DistDataset(theirs, "t", comm, var_config=FILE_VAR_CONFIG, ddstore_store_per_sample=False)
    try:
        assert fake_hydragnn and fake_hydragnn[0] == (["graph"], [0], [1], [2])
        assert ours.var_config is FILE_VAR_CONFIG and ours.ddstore_store_per_sample is False
        for i, got in enumerate(every_graph(ours)):
            assert_same_graph(got, updated(theirs[i]), f"graph {i}")
        order = np.random.default_rng(0).permutation(21).tolist()
        for ids in (list(range(8)), order[:7], order[7:]):
            assert_same_batch(ours._fetch(ids), listed._fetch(ids))
        assert ours.get_node_counts().tolist() == listed.get_node_counts().tolist()
    finally:
        ours.close()
        listed.close()


def test_bad_var_config_from_files_fails_on_every_rank(comm, shared):
    from mdloader.pyg_sources import from_pickle

    on_rank0(comm, lambda: write_pickle(shared, "trainset", molecules(4)))
    with pytest.raises(ValueError, match=r"on rank 0: var_config has no input_node_features"):
        from_pickle(shared, "trainset", comm, var_config={"type": []})


@needs_adios
@pytest.mark.parametrize("chunk", [3, 65536])
def test_adios_uint8_keys_come_back_as_uint8(comm, shared, chunk):
    """HydraGNN's AdiosWriter stores a str attribute (a SMILES string) as its utf-8 bytes,
    a uint8 variable; its AdiosDataset reads any uint8 variable back as a str, which a
    typed record cannot hold: here it is a uint8 tensor of those bytes, cut per graph."""
    from mdloader.pyg_sources import from_adios

    graphs = molecules(17, seed=6)
    for i, data in enumerate(graphs):
        data.smiles = "C" * (1 + i % 5) + "O" * (i % 3)
        data.flags = torch.from_numpy((np.arange(data.num_nodes) % 3).astype(np.uint8))
    path = os.path.join(shared, "strings.bp")
    on_rank0(comm, lambda: write_adios(path, {"trainset": graphs}))
    dataset = from_adios(path, "trainset", comm, chunk=chunk)
    try:
        for i, got in enumerate(every_graph(dataset)):
            theirs = adios_graph(path, "trainset", i)
            assert got.smiles.dtype == torch.uint8 and bytes(got.smiles.numpy()).decode() == theirs.smiles
            assert theirs.smiles == graphs[i].smiles
            theirs.smiles = torch.from_numpy(np.frombuffer(theirs.smiles.encode(), dtype=np.uint8).copy())
            theirs.flags = torch.from_numpy(np.frombuffer(theirs.flags.encode(), dtype=np.uint8).copy())
            assert torch.equal(theirs.flags, graphs[i].flags)
            assert_same_graph(got, theirs, f"graph {i}")
    finally:
        dataset.close()


@needs_adios
@pytest.mark.parametrize("chunk", [4, 65536])
def test_adios_several_files_are_hydragnns_multidataset(comm, shared, chunk):
    """A list of files: HydraGNN's AdiosMultiDataset(paths, label, comm), graphs in the
    list's order (a rank's part spans files), untagged as it returns them; with
    tag_files=True each tagged with its own file's name, as that file's AdiosDataset."""
    from mdloader.pyg_sources import from_adios

    sets = [molecules(9, seed=7), molecules(3, seed=8), molecules(14, seed=9)]
    paths = [os.path.join(shared, f"part{j}.bp") for j in range(3)]

    def write():
        for j, (where, graphs) in enumerate(zip(paths, sets)):
            write_adios(where, {"trainset": graphs}, {"dataset_name": ("qm7x", "mptrj", "somewhere")[j]})

    on_rank0(comm, write)
    tagged = [adios_graph(where, "trainset", i) for where, graphs in zip(paths, sets) for i in range(len(graphs))]
    assert [int(g.dataset_name) for g in tagged] == [1] * 9 + [2] * 3 + [-1] * 14
    untagged = []
    for graph in tagged:
        graph = graph.clone()
        del graph.dataset_name
        untagged.append(graph)
    for tag_files, want in ((False, untagged), (True, tagged)):
        dataset = from_adios(paths, "trainset", comm, chunk=chunk, tag_files=tag_files)
        try:
            assert len(dataset) == len(want) == 26
            for i, got in enumerate(every_graph(dataset)):
                assert_same_graph(got, want[i], f"graph {i}, tag_files={tag_files}")
            assert dataset.get_node_counts().tolist() == [g.num_nodes for graphs in sets for g in graphs]
        finally:
            dataset.close()


@needs_adios
def test_adios_several_files_that_differ(comm, shared):
    from mdloader.pyg_sources import from_adios

    paths = [os.path.join(shared, "full.bp"), os.path.join(shared, "noedges.bp"), os.path.join(shared, "named.bp")]

    def write():
        write_adios(paths[0], {"trainset": molecules(6)})
        write_adios(paths[1], {"trainset": molecules(6, edges=False)})
        write_adios(paths[2], {"trainset": molecules(6)}, {"dataset_name": "qm7x"})

    on_rank0(comm, write)
    raises_everywhere(comm, lambda: from_adios(paths[:2], "trainset", comm), "noedges.bp's graphs differ from",
                      "full.bp's")
    raises_everywhere(comm, lambda: from_adios([paths[0], paths[2]], "trainset", comm, tag_files=True),
                      "named.bp's graphs differ")
    # Untagged (AdiosMultiDataset's way) a file's name is not read: they go together.
    dataset = from_adios([paths[0], paths[2]], "trainset", comm)
    try:
        assert len(dataset) == 12 and "dataset_name" not in dataset[7].keys()
    finally:
        dataset.close()
    # keys= picks the keys the files share: then they go together.
    dataset = from_adios(paths[:2], "trainset", comm, keys=["x", "pos", "y"])
    try:
        assert len(dataset) == 12 and sorted(dataset[7].keys()) == ["pos", "x", "y"]
    finally:
        dataset.close()
    raises_everywhere(comm, lambda: from_adios([paths[0], os.path.join(shared, "gone.bp")], "trainset", comm),
                      "gone.bp")


def test_var_config_without_hydragnn_fails_on_every_rank(comm, shared, monkeypatch):
    import sys

    from mdloader.pyg_sources import from_pickle

    on_rank0(comm, lambda: write_pickle(shared, "trainset", molecules(4)))
    monkeypatch.setitem(sys.modules, "hydragnn", None)  # not importable
    raises_everywhere(comm, lambda: from_pickle(shared, "trainset", comm, var_config=FILE_VAR_CONFIG),
                      "var_config with ddstore_store_per_sample=False applies HydraGNN's updates")


@needs_adios
def test_adios_several_files_one_truncated(comm, shared):
    from mdloader.pyg_sources import from_adios

    paths = [os.path.join(shared, "whole.bp"), os.path.join(shared, "cut2.bp")]

    def write():
        write_adios(paths[0], {"trainset": molecules(8)})
        write_adios(paths[1], {"trainset": molecules(20)})
        data = os.path.join(paths[1], "data.0")
        os.truncate(data, os.path.getsize(data) - 100)

    on_rank0(comm, write)
    raises_everywhere(comm, lambda: from_adios(paths, "trainset", comm), "cut2.bp", "truncated", "rank 0")


@needs_adios
@pytest.mark.parametrize("chunk", [4, 65536])
def test_adios_subset_is_hydragnns_subset(comm, shared, chunk):
    """AdiosDataset(subset_istart=, subset_iend=): graph i is file graph istart + i; only
    those graphs are the dataset. Several files: AdiosMultiDataset(paths, label, comm,
    subset_istart=, subset_iend=) gives each file's AdiosDataset the subset, so the
    dataset is that range of every file, one file after the other (it was the range of
    the files' graphs end to end: graphs 7..19 of 9 + 3 + 14 where HydraGNN has 3 x 2)."""
    from mdloader.pyg_sources import from_adios

    sets = [molecules(9, seed=7), molecules(3, seed=8), molecules(14, seed=9)]
    paths = [os.path.join(shared, f"sub{j}.bp") for j in range(3)]
    on_rank0(comm, lambda: [write_adios(where, {"trainset": graphs}) for where, graphs in zip(paths, sets)])
    per_file = [[adios_graph(where, "trainset", i) for i in range(len(graphs))] for where, graphs in zip(paths, sets)]
    for where, first, last, expected in ((paths, 1, 3, [g for graphs in per_file for g in graphs[1:3]]),
                                         (paths[::2], 2, 9, per_file[0][2:9] + per_file[2][2:9]),
                                         (paths[2], 5, 6, per_file[2][5:6]), (paths[0], 0, 9, per_file[0])):
        dataset = from_adios(where, "trainset", comm, chunk=chunk, subset_istart=first, subset_iend=last)
        try:
            assert len(dataset) == len(expected)
            for i, got in enumerate(every_graph(dataset)):
                assert_same_graph(got, expected[i], f"{where} subset graph {i}")
            assert dataset.get_node_counts().tolist() == [g.num_nodes for g in expected]
        finally:
            dataset.close()
    # A range past one of the files is not AdiosMultiDataset's (its get would fail there).
    raises_value_error_everywhere(comm, lambda: from_adios(paths, "trainset", comm, subset_istart=0, subset_iend=4),
                                  "the smallest of the 3 files has 3")


@needs_adios
def test_bad_chunk_or_no_keys_fail_on_every_rank(comm, shared):
    """chunk <= 0 read no graph (unwritten records; an AttributeError, the loader left
    unclosed) and keys=[] selected nothing: a ValueError on every rank instead, also
    where only one rank's chunk is bad, and the next dataset builds."""
    from mdloader.pyg_sources import from_adios, from_pickle

    graphs = molecules(10, seed=3)
    path = os.path.join(shared, "chunks.bp")
    on_rank0(comm, lambda: (write_adios(path, {"trainset": graphs}), write_pickle(shared, "trainset", graphs, {})))
    last = comm.size - 1
    for chunk in (-1, 0, 2.5, -1 if comm.rank == last else 4):
        raises_value_error_everywhere(comm, lambda: from_adios(path, "trainset", comm, chunk=chunk),
                                      "chunk must be a positive integer")
        raises_value_error_everywhere(comm, lambda: from_pickle(shared, "trainset", comm, chunk=chunk),
                                      "chunk must be a positive integer")
    raises_value_error_everywhere(comm, lambda: from_adios(path, "trainset", comm, keys=[]), "keys=[] selects no")
    dataset = from_adios(path, "trainset", comm, chunk=3)
    try:
        assert len(dataset) == 10
    finally:
        dataset.close()


def test_pickle_subset_is_hydragnns_subset(comm, shared):
    """SimplePickleDataset(subset=[...]): graph i is file sample subset[i], in the
    subset's order, repeats included."""
    from mdloader.pyg_sources import from_pickle

    graphs = molecules(19, seed=4)
    on_rank0(comm, lambda: write_pickle(shared, "trainset", graphs, {}))
    subset = [17, 0, 5, 5, 12, 3, 18]
    dataset = from_pickle(shared, "trainset", comm, chunk=2, subset=np.array(subset))
    try:
        assert len(dataset) == len(subset)
        for i, got in enumerate(every_graph(dataset)):
            assert_same_graph(got, pickle_graph(shared, "trainset", subset[i]), f"subset graph {i}")
    finally:
        dataset.close()


def raises_value_error_everywhere(comm, build, *words):
    with pytest.raises(ValueError) as caught:
        build()
    text = str(caught.value)
    for word in words:
        assert word in text, text
    assert len(set(comm.allgather(text))) == 1, "the ranks raised different errors"


@needs_adios
def test_bad_subsets_fail_on_every_rank(comm, shared):
    """A subset that is not one of the dataset's graphs, or differs on one rank: the same
    ValueError on every rank, and the next dataset builds (nothing left half-agreed)."""
    from mdloader.pyg_sources import from_adios, from_pickle

    graphs = molecules(11, seed=5)
    path = os.path.join(shared, "bad.bp")
    on_rank0(comm, lambda: (write_adios(path, {"trainset": graphs}), write_pickle(shared, "trainset", graphs, {})))
    last = comm.size - 1
    for kwargs, words in (({"subset_istart": 4, "subset_iend": 3}, ("not a range of the 11 graphs",)),
                          ({"subset_istart": 4, "subset_iend": 4}, ("holding one at least",)),
                          ({"subset_istart": 0, "subset_iend": 12}, ("not a range of the 11 graphs",)),
                          ({"subset_istart": 2}, ("subset_iend must be an integer",)),
                          ({"subset_istart": 0, "subset_iend": 5 + (comm.rank == last)}, ("differs across ranks",)),
                          ({"subset_istart": 0, "subset_iend": 5 if comm.rank else "5"}, ("rank 0:",))):
        raises_value_error_everywhere(comm, lambda: from_adios(path, "trainset", comm, **kwargs), *words)
    for subset, words in (([0, 11], ("subset holds 11",)), ([], ("holds no graph",)), ([[1, 2]], ("list of graph ids",)), ([0.5], ("integers",)),
                          ([1, 2, 3 + (comm.rank == last)], ("differs across ranks",))):
        raises_value_error_everywhere(comm, lambda: from_pickle(shared, "trainset", comm, subset=subset), *words)
    dataset = from_adios(path, "trainset", comm, subset_istart=1, subset_iend=11)
    try:
        assert len(dataset) == 10
    finally:
        dataset.close()
