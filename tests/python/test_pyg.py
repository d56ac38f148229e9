"""mdloader.pyg: torch_geometric graphs in, Batch objects out, equal to
Batch.from_data_list of the same graphs; HydraGNN's DistDataset arguments and its
torch_geometric DataLoader + DistributedSampler pattern.

torch and torch_geometric are installed by tests/run_binding_tests.sh; without them
these tests skip, saying so."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the mdloader.pyg tests did not run")
pytest.importorskip("torch_geometric", reason="torch_geometric is not installed: the mdloader.pyg tests did not run")

from torch_geometric.data import Batch, Data  # noqa: E402

from mdloader import EpochTakenOver  # noqa: E402
from mdloader.pyg import DataLoader, DistDataset, collate  # noqa: E402


def graphs(count: int, seed: int = 0) -> list:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(count):
        n = int(torch.randint(1, 12, (1,), generator=g))
        m = int(torch.randint(0, 20, (1,), generator=g))
        out.append(Data(x=torch.randn(n, 5, generator=g), z=torch.randint(0, 9, (n,), generator=g),
                        pos=torch.randn(n, 3, generator=g), edge_index=torch.randint(0, n, (2, m), generator=g),
                        edge_attr=torch.randn(m, 2, generator=g), y=torch.randn(1, 19, generator=g), idx=i,
                        weight=float(i) / 4))
    return out


def assert_same_fields(got: Data, want: Data) -> None:
    assert set(got.keys()) == set(want.keys())
    for key in want.keys():
        a, b = got[key], want[key]
        if isinstance(b, torch.Tensor):
            assert a.dtype == b.dtype and a.shape == b.shape, key
            if b.dtype == torch.bfloat16:  # bit for bit (a NaN equals nothing)
                a, b = a.view(torch.int16), b.view(torch.int16)
            assert torch.equal(a, b), key
        else:
            assert a == b, key


def assert_same_graph(got: Data, want: Data) -> None:
    assert type(got) is type(want), (type(got), type(want))
    assert_same_fields(got, want)


def assert_same_batch(got: Batch, want: Batch) -> None:
    assert_same_fields(got, want)
    for name in ("_slice_dict", "_inc_dict"):
        a, b = getattr(got, name), getattr(want, name)
        assert set(a) == set(b), name
        for key in b:
            assert torch.equal(a[key], b[key]), (name, key)
    assert got.num_graphs == want.num_graphs


@pytest.fixture
def dataset(comm):
    ds = DistDataset(graphs(41), "trainset", comm)
    yield ds
    ds.close()


def test_a_fetched_batch_equals_from_data_list(comm, dataset):
    every = graphs(41)
    rng = np.random.default_rng(comm.rank)
    for ids in ([3, 0, 40, 17, 17], rng.integers(0, 41, 9).tolist()):
        got = dataset._fetch(ids)
        want = Batch.from_data_list([every[i] for i in ids])
        assert_same_batch(got, want)
        # What get_example and to_data_list give back, as for torch_geometric's own batch.
        for mine, theirs in zip(got.to_data_list(), want.to_data_list()):
            assert set(mine.keys()) == set(theirs.keys())
            assert all(torch.equal(mine[key], theirs[key]) for key in theirs.keys())
    fields = dataset.loader.fetch([1, 2, 3]).fields
    got = collate(fields, dataset.facts, follow_batch=["edge_attr"], exclude_keys=["weight"])
    assert_same_batch(got, Batch.from_data_list(every[1:4], follow_batch=["edge_attr"], exclude_keys=["weight"]))


def test_the_loader_covers_every_graph_once_per_epoch(comm, dataset):
    loader = DataLoader(dataset, batch_size=4, shuffle=True, seed=1)
    every = graphs(41)
    for epoch in range(2):
        loader.set_epoch(epoch)
        seen, batches = [], 0
        for batch in loader:
            assert_same_batch(batch, Batch.from_data_list([every[i] for i in batch.idx.tolist()]))
            seen += batch.idx.tolist()
            batches += 1
        assert batches == len(loader)
        everyone = sum(comm.allgather(seen), [])
        assert set(everyone) == set(range(41))


def test_an_epoch_started_ahead_gives_the_batches_of_the_epoch_asked_for(comm, dataset):
    """Each epoch's ids, in order, equal those of a loader that starts nothing ahead,
    whether the guess was right (set_epoch(e + 1), or no set_epoch: the same epoch) or
    wrong (a jump, other settings), and around other uses of the dataset."""

    def ids_of(loader):
        return [b.idx.tolist() for b in loader]

    def reference(epoch, batch_size=4):
        plain = DataLoader(dataset, batch_size=batch_size, shuffle=True, seed=3, start_ahead=False)
        plain.set_epoch(epoch)
        return ids_of(plain)

    want = {e: reference(e) for e in (0, 1, 2, 7)}
    ahead = DataLoader(dataset, batch_size=4, shuffle=True, seed=3)
    got = []
    for epoch in (0, 1, 2):  # guessed right: e + 1
        ahead.set_epoch(epoch)
        got.append(ids_of(ahead))
        assert ahead._ahead is not None and ahead._ahead[0][0] == epoch + 1
    assert got == [want[0], want[1], want[2]]
    ahead.set_epoch(7)  # guessed wrong: epoch 3 was started ahead
    assert ids_of(ahead) == want[7]
    assert ids_of(ahead) == want[7]  # no set_epoch: the same epoch again, started ahead
    ahead.batch_size = 5  # other settings: the epoch started ahead is not used
    assert ids_of(ahead) == reference(7, batch_size=5)
    dataset[0]  # another use of the dataset ends the epoch started ahead
    ahead.batch_size = 4
    assert ids_of(ahead) == want[7]
    for step, _ in enumerate(ahead):  # a loop left early starts nothing ahead
        if step == 1:
            break
    assert ahead._ahead is None
    assert ids_of(ahead) == want[7]


def test_a_collective_call_on_dataset_loader_stops_the_loaders_thread_first(comm, dataset):
    """job_stats, fetch and end_epoch through dataset.loader, between epochs (the next
    one started ahead on the loader's thread) and in a loop: the thread's epoch ends
    first on every rank (left running, its mdl_epoch_begin met job_stats in different
    orders on different ranks: MPI_ERR_TRUNCATE); a loop whose epoch was ended so
    raises at its next batch instead of ending as if complete."""

    def ids_of(loader):
        return [b.idx.tolist() for b in loader]

    want = ids_of(DataLoader(dataset, batch_size=4, shuffle=True, seed=3, start_ahead=False))
    loader = DataLoader(dataset, batch_size=4, shuffle=True, seed=3)
    calls = {"job_stats": lambda: dataset.loader.job_stats(), "fetch": lambda: dataset.loader.fetch([0, 1]),
             "end_epoch": lambda: dataset.loader.end_epoch(), "set_prefetch": lambda: dataset.loader.set_prefetch(2),
             "set_backend": lambda: dataset.loader.set_backend("auto")}
    for name, call in calls.items():
        for _ in range(3):
            assert ids_of(loader) == want, name
            assert dataset._open_epoch is not None  # the next epoch started ahead
            call()
            assert dataset._open_epoch is None, name
        batches = iter(loader)
        next(batches)
        call()
        with pytest.raises(EpochTakenOver):
            next(batches)
    assert ids_of(loader) == want
    # A call in the body of the loop's last batch: the epoch ran to its end.
    taken = 0
    for taken, _ in enumerate(loader, 1):
        if taken == len(loader):
            dataset.loader.job_stats()
    assert taken == len(loader)
    # An epoch of the Loader's own begins at its generator's first next: the thread of
    # an epoch begun after the call (but before that next) is stopped there.
    theirs = dataset.loader.epoch(4, seed=9)
    batches = iter(loader)
    next(batches)
    got = [b.ids.tolist() for b in theirs]
    with pytest.raises(EpochTakenOver):
        next(batches)
    assert got == [b.ids.tolist() for b in dataset.loader.epoch(4, seed=9)]
    assert ids_of(loader) == want


def test_leaving_early_and_a_second_loader(comm, dataset):
    val = DistDataset(graphs(9, seed=5), "valset", comm)
    try:
        train_loader = DataLoader(dataset, batch_size=2, shuffle=True)
        val_loader = DataLoader(val, batch_size=3)
        for step, batch in enumerate(train_loader):
            if step == 1:
                break  # leave the epoch early
        assert sum(b.num_graphs for b in val_loader) > 0  # a validation pass in the middle
        assert len(list(train_loader)) == len(train_loader)  # the next epoch starts cleanly
    finally:
        val.close()


def test_torch_geometric_dataloader_with_a_distributed_sampler(comm, dataset):
    """HydraGNN's pattern: torch_geometric's DataLoader, DistributedSampler; one
    collective fetch per batch through __getitems__."""
    from torch.utils.data.distributed import DistributedSampler
    from torch_geometric.loader import DataLoader as PygDataLoader

    every = graphs(41)
    sampler = DistributedSampler(dataset, num_replicas=comm.size, rank=comm.rank, shuffle=True, seed=2)
    for batch in PygDataLoader(dataset, batch_size=5, shuffle=False, sampler=sampler):
        assert_same_batch(batch, Batch.from_data_list([every[i] for i in batch.idx.tolist()]))
    assert dataset[7].idx == 7


def test_ddstore_width_is_replica_groups(comm):
    if comm.size % 2:
        pytest.skip("needs an even number of ranks")
    ds = DistDataset(graphs(20), "trainset", comm, ddstore_width=comm.size // 2)
    try:
        assert ds.loader.replica.num_groups == 2
        every = graphs(20)
        assert_same_batch(ds._fetch([19, 0]), Batch.from_data_list([every[19], every[0]]))
    finally:
        ds.close()


def test_graphs_that_differ_fail_on_every_rank(comm):
    mine = graphs(6)
    if comm.rank == comm.size - 1:
        for data in mine:
            data.pos = data.pos.double()
    with pytest.raises(ValueError, match=r"field 'pos' is float32\[n, 3\] on rank 0 and float64\[n, 3\] on rank"):
        DistDataset(mine, "trainset", comm, local=True)


def test_the_loader_runs_a_users_sampler_as_its_own_epoch(comm, dataset):
    """HydraGNN's DistributedSampler (and a batch sampler) through mdloader.pyg's
    DataLoader: the sampler's batches, in its order, equal to from_data_list."""
    from torch.utils.data import BatchSampler
    from torch.utils.data.distributed import DistributedSampler

    every = graphs(41)
    sampler = DistributedSampler(dataset, num_replicas=comm.size, rank=comm.rank, shuffle=True, seed=3)
    for drop_last in (False, True):
        loader = DataLoader(dataset, batch_size=4, sampler=sampler, drop_last=drop_last)
        for epoch in range(2):
            loader.set_epoch(epoch)
            order = list(sampler)
            expected = [order[k:k + 4] for k in range(0, len(order), 4)]
            if drop_last and len(expected[-1]) < 4:
                expected.pop()
            got = []
            for batch in loader:
                assert_same_batch(batch, Batch.from_data_list([every[i] for i in batch.idx.tolist()]))
                got.append(batch.idx.tolist())
            assert got == expected and len(loader) == len(expected)
    batches = BatchSampler(DistributedSampler(dataset, num_replicas=comm.size, rank=comm.rank, seed=4), 3, False)
    got = [b.idx.tolist() for b in DataLoader(dataset, batch_sampler=batches)]
    assert got == [list(b) for b in batches]


def test_the_loader_names_what_it_does_not_take(dataset):
    with pytest.raises(TypeError, match="exclude each other"):
        DataLoader(dataset, batch_size=2, shuffle=True, sampler=[0, 1])
    with pytest.raises(TypeError, match="not both"):
        DataLoader(dataset, batch_size=2, sampler=[0, 1], batch_sampler=[[0, 1]])
    with pytest.raises(TypeError, match="timeout"):  # num_workers & co. are accepted (test_pyg_fast.py)
        DataLoader(dataset, batch_size=2, timeout=2)


def test_worker_processes_get_a_clear_error(comm, dataset):
    from torch.utils.data.distributed import DistributedSampler
    from torch_geometric.loader import DataLoader as PygDataLoader

    sampler = DistributedSampler(dataset, num_replicas=comm.size, rank=comm.rank)
    loader = PygDataLoader(dataset, batch_size=4, sampler=sampler, num_workers=1, multiprocessing_context="spawn")
    with pytest.raises(RuntimeError, match="worker processes cannot make"):
        next(iter(loader))


def test_graphs_without_nodes_batch_as_torch_geometric_does(comm):
    mine = [Data(x=torch.randn(n, 2), edge_index=torch.zeros(2, 0, dtype=torch.long)) for n in (3, 0, 2, 4)]
    if comm.rank == 0:
        mine = [Data(x=torch.zeros(0, 2), edge_index=torch.zeros(2, 0, dtype=torch.long))]  # cannot tell increments
    ds = DistDataset(mine, "t", comm, local=True)
    try:
        every = sum(comm.allgather(mine), [])
        ids = list(range(len(every)))
        assert_same_batch(ds._fetch(ids), Batch.from_data_list([every[i] for i in ids]))
    finally:
        ds.close()


def test_a_failure_on_one_rank_before_the_agreement_raises_everywhere(comm):
    # torch_geometric cannot infer num_nodes for rank 0's graph: Data.__inc__ raises there.
    graph = Data(my_index=torch.tensor([[0, 1]]), y=torch.zeros(1))
    if comm.rank:
        graph.x = torch.zeros(2, 1)
    with pytest.raises(ValueError, match=r"on rank 0: RuntimeError: Unable to infer 'num_nodes'"):
        DistDataset([graph], "t", comm, local=True)
    with pytest.raises(ValueError, match=r"on rank 0: t: TypeError"):
        DistDataset(None if comm.rank == 0 else [Data(x=torch.zeros(2, 1))], "t", comm, local=True)


class PairedData(Data):
    """A Data subclass as torch_geometric's docs show it: its own concatenation dimension."""

    def __cat_dim__(self, key, value, *args, **kwargs):
        return 1 if key == "foo" else super().__cat_dim__(key, value, *args, **kwargs)


def test_data_subclasses_and_torch_geometric_own_exceptions(comm):
    mine = [PairedData(x=torch.randn(3, 2), foo=torch.randn(2, k + 1)) for k in range(4)]
    ds = DistDataset(mine, "t", comm, local=True)
    try:
        every = sum(comm.allgather(mine), [])
        got = ds._fetch([1, 0, 3])
        want = Batch.from_data_list([every[i] for i in (1, 0, 3)])
        assert isinstance(got, PairedData) and isinstance(want, PairedData)
        assert_same_batch(got, want)
        assert [d.foo.shape for d in got.to_data_list()] == [d.foo.shape for d in want.to_data_list()]
    finally:
        ds.close()
    featured = [Data(feat=torch.randn(3, 2), y=torch.zeros(1)) for _ in range(3)]  # node count not inferable
    ds = DistDataset(featured, "t", comm, local=True)
    try:
        every = sum(comm.allgather(featured), [])
        assert_same_batch(ds._fetch([0, 2]), Batch.from_data_list([every[0], every[2]]))
    finally:
        ds.close()


def featured(count: int) -> list:
    """Graphs of a Data subclass that concatenates ``foo`` along its dimension 1."""
    g = torch.Generator().manual_seed(7)
    return [PairedData(x=torch.randn(3 + k, 2, generator=g), edge_index=torch.tensor([[0, 1], [1, 2]]),
                       foo=torch.randn(10, k + 1, generator=g), idx=k) for k in range(count)]


@pytest.mark.parametrize("local", [False, True])
def test_a_rank_without_graphs_rebuilds_them_as_their_class(comm, local):
    """One graph of a subclass with its own __cat_dim__: the ranks that hold none cut
    batches with the subclass too (they took plain Data and cut foo along dimension 0)."""
    stored = featured(1)
    ds = DistDataset(stored if not local or comm.rank == 0 else [], "t", comm, local=local)
    try:
        assert ds.data_class is PairedData
        assert_same_graph(ds[0], stored[0])
        for got in ds.__getitems__([0, 0]):
            assert_same_graph(got, stored[0])
        for batch in DataLoader(ds, batch_size=1):
            assert isinstance(batch, PairedData)
            assert_same_graph(batch.get_example(0), stored[0])
    finally:
        ds.close()


def test_graphs_of_different_classes_fail_on_every_rank(comm):
    plain = [Data(x=torch.randn(3, 2)), Data(x=torch.randn(2, 2))]
    paired = [PairedData(x=torch.randn(3, 2)), PairedData(x=torch.randn(2, 2))]
    mixed = [plain[0], paired[1]] if comm.rank == comm.size - 1 else plain
    with pytest.raises(ValueError, match=rf"on rank {comm.size - 1}: ValueError: graph 1 is a test_pyg.PairedData, "
                                         "graph 0 a torch_geometric.data.data.Data: every graph must be of one class"):
        DistDataset(mixed, "t", comm, local=True)
    with pytest.raises(ValueError, match=r"classes differ across ranks: rank 0's are test_pyg.PairedData, rank 1's "
                                         r"torch_geometric.data.data.Data"):
        DistDataset(paired if comm.rank == 0 else plain, "t", comm, local=True)


def test_a_class_a_rank_without_graphs_cannot_import_fails_on_every_rank(comm):
    class Hidden(Data):  # defined in a function: not importable by its name
        pass

    mine = [Hidden(x=torch.randn(2, 2))]
    with pytest.raises(ValueError, match=r"rank 1 holds no graphs and cannot import their class "
                                         r"test_pyg.test_a_class_a_rank.*<locals>.Hidden \(AttributeError"):
        DistDataset(mine if comm.rank == 0 else [], "t", comm, local=True)
    ds = DistDataset(mine, "t", comm, local=True)  # every rank holds its own: nothing to import
    try:
        assert ds.data_class is Hidden and isinstance(ds[comm.size - 1], Hidden)
    finally:
        ds.close()


def bfloat16_graphs(count: int) -> list:
    """Graphs with bfloat16 attributes over every kind of bit pattern (NaNs with
    payloads, infinities, subnormals, -0)."""
    g = torch.Generator().manual_seed(11)
    out = []
    for i in range(count):
        n = 2 + i % 4
        bits = torch.randint(-(2**15), 2**15, (n, 3), generator=g, dtype=torch.int16)
        if i == 0:
            bits[0] = torch.tensor([0x7FC1, -0x8000, 0x0001], dtype=torch.int16)  # NaN payload, -0, subnormal
        out.append(Data(x=bits.view(torch.bfloat16), pos=torch.randn(n, 3, generator=g),
                        edge_index=torch.randint(0, n, (2, 3), generator=g),
                        y=torch.randn(1, generator=g).bfloat16(), idx=i))
    return out


def test_bfloat16_attributes_come_back_bit_for_bit(comm):
    every = bfloat16_graphs(9)
    ds = DistDataset(every, "t", comm)
    try:
        ids = [8, 0, 3, 3]
        got, want = ds._fetch(ids), Batch.from_data_list([every[i] for i in ids])
        assert got.x.dtype == torch.bfloat16 and got.y.dtype == torch.bfloat16
        assert_same_batch(got, want)
        for mine, theirs in zip(got.to_data_list(), [every[i] for i in ids]):
            assert_same_graph(mine, theirs)
        assert_same_graph(ds[0], every[0])
        for batch in DataLoader(ds, batch_size=2, shuffle=True):
            for mine in batch.to_data_list():
                assert_same_graph(mine, every[int(mine.idx)])
    finally:
        ds.close()


def test_bfloat16_that_cannot_be_stored_is_named(comm):
    index = Data(x=torch.randn(2, 1), my_index=torch.zeros(2, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"attribute 'my_index': a bfloat16 attribute incremented by the node count"):
        DistDataset([index], "t", comm, local=True)
    import mdloader

    ld = mdloader.Loader(comm)
    try:
        with pytest.raises(ValueError, match=r"field 'w': numpy cannot take a Tensor of dtype torch.bfloat16"):
            ld.register_shard([{"w": torch.zeros(2, dtype=torch.bfloat16)}])
    finally:
        ld.close()


def resumable_loaders(comm, dataset):
    """(name, a function making a loader) for each way of ordering an epoch."""
    from torch.utils.data import BatchSampler
    from torch.utils.data.distributed import DistributedSampler

    def sampler():
        return DistributedSampler(dataset, num_replicas=comm.size, rank=comm.rank, shuffle=True, seed=3)

    return [
        ("library", lambda: DataLoader(dataset, batch_size=4, shuffle=True, seed=5)),
        ("library-drop-last", lambda: DataLoader(dataset, batch_size=4, shuffle=True, seed=5, drop_last=True)),
        ("library-in-the-loop", lambda: DataLoader(dataset, batch_size=4, shuffle=True, seed=5, collate_ahead=0)),
        ("sampler", lambda: DataLoader(dataset, batch_size=4, sampler=sampler())),
        ("batch-sampler", lambda: DataLoader(dataset, batch_sampler=BatchSampler(sampler(), 3, True))),
    ]


def test_a_state_resumes_the_epoch_at_its_next_batch(comm, dataset):
    """A state taken after k batches of epoch 1 (k from none to all), through json, in a
    new loader: the rest of epoch 1, then epoch 2 whole, as the uninterrupted run; a
    state taken again in the resumed run resumes as well."""
    import json

    def ids_of(batches):
        return [b.idx.tolist() for b in batches]

    for name, make in resumable_loaders(comm, dataset):
        whole = make()
        want = {}
        for epoch in (1, 2):
            whole.set_epoch(epoch)
            want[epoch] = ids_of(whole)
        steps = len(want[1])
        for k in sorted({0, 1, steps // 2, steps}):
            first = make()
            first.set_epoch(1)
            batches = iter(first)
            assert ids_of(next(batches) for _ in range(k)) == want[1][:k], name
            state = json.loads(json.dumps(first.state_dict()))
            assert (state["epoch"], state["step"]) == (1, k), name
            second = make()
            second.load_state_dict(state)
            assert second.state_dict() == state
            second.set_epoch(1)
            resumed = iter(second)
            got = ids_of(next(resumed) for _ in range((steps - k) // 2))
            # Interrupted again in the resumed epoch: the step counts from the epoch's start.
            third = make()
            third.load_state_dict(second.state_dict())
            got += ids_of(third)
            assert got == want[1][k:], (name, k)
            third.set_epoch(2)
            assert ids_of(third) == want[2], (name, k)
            assert third.state_dict()["step"] == len(want[2])


def test_a_state_that_does_not_fit_fails_on_every_rank(comm, dataset):
    loader = DataLoader(dataset, batch_size=4, shuffle=True, seed=5)
    loader.set_epoch(3)
    state = loader.state_dict()
    cases = {
        "batch_size was 4 in the saved run, is 5 in this one": DataLoader(dataset, batch_size=5, shuffle=True, seed=5),
        "seed was 5 in the saved run, is 6 in this one": DataLoader(dataset, batch_size=4, shuffle=True, seed=6),
        "sampler was 'library' in the saved run, is 'user'": DataLoader(dataset, batch_size=4, sampler=range(3)),
    }
    for message, other in cases.items():
        with pytest.raises(ValueError, match=r"load_state_dict: on rank 0: " + message):
            other.load_state_dict(state)
    shorter = DistDataset(graphs(40), "shorter", comm)
    try:
        with pytest.raises(ValueError, match="num_samples was 41 in the saved run, is 40 in this one"):
            DataLoader(shorter, batch_size=4, shuffle=True, seed=5).load_state_dict(state)
    finally:
        shorter.close()
    with pytest.raises(ValueError, match=rf"step {len(loader) + 1} is past the epoch's {len(loader)} batches"):
        loader.load_state_dict({**state, "step": len(loader) + 1})
    with pytest.raises(ValueError, match="the state has no seed, shuffle: not one of DataLoader.state_dict()"):
        loader.load_state_dict({k: v for k, v in state.items() if k not in ("seed", "shuffle")})
    with pytest.raises(ValueError, match=r"the states differ across ranks \(epoch, step\): rank 0's \(3, 0\), rank 1's "
                                         r"\(3, 1\)"):
        loader.load_state_dict({**state, "step": min(comm.rank, 1)})
    # A user's sampler: its number of batches is known at iter, where a step past it fails.
    users = DataLoader(dataset, batch_size=4, sampler=range(comm.rank, 41, comm.size), drop_last=True)
    users.load_state_dict({**users.state_dict(), "step": 99})
    with pytest.raises(ValueError, match=r"resumes at batch 99, past this epoch's \d+ batches"):
        iter(users)
    assert loader.state_dict() == state  # nothing was loaded
    assert len(list(loader)) == len(loader)


def test_ranks_with_different_numbers_of_batches_are_named(comm, dataset):
    """A user's sampler of uneven shares: len(loader) is this rank's, and iter names
    every rank's count (the library said only "2 on some, 3 on others")."""
    ids = list(range(12 if comm.rank == 0 else 8))
    loader = DataLoader(dataset, batch_size=4, sampler=ids)
    assert len(loader) == (3 if comm.rank == 0 else 2)
    counts = ", ".join(f"rank {r}: {3 if r == 0 else 2}" for r in range(comm.size))
    with pytest.raises(ValueError, match=rf"different numbers of batches this epoch \({counts}\); every rank must take "
                                         r"as many: use torch's DistributedSampler .* or drop_last=True"):
        iter(loader)
    uneven = list(range(9 if comm.rank == 0 else 8))  # less than a batch apart: drop_last evens them
    assert len(list(DataLoader(dataset, batch_size=4, sampler=uneven, drop_last=True))) == 2
