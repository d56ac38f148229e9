"""Hardening of the binding (issue #9): integers that ctypes would wrap, out-buffers that
must be written in place, no per-sample state of the binding's own, collective calls
that fail on every rank when a Python-side check fails on one, and the library's
messages in the exceptions.

Every rank runs every test; a rank that raises alone in a collective call would leave
the others waiting, so each "one rank is wrong" case checks what every rank sees."""

import array

import numpy as np
import pytest

import mdloader
from mdloader import MDLError, Status

from conftest import all_ranks

U64 = 2**64


def samples_of(rank):
    """Rank r's samples: sizes 0 .. 40 bytes, content (rank, i)."""
    return [np.full((i * 7 + rank) % 41, (rank * 16 + i) % 251, dtype=np.uint8) for i in range(6 + rank)]


def all_samples(comm):
    out = []
    for r in range(comm.size):
        out.extend(samples_of(r))
    return out


def outcome(call):
    """The exception call raises, or None: never raises, so that every rank reaches the
    next collective call even when a check fails on one rank."""
    try:
        call()
    except Exception as err:  # noqa: BLE001 - the verdict is checked by the caller
        return err
    return None


def agree(comm, ok, what=""):
    """An assertion every rank makes together (one allgather): a check failing on one rank
    fails the test on every rank at the same point instead of leaving the others waiting
    in the test's next collective call."""
    verdicts = comm.allgather((bool(ok), str(what)))
    assert all(v for v, _ in verdicts), [(r, w) for r, (v, w) in enumerate(verdicts) if not v]


def one_rank_fails(comm, loader, bad_call, good_call, bad_exc, bad_status=None):
    """bad_call on the last rank, good_call on the others: the last rank raises bad_exc
    (with bad_status for MDLError), every other rank MDLError(ERR_REMOTE) naming the
    failing rank; nobody hangs. Returns this rank's exception."""
    bad_rank = comm.size - 1
    bad = comm.rank == bad_rank
    err = outcome(bad_call if bad else good_call)
    if bad:
        ok = isinstance(err, bad_exc) and (bad_status is None or getattr(err, "status", None) == bad_status)
    else:
        ok = isinstance(err, MDLError) and err.status == Status.ERR_REMOTE and f"rank {bad_rank}" in str(err)
    agree(comm, ok, f"rank {comm.rank}: {type(err).__name__}: {err}")
    return err


# -- integers ctypes would wrap --------------------------------------------------------


def test_sample_size_never_wraps(comm, loader):
    loader.register_shard(samples_of(comm.rank))
    want = all_samples(comm)
    n = loader.num_samples
    assert loader.sample_size(0) == want[0].size
    assert loader.sample_size(np.uint64(n - 1)) == want[n - 1].size
    assert loader.sample_size(np.int8(1)) == want[1].size
    for bad in (U64, U64 + 1, 2**70, -1, -U64, -(2**63)):
        with pytest.raises(MDLError) as info:
            loader.sample_size(bad)
        assert info.value.status == Status.ERR_OUT_OF_RANGE
        assert str(bad) in str(info.value)
    # The library's own refusal (id >= num_samples), with its message.
    for bad in (n, U64 - 1):
        with pytest.raises(MDLError) as info:
            loader.sample_size(bad)
        assert info.value.status == Status.ERR_OUT_OF_RANGE
        assert "mdl_sample_size" in str(info.value) and str(n) in str(info.value)
    for bad in (0.0, 1.5, np.float64(1), "0", None, True, np.bool_(False), 1j):
        with pytest.raises(TypeError):
            loader.sample_size(bad)


def test_sample_sizes_asks_the_library(comm, loader):
    loader.register_shard(samples_of(comm.rank))
    want = all_samples(comm)
    assert np.array_equal(loader.sample_sizes(), [s.size for s in want])
    ids = [3, 0, len(want) - 1, 3]
    assert np.array_equal(loader.sample_sizes(ids), [want[i].size for i in ids])
    with pytest.raises(MDLError) as info:
        loader.sample_sizes([0, -1])
    assert info.value.status == Status.ERR_OUT_OF_RANGE
    with pytest.raises(TypeError):
        loader.sample_sizes([0.0])


@pytest.mark.parametrize(
    "bad",
    [[U64], [-1], [0, 2**64 + 3], [-1, 2**63], np.array([-5, 0]), np.array([U64 - 1], dtype=np.uint64), [-(2**70)]],
    ids=["2pow64", "minus1", "2pow64plus3", "mixed-sign-list", "int-array", "u64-max", "minus2pow70"],
)
def test_fetch_ids_that_cannot_be_ids_fail_on_every_rank(comm, loader, bad):
    loader.register_shard(samples_of(comm.rank))
    want = all_samples(comm)
    err = one_rank_fails(comm, loader, lambda: loader.fetch(bad), lambda: loader.fetch([0]), MDLError,
                         Status.ERR_OUT_OF_RANGE)
    values = [int(x) for x in np.asarray(bad, dtype=object).ravel()]
    why = "negative" if min(values) < 0 else "64 bits" if max(values) >= U64 else "out of range"
    if comm.rank == comm.size - 1:  # the library's message, and what was wrong with the id
        agree(comm, "mdl_fetch_batch" in str(err) and why in str(err), err)
    else:
        agree(comm, True)
    # The same on every rank: everyone raises OUT_OF_RANGE; the loader stays usable.
    err = outcome(lambda: loader.fetch(bad))
    agree(comm, isinstance(err, MDLError) and err.status == Status.ERR_OUT_OF_RANGE and why in str(err), err)
    assert bytes(loader.fetch([1])[0]) == want[1].tobytes()


@pytest.mark.parametrize(
    "bad",
    [np.array([0.0, 1.0]), [1, 2.5], [1.0], np.array([True]), ["0"], [None], np.array([1 + 0j]), [[0], [0.5]]],
    ids=["float-array", "list-with-float", "integral-float", "bool-array", "string", "none", "complex", "nested"],
)
def test_fetch_non_integer_ids_fail_on_every_rank(comm, loader, bad):
    loader.register_shard(samples_of(comm.rank))
    one_rank_fails(comm, loader, lambda: loader.fetch(bad), lambda: loader.fetch([0]), TypeError)
    assert len(loader.fetch([0, 0])) == 2


def test_fetch_ids_convert_exactly(comm, loader):
    loader.register_shard(samples_of(comm.rank))
    want = all_samples(comm)
    n = len(want)
    expect = [n - 1, 0, 2, n - 1]
    forms = [
        expect,
        np.array(expect, dtype=np.uint64),
        np.array(expect, dtype=np.int16),
        np.array(expect, dtype=np.uint8),
        [np.int64(i) for i in expect],
        np.array(expect, dtype=object),
        np.array(expect, dtype=np.int64)[::-1][::-1],  # a strided view
        np.array([expect[:2], expect[2:]]),  # 2-d: flattened in order
    ]
    for ids in forms:
        batch = loader.fetch(ids)
        assert batch.ids.dtype == np.uint64 and list(batch.ids) == expect
        assert [bytes(batch[k]) for k in range(len(expect))] == [want[i].tobytes() for i in expect]
    batch = loader.fetch(range(n - 1, -1, -2))
    assert list(batch.ids) == list(range(n - 1, -1, -2))
    assert len(loader.fetch([])) == 0 and len(loader.fetch(np.zeros(0))) == 0


# -- out-buffers -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.zeros(4000, dtype=np.uint8)[::2],  # strided view
        lambda: np.zeros((40, 40), dtype=np.uint8)[:, 3],  # a column
        lambda: np.zeros((40, 40), dtype=np.uint8, order="F"),  # contiguous, but not in C order
        lambda: np.zeros((50, 50), dtype=np.uint8).T,
        lambda: np.zeros(4000, dtype=np.uint8).view()[::-1],
        lambda: memoryview(bytearray(4000))[::2],
        lambda: np.frombuffer(bytes(4000), dtype=np.uint8),  # read-only
        lambda: bytes(4000),
        lambda: np.empty(500, dtype=object),
        lambda: "not a buffer",
    ],
    ids=["strided", "column", "fortran-order", "transpose", "reversed", "strided-memoryview", "read-only",
         "bytes", "object", "str"],
)
def test_fetch_refuses_an_out_it_cannot_fill_in_place(comm, loader, make):
    loader.register_shard(samples_of(comm.rank))
    out = make()
    before = bytes(np.asarray(out).tobytes()) if isinstance(out, np.ndarray) and not out.dtype.hasobject else None
    good = np.zeros(4000, dtype=np.uint8)
    err = one_rank_fails(comm, loader, lambda: loader.fetch([0, 1, 2], out=out),
                         lambda: loader.fetch([0, 1, 2], out=good), TypeError)
    if comm.rank == comm.size - 1:
        assert "out" in str(err)
        if before is not None:
            assert np.asarray(out).tobytes() == before  # nothing written anywhere (no hidden copy either)
    else:
        assert not good.any()  # the call failed on every rank before moving a byte


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix
def test_fetch_writes_through_into_any_contiguous_buffer(comm, loader):
    loader.register_shard(samples_of(comm.rank))
    want = all_samples(comm)
    ids = [len(want) - 1, 1, 0, 2]
    expect = b"".join(want[i].tobytes() for i in ids)
    for out in (
        np.zeros(1000, dtype=np.uint8),
        np.zeros(200, dtype=np.float64),  # any plain dtype: written as raw bytes
        np.zeros((10, 30), dtype=np.int32),
        np.zeros(2000, dtype=np.uint8)[100:1100],  # a contiguous slice
        bytearray(1000),
        array.array("d", bytes(1000)),
        memoryview(bytearray(1000)),
        np.asmatrix(np.zeros((1, 1000), dtype=np.uint8)),
    ):
        batch = loader.fetch(ids, out=out)
        raw = memoryview(out).cast("B") if not isinstance(out, np.ndarray) else np.asarray(out).reshape(-1).view(np.uint8)
        assert bytes(raw[: len(expect)]) == expect, type(out)
        assert np.shares_memory(batch.data, np.frombuffer(raw, dtype=np.uint8)) or len(expect) == 0
        assert [bytes(batch[k]) for k in range(len(ids))] == [want[i].tobytes() for i in ids]


def test_too_small_out_on_one_rank_raises_everywhere_and_writes_nothing_beyond(comm, loader):
    loader.register_shard([b"0123456789"] * 3)
    backing = np.full(64, 0xAB, dtype=np.uint8)
    small = backing[:15]  # contiguous, 15 bytes: the batch needs 20
    err = one_rank_fails(comm, loader, lambda: loader.fetch([0, 1], out=small),
                         lambda: loader.fetch([0, 1], out=np.zeros(20, dtype=np.uint8)), MDLError,
                         Status.ERR_BUFFER_TOO_SMALL)
    if comm.rank == comm.size - 1:
        assert "20" in str(err) and "15" in str(err)  # the library says what it needs
    assert (backing[15:] == 0xAB).all()
    batch = loader.fetch([0, 1], out=backing[:20])
    assert bytes(batch.data) == b"0123456789" * 2 and (backing[20:] == 0xAB).all()


# -- no per-sample state in the binding -------------------------------------------------


def test_the_binding_keeps_no_per_sample_array(comm, loader):
    per_rank = 5000
    loader.register_shard([b"x" * (i % 13) for i in range(per_rank)])
    n = loader.num_samples
    big = [k for k, v in vars(loader).items() if isinstance(v, np.ndarray) and v.size >= per_rank]
    assert big == [], f"the loader holds per-sample arrays: {big}"
    assert n == per_rank * comm.size
    assert loader.local_ids == range(comm.rank * per_rank, (comm.rank + 1) * per_rank)


def test_fetch_without_out_sizes_every_batch(comm, loader):
    # Sizes from 0 to a large outlier: n * the largest sample, or exactly per id above the limit.
    mine = [np.full(i % 5, i % 251, dtype=np.uint8) for i in range(20)]
    if comm.rank == 0:
        mine.append(np.full(100_000, 7, dtype=np.uint8))
    loader.register_shard(mine)
    want = all_samples_of(comm, mine)
    n = loader.num_samples
    for limit in (None, 1000):  # 1000: exercise the exact (per-id) sizing too
        if limit is not None:
            loader._BOUND_LIMIT = limit
        for ids in ([20, 0, 1], [0, 0, 3] * 50, [], [4, 9, 14, 19]):
            batch = loader.fetch(ids)
            agree(comm, batch.nbytes == sum(want[i].size for i in ids)
                  and [bytes(batch[k]) for k in range(len(ids))] == [want[i].tobytes() for i in ids], ids)
        # an out-of-range id is refused by the library (every rank), whatever the sizing
        err = outcome(lambda: loader.fetch([0, n]))
        agree(comm, isinstance(err, MDLError) and err.status == Status.ERR_OUT_OF_RANGE, err)


def all_samples_of(comm, mine):
    everything = []
    for part in comm.allgather([m.tobytes() for m in mine]):
        everything.extend(np.frombuffer(p, dtype=np.uint8) for p in part)
    return everything


def test_dataloader_reuse_buffer_without_sizes_array(comm, loader):
    loader.register_shard(samples_of(comm.rank))
    want = all_samples(comm)
    dl = mdloader.DataLoader(loader, batch_size=3, shuffle=True, seed=5, reuse_buffer=True, sampler="python")
    seen = []
    for batch in dl:
        seen.extend(int(i) for i in batch.ids)
        for k, sid in enumerate(batch.ids):
            assert bytes(batch[k]) == want[int(sid)].tobytes()
    assert sorted(set(sum(comm.allgather(seen), []))) == list(range(len(want)))


# -- collective calls whose Python-side check fails on one rank ---------------------------


def need_sampler(loader):
    if not loader.has_sampler:
        pytest.skip("library without the built-in sampler")


@pytest.mark.parametrize(
    "kwargs, exc",
    [
        ({"batch_size": -1}, ValueError),
        ({"batch_size": 0}, ValueError),
        ({"batch_size": 2.0}, TypeError),
        ({"batch_size": U64}, ValueError),
        ({"batch_size": 2, "seed": -1}, ValueError),
        ({"batch_size": 2, "seed": U64}, ValueError),
        ({"batch_size": 2, "seed": 0.5}, TypeError),
        ({"batch_size": 2, "epoch": -1}, ValueError),
        ({"batch_size": 2, "start_step": -1}, ValueError),
        ({"batch_size": 2, "start_step": "1"}, TypeError),
    ],
    ids=lambda v: "-".join(f"{k}={v[k]}" for k in v) if isinstance(v, dict) else v.__name__,
)
def test_epoch_arguments_fail_on_every_rank(comm, loader, kwargs, exc):
    need_sampler(loader)
    loader.register_shard(samples_of(comm.rank))
    one_rank_fails(comm, loader, lambda: next(iter(loader.epoch(**kwargs))),
                   lambda: next(iter(loader.epoch(2, seed=1))), exc)
    # Wrong on every rank: every rank raises the binding's error, nobody waits.
    err = outcome(lambda: next(iter(loader.epoch(**kwargs))))
    agree(comm, isinstance(err, exc), err)
    # The loader is usable: a whole epoch, then plain fetches.
    steps = sum(1 for _ in loader.epoch(2, seed=1))
    assert steps == loader.epoch_steps(2)
    assert len(loader.fetch([0])) == 1


def test_bad_seek_on_one_rank_fails_everywhere_and_the_epoch_goes_on(comm, loader):
    need_sampler(loader)
    loader.register_shard(samples_of(comm.rank))
    reference = [b.ids.copy() for b in loader.epoch(2, seed=3)]
    it = iter(loader.epoch(2, seed=3))
    agree(comm, list(next(it).ids) == list(reference[0]))
    one_rank_fails(comm, loader, lambda: loader.seek(-1), lambda: loader.seek(1), ValueError)
    one_rank_fails(comm, loader, lambda: loader.seek(1.0), lambda: loader.seek(1), TypeError)
    rest = [b.ids.copy() for b in it]
    assert [list(r) for r in rest] == [list(r) for r in reference[1:]]


def test_set_prefetch_checks_the_depth(comm, loader):
    need_sampler(loader)
    loader.register_shard(samples_of(comm.rank))
    with pytest.raises(ValueError):
        loader.set_prefetch(-1)
    for bad in (1.5, "2", None, True):
        with pytest.raises(TypeError):
            loader.set_prefetch(bad)
    with pytest.raises(MDLError) as info:
        loader.set_prefetch(2**32)  # would wrap to 0 through c_uint32
    assert info.value.status == Status.ERR_INVALID_ARG
    loader.set_prefetch(64)
    loader.set_prefetch(0)
    with pytest.raises(MDLError) as info:
        loader.set_prefetch(65)  # above MDL_MAX_PREFETCH: the library refuses it
    assert info.value.status == Status.ERR_INVALID_ARG and "mdl_set_prefetch" in str(info.value)


def test_bad_backend_at_init_fails_on_every_rank(comm):
    bad = comm.rank == comm.size - 1
    for wrong in ("fastest", 1.0, 7):
        err = outcome(lambda: mdloader.Loader(comm, backend=wrong if bad else "auto"))
        agree(comm, isinstance(err, MDLError)
              and err.status == (Status.ERR_INVALID_ARG if bad else Status.ERR_REMOTE), err)
    with mdloader.Loader(comm, backend="collective") as ld:  # and a good one still works
        ld.register_shard([b"ok"])
        assert bytes(ld.fetch([0])[0]) == b"ok"


def test_set_backend_takes_integers_exactly(comm, loader):
    loader.register_shard([b"a"])
    for bad in (1.5, 2**64 + 1, -1):
        with pytest.raises(MDLError) as info:
            loader.set_backend(bad)
        assert info.value.status == Status.ERR_INVALID_ARG
    loader.set_backend(np.int32(2))
    assert bytes(loader.fetch([0])[0]) == b"a"


def test_dataloader_checks_its_arguments_where_it_is_built(comm, loader):
    loader.register_shard(samples_of(comm.rank))
    for kwargs, exc in (
        ({"batch_size": 0}, ValueError),
        ({"batch_size": -1}, ValueError),
        ({"batch_size": 1.5}, TypeError),
        ({"batch_size": 2, "seed": -1}, ValueError),
        ({"batch_size": 2, "seed": 0.5}, TypeError),
        ({"batch_size": 2, "sampler": "library", "prefetch": -1}, ValueError),
    ):
        with pytest.raises(exc):
            mdloader.DataLoader(loader, **kwargs)
    dl = mdloader.DataLoader(loader, batch_size=2)
    with pytest.raises(ValueError):
        dl.set_epoch(-1)
    with pytest.raises(TypeError):
        dl.set_epoch(1.0)


# -- the library's messages ---------------------------------------------------------------


def test_library_messages_reach_the_exceptions(comm, loader):
    with pytest.raises(MDLError) as info:
        loader.fetch([0])
    assert info.value.status == Status.ERR_STATE
    assert "mdl_fetch_batch" in str(info.value) and info.value.message == mdloader.last_error()
    loader.register_shard([b"abc"])
    with pytest.raises(MDLError) as info:
        loader.register_shard([b"abc"])
    assert "mdl_register_shard" in str(info.value) and "MDL_ERR_STATE" in str(info.value)
    if comm.size > 1:
        err = one_rank_fails(comm, loader, lambda: loader.fetch([comm.size + 5]), lambda: loader.fetch([0]),
                             MDLError, Status.ERR_OUT_OF_RANGE)
        # docs/hardening.md 1: the others' message names the failing rank *and its status*.
        named = all(comm.allgather(comm.rank == comm.size - 1 or "MDL_ERR_OUT_OF_RANGE" in err.message))
        assert named, f"ERR_REMOTE message does not name the failing rank's status: {err.message!r}"


def test_verdicts_agree(comm):
    assert all_ranks(comm, True)


def test_status_string_never_wraps():
    assert mdloader.status_string(Status.ERR_OUT_OF_RANGE) == mdloader.status_string(3) != "unknown status"
    assert mdloader.status_string(2**32 + 3) == "unknown status"  # c_int would make it 3
    assert mdloader.status_string(-(2**40)) == "unknown status"
    with pytest.raises(TypeError):
        mdloader.status_string(3.0)
