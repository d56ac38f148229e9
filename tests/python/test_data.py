"""DataLoader / DistributedSampler: epochs, shuffling, the split across ranks, padding
and drop_last, the same number of steps on every rank."""

import numpy as np
import pytest

import mdloader
from mdloader import DataLoader, DistributedSampler


@pytest.mark.parametrize("total,ranks", [(10, 1), (10, 3), (7, 4), (2, 4), (0, 2), (100, 8)])
@pytest.mark.parametrize("drop_last", [False, True])
def test_sampler_split(total, ranks, drop_last):
    samplers = [DistributedSampler(total, ranks, r, shuffle=True, seed=3, drop_last=drop_last) for r in range(ranks)]
    shares = [s.indices() for s in samplers]
    assert len({len(s) for s in shares}) <= 1  # every rank the same count
    joined = np.concatenate(shares) if shares else np.zeros(0)
    if drop_last:
        assert len(joined) == (total // ranks) * ranks
        assert len(set(joined.tolist())) == len(joined)  # disjoint, no padding
    else:
        assert set(joined.tolist()) == set(range(total))  # everything, padded by repeats
        assert len(joined) == (-(-total // ranks)) * ranks if total else len(joined) == 0


def test_sampler_epochs_and_seed():
    s = DistributedSampler(50, 2, 0, shuffle=True, seed=1)
    e0 = s.indices()
    s.set_epoch(1)
    e1 = s.indices()
    assert not np.array_equal(e0, e1)
    t = DistributedSampler(50, 2, 0, shuffle=True, seed=1)
    assert np.array_equal(t.indices(), e0)
    u = DistributedSampler(50, 2, 0, shuffle=False)
    assert np.array_equal(u.indices(), np.arange(0, 50, 2))


@pytest.mark.parametrize("kind", ["python", "library"])
def test_dataloader_epochs_cover_the_dataset(comm, kind):
    rank = comm.rank
    samples = [np.array([rank, i], dtype=np.int32) for i in range(13 + rank)]
    with mdloader.Loader(comm) as ld:
        ld.register_shard(samples)
        n = ld.num_samples
        loader = DataLoader(ld, batch_size=4, shuffle=True, seed=11, drop_last=False, sampler=kind)
        steps = []
        orders = []
        for epoch in range(3):
            assert loader.epoch == epoch
            seen = []
            count = 0
            for batch in loader:
                count += 1
                for k in range(len(batch)):
                    r, i = batch.view(k, np.int32)
                    sid = int(batch.ids[k])
                    assert sid == sum(13 + q for q in range(r)) + i  # content matches the id
                    seen.append(sid)
            steps.append(count)
            assert count == len(loader)
            everyone = np.concatenate(comm.allgather(np.array(seen)))
            assert set(everyone.tolist()) == set(range(n))
            orders.append(seen)
        assert len(set(comm.allgather(tuple(steps)))) == 1  # same steps on every rank
        assert orders[0] != orders[1]

        # drop_last: full batches only, nothing repeated
        loader = DataLoader(ld, batch_size=5, shuffle=True, seed=2, drop_last=True, sampler=kind)
        loader.set_epoch(7)
        got = [int(i) for b in loader for i in b.ids]
        assert all(len(b) == 5 for b in DataLoader(ld, batch_size=5, drop_last=True, sampler=kind))
        everyone = np.concatenate(comm.allgather(np.array(got, dtype=np.int64)))
        assert len(set(everyone.tolist())) == len(everyone)


@pytest.mark.parametrize("kind", ["python", "library"])
def test_dataloader_collate_and_reuse(comm, kind):
    with mdloader.Loader(comm) as ld:
        ld.register_shard([np.full(3 + i % 4, i, dtype=np.float32) for i in range(20)])
        loader = ld.batches(6, shuffle=False, collate_fn=lambda b: [float(b.view(k, np.float32).sum()) for k in range(len(b))],
                            reuse_buffer=True, sampler=kind)
        sums = [s for batch in loader for s in batch]
        sampler = DistributedSampler(ld.num_samples, comm.size, comm.rank, shuffle=False)
        want = [float((i % 20) * (3 + (i % 20) % 4)) for i in sampler.indices()]
        assert sums == want


@pytest.mark.parametrize("align", [1, 8, 8192])
def test_dataloader_buffers_start_on_a_page_and_on_align(comm, align):
    """The DataLoader's own buffers (fetch's, reused or not, and the library sampler's
    batches copied out) start on lcm(align, 4096): a page (see mdl_fetch_batch) and the
    samples' alignment (the typed views' promise)."""
    with mdloader.Loader(comm) as ld:
        ld.register_shard([np.full(2, i, dtype=np.float64) for i in range(12)], align=align)
        want = np.lcm(align, 4096)
        for kind, reuse in (("python", False), ("python", True), ("library", False)):
            loader = ld.batches(5, shuffle=True, seed=3, reuse_buffer=reuse, sampler=kind,
                                collate_fn=lambda b: b.data.ctypes.data % want)
            assert all(misaligned == 0 for misaligned in loader), (kind, reuse, want)


def test_the_default_sampler_is_the_library_s_with_the_python_sampler_s_batches(comm):
    """The default changed from "python" to "library" (2026-12-06, benches/python_sampler):
    a user sees the same batches, in the same order, in memory of their own."""
    with mdloader.Loader(comm) as ld:
        ld.register_shard([np.full(1 + i % 5, comm.rank * 50 + i, dtype=np.int32) for i in range(23 + comm.rank)])
        contents = lambda loader: [[b.ids.tolist(), [b[k].tobytes() for k in range(len(b))]] for b in loader]  # noqa: E731
        for drop_last in (False, True):
            default = DataLoader(ld, 4, shuffle=True, seed=3, drop_last=drop_last)
            assert default.sampler_kind == "library"
            python = DataLoader(ld, 4, shuffle=True, seed=3, drop_last=drop_last, sampler="python")
            for _ in range(2):  # two epochs: each iteration advances both alike
                assert contents(default) == contents(python)
        # Kept past the next step (list), every batch still holds its own samples, and
        # is writable, as the fetched ones are.
        kept = list(DataLoader(ld, 4, shuffle=True, seed=3))
        assert [[b.ids.tolist(), [b[k].tobytes() for k in range(len(b))]] for b in kept] == \
            contents(DataLoader(ld, 4, shuffle=True, seed=3, sampler="python"))
        assert all(b.data.flags.writeable for b in kept)
        # reuse_buffer=True: the library's own memory, valid until the next batch, no copy.
        assert not any(b.data.flags.writeable for b in DataLoader(ld, 4, reuse_buffer=True) if len(b))
        # Where the split is the caller's, the sampler is the Python one.
        assert DataLoader(ld, 4, num_replicas=comm.size, rank=comm.rank).sampler_kind == "python"


def test_a_fetch_inside_a_library_sampler_loop_ends_its_epoch(comm):
    """What the default's change costs: the library's epoch is the Loader's one epoch,
    so a plain fetch inside the loop ends it (the loop raises on every rank at the next
    step); the Python sampler's loop may mix fetches in."""
    with mdloader.Loader(comm) as ld:
        ld.register_shard([bytes([comm.rank, i]) for i in range(12)])
        with pytest.raises(mdloader.EpochTakenOver):
            for k, _ in enumerate(DataLoader(ld, 2)):
                if k == 1:
                    ld.fetch([0])
        steps = 0
        for _ in DataLoader(ld, 2, sampler="python"):
            steps += 1
            assert bytes(ld.fetch([1])[0]) == bytes([0, 1])
        assert steps == ld.epoch_steps(2)


def _library_epoch(ld, **kw):
    return [(b.ids.copy(), [bytes(b[k]) for k in range(len(b))]) for b in ld.epoch(**kw)]


def test_library_sampler_epochs(comm):
    rank = comm.rank
    samples = [np.array([rank, i], dtype=np.int32) for i in range(9 + 2 * rank)]
    with mdloader.Loader(comm) as ld:
        if not ld.has_sampler:
            pytest.skip("this library has no built-in sampler")
        ld.register_shard(samples)
        n = ld.num_samples
        first = [sum(9 + 2 * q for q in range(r)) for r in range(comm.size + 1)]
        loader = DataLoader(ld, batch_size=4, shuffle=True, seed=5, sampler="library")
        orders = []
        for epoch in range(2):
            seen = []
            steps = 0
            for batch in loader:
                steps += 1
                for k in range(len(batch)):
                    r, i = batch.view(k, np.int32)
                    assert int(batch.ids[k]) == first[r] + i
                    seen.append(int(batch.ids[k]))
            assert steps == len(loader) == ld.epoch_steps(4)
            everyone = np.concatenate(comm.allgather(np.array(seen, dtype=np.int64)))
            assert set(everyone.tolist()) == set(range(n))
            assert len(everyone) == -(-n // comm.size) * comm.size  # padded like DistributedSampler
            orders.append(seen)
        assert orders[0] != orders[1]
        # the same order with prefetch, and from a resumed step
        plain = _library_epoch(ld, batch_size=3, seed=9, epoch=4)
        ld.set_prefetch(2)
        ahead = _library_epoch(ld, batch_size=3, seed=9, epoch=4)
        ld.set_prefetch(0)
        assert [a.tolist() for a, _ in plain] == [a.tolist() for a, _ in ahead]
        assert [d for _, d in plain] == [d for _, d in ahead]
        resumed = _library_epoch(ld, batch_size=3, seed=9, epoch=4, start_step=2)
        assert [a.tolist() for a, _ in resumed] == [a.tolist() for a, _ in plain[2:]]
        # drop_last: full batches only
        assert all(len(b) == 4 for b in DataLoader(ld, batch_size=4, sampler="library", drop_last=True))


def test_library_sampler_stopped_early(comm):
    with mdloader.Loader(comm) as ld:
        if not ld.has_sampler:
            pytest.skip("this library has no built-in sampler")
        ld.register_shard([bytes([comm.rank, i]) for i in range(10)])
        for batch in ld.epoch(batch_size=2, seed=1):
            break  # every rank stops at the same step
        # The epoch left open ends at the next fetch, on every rank (the library alone
        # refuses plain fetches during one).
        assert bytes(ld.fetch([1])[0]) == bytes([0, 1])
        for batch in ld.epoch(batch_size=2, seed=1):
            break
        ld.end_epoch()
        assert bytes(ld.fetch([1])[0]) == bytes([0, 1])
        ld.end_epoch()  # nothing open: no-op


@pytest.mark.parametrize("kind", ["python", "library"])
def test_num_workers_collate_on_a_thread_with_the_same_batches(comm, kind):
    with mdloader.Loader(comm) as ld:
        ld.register_shard([np.full(2 + i % 3, comm.rank * 100 + i, dtype=np.int32) for i in range(30)])
        sums = lambda b: [int(b.view(k, np.int32).sum()) for k in range(len(b))]  # noqa: E731
        inline = [sums(b) for b in DataLoader(ld, 4, seed=1, sampler=kind)]
        loader = DataLoader(ld, 4, seed=1, sampler=kind, num_workers=1, prefetch_factor=3, persistent_workers=True,
                            collate_fn=sums)
        assert list(loader) == inline
        for k, _ in enumerate(loader):  # stopping early, then the next epoch: every rank in step
            if k == 1:
                break
        if kind == "library":
            ld.end_epoch()
        assert len(list(loader)) == len(inline)


@pytest.mark.parametrize("call", ["fetch", "job_stats"])
def test_a_collective_call_inside_a_loop_on_a_thread_ends_its_epoch(comm, call):
    """num_workers=1 with the library's sampler: the script's own collective call on the
    Loader inside the loop stops the thread and ends the epoch on every rank alike, and
    the loop raises EpochTakenOver (the two met in a different order on each rank, and
    the Loader could not even be closed)."""
    with mdloader.Loader(comm) as ld:
        ld.register_shard([bytes([comm.rank, i]) for i in range(40)])
        taken = 0
        with pytest.raises(mdloader.EpochTakenOver):
            for taken, _ in enumerate(DataLoader(ld, 4, num_workers=1), start=1):
                if taken == 2:
                    assert bytes(ld.fetch([1])[0]) == bytes([0, 1]) if call == "fetch" else ld.job_stats()
        assert taken == 2
        assert len(list(DataLoader(ld, 4, num_workers=1))) == 40 * comm.size // 4 // comm.size


def test_torch_style_arguments(comm):
    with mdloader.Loader(comm) as ld:
        ld.register_shard([bytes([comm.rank, i]) for i in range(10)])
        with pytest.raises(ValueError, match="prefetch_factor needs num_workers"):
            DataLoader(ld, 2, prefetch_factor=2)
        with pytest.raises(ValueError, match="persistent_workers needs num_workers"):
            DataLoader(ld, 2, persistent_workers=True)
        with pytest.raises(ValueError, match="pin_memory"):
            DataLoader(ld, 2, pin_memory=True)
        sampler = DistributedSampler(ld.num_samples, comm.size, comm.rank, seed=4)
        by_object = [b.ids.tolist() for b in DataLoader(ld, 2, sampler=sampler)]
        assert by_object == [b.ids.tolist() for b in DataLoader(ld, 2, seed=4)]
