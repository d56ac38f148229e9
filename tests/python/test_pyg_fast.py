"""The one-line switch as the fast path (mdloader.pyg_fast, issue 41): torch_geometric's
own DataLoader over a DistributedSampler, built as HydraGNN's create_dataloaders builds
it, takes the library's batch over whole; every batch equals Batch.from_data_list of the
same graphs (fields, slice and increment dictionaries, class, to_data_list).
get_node_counts; mdloader.pyg.DataLoader takes num_workers, pin_memory,
persistent_workers."""

import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the mdloader.pyg tests did not run")
pytest.importorskip("torch_geometric", reason="torch_geometric is not installed: the mdloader.pyg tests did not run")

from torch_geometric.data import Batch  # noqa: E402
from torch_geometric.loader import DataLoader as PygDataLoader  # noqa: E402

from mdloader.pyg import DataLoader, DistDataset  # noqa: E402

from test_pyg import PairedData, assert_same_batch, featured, graphs  # noqa: E402


def assert_equals_from_data_list(got: Batch, graphs_of_batch: list) -> None:
    want = Batch.from_data_list(graphs_of_batch)
    assert type(got) is type(want), (type(got), type(want))
    assert_same_batch(got, want)
    assert torch.equal(got.batch, want.batch) and torch.equal(got.ptr, want.ptr)
    for mine, theirs in zip(got.to_data_list(), want.to_data_list(), strict=True):
        assert type(mine) is type(theirs)
        assert set(mine.keys()) == set(theirs.keys())
        for key in theirs.keys():
            a, b = mine[key], theirs[key]
            assert torch.equal(a, b) if isinstance(b, torch.Tensor) else a == b, key


@pytest.fixture
def dataset(comm):
    ds = DistDataset(graphs(41), "trainset", comm)
    yield ds
    ds.close()


@pytest.mark.parametrize("batch_size", [1, 5, 16])
def test_hydragnn_loader_batches_equal_from_data_list(comm, dataset, batch_size, monkeypatch):
    """create_dataloaders (hydragnn/preprocess/load_data.py): torch_geometric's DataLoader,
    shuffle=False, a DistributedSampler, num_workers=0, pin_memory=True,
    persistent_workers=False; the train loop's set_epoch on loader.sampler. Every batch
    is handed over whole (the fast path), none cut into graphs."""
    from torch.utils.data.distributed import DistributedSampler

    import mdloader.pyg_fast as pyg_fast

    handed_over = []
    monkeypatch.setattr(pyg_fast, "for_collater", lambda b, real=pyg_fast.for_collater: handed_over.append(1) or real(b))

    every = graphs(41)
    sampler = DistributedSampler(dataset, num_replicas=comm.size, rank=comm.rank, shuffle=True)
    loader = PygDataLoader(dataset, batch_size=batch_size, shuffle=False, sampler=sampler, num_workers=0,
                           pin_memory=True, persistent_workers=False)
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        order = list(sampler)
        expected = [order[k:k + batch_size] for k in range(0, len(order), batch_size)]
        got = []
        for batch in loader:
            ids = batch.idx.tolist()
            assert_equals_from_data_list(batch, [every[i] for i in ids])
            assert batch.num_graphs == len(ids) == batch.batch_size
            got.append(ids)
        assert got == expected
    assert len(handed_over) == 2 * len(expected)


def batches_of(dataset, id_lists, **kwargs):
    """torch_geometric's DataLoader over ``dataset`` with the given batches: torch's
    fetcher calls ``__getitems__`` with each, as with HydraGNN's sampler."""
    return list(PygDataLoader(dataset, batch_sampler=id_lists, **kwargs))


def test_a_data_subclass_batches_as_its_own_class(comm):
    mine = featured(7)
    ds = DistDataset(mine, "t", comm)
    try:
        id_lists = [[3, 0, 6], [5]]
        for got, ids in zip(batches_of(ds, id_lists), id_lists, strict=True):
            assert isinstance(got, PairedData)
            assert_equals_from_data_list(got, [mine[i] for i in ids])
    finally:
        ds.close()


def test_the_collated_batch_pickles_copies_and_moves(comm, dataset):
    import copy

    every = graphs(41)
    ids = [4, 9, 9, 0]
    (got,) = batches_of(dataset, [ids])
    assert_equals_from_data_list(got, [every[i] for i in ids])
    assert_equals_from_data_list(pickle.loads(pickle.dumps(got)), [every[i] for i in ids])
    assert_equals_from_data_list(copy.copy(got).to("cpu"), [every[i] for i in ids])
    # A plain batch again: collated with others, it is an ordinary element.
    both = Batch.from_data_list([every[1], every[2]])
    assert Batch.from_data_list([got, both]).num_graphs == 2


def test_every_other_caller_gets_one_graph_per_id(comm, dataset):
    """Only torch's fetcher with torch_geometric's plain Collater takes the batch over
    whole; a direct call, a wrapper that joins two calls' graphs, follow_batch or
    exclude_keys, DataListLoader and a collate_fn of one's own get the graphs."""
    from torch_geometric.loader import DataListLoader

    every = graphs(41)
    got = dataset.__getitems__([4, 9, 0])
    assert [g.idx.item() for g in got] == [4, 9, 0]
    joined = Batch.from_data_list(dataset.__getitems__([1, 2]) + dataset.__getitems__([3]))
    assert_equals_from_data_list(joined, [every[i] for i in (1, 2, 3)])
    (followed,) = batches_of(dataset, [[5, 6]], follow_batch=["x"], exclude_keys=["y"])
    want = Batch.from_data_list([every[5], every[6]], follow_batch=["x"], exclude_keys=["y"])
    assert torch.equal(followed.x_batch, want.x_batch) and "y" not in followed.keys()
    (listed,) = list(DataListLoader(dataset, batch_sampler=[[7, 8]]))
    assert [g.idx.item() for g in listed] == [7, 8]
    (own,) = list(torch.utils.data.DataLoader(dataset, batch_sampler=[[2, 3, 4]], collate_fn=list))
    assert [g.idx.item() for g in own] == [2, 3, 4]


def test_node_counts_as_registered(comm, dataset):
    counts = dataset.get_node_counts()
    assert isinstance(counts, np.ndarray) and counts.dtype == np.int64 and len(counts) == len(dataset)
    every = graphs(41)
    assert counts.tolist() == [g.num_nodes for g in every]
    ids = [40, 0, 13]
    (got,) = batches_of(dataset, [ids])
    assert (np.diff(got.ptr.numpy()) == counts[ids]).all()


def test_node_counts_with_replica_groups_and_local_graphs(comm):
    every = graphs(20)
    if comm.size % 2 == 0:
        ds = DistDataset(every, "t", comm, ddstore_width=comm.size // 2)
        try:
            assert ds.get_node_counts().tolist() == [g.num_nodes for g in every]
        finally:
            ds.close()
    mine = every[comm.rank::comm.size]
    ds = DistDataset(mine, "t", comm, local=True)
    try:
        held = sum(comm.allgather(mine), [])
        assert ds.get_node_counts().tolist() == [g.num_nodes for g in held]
    finally:
        ds.close()


def test_the_loader_takes_hydragnns_arguments(comm, dataset):
    """num_workers / persistent_workers: accepted, the library's threads do the work;
    pin_memory: the batches' tensors pinned where an accelerator can use them."""
    from torch.utils.data.distributed import DistributedSampler

    sampler = DistributedSampler(dataset, num_replicas=comm.size, rank=comm.rank)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler, num_workers=4, pin_memory=True,
                        persistent_workers=False)
    every = graphs(41)
    n = 0
    for batch in loader:
        assert_same_batch(batch, Batch.from_data_list([every[i] for i in batch.idx.tolist()]))
        if loader.pin_memory:
            assert all(t.is_pinned() for t in (batch.x, batch.edge_index, batch.batch))
        n += 1
    assert n == len(loader)
    with pytest.raises(TypeError, match="prefetch_factor"):
        DataLoader(dataset, batch_size=2, prefetch_factor=3)
