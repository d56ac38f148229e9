"""mdloader.Loader under MPI: registration forms, fetch round trips on every engine,
zero-copy views, and errors that fail on every rank together (never a hang)."""

import json

import numpy as np
import pytest

import mdloader
from mdloader import Backend, MDLError, Status

from conftest import all_ranks


def make_samples(rank, count=None):
    """Rank r's samples: sizes vary (0 included), content identifies (rank, i)."""
    count = 7 + 3 * rank if count is None else count
    out = []
    for i in range(count):
        size = (i * 37 + rank * 11) % 300
        out.append(((np.arange(size, dtype=np.uint32) * 2654435761 + rank * 1000 + i) % 251).astype(np.uint8))
    return out


def expected_all(comm):
    everything = []
    for r in range(comm.size):
        everything.extend(make_samples(r))
    return everything


def test_register_list_and_fetch_everything(comm, loader):
    loader.register_shard(make_samples(comm.rank))
    want = expected_all(comm)
    assert loader.num_samples == len(want) == len(loader)
    for b in (Backend.ONESIDED, Backend.COLLECTIVE, Backend.AUTO, "onesided", "collective", "auto"):
        loader.set_backend(b)
        ids = np.random.default_rng(comm.rank).permutation(len(want))
        batch = loader.fetch(ids)
        assert len(batch) == len(want)
        for k, sid in enumerate(ids):
            assert np.array_equal(batch[k], want[sid])
            assert loader.sample_size(int(sid)) == want[sid].size
        assert np.array_equal(batch.sizes, [want[s].size for s in ids])


def test_local_ids_follow_rank_order(comm, loader):
    loader.register_shard(make_samples(comm.rank))
    first = sum(7 + 3 * r for r in range(comm.rank))
    assert loader.local_ids == range(first, first + 7 + 3 * comm.rank)
    assert np.array_equal(loader.sample_sizes()[first : first + 3], [s.size for s in make_samples(comm.rank)[:3]])


def test_register_buffer_and_offsets_of_any_dtype(comm, loader):
    # Sample i of rank r: i + 1 float64 values, r * 100 + i.
    values = [np.full(i + 1, comm.rank * 100 + i, dtype=np.float64) for i in range(5)]
    data = np.concatenate(values)
    offsets = np.concatenate(([0], np.cumsum([v.nbytes for v in values])))
    loader.register_shard(data, offsets)
    batch = loader.fetch([5 * r + 4 for r in range(comm.size)])
    for r in range(comm.size):
        assert np.array_equal(batch.view(r, np.float64), np.full(5, r * 100 + 4.0))


def test_views_are_zero_copy(comm, loader):
    loader.register_shard([bytes([comm.rank]) * 8, b"xyz"])
    batch = loader.fetch([0, 1, 0])
    v = batch[1]
    assert np.shares_memory(v, batch.data)
    assert bytes(v) == b"xyz"
    assert bytes(batch[-1]) == bytes([0]) * 8
    assert [bytes(x) for x in batch[0:2]] == [bytes([0]) * 8, b"xyz"]


def test_fetch_into_a_reused_buffer(comm, loader):
    loader.register_shard(make_samples(comm.rank))
    want = expected_all(comm)
    buf = np.zeros(100_000, dtype=np.uint8)
    for start in range(0, len(want), 5):
        ids = list(range(start, min(start + 5, len(want))))
        batch = loader.fetch(ids, out=buf)
        assert np.shares_memory(batch.data, buf)
        for k, sid in enumerate(ids):
            assert np.array_equal(batch[k], want[sid])


def test_empty_shard_and_empty_fetch(comm, loader):
    if comm.size < 2:
        pytest.skip("needs two ranks")
    loader.register_shard(make_samples(comm.rank) if comm.rank != 0 else [])
    assert loader.num_samples == sum(7 + 3 * r for r in range(1, comm.size))
    batch = loader.fetch([] if comm.rank == 1 else [0])
    assert len(batch) == (0 if comm.rank == 1 else 1)
    assert batch.nbytes == (0 if comm.rank == 1 else make_samples(1)[0].size)


def test_out_of_range_on_one_rank_fails_everywhere(comm, loader):
    loader.register_shard(make_samples(comm.rank))
    n = loader.num_samples
    with pytest.raises(MDLError) as info:
        loader.fetch([n] if comm.rank == 0 else [0])
    if comm.rank == 0:
        assert info.value.status == Status.ERR_OUT_OF_RANGE
        assert "out of range" in info.value.message
    else:
        assert info.value.status == Status.ERR_REMOTE
    assert mdloader.last_error() != ""
    # Still usable.
    assert bytes(loader.fetch([1])[0]) == bytes(expected_all(comm)[1])


def test_negative_id_and_bad_types_fail_everywhere(comm, loader):
    loader.register_shard(make_samples(comm.rank))
    with pytest.raises(MDLError) as info:
        loader.fetch([-1] if comm.rank == 0 else [0])
    assert info.value.status == (Status.ERR_OUT_OF_RANGE if comm.rank == 0 else Status.ERR_REMOTE)
    if comm.rank == 0:
        assert "negative" in str(info.value)
    with pytest.raises(TypeError if comm.rank == 0 else MDLError):
        loader.fetch([0.5] if comm.rank == 0 else [0])
    assert len(loader.fetch([0])) == 1


def test_buffer_too_small(comm, loader):
    loader.register_shard([b"0123456789"] * 3)
    with pytest.raises(MDLError) as info:
        loader.fetch([0, 1], out=np.zeros(5, dtype=np.uint8))
    assert info.value.status == Status.ERR_BUFFER_TOO_SMALL


def test_state_errors(comm, loader):
    with pytest.raises(MDLError) as info:
        loader.fetch([0])
    assert info.value.status == Status.ERR_STATE
    with pytest.raises(MDLError) as info:
        loader.num_samples
    assert info.value.status == Status.ERR_STATE
    loader.register_shard([b"a"])
    with pytest.raises(MDLError) as info:
        loader.register_shard([b"a"])
    assert info.value.status == Status.ERR_STATE


def test_bad_register_on_one_rank_fails_everywhere(comm, loader):
    bad = comm.rank == comm.size - 1
    with pytest.raises(ValueError if bad else MDLError):
        if bad:
            loader.register_shard(np.zeros(4, dtype=np.uint8), [0, 2, 9])  # beyond the data
        else:
            loader.register_shard([b"ok"])


def test_backend_names_and_mismatch(comm, loader):
    loader.register_shard([b"abc"])
    with pytest.raises(MDLError) as info:
        loader.set_backend("fastest")
    assert info.value.status == Status.ERR_INVALID_ARG
    with pytest.raises(MDLError) as info:
        loader.set_backend(7)
    assert info.value.status == Status.ERR_INVALID_ARG
    if comm.size > 1:
        loader.set_backend("onesided" if comm.rank == 0 else "collective")
        with pytest.raises(MDLError) as info:
            loader.fetch([0])
        assert info.value.status == Status.ERR_INVALID_ARG
        loader.set_backend("auto")
    assert bytes(loader.fetch([0])[0]) == b"abc"


def test_close_and_context_manager(comm):
    with mdloader.Loader(comm.py2f(), backend="collective") as ld:  # a Fortran handle works too
        ld.register_shard([b"x" * (comm.rank + 1)])
        assert bytes(ld.fetch([comm.size - 1])[0]) == b"x" * comm.size
    assert ld.closed
    ld.close()  # idempotent
    with pytest.raises(MDLError) as info:
        ld.fetch([0])
    assert info.value.status == Status.ERR_STATE


def test_an_intercommunicator_is_refused_on_every_rank(comm):
    if comm.size < 2:
        pytest.skip("needs 2 ranks")
    half = comm.Split(comm.rank % 2, comm.rank)
    inter = half.Create_intercomm(0, comm, 1 - comm.rank % 2, tag=78)
    try:
        with pytest.raises(MDLError) as info:
            mdloader.Loader(inter)
        assert info.value.status == Status.ERR_INVALID_ARG and "intercommunicator" in str(info.value)
    finally:
        inter.Free()
        half.Free()


def test_status_strings_and_error_type():
    assert mdloader.status_string(Status.ERR_REMOTE) != ""
    err = MDLError(3, "mdl_fetch_batch: something")
    assert err.status is Status.ERR_OUT_OF_RANGE and "MDL_ERR_OUT_OF_RANGE" in str(err)
    assert MDLError(77, "x").status == 77


def test_stats(comm, loader):
    loader.register_shard([b"abc"])
    loader.fetch([0])
    stats = loader.stats()
    if stats:  # a library with mdl_stats_json
        assert stats["rank"] == comm.rank and stats["ranks"] == comm.size
        assert stats["samples"] == 1


def test_errors_name_the_python_call(comm, loader):
    loader.register_shard([b"abc"])
    with pytest.raises(MDLError) as info:
        loader.fetch([comm.size])  # out of range on every rank
    err = info.value
    assert err.call == "Loader.fetch" and str(err).startswith("Loader.fetch: mdl_fetch_batch: ")
    assert err.message == mdloader.last_error()  # the library's text, unchanged


def test_job_stats(comm, loader):
    loader.register_shard([b"abcd"] * 3)
    loader.fetch([0, comm.size * 3 - 1])
    job = loader.job_stats()
    assert job["ranks"] == comm.size and job["samples"] == 2 * comm.size
    assert comm.allgather(json.dumps(job, sort_keys=True)) == [json.dumps(job, sort_keys=True)] * comm.size


def test_verdicts_agree(comm):
    assert all_ranks(comm, True)


def test_a_torchrun_launch_is_refused(comm, monkeypatch):
    """WORLD_SIZE larger than the MPI job: every process would be a job of its own."""
    monkeypatch.setenv("WORLD_SIZE", str(comm.size + 1))
    with pytest.raises(RuntimeError, match=r"WORLD_SIZE=\d+ \(torchrun\?\) but MPI_COMM_WORLD has"):
        mdloader.Loader(comm)


def test_a_second_epoch_on_one_loader_stops_the_first(comm, loader):
    """Two iterations of the built-in sampler on one Loader: the library runs one epoch,
    so the older iteration raises instead of yielding the newer one's batches."""
    loader.register_shard([bytes([i % 256]) * 4 for i in range(64)])
    first = loader.epoch(4, seed=0)
    next(first)
    second = loader.epoch(4, seed=1)
    b = next(second)
    with pytest.raises(MDLError, match="ended before its end by another use") as info:
        next(first)
    assert info.value.status == Status.ERR_STATE
    assert len(next(second)) == 4 and len(b) == 4  # the newer one goes on


def test_fetch_after_a_loop_left_early(comm, loader):
    loader.register_shard([bytes([i % 256]) * 4 for i in range(64)])
    for step, _ in enumerate(loader.epoch(4)):
        if step == 2:
            break  # a validation pass in the middle of an epoch
    assert bytes(loader.fetch([3])[0]) == bytes([3]) * 4
