"""mdloader.pyg where a rank holds no graph, for tests/run_binding_tests.sh at 3 ranks
(pytest runs at 2 and 4): 2 graphs of a Data subclass that concatenates ``feat`` along
its dimension 1, with local=False (the split leaves one rank without a graph) and
local=True (one rank passes an empty list). Every rank must get the stored graphs back,
field by field and of the subclass: a rank without graphs took plain Data and cut
``feat`` along dimension 0, with exit code 0. The class is this script's (``__main__``),
which that rank imports by its name. Prints "rank without graphs: ok" on rank 0."""

import os
import sys
from pathlib import Path

import torch
from mpi4py import MPI
from torch_geometric.data import Data

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("MDL_CALIBRATION", "off")  # as in the pytest suite: it only costs time here
from test_pyg import assert_same_graph  # noqa: E402

from mdloader.pyg import DataLoader, DistDataset  # noqa: E402


class Featured(Data):
    """Node features stored feature-major: ``feat`` of shape (10, nodes)."""

    def __cat_dim__(self, key, value, *args, **kwargs):
        return 1 if key == "feat" else super().__cat_dim__(key, value, *args, **kwargs)


comm = MPI.COMM_WORLD
assert comm.size == 3, "run at 3 ranks"
g = torch.Generator().manual_seed(1)
stored = [Featured(feat=torch.randn(10, n, generator=g), edge_index=torch.tensor([[0, 1], [1, 0]]),
                   y=torch.randn(1, generator=g), num_nodes=n, idx=i) for i, n in enumerate((2, 3))]
for local in (False, True):
    mine = stored if not local else stored[comm.rank:comm.rank + 1] if comm.rank < 2 else []
    dataset = DistDataset(mine, "featured", comm, local=local)
    assert dataset.data_class is Featured
    for i, want in enumerate(stored):
        assert_same_graph(dataset[i], want)
    for got, want in zip(dataset.__getitems__([1, 0]), [stored[1], stored[0]]):
        assert_same_graph(got, want)
    for batch in DataLoader(dataset, batch_size=2):
        assert isinstance(batch, Featured)
        for got in batch.to_data_list():
            assert_same_graph(got, stored[int(got.idx)])
    dataset.close()
if comm.rank == 0:
    print("rank without graphs: ok", flush=True)
