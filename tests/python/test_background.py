"""mdloader.background.in_background's contract, without MPI: the items in order, an
error raised at its item, and, however the consumer stops and however fast it is, the
thread takes exactly ``depth`` items past the last one consumed (the same count on every
rank: the items may be collective calls)."""

import random
import statistics
import time

import pytest

from mdloader.background import in_background


def eventually(condition, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


class Counted:
    """range(n), counting the items taken; raises at item ``fail_at``."""

    def __init__(self, n: int, fail_at: int = -1, seconds_per_item: float = 0.0):
        self.n, self.fail_at, self.seconds = n, fail_at, seconds_per_item
        self.taken = 0

    def __iter__(self):
        for k in range(self.n):
            if k == self.fail_at:
                raise ValueError(f"item {k}")
            time.sleep(self.seconds)
            self.taken += 1
            yield k


@pytest.mark.parametrize("consumer_seconds", [0.0, 0.004], ids=["fast-consumer", "slow-consumer"])
def test_items_in_order_and_exactly_depth_ahead_when_stopping_early(consumer_seconds):
    rng = random.Random(7)
    for _ in range(12):
        n, depth = rng.randint(0, 12), rng.randint(1, 3)
        stop_after = rng.randint(0, n + 1)
        source = Counted(n)
        it = in_background(source, depth)
        got = []
        for item in it:
            if len(got) == stop_after:
                break
            got.append(item)
            time.sleep(consumer_seconds)
        it.close()
        assert got == list(range(min(stop_after, n)))
        consumed = len(got) + (1 if stop_after < n else 0)  # the item taken at the break
        assert source.taken == min(consumed + depth, n), (n, depth, stop_after)


def test_an_error_is_raised_at_its_item():
    it = in_background(Counted(5, fail_at=3), 2)
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="item 3"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)
    it.close()


def test_a_dropped_iterator_stops_its_thread():
    source = Counted(100)
    it = in_background(source, 2)
    assert next(it) == 0
    thread = it._thread
    del it  # collected at once: closed, the thread took its 2 allowed items and ended
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert source.taken == 3


def test_the_thread_starts_before_the_first_take():
    source = Counted(10)
    it = in_background(source, 2)
    deadline = time.monotonic() + 5
    while source.taken < 2 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert source.taken == 2  # ready ahead, and no more
    it.close()
    assert source.taken == 2



def test_a_paused_consumer_is_waited_for_and_its_pause_is_not_its_step():
    """A consumer that stops taking for many of its steps (a validation pass) leaves the
    thread asleep until the consumer's next take wakes it (no polling for as long as
    the pause lasts); afterwards the thread paces itself by the consumer's usual step,
    not by the pause (which left it asleep with room to work while the loop waited)."""
    it = in_background(Counted(100), 2)
    shared = it._shared
    for _ in range(8):
        next(it)
        time.sleep(0.005)
    next(it)
    assert eventually(lambda: shared.notify_me)  # paused: sleeps until the next take
    time.sleep(0.3)
    next(it)
    assert statistics.median(shared.intervals) < 0.1
    it.close()
