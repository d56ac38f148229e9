"""Taking an iterable's items on a thread of its own, a bounded number ahead of the
consumer, with the same number of items taken on every rank however early the consumer
stops: the iterable may make collective calls (a sampler's fetch), and a rank that took
one more than another would leave the other waiting in it.
"""

from __future__ import annotations

import queue
import statistics
import sys
import threading
import time
from collections import deque
from typing import Iterable, Iterator, Optional

__all__ = ["in_background", "InBackground", "every_rank_allows_threads"]

#: The longest the thread sleeps before it looks again for room to take an item, while
#: the consumer is slow (it spends far longer on each item than the thread takes to make
#: one: a training step). The thread then wakes itself instead of being woken by the
#: consumer's ``next``: waking a thread there cost the training loop 30-40 us per step
#: on a busy node (the woken thread preempts the loop, only to wait for the GIL), and a
#: thread woken at once took the GIL from the loop while it was still leaving ``next``
#: and held it for its whole collate (1-2 ms of numpy on small arrays at every other
#: step, QM9 SchNet at 2 ranks). Between takes the thread looks every eighth of the
#: consumer's interval, within [MIN, MAX] here.
POLL_MAX_SECONDS = 0.05
POLL_MIN_SECONDS = 0.0005

#: The consumer's interval is the median of its last takes' intervals: one long pause
#: (a validation pass, a checkpoint) must not become the step the thread paces itself
#: by, or it sleeps up to POLL_MAX_SECONDS with room to work once the loop resumes.
INTERVALS_KEPT = 5

#: A consumer that has not taken an item for this many intervals is paused (validating,
#: checkpointing): the thread then sleeps until the consumer's next take wakes it,
#: instead of looking every quarter interval for as long as the pause lasts.
PAUSED_AFTER_INTERVALS = 2


def every_rank_allows_threads(comm) -> bool:
    """Collective (one all-reduce on the mpi4py communicator ``comm``): whether MPI runs
    at MPI_THREAD_MULTIPLE on every rank, which a thread that calls MPI needs. Agreed,
    because a rank that took items on a thread while another did not would ask for
    collective steps its peers never make."""
    from mpi4py import MPI

    return bool(comm.allreduce(int(MPI.Query_thread() >= MPI.THREAD_MULTIPLE), op=MPI.MIN))


def in_background(iterable: Iterable, depth: int) -> "InBackground":
    """The items of ``iterable``, taken on a background thread at most ``depth`` items
    ahead of the consumer; the thread is the only one that iterates ``iterable``, and
    starts at once (so that a loader can start the next epoch ahead of its loop).

    An exception in the thread is raised here, at the item where it happened. Stopping
    early (``break`` then :meth:`InBackground.close`, or the iterator collected) lets
    the thread take exactly ``depth`` items past the last one consumed (fewer at the
    iterable's end), the same count on every rank whatever the timing, and waits for
    it: the next collective call (a new epoch) then finds every rank in step.

    An item the consumer has taken is dropped on the thread, not in the consumer's next
    ``next``: freeing a collated batch (torch_geometric's ``Batch``) costs tens of us.
    """
    return InBackground(iterable, depth)


class InBackground:
    """The iterator of :func:`in_background`."""

    def __init__(self, iterable: Iterable, depth: int):
        self._shared = _Shared(depth)
        self._previous = None  # the item the consumer holds, retired at the next take
        self._done = False
        # The thread's function holds no reference to this object, so that a consumer
        # that drops it without closing still closes it (``__del__``).
        self._thread = threading.Thread(target=_produce, args=(iter(iterable), self._shared),
                                        name="mdloader-background", daemon=True)
        self._thread.start()

    def __iter__(self) -> "InBackground":
        return self

    @property
    def thread(self) -> threading.Thread:
        """The thread that takes the items."""
        return self._thread

    def __next__(self):
        shared = self._shared
        if self._done:
            raise StopIteration
        if self._previous is not None:
            shared.retired.append(self._previous)
            self._previous = None
        if shared.ready.empty():
            # The consumer waits anyway: wake a thread that sleeps with room to work
            # (it paced itself by a slower consumer), so that it makes the item now.
            with shared.room:
                shared.room.notify()
        item = shared.ready.get()
        if item is _END:
            self._done = True
            raise StopIteration
        if isinstance(item, _Failure):
            self._done = True
            raise item.error
        now = time.perf_counter()
        with shared.room:
            shared.consumed += 1
            if shared.consumed > 1:
                shared.intervals.append(now - shared.last_take)
            shared.last_take = now
            if shared.notify_me:
                shared.room.notify()
        self._previous = item
        return item

    def close(self) -> None:
        """Stop taking items: the thread takes the ones it was allowed (consumed +
        depth, fewer at the end) and ends; waits for it. Idempotent."""
        shared = self._shared
        self._done = True
        self._previous = None
        with shared.room:
            if shared.limit is None:
                shared.limit = shared.consumed + shared.depth
            shared.room.notify()
        self._thread.join()

    def __del__(self):
        if getattr(self, "_thread", None) is not None:
            self.close()


class _Shared:
    """What the consumer and the thread share; ``room`` guards the counters."""

    def __init__(self, depth: int):
        self.depth = depth
        self.ready: queue.Queue = queue.Queue()
        self.room = threading.Condition()
        self.consumed = 0  # items the consumer took
        self.limit: Optional[int] = None  # items the thread takes in all, once the consumer stopped
        self.notify_me = False  # the thread sleeps until notified
        self.intervals: deque = deque(maxlen=INTERVALS_KEPT)  # seconds between the consumer's last takes
        self.last_take = 0.0  # time.perf_counter() of the consumer's last take
        self.retired: list = []  # taken items, dropped by the thread (list.append is atomic)

    def wait_for_room(self, taken: int, making: float) -> bool:
        """Whether the thread may take one more item; False once the consumer stopped
        and the thread took all it was allowed."""
        with self.room:
            while True:
                if self.limit is not None and taken >= self.limit:
                    return False
                if taken < self.consumed + self.depth:
                    return True
                interval = statistics.median(self.intervals) if self.intervals else 0.0
                paused = time.perf_counter() > self.last_take + PAUSED_AFTER_INTERVALS * interval
                if interval > 4 * (making + POLL_MIN_SECONDS) and not paused:
                    self.room.wait(self._poll_seconds(interval))
                else:  # a fast or a paused consumer: its next take wakes the thread
                    self.notify_me = True
                    self.room.wait()
                    self.notify_me = False

    def _poll_seconds(self, interval: float) -> float:
        """How long the thread sleeps before it looks for room again. Its wake takes the
        GIL from the consumer at the consumer's next release of it, or by force after
        Python's switch interval (a consumer running pure Python): either way in the
        middle of the consumer's step, far from its ``next``, when it wakes a switch
        interval before the middle. Once the middle is past (a consumer late for its
        take), a quarter step."""
        middle = self.last_take + interval / 2 - sys.getswitchinterval()
        wait = middle - time.perf_counter()
        if wait <= 0:
            wait = interval / 4 if time.perf_counter() > self.last_take + interval / 2 else 0
        return min(max(wait, POLL_MIN_SECONDS), POLL_MAX_SECONDS)


def _produce(items: Iterator, shared: _Shared) -> None:
    taken = 0
    making = 0.0  # seconds the thread took for its last item
    try:
        while shared.wait_for_room(taken, making):
            shared.retired.clear()
            started = time.perf_counter()
            try:
                item = next(items)
            except StopIteration:
                shared.ready.put(_END)
                return
            making = time.perf_counter() - started
            taken += 1
            shared.ready.put(item)
    except BaseException as err:  # handed to the consumer, which raises it
        shared.ready.put(_Failure(err))


_END = object()


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error
