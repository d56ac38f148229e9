"""pytest under MPI: run as `mpirun -n P python -m pytest tests/python`, every rank runs
the same tests in the same order (the library's calls are collective).

The package is imported from python/ (no install needed) and the library is found
through MDLOADER_LIBRARY / MDLOADER_PREFIX as usual. The loader's start-up calibration
is switched off for these unit tests (MDL_CALIBRATION=off) unless the environment sets
it: it only costs time here.
"""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
os.environ.setdefault("MDL_CALIBRATION", "off")


@pytest.fixture(scope="session")
def comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD


@pytest.fixture
def loader(comm):
    import mdloader

    ld = mdloader.Loader(comm)
    yield ld
    ld.close()


def all_ranks(comm, value: bool) -> bool:
    """True when value is true on every rank (keeps the ranks' verdicts consistent)."""
    return all(comm.allgather(bool(value)))


def pytest_configure(config):
    """A temporary folder of its own for every rank (the ranks run side by side)."""
    if not config.option.basetemp:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        base = ROOT / "target" / "pytest-tmp"
        base.mkdir(parents=True, exist_ok=True)
        config.option.basetemp = str(base / f"np{comm.size}-rank{comm.rank}")
