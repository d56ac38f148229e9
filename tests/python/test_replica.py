"""Replica groups from Python (Loader(group_size=...)): each group holds a full copy,
registered in parts; fetches stay inside the group; the sampler splits every epoch over
all ranks; bad group sizes fail on every rank."""

import numpy as np
import pytest

import mdloader
from mdloader import MDLError, Status

from conftest import all_ranks

N = 240


def sample(i, group):
    """Sample i of a group's copy: its size depends on i alone, its bytes carry the group."""
    size = (i * 37) % 97
    return ((np.arange(size, dtype=np.uint32) * 2654435761 + i) % 251).astype(np.uint8) ^ np.uint8(group)


def register_part(ld):
    part = ld.replica_part(N)
    ld.register_shard([sample(i, ld.replica.group) for i in part])
    return part


@pytest.mark.parametrize("group_size", [1, 2, 0])
def test_each_group_reads_its_own_copy(comm, group_size):
    if group_size and comm.size % group_size:
        pytest.skip(f"group_size {group_size} does not divide {comm.size} ranks")
    with mdloader.Loader(comm, group_size=group_size) as ld:
        info = ld.replica
        if group_size:
            assert info == (comm.rank // group_size, comm.size // group_size, comm.rank % group_size, group_size)
        part = register_part(ld)
        everyone = comm.allgather((info.group, info.rank_in_group, part.start, part.stop))
        mine = sorted((r, a, b) for g, r, a, b in everyone if g == info.group)
        assert [a for _, a, _ in mine] == [0] + [b for _, _, b in mine[:-1]] and mine[-1][2] == N
        assert ld.num_samples == N
        assert ld.local_ids == part
        ids = np.random.default_rng(comm.rank).integers(0, N, 50)
        for backend in ("onesided", "collective", "auto"):
            ld.set_backend(backend)
            batch = ld.fetch(ids)
            assert all(np.array_equal(batch[k], sample(int(i), info.group)) for k, i in enumerate(ids))
        seen = []
        for batch in ld.epoch(16, seed=5):
            seen.extend(int(i) for i in batch.ids)
            assert all(np.array_equal(batch[k], sample(int(i), info.group)) for k, i in enumerate(batch.ids))
        everything = sorted(i for ids in comm.allgather(seen) for i in ids)
        assert everything == list(range(N))  # each sample once across the job (N % ranks == 0)


def test_bad_group_sizes_fail_on_every_rank(comm):
    if comm.size > 2:
        with pytest.raises(MDLError) as err:
            mdloader.Loader(comm, group_size=comm.size - 1)
        assert err.value.status == Status.ERR_INVALID_ARG and "does not divide" in str(err.value)
    # A bad value on rank 0 alone: TypeError there, ERR_REMOTE on the others.
    if comm.rank == 0:
        with pytest.raises(TypeError):
            mdloader.Loader(comm, group_size="two")
    else:
        with pytest.raises(MDLError) as err:
            mdloader.Loader(comm, group_size=1)
        assert err.value.status == Status.ERR_REMOTE
    assert all_ranks(comm, True)


def test_groups_with_different_datasets_fail_on_every_rank(comm):
    if comm.size < 2:
        pytest.skip("needs two groups")
    with mdloader.Loader(comm, group_size=1) as ld:
        extra = [np.zeros(3, np.uint8)] if comm.rank == comm.size - 1 else []
        with pytest.raises(MDLError) as err:
            ld.register_shard([sample(i, 0) for i in range(N)] + extra)
        assert err.value.status == Status.ERR_INVALID_ARG and "replica group" in str(err.value)
        register_part(ld)  # nothing was registered: a correct copy is taken afterwards
        assert ld.num_samples == N
