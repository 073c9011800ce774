"""``LoopWakeups``: wake-ups queued from other threads reach a real event loop, every one,
however the queueing thread and the loop's thread interleave."""
import asyncio
import os
import sys
import threading

import pytest

from zsched.client.awaiting import LoopWakeups

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]

WAKEUPS = 50_000
WAIT = 30  # a bound that only a lost wake-up reaches


class Waiter:
    """Ends its asyncio future when the loop's thread wakes it."""

    def __init__(self, woken):
        self._woken = woken

    def wake(self):
        self._woken.set_result(None)


@pytest.fixture
def fine_switching():
    """Threads switch after about a microsecond, so the queueing thread and the loop's
    interleave often. A window as narrow as a system call needs a test of its own."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


def test_every_wake_up_from_another_thread_reaches_the_loop(fine_switching):
    async def main():
        loop = asyncio.get_running_loop()
        wakeups = LoopWakeups.of(loop)
        assert LoopWakeups.of(loop) is wakeups  # one per loop
        woken = [loop.create_future() for _ in range(WAKEUPS)]
        # queued one by one as a client's I/O thread ends futures, while the loop runs
        # the ones queued before: the two threads contend for the GIL all along
        thread = threading.Thread(target=lambda: [wakeups.queue(Waiter(w)) for w in woken])
        thread.start()
        try:
            await asyncio.wait_for(asyncio.gather(*woken), WAIT)
        finally:
            thread.join()

    asyncio.run(main())


def test_a_wake_up_queued_by_the_loops_own_thread_runs(fine_switching):
    async def main():
        loop = asyncio.get_running_loop()
        woken = loop.create_future()
        LoopWakeups.of(loop).queue(Waiter(woken))
        await asyncio.wait_for(woken, WAIT)

    asyncio.run(main())


def test_a_wake_up_queued_as_the_loop_reads_its_descriptor_leaves_the_next_one_signalled(
        monkeypatch):
    """Another thread queues a wake-up just as the loop's thread reads the descriptor, its
    signal taken by that read: a wake-up queued later must signal the loop again."""
    async def main():
        loop = asyncio.get_running_loop()
        wakeups = LoopWakeups.of(loop)
        first, second, third = (loop.create_future() for _ in range(3))
        real_read = os.read

        def read(fd, size):  # the loop's thread, waking up: the other thread gets in first
            if fd == wakeups._read_fd and not second.done():
                queue_from_a_thread(wakeups, second)
            return real_read(fd, size)

        monkeypatch.setattr(os, "read", read)
        queue_from_a_thread(wakeups, first)
        await asyncio.wait_for(asyncio.gather(first, second), WAIT)
        queue_from_a_thread(wakeups, third)
        await asyncio.wait_for(third, WAIT)

    asyncio.run(main())


def queue_from_a_thread(wakeups, woken):
    thread = threading.Thread(target=wakeups.queue, args=(Waiter(woken),))
    thread.start()
    thread.join()


def test_a_wake_up_that_raises_is_reported_and_the_others_still_run():
    class Failing:
        def wake(self):
            raise LookupError("no such task")

    async def main():
        loop = asyncio.get_running_loop()
        reported = []
        loop.set_exception_handler(lambda _loop, context: reported.append(context))
        woken = loop.create_future()
        wakeups = LoopWakeups.of(loop)
        wakeups.queue(Failing())
        wakeups.queue(Waiter(woken))
        await asyncio.wait_for(woken, WAIT)
        return reported

    [context] = asyncio.run(main())
    assert isinstance(context["exception"], LookupError)
    assert "waking an awaiting task failed" in context["message"]
