"""mdloader.pyg.DistDataset driven as HydraGNN drives its own DistDataset, at its head
(ORNL/HydraGNN d251f816): hydragnn/preprocess/load_data.py ``create_dataloaders`` and
hydragnn/train/train_validate_test.py's epoch loop, ``train``, ``validate`` and ``test``,
call for call, without hydragnn (its PyPI release, 3.0, predates that code); and the
DistDataset arguments and attributes its examples use (mdloader.pyg_hydragnn)."""

import sys
import types

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the mdloader.pyg tests did not run")
pytest.importorskip("torch_geometric", reason="torch_geometric is not installed: the mdloader.pyg tests did not run")

from torch.utils.data.distributed import DistributedSampler  # noqa: E402
from torch_geometric.data import Batch  # noqa: E402
from torch_geometric.loader import DataLoader as PygDataLoader  # noqa: E402

from mdloader import MDLError  # noqa: E402
from mdloader.pyg import DataLoader, DistDataset  # noqa: E402
from test_pyg import assert_same_batch, assert_same_graph, graphs  # noqa: E402


def create_dataloaders(trainset, valset, testset, batch_size, group):
    """create_dataloaders' distributed branch (HYDRAGNN_NUM_WORKERS and
    HYDRAGNN_CUSTOM_DATALOADER unset), its calls in its order; ``group`` an MPI.Comm."""
    group_size, group_rank = group.Get_size(), group.Get_rank()
    samplers = [DistributedSampler(ds, num_replicas=group_size, rank=group_rank, shuffle=True)
                for ds in (trainset, valset, testset)]
    train_loader = PygDataLoader(trainset, batch_size=batch_size, shuffle=False, sampler=samplers[0], num_workers=0,
                                 pin_memory=True, persistent_workers=False)
    val_loader = PygDataLoader(valset, batch_size=batch_size, shuffle=False, sampler=samplers[1])
    test_loader = PygDataLoader(testset, batch_size=batch_size, shuffle=False, sampler=samplers[2])
    return train_loader, val_loader, test_loader


def one_pass(loader, every, comm, expected_ids):
    """train/validate/test's loop over ``loader`` with HYDRAGNN_USE_ddstore=1, each batch
    checked against Batch.from_data_list of ``every``'s graphs of the sampler's ids."""
    from mpi4py import MPI

    use_ddstore = hasattr(loader.dataset, "ddstore") and hasattr(loader.dataset.ddstore, "epoch_begin")
    assert not use_ddstore  # HydraGNN's per-batch fences are skipped by themselves
    nbatch = MPI.COMM_WORLD.allreduce(len(loader), op=MPI.MIN)  # get_nbatch, then the min over ranks
    taken = 0
    for ibatch, data in enumerate(loader):
        if ibatch >= nbatch:
            break
        ids = expected_ids[ibatch * loader.batch_size:(ibatch + 1) * loader.batch_size]
        assert_same_batch(data, Batch.from_data_list([every[i] for i in ids]))
        taken += data.num_graphs
    return comm.allreduce(taken)


@pytest.mark.parametrize("grouped", [False, True])
def test_hydragnn_create_dataloaders_and_epoch_loop(comm, monkeypatch, grouped):
    """With ``grouped``, the multidataset examples' way: ``local=True`` with a
    ``ddstore_width`` of half the ranks, each rank's own graphs, and the samplers over
    ``trainset.ddstore_comm``; otherwise LennardJones': every graph, one group."""
    if grouped and comm.size % 2:
        pytest.skip("needs an even number of ranks")
    monkeypatch.setenv("HYDRAGNN_USE_ddstore", "1")
    if grouped:
        width = comm.size // 2
        opt = {"ddstore_width": width, "local": True}
        sets = [graphs(9 + 2 * comm.rank + k, seed=10 * comm.rank + k) for k in range(3)]
    else:
        opt = {"ddstore_width": None}
        sets = [graphs(23 + k, seed=k) for k in range(3)]
    trainset, valset, testset = (DistDataset(s, name, comm, **opt)
                                 for s, name in zip(sets, ("trainset", "valset", "testset")))
    try:
        group = trainset.ddstore_comm if grouped else comm
        # What each group's datasets hold: its ranks' graphs in rank order.
        everies = [sum(trainset.ddstore_comm.allgather(s), []) if grouped else s for s in sets]
        for ds, every in zip((trainset, valset, testset), everies):
            assert len(ds) == ds.len() == len(every)
            assert_same_graph(ds.get(len(every) - 1), every[-1])
        loaders = create_dataloaders(trainset, valset, testset, 4, group)
        for epoch in range(2):
            for dataloader in loaders:  # train_validate_test's set_epoch, as it finds it
                sampler = getattr(dataloader, "batch_sampler", None)
                if getattr(sampler, "set_epoch", None) is not None:
                    sampler.set_epoch(epoch)
                else:
                    dataloader.sampler.set_epoch(epoch)
            for loader, every in zip(loaders, everies):
                twin = DistributedSampler(every, num_replicas=group.Get_size(), rank=group.Get_rank(), shuffle=True)
                twin.set_epoch(epoch)
                taken = one_pass(loader, every, comm, list(twin))
                if not grouped:
                    assert taken >= len(every)  # DistributedSampler pads to a multiple of the ranks
    finally:
        for ds in (trainset, valset, testset):
            ds.close()


def test_local_groups_hold_their_own_ranks_graphs(comm):
    if comm.size % 2:
        pytest.skip("needs an even number of ranks")
    mine = graphs(3 + comm.rank, seed=comm.rank)
    ds = DistDataset(mine, "t", comm, ddstore_width=comm.size // 2, local=True)
    try:
        assert (ds.ddstore_comm_size, ds.ddstore_comm_rank) == (comm.size // 2, comm.rank % (comm.size // 2))
        every = sum(ds.ddstore_comm.allgather(mine), [])
        assert len(ds) == len(every)
        for i in range(len(every)):
            assert_same_graph(ds[i], every[i])
        # The library's own sampler and loader too, over the group: DistributedSampler's
        # split, ceil(N / ranks) graphs a rank (padded by wrapping around).
        seen = sum((b.num_graphs for b in DataLoader(ds, batch_size=2, shuffle=True)), 0)
        ranks = ds.ddstore_comm_size
        assert ds.ddstore_comm.allreduce(seen) == -(-len(every) // ranks) * ranks
    finally:
        ds.close()
    from mpi4py import MPI

    assert ds.ddstore_comm == MPI.COMM_NULL  # freed by close
    ds.close()  # again: nothing left to free


def test_a_group_that_fails_to_register_fails_every_rank(comm):
    if comm.size % 2:
        pytest.skip("needs an even number of ranks")
    mine = graphs(3) if comm.rank else [graphs(3)[0], "not a graph"]
    with pytest.raises(ValueError, match=r"on rank 0: .*graph 1 is a str|registration failed in another group, on "
                                         r"rank 0: ValueError: .*graph 1 is a str"):
        DistDataset(mine, "t", comm, ddstore_width=comm.size // 2, local=True)


@pytest.mark.parametrize("bad, error, message", [
    ({"ddstore_width": 0}, ValueError, r"t: on rank 0: ddstore_width=0 is not in 1 \.\. "),
    ({"ddstore_width": 1.0}, TypeError, r"t: on rank 0: ddstore_width must be an integer, not 1\.0"),
    ({"local": "yes"}, TypeError, r"t: on rank 0: local must be True or False, not 'yes'"),
    ({"ddstore_store_per_sample": None}, TypeError, r"t: on rank 0: ddstore_store_per_sample must be True or False"),
    ({"var_config": {"type": []}}, ValueError, r"t: on rank 0: var_config has no input_node_features, output_index"),
])
def test_bad_arguments_on_one_rank_fail_on_every_rank(comm, bad, error, message):
    with pytest.raises(error, match=message):
        DistDataset(graphs(5), "t", comm, **(bad if comm.rank == 0 else {}))


def test_arguments_that_differ_across_ranks_fail_on_every_rank(comm):
    if comm.size < 2:
        pytest.skip("needs 2 ranks")
    with pytest.raises(ValueError, match=r"t: the arguments differ across ranks \(ddstore_width, local") as caught:
        DistDataset(graphs(5), "t", comm, ddstore_width=comm.size if comm.rank else 1, local=True)
    assert len(set(comm.allgather(str(caught.value)))) == 1, "the same message on every rank"
    # var_config's values, not only whether one is given: an output index that differs
    # on the last rank would make its graphs' y another target's.
    config = dict(VAR_CONFIG, output_index=[1] if comm.rank == comm.size - 1 else [0])
    with pytest.raises(ValueError, match=r"t: the arguments differ across ranks .*var_config's input_node_features"):
        DistDataset(graphs(5), "t", comm, var_config=config)


VAR_CONFIG = {"input_node_features": [0, 2], "type": ["graph"], "output_index": [0], "graph_feature_dims": [19],
              "node_feature_dims": [5]}


@pytest.fixture
def fake_hydragnn(monkeypatch):
    """hydragnn.preprocess's two updates, recording their arguments (hydragnn is not a
    test dependency)."""
    calls = []

    def update_predicted_values(types_, index, graph_dims, node_dims, data):
        calls.append((types_, index, graph_dims, node_dims))
        data.y = data.y[:, :1] * 2

    def update_atom_features(features, data):
        data.x = data.x[:, features]

    preprocess = types.ModuleType("hydragnn.preprocess")
    preprocess.update_predicted_values, preprocess.update_atom_features = update_predicted_values, update_atom_features
    monkeypatch.setitem(sys.modules, "hydragnn", types.ModuleType("hydragnn"))
    monkeypatch.setitem(sys.modules, "hydragnn.preprocess", preprocess)
    return calls


def test_var_config_is_applied_where_hydragnn_applies_it(comm, fake_hydragnn):
    every = graphs(6)
    kept = DistDataset(every, "t", comm, var_config=VAR_CONFIG)  # per sample: as stored
    try:
        assert kept.var_config is VAR_CONFIG and not fake_hydragnn
        assert_same_graph(kept[5], graphs(6)[5])
    finally:
        kept.close()
    updated = DistDataset(every, "t", comm, var_config=VAR_CONFIG, ddstore_store_per_sample=False)
    try:
        assert fake_hydragnn[0] == (["graph"], [0], [19], [5])
        want = graphs(6)[4]
        want.y, want.x = want.y[:, :1] * 2, want.x[:, [0, 2]]
        assert_same_graph(updated[4], want)
        assert_same_graph(every[4], graphs(6)[4])  # the caller's graphs untouched
    finally:
        updated.close()


def test_var_config_without_hydragnn_fails_on_every_rank(comm, monkeypatch):
    monkeypatch.setitem(sys.modules, "hydragnn", None)  # not importable
    with pytest.raises(ValueError, match=r"on rank 0: t: var_config with ddstore_store_per_sample=False applies "
                                         r"HydraGNN's updates"):
        DistDataset(graphs(4), "t", comm, var_config=VAR_CONFIG, ddstore_store_per_sample=False)


def tagged_graphs(count, tag):
    out = graphs(count)
    for data in out:
        data.dataset_name = tag
    return out


@pytest.mark.parametrize("name, tag", [("b", torch.tensor([[1]])), ("unknown", torch.tensor([[-1]]))])
def test_dataset_name_tags_every_graph_and_batch(comm, name, tag):
    every = tagged_graphs(21, tag)
    ds = DistDataset(graphs(21), "t", comm)
    try:
        ds.dataset_name_dict = {"a": torch.tensor([[0]]), "b": torch.tensor([[1]])}
        ds.dataset_name = name
        assert_same_graph(ds[20], every[20])
        sampler = DistributedSampler(ds, num_replicas=comm.size, rank=comm.rank, shuffle=True)
        ids = list(sampler)
        for k, batch in enumerate(PygDataLoader(ds, batch_size=4, sampler=sampler)):
            assert_same_batch(batch, Batch.from_data_list([every[i] for i in ids[4 * k:4 * k + 4]]))
        for batch in DataLoader(ds, batch_size=4, sampler=sampler):
            assert_same_batch(batch, Batch.from_data_list([every[i] for i in batch.idx.tolist()]))
    finally:
        ds.close()


def test_graphs_tagged_by_their_source_keep_their_tag(comm):
    every = tagged_graphs(9, torch.tensor([[3]]))  # as HydraGNN's AdiosDataset returns them
    ds = DistDataset(every, "t", comm)
    try:
        assert_same_batch(ds._fetch([8, 1]), Batch.from_data_list([every[8], every[1]]))
    finally:
        ds.close()


def test_a_dataset_name_without_a_table_fails_on_every_rank(comm):
    ds = DistDataset(graphs(5), "t", comm)
    try:
        if comm.rank == 0:
            ds.dataset_name = "a"
        with pytest.raises(ValueError, match=r"on rank 0: dataset_name='a' is set but dataset_name_dict is not"):
            next(iter(DataLoader(ds, batch_size=2)))
        with pytest.raises(ValueError if comm.rank == 0 else MDLError,
                           match=r"dataset_name='a' is set but dataset_name_dict is not" if comm.rank == 0 else None):
            ds[0]
        ds.dataset_name = None
        assert_same_graph(ds[0], graphs(5)[0])  # the loader goes on
    finally:
        ds.close()
