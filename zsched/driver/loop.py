"""The driver's event loop: one poller over every socket and descriptor, and timers.

Sockets and descriptors are watched with a handler each; a turn polls until input is
ready or the next timer is due, calls the handlers of what is ready (in the order they
were watched), runs the timers that are due by the injected clock, then the loop's
``after_turn`` hook. Nothing here knows what the driver does with its input.

A handler or timer that raises is logged, and the loop goes on: one bug must not stop
the driver. The loop measures its pauses (``pauses``): each turn's time between polls,
when nothing that arrives is read."""
import logging
import time

import zmq

from ..poller import Poller

log = logging.getLogger(__name__)

POLLIN = int(zmq.POLLIN)  # plain ints: an IntFlag & makes an enum
POLLOUT = int(zmq.POLLOUT)


class Timer:
    """``action`` run every ``interval`` seconds of the loop's clock."""

    __slots__ = ("action", "due", "interval")

    def __init__(self, interval, action, due):
        self.interval = interval
        self.action = action
        self.due = due


class LongestPause:
    """The longest pause over the last ``seconds`` seconds, from the longest of each
    second."""

    def __init__(self, seconds=60):
        self._seconds = seconds
        self._longest = [0.0] * seconds
        self._second = [-1] * seconds   # which second each slot holds

    def add(self, pause, now):
        second = int(now)
        i = second % self._seconds
        if self._second[i] != second:
            self._second[i] = second
            self._longest[i] = pause
        elif pause > self._longest[i]:
            self._longest[i] = pause

    def longest(self, now):
        """The longest pause in the last ``seconds`` seconds up to ``now``."""
        second = int(now)
        return max((pause for pause, at in zip(self._longest, self._second)
                    if 0 <= second - at < self._seconds), default=0.0)


class Loop:
    """A poller with a handler per watched socket or descriptor, and timers."""

    def __init__(self, clock, after_turn=None):
        self.clock = clock
        self.after_turn = after_turn
        self.pauses = LongestPause()  # by the monotonic clock: pauses are real time
        self._poller = Poller()
        self._handlers = {}   # socket or fd -> handler(), called when it is ready
        self._timers = []
        self._next_due = float("inf")
        self.stopping = False

    def watch(self, what, handler, events=POLLIN, only_when_ready=False):
        """Call ``handler()`` whenever ``what`` (a zmq socket or a descriptor) is ready.
        ``only_when_ready``: only the handler uses the socket (see ``Poller.register``)."""
        self._handlers[what] = handler
        self._poller.register(what, events, only_when_ready=only_when_ready)

    def unwatch(self, what):
        if self._handlers.pop(what, None) is not None:
            self._poller.unregister(what)

    def watching(self, what):
        return what in self._handlers

    def every(self, interval, action):
        """Run ``action()`` every ``interval`` seconds, the first time an interval from now."""
        due = self.clock() + interval
        self._timers.append(Timer(interval, action, due))
        self._next_due = min(self._next_due, due)

    def run(self):
        """Turn until ``stop()``."""
        while not self.stopping:
            self.run_once()

    def stop(self):
        self.stopping = True

    def run_once(self, timeout=None, all_timers=False):
        """One turn: wait up to ``timeout`` seconds (default: until the next timer is due)
        for input, handle what is ready, run the timers that are due (every timer with
        ``all_timers``, as of the clock's time now), then ``after_turn``."""
        if timeout is None:
            timeout = max(0.0, self._next_due - self.clock())
        handlers = self._handlers
        ready = self._poller.poll(timeout * 1000)
        started = time.monotonic()
        for what, _ in ready:
            handler = handlers.get(what)  # a handler may have unwatched another meanwhile
            if handler is not None:
                _call(handler)
        if self.stopping:
            return
        now = self.clock()
        if all_timers or now >= self._next_due:
            self._run_timers(now, all_timers)
        if self.after_turn is not None:
            _call(self.after_turn)
        ended = time.monotonic()
        self.pauses.add(ended - started, ended)

    def longest_pause(self):
        """The longest pause of the last minute, in seconds."""
        return self.pauses.longest(time.monotonic())

    def _run_timers(self, now, all_timers):
        for timer in self._timers:
            if all_timers or now >= timer.due:
                _call(timer.action)
                timer.due = now + timer.interval
        self._next_due = min((timer.due for timer in self._timers), default=float("inf"))


def _call(action):
    try:
        action()
    except Exception:
        log.exception("error in the driver's loop (it goes on)")
