"""torch.distributed with MPI's ranks, for scripts launched by mpirun (torch's own
launchers set its rendezvous variables; mpirun does not).

    from mdloader.ddp import init_gloo, end_gloo
    init_gloo(comm)            # torch.distributed over gloo, ranks as in comm
    ...
    end_gloo(comm)             # before MPI_Finalize

A leaf of the package: it needs mpi4py's communicator and, for ``init_gloo``, torch.
"""

from __future__ import annotations

import gc
import os
import socket
from typing import Any, Optional


def free_port(comm: Any, addr: str = "127.0.0.1") -> int:
    """A free TCP port on ``addr``, picked by rank 0 and told to every rank (collective).
    On several nodes ``addr`` must be an address of rank 0's node that the others reach."""
    port = None
    if comm.rank == 0:
        with socket.socket() as s:
            s.bind((addr, 0))
            port = s.getsockname()[1]
    return comm.bcast(port)


def init_gloo(comm: Any, addr: Optional[str] = None) -> None:
    """``torch.distributed.init_process_group("gloo")`` with ``comm``'s ranks, at a port
    rank 0 picks on ``addr`` (default ``MASTER_ADDR``, else the loopback: one node)."""
    import torch.distributed as dist

    addr = addr or os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = free_port(comm, addr)
    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=comm.rank, world_size=comm.size)


def end_gloo(comm: Any) -> None:
    """``torch.distributed.destroy_process_group()``, then every rank past gloo's teardown
    before any goes on to ``MPI_Finalize`` (collective). A rank waiting in
    MPI_Finalize's fence keeps its TCPStore client open, and rank 0, whose store server
    waited for that client at exit, hung (1 run in 4-5 of a 2-rank fairchem training
    with the torch of 2026-12)."""
    import torch.distributed as dist

    dist.destroy_process_group()
    gc.collect()
    comm.Barrier()
