"""set_epoch(e) with e differing across ranks: the library's sampler vs node_budget=."""
from mpi4py import MPI
import torch
from torch_geometric.data import Data
from mdloader.pyg import DistDataset, DataLoader

comm = MPI.COMM_WORLD
graphs = [Data(x=torch.ones(1 + (i * 7) % 5, 2), y=torch.tensor([float(i)])) for i in range(40)]
ds = DistDataset(graphs, "g", comm)
for name, make in (("batch_size=4", lambda: DataLoader(ds, batch_size=4, shuffle=True)),
                   ("node_budget=12", lambda: DataLoader(ds, node_budget=12, shuffle=True))):
    loader = make()
    loader.set_epoch(comm.rank)  # rank 0 epoch 0, rank 1 epoch 1
    try:
        ys = sorted(int(v) for b in loader for v in b.y.tolist())
        every = sorted(sum(comm.allgather(ys), []))
        if comm.rank == 0:
            print(f"{name}: {len(every)} graphs taken, {len(set(every))} distinct of 40", flush=True)
    except Exception as err:
        print(f"rank {comm.rank}: {name}: {type(err).__name__}: {err}", flush=True)
ds.close()
