"""Start-up time and peak RSS per rank: a DistDataset from HydraGNN's ADIOS2 file.

    python startup.py write PATH N          # one process: N QM9-sized graphs in HydraGNN's AdiosWriter layout
    mpirun -n 2 python -m mpi4py startup.py sources PATH    # mdloader.pyg_sources.from_adios
    mpirun -n 2 python -m mpi4py startup.py hydragnn PATH   # HydraGNN's path, emulated (below)

"hydragnn" is HydraGNN's ``DistDataset(AdiosDataset(path, "trainset", comm), ...)``
with ``mdloader.pyg.DistDataset`` as the DistDataset (the one-line switch), and
HydraGNN's ``AdiosDataset`` (not importable here: hydragnn needs torch_scatter)
emulated as its code reads, preload off: rank 0 reads every key's
``variable_count``/``variable_offset`` and broadcasts them, and ``dataset[i]`` reads
graph i key by key from the open file into a new ``Data`` (``torch.tensor`` of each
array), tagged with ``dataset_name``. Each rank prints one line: seconds from before
the file is opened to the dataset registered, the CPU seconds the rank spent in
that time (user + system: on a shared machine the wall clock counts the others' jobs
too), and ru_maxrss.
"""

import resource
import sys
import time

import numpy as np


def write(path: str, n: int, seed: int = 0) -> None:
    """QM9-sized graphs (9-29 atoms, about 4 edges per atom), written as HydraGNN's
    AdiosWriter writes them from one rank, without a Data per graph."""
    import adios2.bindings as ad2

    rng = np.random.default_rng(seed)
    atoms = rng.integers(9, 30, size=n)
    edges = atoms * 4 - rng.integers(0, 8, size=n)
    total_atoms, total_edges = int(atoms.sum()), int(edges.sum())
    columns = {  # key: (global array, per-graph counts, variable_dim)
        "x": (rng.normal(size=(total_atoms, 5)).astype(np.float32), atoms, 0),
        "pos": (rng.normal(size=(total_atoms, 3)).astype(np.float32), atoms, 0),
        # each graph's edges between its own atoms (0 .. atoms - 1)
        "edge_index": ((rng.random(size=(2, total_edges)) * np.repeat(atoms, edges)).astype(np.int64), edges, 1),
        "edge_attr": (rng.normal(size=(total_edges, 1)).astype(np.float32), edges, 0),
        "y": (rng.normal(size=(n, 1)).astype(np.float32), np.ones(n, dtype=np.int64), 0),
    }
    adios = ad2.ADIOS()
    io = adios.DeclareIO(path)
    io.Parameters()["StatsLevel"] = "Off"
    engine = io.Open(path, ad2.Mode.Write)
    io.DefineAttribute("trainset/ndata", np.array(n))
    io.DefineAttribute("trainset/keys", list(columns))
    for k, (values, counts, vdim) in columns.items():
        values = np.ascontiguousarray(values)
        shape = list(values.shape)
        engine.Put(io.DefineVariable(f"trainset/{k}", values, shape, [0] * len(shape), shape, ad2.ConstantDims),
                   values, ad2.Mode.Sync)
        io.DefineAttribute(f"trainset/{k}/variable_dim", np.array(vdim))
        counts = np.ascontiguousarray(counts, dtype=np.int64)
        offsets = np.cumsum(counts) - counts
        for name, table in (("count", counts), ("offset", offsets)):
            engine.Put(io.DefineVariable(f"trainset/{k}/variable_{name}", table, [n], [0], [n], ad2.ConstantDims),
                       table, ad2.Mode.Sync)
    io.DefineAttribute("total_ndata", np.array(n))
    io.DefineAttribute("dataset_name", "qm7x")
    engine.Close()


class EmulatedAdiosDataset:
    """HydraGNN's AdiosDataset(path, "trainset", comm), preload off (see the module's text)."""

    def __init__(self, path: str, label: str, comm):
        import adios2

        self.label = label
        self.f = adios2.FileReader(path)
        meta = None
        if comm.rank == 0:
            keys = list(self.f.read_attribute_string(f"{label}/keys"))
            meta = (keys, int(self.f.read_attribute(f"{label}/ndata").reshape(-1)[0]),
                    {k: (self.f.read(f"{label}/{k}/variable_count"), self.f.read(f"{label}/{k}/variable_offset"),
                         int(self.f.read_attribute(f"{label}/{k}/variable_dim").reshape(-1)[0]),
                         list(self.f.inquire_variable(f"{label}/{k}").shape())) for k in keys},
                    self.f.read_attribute_string("dataset_name")[0])
        self.keys, self.ndata, self.tables, self.dataset_name = comm.bcast(meta, root=0)

    def __len__(self):
        return self.ndata

    def __getitem__(self, i):
        import torch
        from torch_geometric.data import Data

        data = Data()
        for k in self.keys:
            counts, offsets, vdim, shape = self.tables[k]
            start, count = [0] * len(shape), list(shape)
            start[vdim], count[vdim] = int(offsets[i]), int(counts[i])
            data[k] = torch.tensor(self.f.read(f"{self.label}/{k}", start, count))
        data.dataset_name = torch.tensor([[1]])  # "qm7x"
        return data


def main() -> None:
    what, path = sys.argv[1], sys.argv[2]
    if what == "write":
        write(path, int(float(sys.argv[3])))
        return
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    import torch  # noqa: F401 - imported before the clock starts, as in a training script
    import mdloader.pyg as pyg
    import mdloader.pyg_sources as sources

    comm.Barrier()
    # CPU seconds too: on a machine shared with other jobs the wall clock is theirs as well
    before = resource.getrusage(resource.RUSAGE_SELF)
    cpu_before = before.ru_utime + before.ru_stime
    start = time.perf_counter()
    if what == "sources":
        dataset = sources.from_adios(path, "trainset", comm)
    else:
        dataset = pyg.DistDataset(EmulatedAdiosDataset(path, "trainset", comm), "trainset", comm)
    seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    times = comm.gather((seconds, usage.ru_utime + usage.ru_stime - cpu_before), root=0)
    peak = comm.gather(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, root=0)
    if comm.rank == 0:
        for rank, ((t, cpu), kb) in enumerate(zip(times, peak)):
            print(f"{what:9s} graphs={len(dataset)} rank={rank} startup_s={t:.2f} cpu_s={cpu:.2f} "
                  f"peak_rss_MB={kb / 1024:.0f}", flush=True)
    dataset.close()


if __name__ == "__main__":
    main()
