"""mdloader.fairchem: fairchem's .aselmdb files and ase.Atoms in, fairchem AtomicData out,
each structure and each batch compared field by field with what fairchem itself makes
of the same rows (its AseDBDataset, atomicdata_list_to_batch, its collaters), through
fairchem's own batch samplers and create_concat_dataset, under mpirun.

fairchem-core pins its own torch (2.13 for fairchem-core 2.24), so it lives in a
virtual environment of its own (scripts/install-fairchem.sh); without it these tests
skip, saying so."""

import functools
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fairchem.core", reason="fairchem-core is not installed: the mdloader.fairchem tests did not run "
                    "(scripts/install-fairchem.sh)")
import torch  # noqa: E402
from fairchem.core.datasets import AseDBDataset  # noqa: E402
from fairchem.core.datasets.atomic_data import AtomicData, atomicdata_list_to_batch  # noqa: E402
from fairchem.core.datasets.samplers.max_atom_distributed_sampler import MaxAtomDistributedBatchSampler  # noqa: E402

from conftest import ROOT, all_ranks  # noqa: E402
from fairchem_data import structures, write_aselmdb  # noqa: E402
from mdloader.fairchem import DistAseDBDataset, get_dataloader  # noqa: E402
from mdloader.fairchem_records import collate, examples  # noqa: E402
from mdloader.fairchem_samplers import MaxAtomBatchSampler  # noqa: E402

COUNT = 90
A2G = {"r_energy": True, "r_forces": True}


def shared_folder(comm, name: str, **kwargs) -> Path:
    """A dataset every rank reads, written once by rank 0."""
    folder = ROOT / "target" / "fairchem-test-data" / f"np{comm.size}" / name
    problem = ""
    if comm.rank == 0:
        try:
            write_aselmdb(folder, **kwargs)
        except Exception as err:  # noqa: BLE001 - told to every rank
            problem = f"{type(err).__name__}: {err}"
    problem = comm.bcast(problem)
    if problem:
        raise RuntimeError(f"writing the test data failed on rank 0: {problem}")
    return folder


@pytest.fixture(scope="module")
def folder(comm):
    return shared_folder(comm, "slabs-and-molecules", count=COUNT, files=3, seed=1)


@pytest.fixture(scope="module")
def config(folder):
    return {"src": str(folder), "a2g_args": A2G}


@pytest.fixture(scope="module")
def fairchems(config):
    """fairchem's own AseDBDataset over the same files: the reference."""
    return AseDBDataset(dict(config))


@pytest.fixture(scope="module")
def dataset(comm, config):
    ds = DistAseDBDataset(dict(config), comm)
    yield ds
    ds.close()


@pytest.fixture(scope="module")
def ddp(comm):
    """torch.distributed over gloo with MPI's ranks (fairchem's BalancedBatchSampler
    gathers sizes through it)."""
    from mdloader.ddp import init_gloo

    if not torch.distributed.is_initialized():
        init_gloo(comm)
    return torch.distributed


def assert_same_structure(got: AtomicData, want: AtomicData) -> None:
    assert set(got.keys()) == set(want.keys())
    for key in want.keys():
        a, b = got[key], want[key]
        if isinstance(b, torch.Tensor):
            assert isinstance(a, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, key
            assert torch.equal(a, b), key
        else:
            assert type(a) is type(b) and a == b, key


def assert_same_batch(got: AtomicData, want: AtomicData) -> None:
    """Every field, and the slices, cumulative sums, cat dims and atom counts that
    get_example reads."""
    assert_same_structure(got, want)
    assert got.get_batch_stats() == want.get_batch_stats()
    assert got.num_graphs == want.num_graphs


def test_every_structure_is_fairchems(comm, dataset, fairchems):
    assert len(dataset) == len(fairchems) == COUNT
    mine = range(comm.rank, COUNT, 7)  # rows of every rank's shard
    for i in mine:
        assert_same_structure(dataset[i], fairchems[i])
    # Each rank asks for a different number of rows above; the fetches are collective.
    for _ in range(len(range(0, COUNT, 7)) - len(mine)):
        dataset[0]


def test_batches_equal_atomicdata_list_to_batch(comm, dataset, fairchems):
    rng = np.random.default_rng(comm.rank)
    for size in (1, 2, 7, 31):
        ids = rng.choice(COUNT, size, replace=False)
        fetched = dataset.loader.fetch(ids)
        got = collate(fetched.fields, dataset.facts)
        want = atomicdata_list_to_batch([fairchems[int(i)] for i in ids])
        assert_same_batch(got, want)
        # The fields the models read, named (assert_same_batch compared them all).
        for key in ("pos", "atomic_numbers", "cell", "pbc", "energy", "forces", "natoms", "batch", "fixed", "tags",
                    "edge_index", "cell_offsets", "nedges", "charge", "spin"):
            assert torch.equal(got[key], want[key]), key
        assert got.sid == want.sid
        # Cut back into structures: fairchem's own get_example gives the rows back.
        for k, item in enumerate(examples(got, dataset.facts)):
            assert_same_structure(item, fairchems[int(ids[k])])


def test_atoms_with_edges_and_dataset_names(comm):
    """From each rank's own ase.Atoms, with an edge list and cell offsets stored and a
    dataset name set as fairchem's common_transform sets it (a str)."""
    from ase.neighborlist import neighbor_list
    from fairchem.core.modules.transforms import common_transform

    atoms = structures(9 + 4 * comm.rank, seed=10 + comm.rank)

    def with_edges(data):
        a = data.to_ase_single()
        i, j, shift = neighbor_list("ijS", a, 3.0)
        data.edge_index = torch.from_numpy(np.vstack([j, i])).long()
        data.cell_offsets = torch.from_numpy(shift).float()
        data.nedges = torch.tensor([len(i)])
        return common_transform(data, {"dataset_name": f"set{comm.rank % 2}"})

    ds = DistAseDBDataset.from_atoms(atoms, comm, a2g_args=A2G, transform=with_edges)
    try:
        assert len(ds) == sum(9 + 4 * r for r in range(comm.size))
        local = [with_edges(AtomicData.from_ase(a, **A2G)) for a in atoms]
        first = ds.loader.local_ids.start
        # Every rank fetches its own structures in reverse: the edges of later ones are
        # shifted by the atoms before them in the batch.
        ids = np.arange(first, first + len(local))[::-1]
        want = atomicdata_list_to_batch(local[::-1])
        got = collate(ds.loader.fetch(ids).fields, ds.facts)
        assert want.edge_index.shape[1] > 0
        assert_same_batch(got, want)
        assert got.dataset == [f"set{comm.rank % 2}"] * len(local)
        items = examples(got, ds.facts)
        assert items[0].dataset == f"set{comm.rank % 2}"  # a str, as the transform left it
    finally:
        ds.close()


def test_metadata_served_from_memory(comm, dataset, fairchems):
    natoms = np.asarray(fairchems.get_metadata("natoms", list(range(COUNT))))
    assert np.array_equal(dataset.get_metadata("natoms", dataset.indices), natoms)
    assert dataset.get_metadata("natoms", [3, 1]) == list(natoms[[3, 1]])
    assert dataset.get_metadata("natoms", [[3, 1]])[0].tolist() == natoms[[3, 1]].tolist()  # fairchem's Subset
    assert dataset.get_metadata("natoms", 5) == natoms[5]
    assert dataset.metadata_hasattr("natoms") and not dataset.metadata_hasattr("energy")
    assert dataset.get_metadata("energy", 5) is None


def test_without_metadata_npz_counts_are_read(comm):
    folder = shared_folder(comm, "no-metadata", count=23, files=2, seed=3, metadata=False)
    ds = DistAseDBDataset({"src": str(folder), "a2g_args": A2G}, comm)
    try:
        want = [len(a) for a in structures(23, seed=3)]
        assert ds.get_metadata("natoms", list(range(23))) == want
    finally:
        ds.close()


def test_wrong_metadata_npz_is_refused_on_every_rank(comm):
    folder = shared_folder(comm, "wrong-metadata", count=11, files=1, seed=4)
    if comm.rank == 0:
        natoms = np.load(folder / "metadata.npz")["natoms"]
        natoms[-1] += 1  # the last rank's last row
        np.savez(folder / "metadata.npz", natoms=natoms)
    comm.Barrier()
    with pytest.raises(ValueError, match="metadata.npz differ"):
        DistAseDBDataset({"src": str(folder), "a2g_args": A2G}, comm)


def test_missing_files_fail_on_every_rank(comm, folder):
    src = str(folder) if comm.rank == 0 else str(folder / "nothing-here")
    with pytest.raises(ValueError, match="on rank 1: .*nothing-here|different numbers of structures"):
        DistAseDBDataset({"src": src, "a2g_args": A2G}, comm)


def sampler_fn(cls=MaxAtomDistributedBatchSampler, **kwargs):
    return functools.partial(cls, **{"max_atoms": 70, "seed": 3, "shuffle": True, **kwargs})


def reference_batches(sampler, fairchems, epoch: int, start: int = 0) -> list:
    sampler.set_epoch_and_start_iteration(epoch, start)
    return [atomicdata_list_to_batch([fairchems[int(i)] for i in ids]) for ids in list(sampler)]


@pytest.mark.parametrize("cls", [MaxAtomDistributedBatchSampler, MaxAtomBatchSampler])
def test_max_atom_samplers_through_the_library(comm, dataset, fairchems, cls):
    loader = get_dataloader(dataset, sampler_fn(cls))
    reference = sampler_fn(cls)(dataset=dataset, num_replicas=comm.size, rank=comm.rank)
    assert len(loader) == len(reference)
    for epoch in (0, 1):
        loader.batch_sampler.set_epoch_and_start_iteration(epoch, 0)
        got = list(loader)
        want = reference_batches(reference, fairchems, epoch)
        assert len(got) == len(want) > 0
        for g, w in zip(got, want):
            assert_same_batch(g, w)
            assert int(g.natoms.sum()) <= 70


def test_collate_functions(comm, dataset, fairchems):
    """fairchem's data_list_collater (its `neighbors`, or none with otf_graph) built
    vectorised, and any other collate_fn called with the structures."""
    from fairchem.core.datasets import data_list_collater

    def own(structures):
        return [s.sid[0] for s in structures]

    reference = sampler_fn()(dataset=dataset, num_replicas=comm.size, rank=comm.rank)
    for collate_fn in (data_list_collater, functools.partial(data_list_collater, otf_graph=True), own):
        loader = get_dataloader(dataset, sampler_fn(), collate_fn)
        loader.batch_sampler.set_epoch_and_start_iteration(1, 0)
        reference.set_epoch_and_start_iteration(1, 0)
        got = list(loader)
        want = [collate_fn([fairchems[int(i)] for i in ids]) for ids in reference]
        assert len(got) == len(want) > 0
        for g, w in zip(got, want):
            if collate_fn is own:
                assert g == w
                continue
            assert_same_batch(g, w)
            assert hasattr(g, "neighbors") == (collate_fn is data_list_collater)


def test_own_sampler_gives_fairchems_batches(comm, dataset):
    for drop_last in (False, True):
        for ranks in (1, 2, 3):
            ours = MaxAtomBatchSampler(dataset, 70, ranks, ranks - 1, seed=5, drop_last=drop_last, min_atoms=20)
            theirs = MaxAtomDistributedBatchSampler(dataset, 70, ranks, ranks - 1, seed=5, drop_last=drop_last,
                                                    min_atoms=20)
            assert ours.all_batches == [list(b) for b in theirs.all_batches]
            assert len(ours) == len(theirs)
            for epoch in (0, 3):
                for s in (ours, theirs):
                    s.set_epoch_and_start_iteration(epoch, 1)
                assert [list(b) for b in ours] == [list(b) for b in theirs]


def test_resume_mid_epoch_exactly(comm, dataset):
    loader = get_dataloader(dataset, sampler_fn())
    loader.batch_sampler.set_epoch_and_start_iteration(2, 0)
    whole = [b.sid for b in loader]
    for start in (1, len(whole) - 1):
        loader.batch_sampler.set_epoch_and_start_iteration(2, start)
        assert [b.sid for b in loader] == whole[start:]


def test_stopping_early_then_a_new_epoch(comm, dataset, fairchems):
    loader = get_dataloader(dataset, sampler_fn(), collate_ahead=1)
    loader.batch_sampler.set_epoch_and_start_iteration(0, 0)
    for k, _ in enumerate(loader):
        if k == 1:
            break
    dataset[3]  # a fetch between: the open epoch ends on every rank first
    loader.batch_sampler.set_epoch_and_start_iteration(1, 0)
    got = list(loader)
    reference = sampler_fn()(dataset=dataset, num_replicas=comm.size, rank=comm.rank)
    assert [b.sid for b in got] == [b.sid for b in reference_batches(reference, fairchems, 1)]


def test_balanced_batch_sampler(comm, dataset, fairchems, ddp):
    from fairchem.core.common.data_parallel import BalancedBatchSampler

    fn = functools.partial(BalancedBatchSampler, batch_size=6, seed=2, device=torch.device("cpu"))
    loader = get_dataloader(dataset, fn)
    reference = fn(dataset=dataset, num_replicas=comm.size, rank=comm.rank)
    for epoch, start in ((1, 0), (1, 2)):
        loader.batch_sampler.set_epoch_and_start_iteration(epoch, start)
        got = list(loader)
        want = reference_batches(reference, fairchems, epoch, start)
        assert len(got) == len(want) > 0
        for g, w in zip(got, want):
            assert_same_batch(g, w)


def test_fairchem_config_with_concat_dataset_and_mt_collater(comm, folder):
    """fairchem's create_concat_dataset with `format: mdloader.fairchem.DistAseDBDataset`
    (sample_n, max_atoms, key_mapping, common_transform) and its MTCollater: the batches
    equal those of the same config with `format: ase_db` through fairchem's own
    collater."""
    from fairchem.core.datasets.collaters.mt_collater import MTCollater
    from fairchem.core.datasets.mt_concat_dataset import create_concat_dataset
    from omegaconf import OmegaConf

    def datasets(fmt):
        cfg = {"oc20": {"splits": {"train": {"src": str(folder), "sample_n": 70}}, "format": fmt, "max_atoms": 40,
                        "a2g_args": A2G, "key_mapping": {"energy": "oc20_energy"},
                        "transforms": {"common_transform": {"dataset_name": "oc20"}}}}
        return create_concat_dataset(OmegaConf.create(cfg), {"sampling": {"type": "explicit",
                                                                           "ratios": {"oc20.train": 2.0}}})

    tasks = {"oc20_energy": {"level": "system", "datasets": ["oc20"], "out_spec": {"dim": [1], "dtype": "float32"}},
             "forces": {"level": "atom", "datasets": ["oc20"], "out_spec": {"dim": [3], "dtype": "float32"}},
             "omol_energy": {"level": "system", "datasets": ["omol"], "out_spec": {"dim": [1], "dtype": "float32"}}}
    collater = MTCollater(tasks, exclude_keys=[])
    ours, theirs = datasets("mdloader.fairchem.DistAseDBDataset"), datasets("ase_db")
    try:
        assert len(ours) == len(theirs) == 140
        loader = get_dataloader(ours, sampler_fn(max_atoms=60), collater)
        reference = sampler_fn(max_atoms=60)(dataset=theirs, num_replicas=comm.size, rank=comm.rank)
        loader.batch_sampler.set_epoch_and_start_iteration(0, 0)
        got = list(loader)
        want = [collater([theirs[int(i)] for i in ids]) for ids in reference]
        assert len(got) == len(want) > 0
        for g, w in zip(got, want):
            assert_same_batch(g, w)
            assert torch.isinf(g.omol_energy).all() and g.dataset_name == ["oc20.train"] * g.num_graphs
    finally:
        ours.datasets[0].dataset.close()


def test_a_sampler_with_uneven_batches_fails_on_every_rank(comm, dataset):
    def uneven(dataset, num_replicas, rank):
        return [[0, 1]] * (2 + rank)

    def negative_on_the_last_rank(dataset, num_replicas, rank):
        return [[0, -1 if rank == num_replicas - 1 else 1]]

    loader = get_dataloader(dataset, uneven)
    with pytest.raises(ValueError, match="different numbers of batches"):
        iter(loader)
    loader = get_dataloader(dataset, negative_on_the_last_rank)
    with pytest.raises(ValueError, match=f"failed on rank {comm.size - 1}: IndexError: id -1 is not one"):
        iter(loader)
    assert all_ranks(comm, True)
