"""Typed samples (mdloader.typed): mappings of named arrays stored as raw bytes, fetched
back per field, vectorised; the schema agreed across ranks."""

import numpy as np
import pytest


CAT = {"edge_index": -1}  # edge_index is [2, m]: concatenated along its last dimension


def molecules(rank: int, count: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed * 1000 + rank)
    out = []
    for i in range(count):
        n, m = int(rng.integers(1, 20)), int(rng.integers(0, 30))
        out.append({
            "z": rng.integers(0, 9, n),
            "pos": rng.random((n, 3), dtype=np.float32),
            "edge_index": rng.integers(0, n, (2, m)),
            "y": np.float32(rank * 1000 + i),
            "w": rng.random((1, 4)),
        })
    return out


def expected(flat: list, ids, name: str) -> np.ndarray:
    if name == "y":
        return np.array([flat[i]["y"] for i in ids], dtype=np.float32)
    dim = 1 if name == "edge_index" else 0
    parts = [flat[i][name] for i in ids]
    return np.concatenate(parts, axis=dim) if parts else np.zeros((2, 0) if dim else (0,) + flat[0][name].shape[1:])


def test_fields_come_back_concatenated_with_counts(comm, loader):
    mine = molecules(comm.rank, 30 + 7 * comm.rank)
    loader.register_shard(mine, cat_dims={"edge_index": -1})
    flat = [s for part in comm.allgather(mine) for s in part]
    assert loader.schema.names == ["edge_index", "pos", "w", "y", "z"]
    rng = np.random.default_rng(comm.rank)
    for ids in (rng.integers(0, len(flat), 33), np.array([5, 5, 0]), np.zeros(0, dtype=np.int64)):
        batch = loader.fetch(ids)
        fields = batch.fields
        for name in ("z", "pos", "edge_index", "w", "y"):
            want = expected(flat, ids, name).astype(flat[0][name].dtype)
            got = fields[name]
            assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want), name
        dim_of = {"z": 0, "pos": 0, "edge_index": 1, "w": 0}
        for name, dim in dim_of.items():
            assert fields.counts[name].tolist() == [flat[i][name].shape[dim] for i in ids], name
        assert batch.sizes.tolist() == np.diff(batch.offsets).tolist()  # the byte view stays
    seen = []
    for batch in loader.epoch(8, seed=3):
        want = expected(flat, batch.ids, "pos")
        assert np.array_equal(batch.fields["pos"], want)
        seen += batch.ids.tolist()
    everyone = sorted(sum(comm.allgather(seen), []))
    assert everyone[: len(flat)] == list(range(len(flat))) or set(everyone) == set(range(len(flat)))


def test_a_rank_without_samples_takes_the_schema(comm, loader):
    mine = molecules(comm.rank, 10) if comm.rank == 0 else []
    loader.register_shard(mine, cat_dims={"edge_index": -1})
    assert loader.schema.names == ["edge_index", "pos", "w", "y", "z"]
    batch = loader.fetch([0, 9])
    assert batch.fields["pos"].dtype == np.float32


def test_a_schema_that_differs_fails_on_every_rank_naming_it(comm, loader):
    mine = molecules(comm.rank, 5)
    if comm.rank == comm.size - 1:
        for s in mine:
            s["pos"] = s["pos"].astype(np.float64)
    with pytest.raises(ValueError, match=r"field 'pos' is float32\[n, 3\] on rank 0 and float64\[n, 3\] on rank"):
        loader.register_shard(mine, cat_dims=CAT)


def test_a_bad_field_fails_on_every_rank(comm, loader):
    mine = molecules(comm.rank, 5)
    if comm.rank == 0:
        mine[3]["name"] = "water"
    with pytest.raises(ValueError, match=r"on rank 0: .*field 'name': str is not an array"):
        loader.register_shard(mine, cat_dims=CAT)


def test_a_sample_unlike_the_others_is_named(comm, loader):
    mine = molecules(comm.rank, 5)
    mine[2]["pos"] = mine[2]["pos"][:, :2]
    with pytest.raises(ValueError, match=r"sample 2: field 'pos' is float32\[n, 2\], sample 0's is float32\[n, 3\]"):
        loader.register_shard(mine, cat_dims=CAT)


def test_bytes_on_one_rank_and_mappings_on_another_fail_everywhere(comm, loader):
    if comm.size < 2:
        pytest.skip("needs two ranks")
    mine = molecules(comm.rank, 3) if comm.rank == 0 else [b"abc", b"de"]
    with pytest.raises(ValueError, match="some ranks pass typed samples"):
        loader.register_shard(mine)


def test_torch_tensors_and_numbers_are_fields(comm, loader):
    torch = pytest.importorskip("torch")
    mine = [{"x": torch.arange(i + 1, dtype=torch.float32), "label": i} for i in range(4)]
    loader.register_shard(mine)
    fields = loader.fetch([1, 3]).fields
    assert fields["x"].tolist() == [0, 1, 0, 1, 2, 3]
    assert fields.counts["x"].tolist() == [2, 4]
    assert fields["label"].tolist() == [1, 3]


def test_torch_views_with_a_lazy_negation_keep_their_values(comm, loader):
    torch = pytest.importorskip("torch")
    x = torch.tensor([1 + 2j, 3 + 4j], dtype=torch.complex64).conj().imag  # negative bit set
    loader.register_shard([{"x": x}])
    assert loader.fetch([comm.rank]).fields["x"].tolist() == [-2.0, -4.0]
