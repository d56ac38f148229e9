"""A user's batch sampler run as the library's epoch: its batches are taken on every
rank in ``iter`` (on the script's thread, not on a loader's thread, where the allgather
could meet the script's own collective calls on the communicator) and their number
agreed, because the library's epoch needs as many steps on every rank.

A leaf of the package: the adapters (:mod:`mdloader.pyg`, :mod:`mdloader.fairchem`)
import it; it imports nothing of theirs.
"""

from __future__ import annotations

from typing import Any, Callable


def agreed_batches(comm: Any, make: Callable[[], list], caller: str, advice: str, same: Any = None,
                   same_what: str = "") -> list:
    """``make()``'s batches on this rank, their number the same on every rank
    (collective: one allgather). A ``make`` that fails on any rank, or ranks with
    different numbers of batches, raise ValueError on every rank, naming the rank and
    why, or each rank's count and ``advice``; ``caller`` names the user's call.
    ``same``: a value the batches depend on that must be the same on every rank (a
    sampler's epoch), ``same_what`` its name; ValueError on every rank where it differs."""
    batches, problem = [], ""
    try:
        batches = make()
    except Exception as err:  # noqa: BLE001 - agreed below, not raised alone
        problem = f"{type(err).__name__}: {err}"
    everyone = comm.allgather((len(batches), problem, same))
    for rank, (_, why, _) in enumerate(everyone):
        if why:
            raise ValueError(f"{caller}: the sampler failed on rank {rank}: {why}")
    for rank, (_, _, theirs) in enumerate(everyone):
        if theirs != everyone[0][2]:
            raise ValueError(f"{caller}: the {same_what} differs across ranks (rank 0's {everyone[0][2]!r}, rank "
                             f"{rank}'s {theirs!r}): every rank must take its batches of the same plan")
    counts = [count for count, _, _ in everyone]
    if len(set(counts)) > 1:
        each = ", ".join(f"rank {rank}: {count}" for rank, count in enumerate(counts))
        raise ValueError(f"{caller}: the sampler gives the ranks different numbers of batches this epoch ({each}); "
                         f"every rank must take as many: {advice}")
    return batches
