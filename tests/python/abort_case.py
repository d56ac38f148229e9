"""A job in which one rank fails, for tests/run_binding_tests.sh: the job must end in
seconds (mdloader.abort), not hang with the failed rank in MPI_Finalize and the other in
its next fetch.

    mpirun -n 2 python tests/python/abort_case.py raise|sigint|raise-ddp

raise-ddp: as raise, in a job that started torch.distributed (gloo), whose own
excepthook captures the traceback; the log must still show it.
"""

import os
import signal
import sys
import time

import numpy as np
from mpi4py import MPI

import mdloader

mode = sys.argv[1]
comm = MPI.COMM_WORLD
if mode == "raise-ddp":
    from mdloader.ddp import init_gloo

    init_gloo(comm)
with mdloader.Loader(comm) as ld:
    ld.register_shard([np.full(64, i % 256, dtype=np.uint8) for i in range(1000)])
    start = time.time()
    for epoch in range(1000):
        for step, batch in enumerate(ld.epoch(16, epoch=epoch)):
            if comm.rank == 1 and epoch == 1 and step == 3:
                # When the failure happens, on the clock the runner reads after the job:
                # what must take seconds is the end after it, not the start-up (torch's
                # import under load) before it.
                print(f"failing at {time.time():.3f}", flush=True)
                if mode.startswith("raise"):
                    raise RuntimeError("a collate function failed on rank 1")
                os.kill(os.getpid(), signal.SIGINT)
        if time.time() - start > 120:
            break
print(f"rank {comm.rank}: the job was not ended", flush=True)
