"""mdloader.pyg.DataLoader(ds, node_budget=...) on rank 1 only (rank 0: batch_size=4).
Run at 2 ranks under a timeout."""
import sys
from mpi4py import MPI
import torch
from torch_geometric.data import Data
from mdloader.pyg import DistDataset, DataLoader

comm = MPI.COMM_WORLD
graphs = [Data(x=torch.ones(1 + i % 5, 2), y=torch.tensor([float(i)])) for i in range(40)]
ds = DistDataset(graphs, "g", comm)
try:
    if comm.rank == 1:
        loader = DataLoader(ds, node_budget=12)
    else:
        loader = DataLoader(ds, batch_size=4)
    print(f"rank {comm.rank}: built, len {len(loader)}", flush=True)
    n = sum(1 for _ in loader)
    print(f"rank {comm.rank}: {n} batches", flush=True)
except Exception as err:
    print(f"rank {comm.rank}: {type(err).__name__}: {err}", flush=True)
ds.close()
print(f"rank {comm.rank}: closed", flush=True)
