"""Start-up and peak RSS per rank: a ready dataset from a HydraGNN ADIOS2 file, mdloader's
reader against HydraGNN's own AdiosDataset -> DistDataset (issue 41, item 3).

    mpirun -n 1 python -m mpi4py startup.py write PATH N      # HydraGNN's own AdiosWriter
    python startup.py write-columns PATH N                    # the same file, adios2 package, no Data list
    python startup.py same PATH1 PATH2                        # two files' attributes and variables equal
    mpirun -n 2 python -m mpi4py startup.py mdl PATH          # mdloader.pyg_sources.from_adios
    mpirun -n 2 python -m mpi4py startup.py hydragnn PATH     # HydraGNN's AdiosDataset -> DistDataset
    mpirun -n 2 python -m mpi4py startup.py hydragnn-ddstore PATH   # AdiosDataset(ddstore=True)
    mpirun -n 2 python -m mpi4py startup.py check PATH        # both; first batches compared
    mpirun -n 2 python -m mpi4py startup.py write-pickle DIR N   # HydraGNN's SimplePickleWriter
    mpirun -n 2 python -m mpi4py startup.py mdl-pickle DIR    # mdloader.pyg_sources.from_pickle
    mpirun -n 2 python -m mpi4py startup.py hydragnn-pickle DIR   # SimplePickleDataset -> DistDataset
    mpirun -n 2 python -m mpi4py startup.py check-pickle DIR

HydraGNN is imported from an unmodified checkout on PYTHONPATH (run.sh archives one),
pyddstore from the virtual environment; nothing of HydraGNN is copied here.

write:     one rank makes N QM9-sized graphs (3-29 atoms; x [n, 11] and pos
           [n, 3] float32; edge_index [2, m] int64, both directions, between atoms closer
           than 1.7 and from each atom to its nearest neighbour, so no graph is without
           edges; y [1, 19] float32) as torch_geometric Data objects and writes them with
           HydraGNN's AdiosWriter (label "trainset"), as HydraGNN's preprocessing does.
mdl:       mdloader.pyg_sources.from_adios(PATH, "trainset", comm): each rank reads its
           half, column by column, into the library's records (no Data per graph).
hydragnn:  HydraGNN's AdiosDataset -> DistDataset, as its examples/multidataset/train.py
           builds it: AdiosDataset(PATH, "trainset", comm) (preload off),
           setsubset(first, last + 1, preload=True) over the rank's nsplit part (reads the
           rank's contiguous range of every key), then HydraGNN's DDStore-backed
           DistDataset(trainset, "trainset", comm, local=True): a Data per graph of the
           rank's part in a list, then its per-sample records into DDStore.
hydragnn-ddstore: AdiosDataset(PATH, "trainset", comm, preload=False, ddstore=True), as
           examples/LennardJones builds it with --format adios --ddstore: the rank's part
           of every key read, then per-sample records into DDStore (no DistDataset).
check:     mdl and hydragnn in one job; torch_geometric's DataLoader (batch 64) over each
           with the same DistributedSampler (shuffle off); the first 4 batches of every
           rank compared key by key (x, pos, edge_index, y, batch, ptr); HydraGNN's
           DDStore fences (epoch_begin/epoch_end) around each batch, as its train loop.
write-columns, same, write-pickle, *-pickle: their functions below.

Each rank prints the seconds from before the file is opened to the dataset ready, the CPU
seconds (user + system) in that time, RSS before and peak RSS (ru_maxrss, torch, MPI and
hydragnn's imports included) in MiB.
"""

import resource
import sys
import time

import numpy as np

KEYS = ("edge_index", "pos", "x", "y")


def hydragnn_adios():
    """HydraGNN's adiosdataset module, unmodified, made to run on the PyPI adios2 wheel,
    which is built without MPI: HydraGNN opens its files with a communicator
    (``adios2.Stream(path, "r", comm)`` in ``adios2_open``; ``io.Open(path, mode, comm)``
    in ``AdiosWriter.save``), which the serial bindings refuse. The module's global
    ``adios2`` is given a ``Stream`` that drops the communicator (each rank opens the
    file alone, as mdloader's reader does; every read HydraGNN then makes is its own
    rank's selection, as with a parallel open), and ``AdiosWriter`` is run on one rank
    with its ``io`` wrapped to drop the communicator of size 1. Nothing else changes."""
    import types

    import adios2
    import hydragnn.utils.datasets.adiosdataset as module

    if not isinstance(module.adios2, types.SimpleNamespace):
        module.adios2 = types.SimpleNamespace(
            __version__=adios2.__version__, Stream=lambda path, mode, comm=None: adios2.Stream(path, mode))
    return module


class SerialIO:
    """An adios2 IO whose Open takes (and drops) a communicator of one rank."""

    def __init__(self, io):
        self._io = io

    def Open(self, name, mode, comm=None):  # noqa: N802 - adios2's name
        assert comm is None or comm.Get_size() == 1
        return self._io.Open(name, mode)

    def __getattr__(self, name):
        return getattr(self._io, name)


def molecules(first: int, count: int, seed: int = 41) -> list:
    """Graphs first .. first + count - 1; graph i depends on (seed, i) only."""
    import torch
    from torch_geometric.data import Data

    out = []
    for i in range(first, first + count):
        rng = np.random.default_rng((seed, i))
        n = int(rng.integers(3, 30))
        pos = rng.normal(scale=1.2, size=(n, 3)).astype(np.float32)
        d = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
        np.fill_diagonal(d, np.inf)
        near = np.zeros((n, n), dtype=bool)
        near[np.arange(n), d.argmin(axis=1)] = True
        src, dst = np.nonzero((d < 1.7) | near | near.T)
        out.append(Data(x=torch.from_numpy(rng.normal(size=(n, 11)).astype(np.float32)),
                        pos=torch.from_numpy(pos),
                        edge_index=torch.from_numpy(np.stack([src, dst]).astype(np.int64)),
                        y=torch.from_numpy(rng.normal(size=(1, 19)).astype(np.float32))))
    return out


def part(n: int, rank: int, size: int) -> range:
    """HydraGNN's nsplit of range(n): the first n % size parts one longer."""
    k, m = divmod(n, size)
    first = rank * k + min(rank, m)
    return range(first, first + k + (1 if rank < m else 0))


def write(path: str, n: int, comm) -> None:
    assert comm.size == 1, "the serial adios2 wheel: write from one rank"
    graphs = molecules(0, n)
    writer = hydragnn_adios().AdiosWriter(path, comm)
    writer.io = SerialIO(writer.io)
    writer.add("trainset", graphs)
    writer.save()


def write_columns(path: str, n: int, chunk: int = 10000) -> None:
    """The graphs of ``write``, written in the layout HydraGNN's AdiosWriter writes from one
    rank (checked variable by variable against it by ``same``) with the adios2 package,
    without its list of a Data per graph: HydraGNN's writer holds all N Data objects and
    then each key's concatenation, about 9 KiB a graph at its peak (1.7 GB at 10^5), too
    much for 10^6 here. Columns are gathered chunk by chunk."""
    import adios2.bindings as ad2

    vdim = {"edge_index": 1, "pos": 0, "x": 0, "y": 0}
    parts = {k: [] for k in KEYS}
    counts = {k: [] for k in KEYS}
    for first in range(0, n, chunk):
        graphs = molecules(first, min(chunk, n - first))
        for k in KEYS:
            arrays = [g[k].numpy() for g in graphs]
            parts[k].append(np.concatenate(arrays, axis=vdim[k]))
            counts[k].append(np.array([a.shape[vdim[k]] for a in arrays]))
        del graphs
    adios = ad2.ADIOS()
    io = adios.DeclareIO(path)
    io.Parameters()["StatsLevel"] = "Off"
    engine = io.Open(path, ad2.Mode.Write)
    io.DefineAttribute("trainset/ndata", np.array(n))
    io.DefineAttribute("trainset/keys", list(KEYS))
    for k in KEYS:
        val = np.ascontiguousarray(np.concatenate(parts.pop(k), axis=vdim[k]))
        shape = list(val.shape)
        engine.Put(io.DefineVariable(f"trainset/{k}", val, shape, [0] * len(shape), shape, ad2.ConstantDims),
                   val, ad2.Mode.Sync)
        del val
        io.DefineAttribute(f"trainset/{k}/variable_dim", np.array(vdim[k]))
        vcount = np.concatenate(counts.pop(k))
        offset = np.zeros_like(vcount)
        offset[1:] = np.cumsum(vcount)[:-1]
        for name, table in (("count", vcount), ("offset", offset)):
            engine.Put(io.DefineVariable(f"trainset/{k}/variable_{name}", table, [n], [0], [n], ad2.ConstantDims),
                       table, ad2.Mode.Sync)
    io.DefineAttribute("total_ndata", np.array(n))
    engine.Close()


def same(a: str, b: str) -> None:
    """Every attribute and variable of two files equal (type, shape, values; the keys'
    order aside)."""
    import adios2

    with adios2.FileReader(a) as fa, adios2.FileReader(b) as fb:
        attrs, avars = fa.available_attributes(), fa.available_variables()
        # AdiosWriter stores the first graph's Data.keys(), whose order varies from run to
        # run (torch_geometric keeps them in a set); it changes only the order in which a
        # reader sets a Data's attributes, not the graphs
        keys = "trainset/keys"
        assert sorted(fa.read_attribute_string(keys)) == sorted(fb.read_attribute_string(keys)), keys
        assert ({k: v for k, v in attrs.items() if k != keys}
                == {k: v for k, v in fb.available_attributes().items() if k != keys}), "attributes differ"
        assert sorted(avars) == sorted(fb.available_variables()), "variables differ"
        for name, info in avars.items():
            other = fb.available_variables()[name]
            assert (info["Type"], info["Shape"]) == (other["Type"], other["Shape"]), name
            assert np.array_equal(fa.read(name), fb.read(name)), name
    print(f"{a} and {b}: {len(attrs)} attributes, {len(avars)} variables, all equal", flush=True)


def hydragnn_path(path: str, comm):
    from hydragnn.utils.datasets.distdataset import DistDataset

    trainset = hydragnn_adios().AdiosDataset(path, "trainset", comm)
    rx = part(len(trainset), comm.rank, comm.size)
    trainset.setsubset(rx[0], rx[-1] + 1, preload=True)
    return DistDataset(trainset, "trainset", comm, local=True)


def write_pickle(basedir: str, n: int, comm) -> None:
    """The graphs of ``write`` with HydraGNN's SimplePickleWriter, each rank its nsplit part,
    10,000 files a subdirectory (use_subdir), as HydraGNN's larger examples write them."""
    import socket

    import torch.distributed as dist
    from hydragnn.utils.datasets.pickledataset import SimplePickleWriter

    # its progress bar asks torch.distributed for the rank, as HydraGNN's scripts set it up
    port = None
    if comm.rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{comm.bcast(port)}", rank=comm.rank,
                            world_size=comm.size)
    mine = part(n, comm.rank, comm.size)
    SimplePickleWriter(molecules(mine.start, len(mine)), basedir, "trainset", use_subdir=True, comm=comm)


def hydragnn_pickle(basedir: str, comm):
    """HydraGNN's SimplePickleDataset -> DistDataset as examples/multidataset/train.py builds
    it with --format pickle --ddstore: the dataset (preload off), then DistDataset reads
    the rank's nsplit part graph by graph (one file each) into its list."""
    from hydragnn.utils.datasets.distdataset import DistDataset
    from hydragnn.utils.datasets.pickledataset import SimplePickleDataset

    return DistDataset(SimplePickleDataset(basedir=basedir, label="trainset"), "trainset", comm)


def build(what: str, path: str, comm):
    if what == "mdl-pickle":
        import mdloader.pyg_sources as sources

        return sources.from_pickle(path, "trainset", comm)
    if what == "hydragnn-pickle":
        return hydragnn_pickle(path, comm)
    if what == "mdl":
        import mdloader.pyg_sources as sources

        return sources.from_adios(path, "trainset", comm)
    if what == "hydragnn":
        return hydragnn_path(path, comm)
    if what == "hydragnn-ddstore":
        return hydragnn_adios().AdiosDataset(path, "trainset", comm, preload=False, ddstore=True)
    raise SystemExit(f"unknown variant {what}")


def check(path: str, comm, pickle: bool = False) -> None:
    import torch
    from torch.utils.data.distributed import DistributedSampler
    from torch_geometric.loader import DataLoader

    import mdloader.pyg_sources as sources

    ours = sources.from_pickle(path, "trainset", comm) if pickle else sources.from_adios(path, "trainset", comm)
    theirs = hydragnn_pickle(path, comm) if pickle else hydragnn_path(path, comm)
    assert len(ours) == len(theirs), (len(ours), len(theirs))
    loaders = [DataLoader(d, batch_size=64, sampler=DistributedSampler(
        d, num_replicas=comm.size, rank=comm.rank, shuffle=False)) for d in (ours, theirs)]
    compared = 0
    ours_it, theirs_it = iter(loaders[0]), iter(loaders[1])
    for step in range(4):
        a = next(ours_it)
        theirs.ddstore.epoch_begin()
        b = next(theirs_it)
        theirs.ddstore.epoch_end()
        for key in KEYS + ("batch", "ptr"):
            if not torch.equal(a[key], b[key]):
                raise SystemExit(f"rank {comm.rank} batch {step}: {key} differs")
        compared += a.num_graphs
    counts = comm.gather(compared, root=0)
    if comm.rank == 0:
        print(f"check{'-pickle' if pickle else ''} graphs={len(ours)}: the first 4 batches (64) of every rank equal, "
              f"x pos edge_index y batch ptr ({sum(counts)} graphs compared)", flush=True)
    ours.close()


def main() -> None:
    what, path = sys.argv[1], sys.argv[2]
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if what == "same":
        same(path, sys.argv[3])
        return
    # The writers: each timed, one line from rank 0.
    writers = {
        "write-columns": (" (columns)", lambda n: write_columns(path, n)),
        "write": ("", lambda n: write(path, n, comm)),
        "write-pickle": (" (pickle)", lambda n: write_pickle(path, n, comm)),
    }
    if what in writers:
        kind, write_graphs = writers[what]
        graphs = int(float(sys.argv[3]))
        start = time.perf_counter()
        write_graphs(graphs)
        if comm.rank == 0:
            print(f"wrote {path}{kind}: {graphs} graphs in {time.perf_counter() - start:.1f} s", flush=True)
        return
    if what in ("check", "check-pickle"):
        check(path, comm, what == "check-pickle")
        return
    # imported before the clock starts, as in a training script
    import torch  # noqa: F401
    import mdloader.pyg  # noqa: F401
    import mdloader.pyg_sources  # noqa: F401
    if what.startswith("hydragnn"):
        import hydragnn.utils.datasets.distdataset  # noqa: F401
        hydragnn_adios()

    before_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    comm.Barrier()
    before = resource.getrusage(resource.RUSAGE_SELF)
    cpu_before = before.ru_utime + before.ru_stime
    start = time.perf_counter()
    dataset = build(what, path, comm)
    seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    rows = comm.gather((seconds, usage.ru_utime + usage.ru_stime - cpu_before, before_rss, usage.ru_maxrss),
                       root=0)
    if comm.rank == 0:
        for rank, (t, cpu, rss0, peak) in enumerate(rows):
            print(f"RESULT {what} graphs={len(dataset)} rank={rank} startup_s={t:.2f} cpu_s={cpu:.2f} "
                  f"rss_before_MiB={rss0 / 1024:.0f} peak_rss_MiB={peak / 1024:.0f}", flush=True)
    if what == "mdl":
        dataset.close()


if __name__ == "__main__":
    main()
