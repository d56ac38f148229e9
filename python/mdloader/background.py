"""Taking an iterable's items on a thread of its own, a bounded number ahead of the
consumer, with the same number of items taken on every rank however early the consumer
stops: the iterable may make collective calls (a sampler's fetch), and a rank that took
one more than another would leave the other waiting in it.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Iterable, Iterator

__all__ = ["in_background"]

#: The pause of the thread before it takes the next item, while the consumer holds one
#: and spends far longer on each than the thread takes to make one. The consumer's
#: ``next`` wakes the thread (a permit back) and, without the pause, lost the GIL to it
#: until the thread's item was done: a torch_geometric collate holds the GIL for 1-2 ms
#: (numpy on small arrays), and the training loop waited that long at every other step
#: (QM9 SchNet, 2 ranks: 0.04 s of waiting per epoch of 32 steps against 0.01 s with
#: the pause, the library's own fetch 0.002 s). A consumer that keeps up with the
#: thread (a loop that only counts batches) gets no pause: it would wait for it.
HANDOFF_PAUSE_SECONDS = 0.0005


def in_background(iterable: Iterable, depth: int) -> Iterator:
    """The items of ``iterable``, taken on a background thread at most ``depth`` items
    ahead of the consumer; the thread is the only one that iterates ``iterable``.

    An exception in the thread is raised here, at the item where it happened. Stopping
    early (``break``, closing the generator) lets the thread take exactly ``depth``
    items past the last one consumed (fewer at the iterable's end), the same count on
    every rank whatever the timing, and waits for it: the next collective call (a new
    epoch) then finds every rank in step.
    """
    items = iter(iterable)
    permits = threading.Semaphore(depth)  # one per item the thread may take ahead
    ready: queue.Queue = queue.Queue()
    limit: list = [None]  # set when the consumer stops: the items the thread takes in all
    # Seconds between the consumer's last two takes (read by the thread; a float
    # assignment is atomic under the GIL).
    consumer_interval = [0.0]

    def produce() -> None:
        taken = 0
        making = 0.0  # seconds the thread took for its last item
        try:
            while True:
                permits.acquire()
                if limit[0] is not None and taken >= limit[0]:
                    return
                if consumer_interval[0] > 4 * (making + HANDOFF_PAUSE_SECONDS):
                    # The permit came back with an item taken, and the consumer is far
                    # from needing the next: let it leave ``next`` first (see
                    # HANDOFF_PAUSE_SECONDS). At any depth, 1 included.
                    time.sleep(HANDOFF_PAUSE_SECONDS)
                started = time.perf_counter()
                try:
                    item = next(items)
                except StopIteration:
                    ready.put(_END)
                    return
                making = time.perf_counter() - started
                taken += 1
                ready.put(item)
        except BaseException as err:  # handed to the consumer, which raises it
            ready.put(_Failure(err))

    thread = threading.Thread(target=produce, name="mdloader-background", daemon=True)
    thread.start()
    consumed = 0
    last_take = None
    try:
        while True:
            item = ready.get()
            if item is _END:
                return
            if isinstance(item, _Failure):
                raise item.error
            consumed += 1
            now = time.perf_counter()
            if last_take is not None:
                consumer_interval[0] = now - last_take
            last_take = now
            permits.release()
            yield item
            item = None  # the consumer's copy is the only one left
    finally:
        # Every take that started was permitted, so the thread has taken at most
        # consumed + depth items; it takes the rest of them and stops at the next permit.
        limit[0] = consumed + depth
        permits.release()
        thread.join()


_END = object()


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error
