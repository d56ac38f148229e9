"""from_adios([a, b], ...) against HydraGNN's own AdiosMultiDataset([a, b], ...):
(1) subset_istart/subset_iend: HydraGNN passes them to every file's AdiosDataset;
(2) dataset_name: AdiosMultiDataset.__getitem__ tags nothing (it never calls
AbstractBaseDataset.__init__, so it has no dataset_name attribute).
Run: mpirun -n 2 python -m mpi4py repro/multi_files_vs_adiosmultidataset.py
(PYTHONPATH=python:tests/python:<HydraGNN checkout>)"""
import os, sys, tempfile
from mpi4py import MPI
import numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from hydragnn_files import molecules, write_adios
import types, adios2
import hydragnn.utils.datasets.adiosdataset as module
# As benches/readers/startup.py: the PyPI adios2 has no MPI; each rank opens alone.
module.adios2 = types.SimpleNamespace(__version__=adios2.__version__,
                                      Stream=lambda path, mode, comm=None: adios2.Stream(path, mode))
AdiosMultiDataset = module.AdiosMultiDataset
from mdloader.pyg_sources import from_adios

comm = MPI.COMM_WORLD
d = comm.bcast(tempfile.mkdtemp(prefix="h41multi", dir="/tmp") if comm.rank == 0 else None)
paths = [os.path.join(d, "a.bp"), os.path.join(d, "b.bp")]
if comm.rank == 0:
    write_adios(paths[0], {"trainset": molecules(9, seed=1, edges=False)}, {"dataset_name": "qm7x"})
    write_adios(paths[1], {"trainset": molecules(14, seed=2, edges=False)}, {"dataset_name": "mptrj"})
comm.Barrier()

for kw in ({}, {"subset_istart": 2, "subset_iend": 5}):
    theirs = AdiosMultiDataset(paths, "trainset", comm, **kw)
    ours = from_adios(paths, "trainset", comm, **kw)
    n_theirs, n_ours = len(theirs), len(ours)
    got = [ours[i] for i in range(n_ours)]  # collective
    if comm.rank == 0:
        print(f"{kw}: AdiosMultiDataset len {n_theirs}, from_adios len {n_ours}")
        want = [theirs[i] for i in range(n_theirs)]
        for i in range(min(n_ours, n_theirs)):
            same = want[i].x.shape == got[i].x.shape and bool((want[i].x == got[i].x).all())
            if not same or i < 2:
                print(f"  graph {i}: x equal {same}; dataset_name theirs "
                      f"{getattr(want[i], 'dataset_name', None)}, ours {getattr(got[i], 'dataset_name', None)}")
    ours.close()
