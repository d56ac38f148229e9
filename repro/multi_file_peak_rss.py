"""Peak RSS of from_adios over one file against the same graphs in 2 or 4 files (1 rank:
the whole shard). Usage: python -m mpi4py repro/multi_file_peak_rss.py write|one|two|four DIR"""
import os, resource, sys
import numpy as np
import torch
from torch_geometric.data import Data
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from hydragnn_files import write_adios

N = 16000
mode, d = sys.argv[1], sys.argv[2]
def graphs(lo, hi):
    rng = np.random.default_rng(lo)
    out = []
    for i in range(lo, hi):
        n = 8 + i % 24
        out.append(Data(x=torch.from_numpy(rng.normal(size=(n, 128)).astype(np.float32)),
                        pos=torch.from_numpy(rng.normal(size=(n, 3)).astype(np.float32)), y=torch.tensor([[float(i)]])))
    return out
if mode == "write":
    os.makedirs(d, exist_ok=True)
    write_adios(os.path.join(d, "one.bp"), {"trainset": graphs(0, N)}, writers=1)
    for k in (2, 4):
        for j in range(k):
            write_adios(os.path.join(d, f"of{k}-{j}.bp"), {"trainset": graphs(j * N // k, (j + 1) * N // k)}, writers=1)
    sys.exit()
from mpi4py import MPI
from mdloader.pyg_sources import from_adios
paths = {"one": os.path.join(d, "one.bp"), "two": [os.path.join(d, f"of2-{j}.bp") for j in range(2)],
         "four": [os.path.join(d, f"of4-{j}.bp") for j in range(4)]}[mode]
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
import gc; gc.collect()
with open("/proc/self/status") as f:
    rss0 = int([l for l in f if l.startswith("VmRSS")][0].split()[1])
ds = from_adios(paths, "trainset", MPI.COMM_WORLD)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with open("/proc/self/status") as f:
    rss1 = int([l for l in f if l.startswith("VmRSS")][0].split()[1])
print(f"{mode}: {len(ds)} graphs, RSS before {rss0/1024:.0f} MB, after {rss1/1024:.0f} MB, peak {peak/1024:.0f} MB "
      f"(peak - before {(peak - rss0)/1024:.0f} MB)", flush=True)
ds.close()
