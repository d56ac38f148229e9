"""Node-budget batches: mdloader.budget's sampler in mdloader.pyg.DataLoader(node_budget=...),
and HydraGNN's own node-budget sampler over mdloader.pyg.DistDataset, driven as
HydraGNN's create_dataloaders drives it (its node_budget branch, restated call for call:
hydragnn as a package does not import here), both with their batches handed whole to the
library. HydraGNN's sampler is read from a checkout of HydraGNN named by HYDRAGNN_SRC
(its hydragnn/preprocess/batch_sampler.py needs torch alone; the project holds no copy
of it); without one those tests skip."""

import importlib.util
import os
import pathlib
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the mdloader.pyg tests did not run")
pytest.importorskip("torch_geometric", reason="torch_geometric is not installed: the mdloader.pyg tests did not run")

from torch_geometric.data import Batch  # noqa: E402
from torch_geometric.loader import DataLoader as PygDataLoader  # noqa: E402

from mdloader.budget import NodeBudgetBatchSampler, pack  # noqa: E402
from mdloader.fairchem_samplers import max_atom_batches  # noqa: E402
from mdloader.pyg import DataLoader, DistDataset  # noqa: E402
from test_pyg import assert_same_batch, graphs  # noqa: E402


def test_pack_fills_greedily_within_budget_and_cap():
    counts = np.random.default_rng(0).integers(1, 30, 500)
    ids = np.random.default_rng(1).permutation(500)
    for cap in (None, 3):
        batches = pack(counts[ids], ids, 40, max_graphs=cap)
        assert np.array_equal(np.concatenate(batches), ids)  # every id, in order
        for k, batch in enumerate(batches):
            assert counts[batch].sum() <= 40 and (cap is None or len(batch) <= cap)
            if k + 1 < len(batches):  # full: the next graph did not fit, or the cap was reached
                nxt = counts[batches[k + 1][0]]
                assert counts[batch].sum() + nxt > 40 or len(batch) == cap
    # fairchem's max-atoms batches are the same packing (one above the budget left out there)
    assert max_atom_batches(counts[ids], ids, 40) == [b.tolist() for b in pack(counts[ids], ids, 40)]
    with pytest.raises(ValueError, match="above the budget"):
        pack([3, 50], [0, 1], 40)
    with pytest.raises(ValueError, match="must be positive"):
        pack([3], [0], 0)


def test_sampler_plan_is_balanced_the_same_everywhere_and_resumable():
    counts = np.random.default_rng(2).integers(3, 30, 2000)
    ranks = 4
    samplers = [NodeBudgetBatchSampler(counts, 128, ranks, r, seed=7, max_graphs=12) for r in range(ranks)]
    for s in samplers:
        s.set_epoch(3)
    taken = [list(s) for s in samplers]
    assert len({len(t) for t in taken}) == 1 and len(taken[0]) == len(samplers[0])
    every = np.concatenate([np.asarray(b) for t in taken for b in t])
    assert set(every.tolist()) == set(range(2000))  # padded with repeats, none missing
    costs = samplers[0].step_costs()
    assert (costs.max(axis=1) / costs.mean(axis=1)).mean() < 1.05  # similar batches side by side
    again = NodeBudgetBatchSampler(counts, 128, ranks, 2, seed=7, max_graphs=12)
    again.set_epoch_and_start_step(3, 9)
    assert list(again) == taken[2][9:]
    samplers[0].set_epoch(4)
    assert list(samplers[0]) != taken[0]


def test_node_budget_loader_batches_equal_the_plan_with_prefetch(comm):
    every = graphs(97, seed=4)
    ds = DistDataset(every, "trainset", comm)
    fetches = []
    real_fetch = ds.loader.fetch
    ds.loader.fetch = lambda *a, **k: fetches.append(1) or real_fetch(*a, **k)
    try:
        loader = DataLoader(ds, node_budget=24, max_graphs=5, shuffle=True, seed=3)
        counts = np.array([g.num_nodes for g in every])
        assert np.array_equal(ds.get_node_counts(), counts)
        plan = NodeBudgetBatchSampler(counts, 24, comm.size, comm.rank, max_graphs=5, seed=3)
        seen = set()
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            plan.set_epoch(epoch)
            want = list(plan)
            got = list(loader)
            assert len(got) == len(want) == len(loader)
            for batch, ids in zip(got, want):
                assert batch.num_nodes <= 24 and batch.num_graphs <= 5
                assert_same_batch(batch, Batch.from_data_list([every[i] for i in ids]))
                seen.update(ids)
        assert set().union(*comm.allgather(seen)) == set(range(97))
        assert not fetches  # each epoch handed whole to the library, no fetch per batch
        # resumable: a state taken mid-epoch resumes at its next batch
        loader.set_epoch(1)
        it = iter(loader)
        next(it), next(it)
        state = loader.state_dict()
        again = DataLoader(ds, node_budget=24, max_graphs=5, shuffle=True, seed=3)
        again.load_state_dict(state)
        rest = list(again)
        assert len(rest) == len(want) - 2
        for batch, ids in zip(rest, want[2:]):
            assert_same_batch(batch, Batch.from_data_list([every[i] for i in ids]))
        other = DataLoader(ds, node_budget=25, max_graphs=5, shuffle=True, seed=3)
        with pytest.raises(ValueError, match="node_budget was 24"):
            other.load_state_dict(state)
    finally:
        ds.close()


@pytest.mark.parametrize("case", ["zero", "negative", "not_int", "above", "differ", "cap_differs"])
def test_bad_budget_raises_on_every_rank(comm, case):
    every = graphs(30, seed=5)
    ds = DistDataset(every, "trainset", comm)
    biggest = max(g.num_nodes for g in every)
    budget, cap, match = {
        "zero": (0, None, "on rank 0: node_budget = 0: it must be positive"),
        "negative": (-3, None, "on rank 0: node_budget = -3"),
        "not_int": (2.5, None, "node_budget must be a positive integer"),
        "above": (biggest - 1, None, f"has {biggest} nodes, above the budget of {biggest - 1}"),
        "differ": (40 + comm.rank, None, "differ across ranks"),
        "cap_differs": (40, 2 + (comm.rank == comm.size - 1), "differ across ranks"),
    }[case]
    try:
        with pytest.raises((ValueError, TypeError), match=match):
            DataLoader(ds, node_budget=budget, max_graphs=cap)
        # nothing left half-agreed: the dataset still serves an epoch on every rank
        assert len(list(DataLoader(ds, batch_size=4))) == ds.loader.epoch_steps(4, False)
    finally:
        ds.close()


def test_max_graphs_alone_or_with_batch_size_is_refused(comm):
    ds = DistDataset(graphs(10), "trainset", comm)
    try:
        with pytest.raises(TypeError, match="pass node_budget= too"):
            DataLoader(ds, max_graphs=3)
        with pytest.raises(TypeError, match="no batch_size"):
            DataLoader(ds, batch_size=4, node_budget=30)
    finally:
        ds.close()


def test_node_budget_on_some_ranks_only_raises_on_every_rank(comm):
    """node_budget= on some ranks only: the others' loader makes no collective call in
    its constructor, so the budget's agreement met their first iter (an allreduce):
    mismatched collectives, a hang. Now a ValueError on every rank, on the budget side
    in the constructor and on the other in iter; a budget with a batch_size on one rank
    only is the agreement's TypeError on every rank. Then the dataset still serves."""
    if comm.size < 2:
        pytest.skip("needs 2 ranks")
    ds = DistDataset(graphs(30, seed=2), "trainset", comm)
    last = comm.size - 1
    try:
        with pytest.raises(ValueError, match="in another collective call") as caught:
            loader = DataLoader(ds, node_budget=30) if comm.rank == last else DataLoader(ds, batch_size=4)
            next(iter(loader))
        assert ("node_budget=30 on rank" in str(caught.value)) == (comm.rank == last)
        with pytest.raises(TypeError, match=f"on rank {last}: node_budget= makes the batches"):
            DataLoader(ds, node_budget=30, batch_size=4 if comm.rank == last else 1)
        assert len(list(DataLoader(ds, batch_size=4))) == ds.loader.epoch_steps(4, False)
    finally:
        ds.close()


def hydragnn_cost_aware_sampler():
    """HydraGNN's DistributedCostAwareBatchSampler, from the checkout at HYDRAGNN_SRC."""
    source = pathlib.Path(os.environ.get("HYDRAGNN_SRC", "")) / "hydragnn" / "preprocess" / "batch_sampler.py"
    if not os.environ.get("HYDRAGNN_SRC") or not source.is_file():
        pytest.skip("HydraGNN's sampler: set HYDRAGNN_SRC to a HydraGNN checkout (git clone "
                    "https://github.com/ORNL/HydraGNN) to run it over mdloader.pyg.DistDataset")
    spec = importlib.util.spec_from_file_location("hydragnn_batch_sampler", source)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.DistributedCostAwareBatchSampler


def create_dataloaders_node_budget(trainset, valset, testset, batching, group, loader_type):
    """HydraGNN's create_dataloaders, its node_budget branch (dist initialised, ``group``
    an MPI.Comm, HYDRAGNN_CUSTOM_DATALOADER unset): its calls in its order.
    ``loader_type``: its DataLoader (torch_geometric's), or mdloader.pyg.DataLoader where
    the script rebinds ``hydragnn.preprocess.load_data.DataLoader`` to it."""
    sampler_type = hydragnn_cost_aware_sampler()
    distributed_options = {"num_replicas": group.Get_size(), "rank": group.Get_rank(),
                           "pad_batches": not batching.get("drop_last", False)}

    def make_loader(dataset, shuffle):
        sampler_drop_last = False  # sampler_type is not CostAwareBatchSampler
        batch_sampler = sampler_type(dataset, max_cost=batching["max_nodes"], max_graphs=batching.get("max_graphs"),
                                     shuffle=batching.get("shuffle", shuffle), seed=batching.get("seed", 0),
                                     oversized_sample=batching.get("oversized_sample", "error"),
                                     drop_last=sampler_drop_last, **distributed_options)
        return loader_type(dataset, batch_sampler=batch_sampler, num_workers=0, pin_memory=True,
                           persistent_workers=False)

    return make_loader(trainset, True), make_loader(valset, True), make_loader(testset, True)


@pytest.mark.parametrize("rebound", [False, True])
def test_hydragnn_node_budget_sampler_over_distdataset(comm, rebound):
    """HydraGNN's DistributedCostAwareBatchSampler over mdloader.pyg.DistDataset: it asks
    the dataset for get_node_counts() (no graph read to plan); its batches equal
    Batch.from_data_list of the graphs it chose, epoch after epoch as HydraGNN's train
    loop sets them (``loader.batch_sampler.set_epoch``). Under mdloader.pyg.DataLoader
    (``rebound``) each epoch's batches are handed to the library whole and fetched ahead
    (no fetch per batch); under torch_geometric's, one collective fetch per batch."""
    sets = [graphs(n, seed=s) for n, s in ((83, 1), (29, 2), (31, 3))]
    datasets = [DistDataset(g, name, comm) for g, name in zip(sets, ("trainset", "valset", "testset"))]
    fetches = []
    for ds in datasets:
        real_fetch = ds.loader.fetch
        ds.loader.fetch = lambda *a, _f=real_fetch, **k: fetches.append(1) or _f(*a, **k)
    try:
        batching = {"mode": "node_budget", "max_nodes": 30, "max_graphs": 6, "seed": 11}
        loaders = create_dataloaders_node_budget(*datasets, batching, comm,
                                                 DataLoader if rebound else PygDataLoader)
        for epoch in (0, 1):
            for loader in loaders:  # train_validate_test's loop, before train()
                sampler = getattr(loader, "batch_sampler", None)
                sampler.set_epoch(epoch)
            for loader, every in zip(loaders, sets):
                want = list(loader.batch_sampler)
                got = list(loader)
                assert len(got) == len(want) == len(loader)
                assert len(set(comm.allgather(len(got)))) == 1
                for batch, ids in zip(got, want):
                    assert batch.num_nodes <= 30 and batch.num_graphs <= 6
                    assert_same_batch(batch, Batch.from_data_list([every[i] for i in ids]))
        if rebound:
            assert not fetches
        else:
            assert fetches
    finally:
        for ds in datasets:
            ds.close()


def test_fewer_batches_than_ranks_raises_on_every_rank(comm):
    ds = DistDataset(graphs(3), "trainset", comm)
    try:
        with pytest.raises(ValueError, match="fewer batches than ranks"):
            DataLoader(ds, node_budget=1000)
    finally:
        ds.close()


def test_node_budget_over_local_groups(comm):
    """local=True with a ddstore_width: each group's dataset is its ranks' graphs, and the
    budget's plan is the group's (its node counts, its ranks)."""
    if comm.size % 2:
        pytest.skip("needs an even number of ranks")
    mine = graphs(20 + comm.rank, seed=comm.rank)
    ds = DistDataset(mine, "t", comm, ddstore_width=comm.size // 2, local=True)
    try:
        every = sum(ds.ddstore_comm.allgather(mine), [])
        loader = DataLoader(ds, node_budget=30, shuffle=True, seed=2)
        seen = set()
        for batch, ids in zip(loader, list(loader.batch_sampler)):
            assert batch.num_nodes <= 30
            assert_same_batch(batch, Batch.from_data_list([every[i] for i in ids]))
            seen.update(ids)
        assert set().union(*ds.ddstore_comm.allgather(seen)) == set(range(len(every)))
    finally:
        ds.close()


def test_node_budget_epoch_differing_across_ranks_raises_on_every_rank(comm):
    """set_epoch(e) with e differing across ranks: the library's own sampler refuses it
    (MDL_ERR_INVALID_ARG on every rank); a node-budget loader took each rank's batches
    of a different epoch's plan (40 graphs: 31 distinct, some twice, 9 never) without an
    error. Now a ValueError on every rank, and the next epoch with agreed epochs runs."""
    if comm.size < 2:
        pytest.skip("needs 2 ranks")
    ds = DistDataset(graphs(40, seed=6), "trainset", comm)
    try:
        loader = DataLoader(ds, node_budget=30, shuffle=True, seed=1)
        loader.set_epoch(comm.rank)
        with pytest.raises(ValueError, match="epoch \\(set_epoch\\) differs across ranks"):
            list(loader)
        loader.set_epoch(1)
        taken = [int(i) for batch in loader for i in batch.idx.tolist()]
        assert len(set(sum(comm.allgather(taken), []))) == 40
    finally:
        ds.close()
