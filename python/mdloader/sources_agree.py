"""Errors and file fingerprints agreed across ranks.

Reading is local (each rank its own part), registration is collective: a rank whose
read fails must not raise alone, or the others wait for it in the next collective
call. Every step that may fail on some ranks only therefore ends in
:func:`agree_problems`, which raises the same error on every rank.
"""

from __future__ import annotations

import hashlib
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


#: Files up to this size are fingerprinted by their contents, larger ones by their mtime.
DIGEST_LIMIT = 64 << 20


def fingerprint_of(path: str) -> tuple:
    """What differs when two ranks see different copies of a dataset, or one copy
    changing under them: of a file, its size and its contents' digest; of a directory
    (an ADIOS2 ``.bp`` dataset), every file's bytes summed and the digest of its
    metadata files (``md.*``, ``mmd.*``: they describe every block written, so a
    rewrite changes them). Not mtimes: node-local copies of one dataset (staged with
    ``cp -r``, which gives new mtimes) are the same dataset. A file above
    :data:`DIGEST_LIMIT` bytes is fingerprinted by its mtime instead."""
    if not os.path.isdir(path):
        return os.path.getsize(path), _digest(path)
    size, digests = 0, []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            where = os.path.join(root, name)
            size += os.stat(where).st_size
            if name.startswith(("md.", "mmd.")):
                digests.append((os.path.relpath(where, path), _digest(where)))
    return size, tuple(digests)


def _digest(path: str) -> str:
    st = os.stat(path)
    if st.st_size > DIGEST_LIMIT:
        return f"mtime {st.st_mtime_ns}"
    digest = hashlib.sha1()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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
