"""Where a rank's structures come from: its part of fairchem ``.aselmdb`` files (or any
ASE database fairchem's ``AseDBDataset`` reads), or its own ``ase.Atoms``.

Both give fairchem ``AtomicData`` exactly as fairchem makes them: the ``.aselmdb`` part
through fairchem's own ``AseDBDataset`` (its ``a2g_args``, tags, ``sid``, ``transforms``
and ``key_mapping``), opened on every rank (which lists the rows' ids and reads no
structure) and read only for the rank's rows.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

import numpy as np
from fairchem.core.datasets.atomic_data import AtomicData

__all__ = ["AseDBPart", "structures_of_atoms"]


class AseDBPart:
    """fairchem's ``AseDBDataset`` over ``config`` (its keys: ``src``, ``a2g_args``,
    ``connect_args``, ``select_args``, ``transforms``, ``key_mapping``, ...), opened
    without reading a structure."""

    def __init__(self, config: dict):
        from fairchem.core.datasets import AseDBDataset

        self.source = AseDBDataset(config)

    @property
    def total(self) -> int:
        return len(self.source)

    def natoms(self) -> Optional[np.ndarray]:
        """Every structure's atom count from the files' ``metadata.npz`` (as fairchem
        reads it), or None where there is none."""
        if not self.source.metadata_hasattr("natoms"):
            return None
        return np.asarray(self.source._metadata["natoms"], dtype=np.int64)

    def read(self, ids: Iterable[int]) -> list:
        """The structures ``ids`` (this rank's part) as fairchem's ``AseDBDataset[i]``."""
        return [self.source[i] for i in ids]

    def close(self) -> None:
        for db in getattr(self.source, "dbs", ()):
            if hasattr(db, "close"):
                db.close()
        self.source.dbs = []


def structures_of_atoms(atoms: Iterable[Any], a2g_args: Optional[dict] = None,
                        transform: Optional[Callable[[AtomicData], AtomicData]] = None) -> list:
    """``AtomicData.from_ase(a, **a2g_args)`` of each of ``atoms``, then ``transform``
    (e.g. fairchem's ``common_transform`` with a ``dataset_name``) where given."""
    args = dict(a2g_args or {})
    out = []
    for a in atoms:
        data = AtomicData.from_ase(a, **args)
        out.append(transform(data) if transform is not None else data)
    return out
