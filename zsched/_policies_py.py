"""Pure-Python twin of the compiled scheduling policies (``_policies.pyx``); they must agree
exactly. They are the decisions beyond the plain offer, after Spark's scheduler, each off
unless its setting turns it on. They do no I/O and read no clock: the time is an argument.

- ``Runtimes`` decides when a running task is a straggler, for speculation: once a
  fraction (``quantile``) of its group's tasks finished, a task of the group running
  longer than ``multiplier`` times their median, and at least ``min_runtime``.
- ``HealthTracker`` decides which executors and hosts are excluded for failures: an
  executor whose attempts failed ``max_failed_tasks_per_executor`` times within
  ``timeout``, a host where ``max_failed_executors_per_host`` executors were excluded.
  Each exclusion lasts ``timeout``.
- ``LocalityQueue`` holds the queued tasks that prefer hosts, for delay scheduling: a task
  goes to an executor on one of its hosts, or anywhere once it has waited ``wait``, or at
  once if none of its hosts has an executor.
"""
import math
from collections import deque

# The run times a group keeps for its median: the latest ones.
RUNTIMES_KEPT = 1024


class Runtimes:
    """The finished tasks of one group (a client's tasks of one function): how many, the
    latest run times, and how many the group has submitted."""

    __slots__ = ("submitted", "finished", "_recent", "_median")

    def __init__(self):
        self.submitted = 0
        self.finished = 0
        self._recent = deque(maxlen=RUNTIMES_KEPT)
        self._median = -1.0  # below 0: to be computed again

    def submit(self, n):
        self.submitted += n

    def finish(self, seconds):
        """A task of the group finished, after running ``seconds``."""
        seconds = float(seconds)
        self.finished += 1
        self._recent.append(seconds)
        self._median = -1.0

    def median(self):
        """The median of the latest run times (the upper one of an even count); None
        before any task finished."""
        if not self._recent:
            return None
        if self._median < 0.0:
            ordered = sorted(self._recent)
            self._median = ordered[len(ordered) // 2]
        return self._median

    def threshold(self, quantile, multiplier, min_runtime):
        """The run time past which a task of the group is a straggler: infinite until at
        least one task and ``quantile`` of those submitted finished."""
        if self.finished == 0 or self.finished < math.floor(quantile * self.submitted):
            return math.inf
        return max(min_runtime, multiplier * self.median())


def stragglers(launches, now, threshold):
    """The tasks of ``launches`` (``{task: launched at}``, in launch order) that have run
    for more than ``threshold`` seconds at ``now``, oldest first."""
    found = []
    for task, launched_at in launches.items():
        if now - launched_at <= threshold:
            break
        found.append(task)
    return found


class HealthTracker:
    """Failures of task attempts per executor, and the executors and hosts they exclude."""

    def __init__(self, max_failed_tasks_per_executor, max_failed_executors_per_host, timeout):
        self.max_failed_tasks_per_executor = max_failed_tasks_per_executor
        self.max_failed_executors_per_host = max_failed_executors_per_host
        self.timeout = timeout
        self._failures = {}   # executor id -> deque of the times its attempts failed
        self.executors = {}   # executor id -> (until, host, reason): excluded
        self.hosts = {}       # host -> (until, reason): excluded
        self._lifted = []     # (kind, name): lifted, for expire to report

    def task_failed(self, executor_id, host, now, reason):
        """An attempt failed on ``executor_id`` (on ``host``) at ``now`` for ``reason``:
        the exclusions it makes, ``[(kind, name, why), ...]``, kind "executor" or "host".
        The exclusions over at ``now`` are lifted first (``expire`` reports them)."""
        self._lift(now)
        times = self._failures.get(executor_id)
        if times is None:
            times = self._failures[executor_id] = deque()
        times.append(now)
        while times and times[0] <= now - self.timeout:
            times.popleft()
        made = []
        if executor_id in self.executors or len(times) < self.max_failed_tasks_per_executor:
            return made
        why = f"{len(times)} failed task attempts (the latest: {reason})"
        self.executors[executor_id] = (now + self.timeout, host, why)
        made.append(("executor", executor_id, why))
        if host in self.hosts:
            return made
        excluded_here = sum(1 for _, on, _ in self.executors.values() if on == host)
        if excluded_here >= self.max_failed_executors_per_host:
            why = f"{excluded_here} of its executors excluded (the latest: {executor_id})"
            self.hosts[host] = (now + self.timeout, why)
            made.append(("host", host, why))
        return made

    def is_excluded(self, executor_id, host):
        """Whether ``executor_id`` or its ``host`` is excluded, as of the last ``expire``
        or ``task_failed``."""
        return executor_id in self.executors or host in self.hosts

    def expire(self, now):
        """Lift the exclusions whose time is up: ``[(kind, name), ...]``, with those that
        ``task_failed`` lifted since the last call, in the order they were lifted."""
        self._lift(now)
        lifted, self._lifted = self._lifted, []
        return lifted

    def _lift(self, now):
        lifted = self._lifted
        for executor_id, (until, _, _) in list(self.executors.items()):
            if until <= now:
                del self.executors[executor_id]
                self._failures.pop(executor_id, None)
                lifted.append(("executor", executor_id))
        for host, (until, _) in list(self.hosts.items()):
            if until <= now:
                del self.hosts[host]
                lifted.append(("host", host))

    def forget_executor(self, executor_id):
        """``executor_id`` is gone: its failures go; an exclusion of it stays, counted
        against its host, until its time is up."""
        self._failures.pop(executor_id, None)

    def snapshot(self, now):
        """``{"executors": [...], "hosts": [...]}``, each exclusion with its reason and the
        seconds it has left, in name order."""
        return {
            "executors": [{"executor_id": executor_id, "host": host, "reason": why,
                           "seconds_left": round(max(0.0, until - now), 3)}
                          for executor_id, (until, host, why) in sorted(self.executors.items())],
            "hosts": [{"host": host, "reason": why, "seconds_left": round(max(0.0, until - now), 3)}
                      for host, (until, why) in sorted(self.hosts.items())],
        }


class LocalityQueue:
    """Queued tasks that prefer hosts: in the order they joined, and by host.

    A task taken by one way is skipped by the others (``_waiting`` holds the tasks still
    queued, by task id). A cancelled task is dropped when met."""

    def __init__(self):
        self._order = deque()  # tasks in the order they joined
        self._by_host = {}     # host -> deque of the tasks that prefer it
        self._waiting = {}     # task id -> the hosts of a task still queued
        self._counts = {}      # host -> tasks still queued that prefer it

    def __len__(self):
        return len(self._waiting)

    def add(self, task, hosts):
        """Queue ``task``, which prefers ``hosts`` (names); it joined at ``task.queued_at``.
        A task joins once."""
        hosts = tuple(hosts)
        if task.task_id in self._waiting:
            raise ValueError(f"task {task.task_id} is queued already")
        self._waiting[task.task_id] = hosts
        for host in hosts:
            self._counts[host] = self._counts.get(host, 0) + 1
        self._order.append(task)
        for host in hosts:
            queue = self._by_host.get(host)
            if queue is None:
                queue = self._by_host[host] = deque()
            queue.append(task)

    def clear(self):
        self._order.clear()
        self._by_host.clear()
        self._waiting.clear()
        self._counts.clear()

    def discard(self, task):
        """Take ``task`` out, if queued here: whether it was."""
        return self._forget(task.task_id) is not None

    def take_local(self, host, count):
        """Up to ``count`` tasks that prefer ``host``, oldest first."""
        queue = self._by_host.get(host)
        taken = []
        while queue and len(taken) < count:
            task = queue.popleft()
            if self._take(task):
                taken.append(task)
        if queue is not None and not queue:
            del self._by_host[host]
        return taken

    def take_any(self, count, now, wait, live_hosts):
        """Up to ``count`` tasks that may run on any host: those that waited ``wait`` or
        more, oldest first, then those none of whose hosts is in ``live_hosts``."""
        taken = []
        order = self._order
        while order and len(taken) < count:
            task = order[0]
            if task.task_id not in self._waiting or task.cancelled:
                order.popleft()
                self._forget(task.task_id)
            elif now - task.queued_at >= wait:
                order.popleft()
                self._take(task)
                taken.append(task)
            else:
                break
        for host in [h for h in self._by_host if h not in live_hosts]:
            if len(taken) >= count:
                break
            kept = deque()
            for task in self._by_host.pop(host):
                hosts = self._waiting.get(task.task_id)
                if hosts is None:
                    continue  # taken already
                if len(taken) < count and not any(h in live_hosts for h in hosts):
                    if self._take(task):
                        taken.append(task)
                else:
                    kept.append(task)
            if kept:
                self._by_host[host] = kept
        return taken

    def _take(self, task):
        """Take ``task`` out if it still waits and is not cancelled: whether it did wait."""
        if self._forget(task.task_id) is None:
            return False
        return not task.cancelled

    def _forget(self, task_id):
        """Take the task ``task_id`` out of the queued ones: its hosts, or None if it was
        not queued."""
        hosts = self._waiting.pop(task_id, None)
        if hosts is not None:
            counts = self._counts
            for host in hosts:
                left = counts[host] - 1
                if left:
                    counts[host] = left
                else:
                    del counts[host]
        return hosts

    def waiting_by_host(self):
        """``{host: tasks still queued that prefer it}``."""
        return dict(self._counts)

    def oldest_wait(self, now):
        """How long the oldest queued task has waited (0.0 if none)."""
        order = self._order
        while order and order[0].task_id not in self._waiting:
            order.popleft()
        return now - order[0].queued_at if order else 0.0
