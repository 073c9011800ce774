"""``await future``: what an asyncio task awaiting a ``TaskFuture`` waits on, and how the
thread that ends the future wakes the task's event loop.

A loop is woken from another thread through its self-pipe (``call_soon_threadsafe``),
and a woken asyncio.Future resumes its task one turn of the loop later. Here each loop
gets a descriptor of its own (an eventfd on Linux, a pipe elsewhere), watched by the loop
(``add_reader``). The thread that ends a future queues the task's wake-up and signals
the descriptor once; the loop, woken, runs the queued wake-ups in the same turn.
"""
import asyncio
import collections
import os
import weakref
from concurrent.futures._base import CANCELLED, CANCELLED_AND_NOTIFIED

_CANCELLED_STATES = (CANCELLED, CANCELLED_AND_NOTIFIED)


class LoopWaiter:
    """The part of a future that an asyncio task uses while it waits for a
    ``TaskFuture``: the task's wake-up is queued on its loop once the future ends."""

    __slots__ = ("_future", "_loop", "_wakeups", "_wakeup", "_context",
                 "_asyncio_future_blocking")

    def __init__(self, future):
        self._future = future
        loop = self._loop = asyncio.get_running_loop()
        self._wakeups = LoopWakeups.of(loop)
        self._wakeup = self._context = None
        self._asyncio_future_blocking = True  # the task waits for the wake-up

    def get_loop(self):
        return self._loop

    def add_done_callback(self, fn, *, context=None):  # the task's wake-up: once
        self._wakeup, self._context = fn, context
        self._future.add_done_callback(self._ended)

    def _ended(self, _future):  # in whichever thread ended the future
        self._wakeups.queue(self)

    def wake(self):
        """In the loop's thread: resume the awaiting task."""
        if self._context is None:
            self._wakeup(self)
        else:
            self._context.run(self._wakeup, self)

    def cancel(self, msg=None):
        """The awaiting task is cancelled: so is the future (the wake-up follows)."""
        return self._future.cancel()

    def cancelled(self):
        return self._future.cancelled()

    def done(self):
        return self._future.done()

    def result(self):
        """What the task's wake-up asks: nothing, or CancelledError once cancelled."""
        if self._future._state in _CANCELLED_STATES:  # done: read without its lock
            raise asyncio.CancelledError()

    def exception(self):
        return None


class LoopWakeups:
    """The wake-ups queued for one event loop, and the descriptor that wakes it."""

    _of_loop = weakref.WeakKeyDictionary()  # event loop -> its LoopWakeups

    @classmethod
    def of(cls, loop):
        """The wake-ups of ``loop``, made at its first await."""
        wakeups = cls._of_loop.get(loop)
        if wakeups is None:
            wakeups = cls._of_loop[loop] = cls(loop)
        return wakeups

    def __init__(self, loop):
        self._loop = weakref.ref(loop)
        self._queued = collections.deque()
        self._signalled = False
        if hasattr(os, "eventfd"):
            self._read_fd = self._write_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        else:
            self._read_fd, self._write_fd = os.pipe()
            os.set_blocking(self._read_fd, False)
            os.set_blocking(self._write_fd, False)
        weakref.finalize(self, _close, self._read_fd, self._write_fd)
        loop.add_reader(self._read_fd, self._run)

    def queue(self, waiter):
        """From any thread: have ``waiter`` woken in the loop's thread."""
        self._queued.append(waiter)
        if not self._signalled:
            self._signalled = True
            try:
                os.write(self._write_fd, b"\1\0\0\0\0\0\0\0")  # an eventfd takes 8 bytes
            except (BlockingIOError, OSError):  # already signalled, or the loop is gone
                pass

    def _run(self):
        # the signals so far are taken before the flag is cleared: a wake-up queued after
        # this read signals again, one queued before it is run below
        try:
            os.read(self._read_fd, 4096)
        except BlockingIOError:
            pass
        self._signalled = False
        queued = self._queued
        while queued:
            waiter = queued.popleft()
            try:
                waiter.wake()
            except BaseException as exc:  # never lose the other wake-ups
                loop = self._loop()
                if loop is not None:
                    loop.call_exception_handler({"message": "waking an awaiting task failed",
                                                 "exception": exc})


def _close(read_fd, write_fd):
    os.close(read_fd)
    if write_fd != read_fd:
        os.close(write_fd)
