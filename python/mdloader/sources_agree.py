"""Errors and file fingerprints agreed across ranks.

Reading is local (each rank its own part), registration is collective: a rank whose
read fails must not raise alone, or the others wait for it in the next collective
call. Every step that may fail on some ranks only therefore ends in
:func:`agree_problems`, which raises the same error on every rank.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["SourceError", "agree_problems", "agree_fingerprint", "fingerprint_of"]


class SourceError(ValueError):
    """A dataset file that cannot be read as the dataset it claims to be, raised on
    every rank with the same text (naming the rank that saw it first)."""


def agree_problems(comm: Any, problem: str, what: str) -> None:
    """Collective (one allgather): raise :class:`SourceError` on every rank when any
    rank's ``problem`` is not empty, naming each rank that had one."""
    everyone = comm.allgather(problem)
    bad = [(rank, why) for rank, why in enumerate(everyone) if why]
    if bad:
        where = "; ".join(f"rank {rank}: {why}" for rank, why in bad[:4])
        more = f" (and {len(bad) - 4} more ranks)" if len(bad) > 4 else ""
        raise SourceError(f"{what}: {where}{more}")


def fingerprint_of(path: str) -> tuple:
    """(bytes, newest mtime in ns) of a file, or of every file under a directory (an
    ADIOS2 ``.bp`` dataset is a directory): what differs when two ranks see different
    copies, or one copy changing under them."""
    if not os.path.isdir(path):
        st = os.stat(path)
        return st.st_size, st.st_mtime_ns
    size, newest = 0, 0
    for root, _, files in os.walk(path):
        for name in files:
            st = os.stat(os.path.join(root, name))
            size, newest = size + st.st_size, max(newest, st.st_mtime_ns)
    return size, newest


def agree_fingerprint(comm: Any, mine: Any, what: str) -> None:
    """Collective (one allgather): raise :class:`SourceError` on every rank when the
    ranks' fingerprints (any plain value: sizes, mtimes, sample counts) differ, naming
    the first two that do. Each rank reads only its part, so two ranks reading different
    files would otherwise build a dataset that is neither."""
    everyone = comm.allgather(mine)
    for rank, theirs in enumerate(everyone):
        if theirs != everyone[0]:
            raise SourceError(f"{what}: the ranks see different files: rank 0 {everyone[0]}, rank {rank} {theirs} "
                              "(every rank must read the same dataset; a shared file system, or identical copies)")
