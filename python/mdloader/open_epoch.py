"""The epoch a dataset's DataLoader runs on the dataset's Loader, for the datasets of
``mdloader.pyg`` and ``mdloader.fairchem``: a loop that stops early leaves it open, and
any other use of the dataset (``dataset[i]``, another loader's ``iter``, ``close``) must
end it first, on every rank alike, or the library would see two epochs' calls.
"""

from __future__ import annotations

import atexit
import weakref
from typing import Any, Iterator, Optional

__all__ = ["HoldsOpenEpoch"]


class HoldsOpenEpoch:
    """A dataset with a ``loader`` (:class:`mdloader.Loader`) whose DataLoaders run its
    epochs. ``_open_epoch``: the batches of the epoch in progress (an iterator; an
    :class:`mdloader.background.InBackground` where a thread of this package collates
    ahead), or None."""

    loader: Any
    _open_epoch: Optional[Iterator] = None

    def _hold_open_epoch(self, batches: Iterator) -> None:
        """``batches`` is the epoch in progress. Where a thread takes them (``batches.thread``),
        a collective call on the loader from the script (job_stats between epochs, a
        fetch) stops that thread first (:meth:`mdloader.Loader.epoch_on_thread`), and so
        does the interpreter's exit."""
        self._open_epoch = batches
        thread = getattr(batches, "thread", None)
        if thread is not None:
            _held_on_threads.add(self)
            self.loader.epoch_on_thread(thread, self._close_open_epoch)

    def _close_open_epoch(self) -> None:
        """End the epoch a DataLoader left open (its thread, then the library's epoch)."""
        self.loader.epoch_on_thread(None)
        if self._open_epoch is not None:
            self._open_epoch.close()
            self._open_epoch = None
        self.loader.end_epoch()


#: Datasets whose epoch a thread may be running: the thread is stopped at exit, before
#: MPI_Finalize (which mpi4py calls after Python's exit handlers), so that no thread is
#: inside MPI then (a loop left early, or a thread gone on into the next epoch, then the
#: script's end).
_held_on_threads: "weakref.WeakSet[HoldsOpenEpoch]" = weakref.WeakSet()


@atexit.register
def _stop_threads_at_exit() -> None:
    for dataset in list(_held_on_threads):
        if dataset._open_epoch is not None:
            dataset._open_epoch.close()
