"""mdloader.torch behind torch's own DataLoader: one sampler order, drop_last's one
meaning, arguments checked across ranks, exact resume, tensors without copies or
warnings, collate off the training thread, torch tensors registered, aligned samples;
and the vectorised QM9 graph collate against the per-molecule reference.

torch is installed by tests/run_binding_tests.sh; without it these tests skip, saying so.
"""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed in this environment: the mdloader.torch tests "
                                            "did NOT run (tests/run_binding_tests.sh installs it)")

import mdloader  # noqa: E402
import mdloader.torch as mdt  # noqa: E402
from mdloader import qm9  # noqa: E402
from mdloader.qm9_graph import collate_records  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402


def shard(comm, n=23):
    """Rank r's samples: float32 [r, i, i, ...] of varying length (not a multiple of 8)."""
    return [np.array([comm.rank, i] + [i] * (i % 3), dtype=np.float32) for i in range(n + comm.rank)]


def first_ids(comm, n=23):
    return [sum(n + q for q in range(r)) for r in range(comm.size + 1)]


def ids_of(batches):
    return [list(b) for b in batches]


def test_one_order_for_one_seed(comm, loader):
    loader.register_shard(shard(comm))
    n = loader.num_samples
    sampler = mdt.DistributedBatchSampler(loader, 4, seed=3, shuffle=True, drop_last=False)
    sampler.set_epoch(2)
    torch_order = ids_of(sampler)
    library = [b.ids.tolist() for b in loader.epoch(4, seed=3, epoch=2, shuffle=True)]
    python = mdloader.DistributedSampler(n, comm.size, comm.rank, seed=3, shuffle=True)
    python.set_epoch(2)
    share = python.indices().tolist()
    assert torch_order == library
    assert sum(torch_order, []) == share
    loop = mdloader.DataLoader(loader, batch_size=4, seed=3, shuffle=True)
    loop.set_epoch(2)
    assert [b.ids.tolist() for b in loop] == torch_order


@pytest.mark.parametrize("drop_last", [False, True])
def test_drop_last_means_full_batches_everywhere(comm, loader, drop_last):
    loader.register_shard(shard(comm))
    n, p, bs = loader.num_samples, comm.size, 5
    sampler = mdt.DistributedBatchSampler(loader, bs, seed=1, drop_last=drop_last, prefetch=0)
    before = loader.stats()["samples"]
    got = ids_of(sampler)
    # without prefetch nothing is fetched but what is yielded (no short batch thrown away)
    assert loader.stats()["samples"] - before == len(sum(got, []))
    share = n // p if drop_last else -(-n // p)
    steps = share // bs if drop_last else -(-share // bs)
    assert len(got) == len(sampler) == loader.epoch_steps(bs, drop_last) == steps
    assert len(mdloader.DataLoader(loader, bs, drop_last=drop_last)) == steps
    assert len([b for b in mdloader.DataLoader(loader, bs, drop_last=drop_last, sampler="library")]) == steps
    if drop_last:
        assert all(len(b) == bs for b in got)
    everyone = sum(comm.allgather(sum(got, [])), [])
    if drop_last:
        assert len(set(everyone)) == len(everyone)
    else:
        assert set(everyone) == set(range(n))


def test_arguments_that_differ_fail_on_every_rank(comm, loader):
    if comm.size < 2:
        pytest.skip("needs two ranks")
    loader.register_shard(shard(comm))
    with pytest.raises(ValueError, match="seed differs across ranks"):
        mdt.DistributedBatchSampler(loader, 4, seed=comm.rank)
    with pytest.raises(ValueError, match="on rank 1: batch_size"):
        mdt.DistributedBatchSampler(loader, 0 if comm.rank == 1 else 4)
    with pytest.raises(ValueError, match="drop_last differs"):
        mdt.DistributedBatchSampler(loader, 4, drop_last=comm.rank == 0)
    # the loader is still usable on every rank
    assert len(ids_of(mdt.DistributedBatchSampler(loader, 4))) > 0


def collate(samples):
    """A generic collate: the first two floats of every sample, and the ids."""
    return torch.stack([samples.view(k, torch.float32)[:2] for k in range(len(samples))]), samples.ids.clone()


def test_torch_dataloader_yields_writable_tensors_without_warnings(comm, loader):
    loader.register_shard(shard(comm), align=8)
    first = first_ids(comm)
    ds = mdt.ShardDataset(loader)
    assert len(ds) == loader.num_samples
    sampler = mdt.DistributedBatchSampler(ds, 6, seed=4, drop_last=True)
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch.from_numpy on a read-only array would warn
        for x, ids in DataLoader(ds, batch_sampler=sampler, collate_fn=collate):
            for (r, i), sid in zip(x.tolist(), ids.tolist()):
                assert sid == first[int(r)] + int(i)  # each sample's content matches its id
            seen += ids.tolist()
        samples = ds.__getitems__(next(iter(sampler)))
    assert len(seen) == len(sampler) * 6
    t = samples[0]
    t[0] = 255  # writable: the batch's own memory
    assert samples.data[0] == 255
    assert samples.data.data_ptr() % 8 == 0
    assert all(int(o) % 8 == 0 for o in samples.offsets)
    with pytest.raises(TypeError, match="whole batches"):
        ds[0]


def test_plain_ids_fetch_in_the_main_process(comm, loader):
    loader.register_shard(shard(comm))
    ds = mdt.ShardDataset(loader)
    got = ds.__getitems__([0, loader.num_samples - 1])
    assert got.view(0, torch.float32)[:2].tolist() == [0.0, 0.0]
    assert got.view(1, torch.float32)[0].item() == comm.size - 1


def run(ds, sampler, epochs, stop=None):
    """Every batch's bytes, epoch by epoch; stop=(epoch, step) ends the run after that
    many batches of that epoch and returns the sampler's state too."""
    out = []
    for epoch in epochs:
        sampler.set_epoch(epoch)
        for k, samples in enumerate(DataLoader(ds, batch_sampler=sampler, collate_fn=lambda s: s)):
            out.append((epoch, samples.ids.tolist(), bytes(samples.array)))
            if stop == (epoch, k + 1):
                return out, sampler.state_dict()
    return out, None


def test_resume_mid_epoch_is_byte_for_byte_the_uninterrupted_run(comm, loader):
    loader.register_shard(shard(comm, 40))
    ds = mdt.ShardDataset(loader)
    make = lambda: mdt.DistributedBatchSampler(ds, 3, seed=8, drop_last=True, prefetch=2)  # noqa: E731
    whole, _ = run(ds, make(), [0, 1])
    part, state = run(ds, make(), [0, 1], stop=(1, 4))
    assert state["epoch"] == 1 and state["step"] == 4
    resumed_sampler = make()
    resumed_sampler.load_state_dict(state)
    rest, _ = run(ds, resumed_sampler, [1])
    assert part + rest == whole
    assert len(whole) == 2 * len(resumed_sampler)
    bad = dict(state, seed=9)
    with pytest.raises(ValueError, match="seed"):
        make().load_state_dict(bad)


def test_background_loader_same_batches_and_safe_early_stop(comm, loader):
    loader.register_shard(shard(comm, 40))
    ds = mdt.ShardDataset(loader)
    sampler = mdt.DistributedBatchSampler(ds, 3, seed=2, prefetch=1)
    plain = [ids.tolist() for _, ids in DataLoader(ds, batch_sampler=sampler, collate_fn=collate)]
    background = mdt.BackgroundLoader(DataLoader(ds, batch_sampler=sampler, collate_fn=collate), depth=2)
    assert len(background) == len(plain)
    assert [ids.tolist() for _, ids in background] == plain
    for k, _ in enumerate(background):
        if k == 1:
            break  # the thread takes exactly depth batches more on every rank, then stops
    sampler.set_epoch(1)
    assert len([b for b in background]) == len(plain)  # the next epoch runs in step everywhere

    def failing(samples):
        raise RuntimeError("collate failed")

    with pytest.raises(RuntimeError, match="collate failed"):
        for _ in mdt.BackgroundLoader(DataLoader(ds, batch_sampler=sampler, collate_fn=failing)):
            pass


def test_worker_processes_collate_the_same_batches(comm, loader):
    loader.register_shard(shard(comm, 40))
    ds = mdt.ShardDataset(loader)
    sampler = mdt.DistributedBatchSampler(ds, 4, seed=6)
    inline = [(x.tolist(), ids.tolist()) for x, ids in DataLoader(ds, batch_sampler=sampler, collate_fn=collate)]
    workers = DataLoader(ds, batch_sampler=sampler, collate_fn=collate, num_workers=1, persistent_workers=True,
                         prefetch_factor=2)
    for _ in range(2):  # persistent workers, two epochs
        assert [(x.tolist(), ids.tolist()) for x, ids in workers] == inline
    del workers


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_spawned_workers_collate_the_same_batches(comm, loader, context):
    """The dataset pickles for spawn and forkserver workers (Python 3.14's default on
    Linux): they get no loader, only the batches, and never call MPI."""
    loader.register_shard(shard(comm, 24))
    ds = mdt.ShardDataset(loader)
    sampler = mdt.DistributedBatchSampler(ds, 4, seed=3)
    inline = [(x.tolist(), ids.tolist()) for x, ids in DataLoader(ds, batch_sampler=sampler, collate_fn=collate)]
    workers = DataLoader(ds, batch_sampler=sampler, collate_fn=collate, num_workers=1,
                         multiprocessing_context=context)
    assert [(x.tolist(), ids.tolist()) for x, ids in workers] == inline


def test_register_torch_tensors(comm, loader):
    w = torch.arange(6, dtype=torch.float32, requires_grad=True)
    loader.register_shard([torch.tensor([comm.rank, 7], dtype=torch.int16), w, torch.ones(3, dtype=torch.float64)])
    batch = loader.fetch([0, 1, 2])
    assert batch.view(0, np.int16).tolist() == [0, 7]
    assert batch.view(1, np.float32).tolist() == list(range(6))
    assert batch.view(2, np.float64).tolist() == [1.0] * 3


def test_align_pads_every_sample_and_is_agreed(comm, loader):
    with pytest.raises(ValueError, match="align" if comm.size == 1 else "differs across ranks|power of two"):
        loader.register_shard([b"abc"], align=3 if comm.size == 1 else 8 << comm.rank)
    loader.register_shard([b"abc", b"", np.arange(5, dtype=np.float32)], align=8)
    assert loader.align == 8
    assert [loader.sample_size(i) for i in range(3)] == [8, 0, 24]
    batch = loader.fetch(range(loader.num_samples))
    assert batch.data.ctypes.data % 8 == 0 and all(int(o) % 8 == 0 for o in batch.offsets)
    assert batch.view(2, np.float32)[:5].tolist() == list(range(5))
    assert bytes(batch[0]) == b"abc" + bytes(5)


def test_vectorised_qm9_collate_matches_the_per_molecule_one():
    rng = np.random.default_rng(5)
    records = []
    for row in range(40):
        n = int(rng.integers(1, 12))
        records.append(qm9.encode(rng.integers(1, 10, n), rng.normal(scale=1.5, size=(n, 3)), float(rng.random()),
                                  mol_index=row + 1, row=row, cutoff=2.5))
    data = np.frombuffer(b"".join(records), dtype=np.uint8)
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in records])]).astype(np.uint64)
    got = collate_records(data, offsets)
    want = qm9.collate(mdloader.Batch(np.arange(40, dtype=np.uint64), data, offsets))
    for key in ("z", "pos", "edge_index", "batch", "y", "row"):
        assert np.array_equal(got[key], want[key]), key
    empty = collate_records(data[:0], np.zeros(1, dtype=np.uint64))
    assert empty["z"].size == 0 and empty["edge_index"].shape == (2, 0)
    corrupted = data.copy()
    corrupted[0] ^= 1
    with pytest.raises(ValueError, match="not a batch of QM9 records"):
        collate_records(corrupted, offsets)


def test_the_sampler_passed_as_sampler_is_a_clear_error(comm, loader):
    loader.register_shard([np.full(8, i % 256, dtype=np.uint8) for i in range(64)])
    ds = mdt.ShardDataset(loader)
    sampler = mdt.DistributedBatchSampler(ds, 4, prefetch=0)
    with pytest.raises(TypeError, match="pass it as batch_sampler="):
        next(iter(DataLoader(ds, sampler=sampler)))
    loader.end_epoch()


def test_background_loader_resumes_exactly(comm, loader):
    """state_dict through BackgroundLoader counts the batches the loop took, not the
    ones its thread took ahead."""
    loader.register_shard(shard(comm, 40))
    ds = mdt.ShardDataset(loader)
    sampler = mdt.DistributedBatchSampler(ds, 2, seed=5)
    whole = [ids.tolist() for _, ids in DataLoader(ds, batch_sampler=sampler, collate_fn=collate)]
    background = mdt.BackgroundLoader(DataLoader(ds, batch_sampler=sampler, collate_fn=collate), depth=2)
    for step, _ in enumerate(background):
        if step == 2:
            state = background.state_dict()
            break
    assert state["step"] == 3
    resumed = mdt.DistributedBatchSampler(ds, 2, seed=5)
    resumed.load_state_dict(state)
    again = mdt.BackgroundLoader(DataLoader(ds, batch_sampler=resumed, collate_fn=collate), depth=2)
    assert [ids.tolist() for _, ids in again] == whole[3:]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_users_batch_sampler_fetched_ahead(comm, loader, workers):
    """torch's own DistributedSampler order behind the library: the same batches as
    fetching them one by one, with worker processes collating."""
    from torch.utils.data import BatchSampler, DistributedSampler

    loader.register_shard(shard(comm, 30))
    ds = mdt.ShardDataset(loader)
    batches = BatchSampler(DistributedSampler(ds, num_replicas=comm.size, rank=comm.rank, seed=4), 4, drop_last=True)
    sampler = mdt.FetchingBatchSampler(batches, ds, depth=2)
    sampler.set_epoch(1)
    expected = [list(b) for b in batches]
    got = DataLoader(ds, batch_sampler=sampler, collate_fn=collate, num_workers=workers,
                     multiprocessing_context="spawn" if workers else None)
    assert [ids.tolist() for _, ids in got] == expected
    assert len(sampler) == len(expected)


def test_a_weighted_sampler_of_each_rank_runs_as_the_librarys_epoch(comm, loader):
    """Each rank's own weighted order (different on every rank, repeats included),
    through the library's epoch: the ids and bytes of fetching them one by one."""
    from torch.utils.data import BatchSampler, WeightedRandomSampler

    loader.register_shard(shard(comm, 30))
    ds = mdt.ShardDataset(loader)
    generator = torch.Generator().manual_seed(comm.rank)
    weights = torch.arange(1, len(ds) + 1, dtype=torch.float64)
    batches = list(BatchSampler(WeightedRandomSampler(weights, 24, generator=generator), 5, drop_last=False))
    got = [(bytes(b.data), b.ids.tolist()) for b in loader.epoch_of_batches(batches)]
    expected = [(bytes(loader.fetch(ids).data), list(ids)) for ids in batches]
    assert got == expected


def test_a_users_batches_that_differ_across_ranks_fail_on_every_rank(comm, loader):
    """A different number of batches on one rank, a negative id, an empty batch: an
    error on every rank, not a hang; the loader fetches afterwards."""
    loader.register_shard(shard(comm, 30))
    last = comm.size - 1
    cases = [
        ([[0, 1]] * (3 if comm.rank == last else 2), "differs across ranks"),
        ([[0, 1], [-1 if comm.rank == last else 2]], "negative"),
        ([[0, 1], [] if comm.rank == last else [2]], "empty"),
    ]
    for batches, what in cases:
        if comm.size == 1 and what == "differs across ranks":
            continue
        with pytest.raises(mdloader.MDLError) as raised:
            list(loader.epoch_of_batches(batches))
        if comm.rank == last or what == "differs across ranks":
            assert what in str(raised.value)
        else:
            assert raised.value.status == mdloader.Status.ERR_REMOTE
    assert loader.fetch([0, 1]).ids.tolist() == [0, 1]


def test_a_users_sampler_survives_other_uses_of_its_loader(comm, loader):
    """A validation pass through a second FetchingBatchSampler and a plain fetch in the
    middle of a training epoch on the same Loader: the training epoch goes on where it
    stood, every batch once, in order."""
    from torch.utils.data import BatchSampler, DistributedSampler

    loader.register_shard(shard(comm, 30))
    ds = mdt.ShardDataset(loader)
    train = BatchSampler(DistributedSampler(ds, num_replicas=comm.size, rank=comm.rank, seed=6), 3, drop_last=True)
    val = BatchSampler(DistributedSampler(ds, num_replicas=comm.size, rank=comm.rank, shuffle=False), 5, False)
    got = []
    for step, (_, ids) in enumerate(DataLoader(ds, batch_sampler=mdt.FetchingBatchSampler(train, ds),
                                               collate_fn=collate)):
        got.append(ids.tolist())
        if step == 1:
            seen = [i.tolist() for _, i in DataLoader(ds, batch_sampler=mdt.FetchingBatchSampler(val, ds),
                                                       collate_fn=collate)]
            assert seen == [list(b) for b in val]
        if step == 2:
            assert loader.fetch([1, 0]).ids.tolist() == [1, 0]
    assert got == [list(b) for b in train]


def test_a_users_batches_must_each_be_a_flat_list_of_ids(comm, loader):
    """A sampler of single ids where a batch sampler belongs, or nested batches: a
    TypeError here, MDLError(ERR_REMOTE) elsewhere; iterators of ids are batches."""
    loader.register_shard(shard(comm, 30))
    last = comm.size - 1
    for bad in ([3, 4], [[[1, 2], [3, 4]]]):
        batches = bad if comm.rank == last else [[3], [4]]
        expected = TypeError if comm.rank == last else mdloader.MDLError
        with pytest.raises(expected) as raised:
            list(loader.epoch_of_batches(batches))
        if comm.rank == last:
            assert "flat sequence of ids" in str(raised.value)
    got = [b.ids.tolist() for b in loader.epoch_of_batches([iter([2, 1]), (i for i in [0])])]
    assert got == [[2, 1], [0]]
