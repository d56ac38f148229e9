"""Ranks with different numbers of batches under torch_geometric's own DataLoader over
``mdloader.pyg.DistDataset`` (a per-rank split: rank 0 has one batch more), as a user's
script meets it. Run by tests/run_binding_tests.sh at 2 ranks:

    python mismatch_case.py close       the ranks that finished close the dataset while
                                        rank 0 fetches its last batch: every rank is told
                                        (ERR_CALL_MISMATCH, naming mdl_fetch_batch and
                                        mdl_finalize), nothing is done, then rank 0 closes
                                        too and every rank's close succeeds; exit 0
    python mismatch_case.py allreduce   the ranks that finished wait in the script's own
                                        comm.allreduce: the library's watchdog (the runner
                                        sets MDL_WATCHDOG short) ends the job with a line
                                        naming the call; the runner checks it
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
os.environ.setdefault("MDL_CALIBRATION", "off")

import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402
from torch_geometric.data import Data  # noqa: E402
from torch_geometric.loader import DataLoader  # noqa: E402

from mdloader import MDLError, Status  # noqa: E402
from mdloader.pyg import DistDataset  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
mode = sys.argv[1]

graphs = [Data(x=torch.full((3 + i % 4, 2), float(i)), edge_index=torch.tensor([[0, 1], [1, 0]])) for i in range(40)]
dataset = DistDataset(graphs, "trainset", comm)
# Rank 0's part has 3 batches of 4, the others' 2: a per-rank split of different sizes.
mine = list(range(rank, len(graphs), size))[: 12 if rank == 0 else 8]
loader = DataLoader(dataset, batch_size=4, sampler=torch.utils.data.SubsetRandomSampler(mine))

failures = []
try:
    for batch in loader:
        for graph in batch.to_data_list():
            if not torch.equal(graph.x, graphs[int(graph.x[0, 0])].x):
                failures.append("a wrong graph")
    if mode == "allreduce":
        comm.allreduce(1)  # rank 0 never comes: it waits in its third fetch
        failures.append("the allreduce returned")
    elif rank != 0:
        dataset.close()
        failures.append("close returned while rank 0 fetched")
except MDLError as err:
    text = str(err)
    print(f"rank {rank}: {text}", file=sys.stderr, flush=True)
    expected = "mdl_fetch_batch" in text and "mdl_finalize" in text and "different calls" in text
    if mode != "close" or err.status != Status.ERR_CALL_MISMATCH or not expected:
        failures.append(f"expected ERR_CALL_MISMATCH naming both calls, got {err.status!r}")
    if "trainset" not in text or ("DistDataset.__getitems__" if rank == 0 else "DistDataset.close") not in text:
        failures.append("the message does not name the dataset and its call")

# Nothing was done: every rank can now close together.
try:
    dataset.close()
except MDLError as err:
    failures.append(f"the closing close failed: {err}")
verdicts = comm.allgather(failures)
if rank == 0:
    for r, theirs in enumerate(verdicts):
        print(f"{'FAIL' if theirs else 'PASS'} rank {r}: {'; '.join(theirs) or 'told of the mismatch, then closed'}")
sys.exit(1 if any(verdicts) else 0)
