"""Taking an iterable's items on a thread of its own, a bounded number ahead of the
consumer, with the same number of items taken on every rank however early the consumer
stops: the iterable may make collective calls (a sampler's fetch), and a rank that took
one more than another would leave the other waiting in it.
"""

from __future__ import annotations

import queue
import threading
from typing import Iterable, Iterator

__all__ = ["in_background"]


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

    def produce() -> None:
        taken = 0
        try:
            while True:
                permits.acquire()
                if limit[0] is not None and taken >= limit[0]:
                    return
                try:
                    item = next(items)
                except StopIteration:
                    ready.put(_END)
                    return
                taken += 1
                ready.put(item)
        except BaseException as err:  # handed to the consumer, which raises it
            ready.put(_Failure(err))

    thread = threading.Thread(target=produce, name="mdloader-background", daemon=True)
    thread.start()
    consumed = 0
    try:
        while True:
            item = ready.get()
            if item is _END:
                return
            if isinstance(item, _Failure):
                raise item.error
            consumed += 1
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
