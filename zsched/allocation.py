"""Executor allocation: the target number of executors, and the allocator that reaches it.

The driver keeps one number, the target, changed only by the allocation contract
(request a total, request more, kill without replacement, decommission). The allocator
works like Spark's ExecutorPodsAllocator: every ``allocation_batch_delay`` it compares what
exists (executors the cluster manager started and that have not ended or been killed) with
the target, starts at most ``allocation_batch_size`` executors, and gives up on executors
that have not registered within ``executor_start_timeout`` (they are killed, reported, and
fresh ones are tried after a backoff). It never kills to reach a lower target. Executors
lost unexpectedly leave the target unchanged, so they are replaced.
"""
import logging
from collections import deque

log = logging.getLogger("zsched.allocation")

_BACKOFF_FIRST = 0.5
_BACKOFF_MAX = 30.0


class ExecutorAllocator:
    def __init__(self, manager, config, clock, target=0):
        self.manager = manager
        self.config = config
        self.clock = clock
        self.target = target
        self._starting = {}          # executor id -> when it was started (not yet registered)
        self._failed_starts = 0      # executors in a row that ended or timed out unregistered
        self._next_start = 0.0       # backoff: nothing is started before this time
        self._next_round = 0.0
        self.events = deque(maxlen=200)  # (time, what happened and why)

    def _event(self, text, level=logging.INFO):
        self.events.append((self.clock(), text))
        log.log(level, "%s", text)

    # -- the target

    def set_target(self, n, why):
        if n < 0:
            raise ValueError(f"the number of executors cannot be negative, got {n}")
        if n != self.target:
            self._event(f"target {self.target} -> {n}: {why}")
            self.target = n
            self._next_round = 0.0  # act at the next tick, not after the batch delay

    # -- what the driver sees

    def registered(self, executor_id):
        if self._starting.pop(executor_id, None) is not None:
            self._failed_starts = 0

    def ended(self, executor_id, reason):
        """A started executor ended; one that never registered counts as a failed start."""
        if self._starting.pop(executor_id, None) is not None:
            self._start_failed(f"executor {executor_id} ended before registering: {reason}")

    def _start_failed(self, what):
        self._failed_starts += 1
        delay = min(_BACKOFF_MAX, _BACKOFF_FIRST * 2 ** (self._failed_starts - 1))
        self._next_start = self.clock() + delay
        self._event(f"{what} (next start in {delay:.1f} s)", logging.WARNING)

    def pending(self):
        """Executors started and not registered yet."""
        return len(self._starting)

    # -- rounds

    def tick(self):
        """Run a round when the batch delay has passed since the last one."""
        now = self.clock()
        if now >= self._next_round:
            self._next_round = now + self.config.allocation_batch_delay
            self.round()

    def round(self):
        now = self.clock()
        timeout = self.config.executor_start_timeout
        for executor_id, started in list(self._starting.items()):
            if now - started > timeout:
                del self._starting[executor_id]
                self.manager.kill([executor_id])
                self._start_failed(f"executor {executor_id} did not register within "
                                   f"executor_start_timeout ({timeout:g} s): killed")
        existing = len(self.manager.launched_ids())
        missing = self.target - existing
        if missing <= 0 or now < self._next_start:
            return
        n = min(missing, self.config.allocation_batch_size)
        before = set(self.manager.launched_ids())
        self.manager.request_total(existing + n)
        started = [i for i in self.manager.launched_ids() if i not in before]
        if not started:  # a manager that starts nothing (executors started by hand)
            return
        for executor_id in started:
            self._starting[executor_id] = now
        self._event(f"started {len(started)} executor(s) ({', '.join(started)}): "
                    f"{existing} of target {self.target}")
