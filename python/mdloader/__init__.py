"""MDLoader for Python: a ctypes binding of libmdloader.so (no compiled extension).

An in-memory, MPI-sharded sample store for distributed training: every rank registers
its shard of samples (arbitrary byte records), and every step every rank fetches a
batch of any samples by global id, moved by MPI one-sided gets or an all-to-all,
whichever the library predicts faster.

    from mpi4py import MPI
    import numpy as np
    import mdloader

    with mdloader.Loader(MPI.COMM_WORLD) as ld:
        ld.register_shard([np.full(10 + i, i, dtype=np.uint8) for i in range(100)])
        loader = mdloader.DataLoader(ld, batch_size=16, shuffle=True, seed=0, drop_last=True)
        for epoch in range(3):
            for batch in loader:
                for k, sample in enumerate(batch):   # zero-copy uint8 views
                    ...

The shared library is found through MDLOADER_LIBRARY (its full path), MDLOADER_PREFIX
(an install prefix: PREFIX/lib/libmdloader.so) or next to this package; it must be built
for the same MPI as mpi4py. See mdloader._lib.
"""

from . import abort
from ._lib import LibraryNotFound, library_path, load_library
from .data import BatchIterator, DataLoader, DistributedSampler
from .batch import Batch
from .errors import EpochTakenOver, MDLError, Status, last_error, status_string
from .loader import Backend, Loader, ReplicaInfo

__version__ = "0.1.0"

abort.install()  # one rank's uncaught exception ends the MPI job (MDLOADER_ABORT_ON_ERROR=0: off)

__all__ = [
    "Backend",
    "Batch",
    "BatchIterator",
    "DataLoader",
    "DistributedSampler",
    "LibraryNotFound",
    "Loader",
    "EpochTakenOver",
    "MDLError",
    "ReplicaInfo",
    "Status",
    "last_error",
    "library_path",
    "load_library",
    "status_string",
]
