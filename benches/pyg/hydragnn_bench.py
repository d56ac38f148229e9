"""HydraGNN's loaders as create_dataloaders builds them, over each dataset (issue 41).

Every variant delivers torch_geometric Batch objects of QM9-sized graphs, batch B per
rank, one epoch of a DistributedSampler split over the ranks; epochs alternate between
the variants (one warm-up epoch each first); graphs/s per rank over an epoch, the
slowest rank's, median over the measured epochs:

  ddstore      HydraGNN's DDStore pattern, emulated (pyddstore is not installed here): its
               DistDataset.get (hydragnn/utils/datasets/distdataset.py, the default
               path, ddstore_store_per_sample off) line for line, with DDStore's get as
               one one-sided get from the owner rank's window (MPI_Win_lock, MPI_Get,
               MPI_Win_unlock) per graph and attribute; the train loop's per-batch
               ddstore.epoch_begin/epoch_end (HYDRAGNN_USE_ddstore=1) left out;
               torch_geometric's DataLoader as create_dataloaders builds it
               (hydragnn/preprocess/load_data.py: shuffle=False, sampler, num_workers=0,
               pin_memory=True, persistent_workers=False), Batch.from_data_list per step;
  switch-old   mdloader.pyg.DistDataset as it was before issue 41 (__getitems__ returns
               batch.to_data_list(), which the Collater glues back), same DataLoader;
  switch       mdloader.pyg.DistDataset (the one-line switch), same DataLoader: the
               Collater takes the library's batch over whole (mdloader.pyg_fast);
  mdl-loader   mdloader.pyg.DataLoader(dataset, batch_size, sampler=DistributedSampler):
               the README's second change, for reference;
  custom-*     with --custom: HydraGNN's HydraDataLoader (HYDRAGNN_CUSTOM_DATALOADER=1,
               HYDRAGNN_NUM_WORKERS=1), its __iter__/fetch copied: every batch submitted
               to a thread pool at iter, each batch [dataset[i] for i in index] then
               Batch.from_data_list; over the DDStore emulation, over the switch, and
               (custom-list) over a list of every graph in memory, dataset[i] free:
               the ceiling of that loader whatever the dataset.

QM9-sized synthetic molecules (3-29 atoms, about 18 on average; x of 11 features, z,
pos, edges within 1.7 of a random geometry, y of 19 targets, idx). Each batch's graph
ids are checked against the sampler's.

    mpirun -n 2 python benches/pyg/hydragnn_bench.py [--graphs 8000] [--batch 64 256] [--epochs 3] [--custom]
"""

import argparse
import concurrent.futures
import statistics
import time

import numpy as np
import torch
from mpi4py import MPI
from torch.utils.data.distributed import DistributedSampler
from torch_geometric.data import Batch, Data
from torch_geometric.loader import DataLoader as PygDataLoader

from mdloader.pyg import DataLoader, DistDataset

from collate_bench import synthetic as molecules  # this directory: the script's own

KEYS = ("x", "z", "pos", "edge_index", "y", "idx")


def synthetic(count: int, seed: int) -> list:
    """collate_bench's QM9-sized molecules, with HydraGNN's node features x (11) and idx
    as a tensor."""
    rng = np.random.default_rng(seed + 1)
    graphs = molecules(count, seed)
    for g in graphs:
        g.x = torch.from_numpy(rng.normal(size=(g.num_nodes, 11)).astype(np.float32))
        g.idx = torch.tensor([g.idx])
    return graphs


class DDStoreLike(torch.utils.data.Dataset):
    """HydraGNN's DDStore-backed DistDataset, emulated with mpi4py: each rank exposes its
    part of every attribute (rows concatenated along the attribute's dimension 0, as
    DDStore needs) in one window per attribute; every rank holds each graph's offset
    and count per attribute (HydraGNN's variable_offset / variable_count)."""

    def __init__(self, graphs: list, comm):
        self.comm = comm
        n = len(graphs)
        part = np.array_split(np.arange(n), comm.size)
        first = [int(p[0]) if len(p) else 0 for p in part]
        self.owner = np.repeat(np.arange(comm.size), [len(p) for p in part])
        mine = [graphs[i] for i in part[comm.rank]]
        self.windows, self.meta = {}, {}
        for key in KEYS:
            rows = [g[key].t().contiguous() if key == "edge_index" else g[key] for g in graphs]
            counts = np.array([r.shape[0] for r in rows], dtype=np.int64)
            # Offsets within the owner's window (DDStore: within the owner's part).
            offsets = np.zeros(n, dtype=np.int64)
            for r in range(comm.size):
                sel = part[r]
                if len(sel):
                    offsets[sel] = np.cumsum(counts[sel]) - counts[sel]
            local = torch.cat([rows[i] for i in part[comm.rank]]).numpy() if len(mine) else np.zeros(0)
            local = np.ascontiguousarray(local)
            row_bytes = int(np.prod(rows[0].shape[1:], dtype=np.int64)) * rows[0].element_size()
            win = MPI.Win.Create(local if local.size else None, disp_unit=1, comm=comm)
            self.windows[key] = (win, local)
            self.meta[key] = (offsets, counts, rows[0].shape[1:], rows[0].numpy().dtype, row_bytes)
        del first

    def __len__(self) -> int:
        return len(self.owner)

    def __getitem__(self, idx: int) -> Data:
        # As HydraGNN's DistDataset.get (hydragnn/utils/datasets/distdataset.py, its
        # default path): per attribute a zeroed buffer, the edge dimension moved first,
        # one get (DDStore: MPI_Win_lock / MPI_Get / MPI_Win_unlock on the owner),
        # torch.tensor (a copy) and exec to set it.
        data_object = Data()
        owner = int(self.owner[idx])
        for k in KEYS:
            offsets, counts, shape, dtype, row_bytes = self.meta[k]
            val = np.zeros((int(counts[idx]), *shape), dtype=dtype)
            win = self.windows[k][0]
            win.Lock(owner, MPI.LOCK_SHARED)
            win.Get([val, MPI.BYTE], owner, target=(int(offsets[idx]) * row_bytes, val.nbytes, MPI.BYTE))
            win.Unlock(owner)
            if k == "edge_index":  # stored with its cat dimension (1) first
                val = np.ascontiguousarray(np.moveaxis(val, 0, 1))
            v = torch.tensor(val)  # noqa: F841 - set by the exec below, as HydraGNN does
            exec("data_object.%s = v" % (k))
        return data_object

    def close(self) -> None:
        for win, _ in self.windows.values():
            win.Free()


class ListDataset(list):
    """Every graph in memory on every rank, dataset[i] a list lookup: the most any
    dataset can give HydraDataLoader (its own per-graph list and from_data_list remain)."""

    def close(self) -> None:
        pass


class OldSwitch(DistDataset):
    """mdloader.pyg.DistDataset before issue 41: __getitems__ cut the batch into graphs."""

    def __getitems__(self, ids):
        return self._fetch(ids, "__getitems__").to_data_list()


class HydraDataLoaderCopy(PygDataLoader):
    """hydragnn/preprocess/load_data.py's HydraDataLoader, its iteration copied (the
    affinity setting of its worker_init left out)."""

    def __init__(self, dataset, **kwargs):
        super().__init__(dataset, **kwargs)

    @staticmethod
    def fetch(dataset, ibatch, index, pin_memory=False):
        batch = [dataset[i] for i in index]
        data = Batch.from_data_list(batch)
        if pin_memory and torch.cuda.is_available():
            data = torch.utils.data._utils.pin_memory.pin_memory(data)
        return ibatch, data

    def __iter__(self):
        self._sampler_iter = iter(self._index_sampler)
        executor = concurrent.futures.ThreadPoolExecutor(max_workers=self.num_workers)
        self._fs = [executor.submit(self.fetch, self.dataset, i, next(self._sampler_iter), self.pin_memory)
                    for i in range(len(self._index_sampler))]
        executor.shutdown(wait=False)
        return (f.result()[1] for f in self._fs)


def make(name: str, datasets: dict, comm, batch: int):
    dataset = datasets[{"ddstore": "ddstore", "switch-old": "old", "custom-ddstore": "ddstore",
                        "custom-list": "list"}.get(name, "mdl")]
    sampler = DistributedSampler(dataset, num_replicas=comm.size, rank=comm.rank, shuffle=True)
    if name == "mdl-loader":
        return DataLoader(dataset, batch_size=batch, sampler=sampler, num_workers=0, pin_memory=True,
                          persistent_workers=False), sampler
    if name.startswith("custom-"):
        return HydraDataLoaderCopy(dataset, batch_size=batch, sampler=sampler, num_workers=1, pin_memory=True,
                                   persistent_workers=False), sampler
    return PygDataLoader(dataset, batch_size=batch, shuffle=False, sampler=sampler, num_workers=0, pin_memory=True,
                         persistent_workers=False), sampler


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--graphs", type=int, default=8000)
    p.add_argument("--batch", type=int, nargs="+", default=[64, 256])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--custom", action="store_true")
    p.add_argument("--variants", nargs="+", default=["ddstore", "switch-old", "switch", "mdl-loader"])
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    graphs = synthetic(a.graphs, 7)
    variants = list(a.variants) + (["custom-ddstore", "custom-switch", "custom-list"] if a.custom else [])
    datasets = {"mdl": DistDataset(graphs, "bench", comm), "list": ListDataset(graphs)}
    if any(v in ("ddstore", "custom-ddstore") for v in variants):
        datasets["ddstore"] = DDStoreLike(graphs, comm)
    if "switch-old" in variants:
        datasets["old"] = OldSwitch(graphs, "bench-old", comm)
    import warnings

    warnings.filterwarnings("ignore", message=".*pin_memory.*")
    lib = MPI.Get_library_version().splitlines()[0].strip()[:24]
    for batch in a.batch:
        loaders = {v: make(v, datasets, comm, batch) for v in variants}
        rates = {v: [] for v in variants}
        for epoch in range(a.epochs + 1):  # the first of each is warm-up
            for name in variants:
                loader, sampler = loaders[name]
                (loader.set_epoch if hasattr(loader, "set_epoch") else sampler.set_epoch)(epoch)
                order = list(sampler)
                comm.Barrier()
                start, count, seen = time.perf_counter(), 0, []
                for got in loader:
                    count += got.num_graphs
                    seen.append(got.idx)
                rate = count / (time.perf_counter() - start)
                ids = torch.cat(seen).tolist()
                assert ids == order, f"{name}: the batches' graphs are not the sampler's"
                slowest = comm.allreduce(rate, op=MPI.MIN)
                if epoch:
                    rates[name].append(slowest)
        if comm.rank == 0:
            med = {v: statistics.median(r) for v, r in rates.items()}
            print(f"mpi={lib!r} ranks={comm.size} graphs={len(graphs)} batch={batch} epochs={a.epochs}", flush=True)
            for v in variants:
                print(f"  {v:15s} {med[v]:9.0f} graphs/s per rank (median; epochs: "
                      f"{' '.join(f'{r:.0f}' for r in rates[v])})  x{med[v] / med[variants[0]]:.1f} vs {variants[0]}",
                      flush=True)
    for d in datasets.values():
        d.close()


if __name__ == "__main__":
    main()
