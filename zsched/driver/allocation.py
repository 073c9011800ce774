"""Executor allocation: the target number of executors, and the allocator that reaches it.

The driver keeps one number, the target, changed only by the allocation contract
(request a total, request more, kill without replacement, decommission). The allocator
works like Spark's ExecutorPodsAllocator: every ``allocation_batch_delay`` it compares what
exists (executors the cluster manager started and that have not ended or been killed) with
the target, starts at most ``allocation_batch_size`` executors, and gives up on executors
that have not registered within ``executor_start_timeout`` (they are killed, reported, and
fresh ones are tried after a backoff). It never kills to reach a lower target. Executors
lost unexpectedly leave the target unchanged, so they are replaced.

Failed starts back off per host (``manager.host_of``): a host that cannot be reached, or
refuses the key, waits 0.5 s doubling to 30 s between attempts, while the other hosts go
on. Any error the manager raises while starting executors (out of descriptors, memory or
threads) is a failed start of the manager as a whole: it backs off the same way, and the
driver serves on. Each failed start is counted (``executor_start_failures``); a reason
is logged once per host and backoff, not once per executor. A target beyond the
manager's ``capacity()`` is reported once; the rest wait for room.

Each round also hands the manager where new executors are wanted: the waiting tasks that
prefer each host (``set_locality``, as the last allocation request gave them), lowered
by the cores of the executors still starting there, and the hosts the driver excluded
for failures (``excluded_hosts``), which the manager uses only when no other has room.
"""
import logging
from collections import deque

from ..config import MAX_EXECUTORS

log = logging.getLogger("zsched.driver.allocation")

_BACKOFF_FIRST = 0.5
_BACKOFF_MAX = 30.0


class ExecutorAllocator:
    def __init__(self, manager, config, clock, target=0, report=None):
        self.manager = manager
        self.config = config
        self.clock = clock
        self.target = target
        self.report = report         # called with the text of each warning, if given
        self._starting = {}          # executor id -> (when it was started, its host)
        self._failed_starts = {}     # host -> executors in a row that ended or timed out unregistered
        self._next_start = {}        # host -> backoff: nothing starts there before this time
        self._next_round = 0.0
        self._reported_short = None  # the target last reported as beyond capacity
        self._quiet_until = {}       # (host, reason) -> when that failed start is logged again
        self._unlogged = {}          # (host, reason) -> failed starts not logged meanwhile
        self.executor_start_failures = 0  # starts that failed, or ended or timed out unregistered
        self.events = deque(maxlen=200)  # (time, what happened and why)
        self.locality_aware_tasks = 0     # waiting tasks with a preferred host, as last requested
        self.host_to_local_task_count = {}  # host -> waiting tasks that prefer it, as last requested
        self.excluded_hosts = set()       # set by the driver: hosts excluded for failures

    def _event(self, text, level=logging.INFO, quiet=False):
        """Record what happened; log it (and report a warning) unless ``quiet``."""
        self.events.append((self.clock(), text))
        if quiet:
            return
        log.log(level, "%s", text)
        if level >= logging.WARNING and self.report is not None:
            self.report(text)

    # -- the target

    def set_target(self, n, why):
        if not 0 <= n <= MAX_EXECUTORS:
            raise ValueError(f"the number of executors must be from 0 to {MAX_EXECUTORS}, got {n}")
        if n != self.target:
            self._event(f"target {self.target} -> {n}: {why}")
            self.target = n
            self._next_round = 0.0  # act at the next tick, not after the batch delay

    def set_locality(self, locality_aware_tasks, host_to_local_task_count):
        """Where the waiting tasks want executors, kept until the next call: how many tasks
        prefer some host, and ``{host: how many prefer it}`` (None or {} clears it)."""
        counts = {} if host_to_local_task_count is None else host_to_local_task_count
        _check_count("locality_aware_tasks", locality_aware_tasks)
        if not isinstance(counts, dict):
            raise ValueError(f"host_to_local_task_count must be a dict of host -> task count, "
                             f"got {type(counts).__name__}")
        for host, count in counts.items():
            if not isinstance(host, str) or not host:
                raise ValueError(f"host_to_local_task_count: a host must be a name, got {host!r}")
            _check_count(f"host_to_local_task_count[{host!r}]", count)
        self.locality_aware_tasks = locality_aware_tasks
        self.host_to_local_task_count = {host: count for host, count in counts.items() if count}

    def local_tasks_left(self):
        """``{host: waiting tasks that prefer it}`` less the cores of the executors still
        starting there (they will take those tasks); None when no task prefers a host."""
        left = dict(self.host_to_local_task_count)
        if not left:
            return None
        cores = self.manager.cores_per_executor
        for _, host in self._starting.values():
            if host in left:
                left[host] -= cores
        return {host: count for host, count in left.items() if count > 0} or None

    # -- what the driver sees

    def registered(self, executor_id):
        started = self._starting.pop(executor_id, None)
        if started is not None:
            self._failed_starts.pop(started[1], None)
            self._next_start.pop(started[1], None)

    def ended(self, executor_id, reason):
        """A started executor ended; one that never registered counts as a failed start."""
        started = self._starting.pop(executor_id, None)
        if started is not None:
            self._start_failed(started[1], f"executor {executor_id} ended before registering: {reason}",
                               reason)

    def _start_failed(self, host, what, reason):
        """A start failed on ``host`` (None: the manager as a whole) for ``reason``: counted,
        backed off, and ``what`` logged unless this reason was logged within the backoff."""
        self.executor_start_failures += 1
        failures = self._failed_starts[host] = self._failed_starts.get(host, 0) + 1
        delay = min(_BACKOFF_MAX, _BACKOFF_FIRST * 2 ** (failures - 1))
        now = self.clock()
        self._next_start[host] = now + delay
        key = (host, reason)
        where = "" if host is None else f"host {host}: "
        text = f"{where}{what} (next start {'there ' if host else ''}in {delay:.1f} s)"
        if now < self._quiet_until.get(key, now):
            self._unlogged[key] = self._unlogged.get(key, 0) + 1
            self._event(text, logging.WARNING, quiet=True)
            return
        self._quiet_until[key] = now + delay
        unlogged = self._unlogged.pop(key, 0)
        if unlogged:
            text += f" ({unlogged} more like it not logged)"
        self._event(text, logging.WARNING)

    def pending(self):
        """Executors started and not registered yet."""
        return len(self._starting)

    def backoff(self):
        """``{host: seconds}`` until a start is tried again on hosts backing off (host None:
        a manager without hosts)."""
        now = self.clock()
        return {host: round(at - now, 3) for host, at in self._next_start.items() if at > now}

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
        queued = set(self.manager.queued_ids())
        for executor_id, (started, host) in list(self._starting.items()):
            if executor_id in queued:  # waiting for room in a batch queue: its clock starts later
                self._starting[executor_id] = (now, host)
            elif now - started > timeout:
                del self._starting[executor_id]
                self.manager.kill([executor_id])
                self._start_failed(host, f"executor {executor_id} did not register within "
                                         f"executor_start_timeout ({timeout:g} s): killed",
                                   "did not register")
        existing = len(self.manager.launched_ids())
        missing = self.target - existing
        if missing <= 0:
            return
        avoid_hosts = set(self.backoff())
        if None in avoid_hosts:  # a manager without hosts backs off as a whole
            return
        n = min(missing, self.config.allocation_batch_size)
        before = set(self.manager.launched_ids())
        try:
            self.manager.request_total(existing + n, avoid_hosts=avoid_hosts,
                                       local_tasks=self.local_tasks_left(),
                                       excluded_hosts=frozenset(self.excluded_hosts))
        except Exception as exc:  # out of descriptors, memory, threads...: never the driver's end
            reason = f"{type(exc).__name__}: {exc}"
            self._start_failed(None, f"could not start executors: {reason}", reason)
        started = [i for i in self.manager.launched_ids() if i not in before]
        for executor_id in started:
            self._starting[executor_id] = (now, self.manager.host_of(executor_id))
        if started:
            self._event(f"started {len(started)} executor(s) ({', '.join(started)}): "
                        f"{existing} of target {self.target}")
        self._report_capacity()

    def _report_capacity(self):
        """Say once per target that it is beyond what the cluster can hold."""
        capacity = self.manager.capacity()
        if capacity is None or self.target <= capacity:
            self._reported_short = None
        elif self._reported_short != self.target:
            self._reported_short = self.target
            self._event(f"target {self.target} is beyond the capacity of the hosts "
                        f"({capacity} executors): {self.target - capacity} wait for room",
                        logging.WARNING)


def _check_count(name, value):
    """A count of tasks: an int from 0 (bool is not one), else ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a count of tasks (an integer >= 0), got {value!r}")
