# cython: language_level=3
"""Compiled scheduling policies; ``_policies_py.py`` is the twin they must agree with
exactly, and describes them. Times are doubles, counts C longs; a task is read through
its ``task_id``, ``queued_at`` and ``cancelled`` attributes alone."""
from collections import deque

from libc.math cimport INFINITY, floor
from libc.stdlib cimport free, malloc, qsort, realloc
from libc.string cimport memcpy

cdef enum:
    KEPT = 1024  # the run times a group keeps for its median: the latest ones

RUNTIMES_KEPT = KEPT


cdef int _compare(const void* a, const void* b) noexcept nogil:
    cdef double x = (<const double*>a)[0]
    cdef double y = (<const double*>b)[0]
    return (x > y) - (x < y)


cdef class Runtimes:
    """The finished tasks of one group (a client's tasks of one function): how many, the
    latest run times, and how many the group has submitted."""

    cdef public long submitted
    cdef public long finished
    cdef double* _recent        # a ring of the latest run times, grown up to KEPT
    cdef Py_ssize_t _capacity
    cdef Py_ssize_t _count      # run times kept
    cdef Py_ssize_t _next       # where the next one goes: over the oldest once full
    cdef double _median
    cdef bint _stale            # _median to be computed again

    def __cinit__(self):
        self._stale = True

    def __dealloc__(self):
        free(self._recent)

    def submit(self, long n):
        self.submitted += n

    def finish(self, double seconds):
        """A task of the group finished, after running ``seconds``."""
        if self._count == self._capacity and self._capacity < KEPT:
            self._grow()
        self.finished += 1
        self._recent[self._next] = seconds
        self._next = (self._next + 1) % self._capacity
        if self._count < self._capacity:
            self._count += 1
        self._stale = True

    cdef int _grow(self) except -1:
        # Before it is full at KEPT the ring has not wrapped: its times are in order.
        cdef Py_ssize_t capacity = min(KEPT, max(8, 2 * self._capacity))
        cdef double* grown = <double*>realloc(self._recent, capacity * sizeof(double))
        if grown == NULL:
            raise MemoryError()
        self._recent, self._capacity, self._next = grown, capacity, self._count
        return 0

    def median(self):
        """The median of the latest run times (the upper one of an even count); None
        before any task finished."""
        if self._count == 0:
            return None
        return self._median_of_recent()

    cdef double _median_of_recent(self) except? -1.0:
        cdef double* ordered
        if self._stale:
            ordered = <double*>malloc(self._count * sizeof(double))
            if ordered == NULL:
                raise MemoryError()
            memcpy(ordered, self._recent, self._count * sizeof(double))
            qsort(ordered, self._count, sizeof(double), _compare)
            self._median = ordered[self._count // 2]
            free(ordered)
            self._stale = False
        return self._median

    def threshold(self, double quantile, double multiplier, double min_runtime):
        """The run time past which a task of the group is a straggler: infinite until at
        least one task and ``quantile`` of those submitted finished."""
        cdef double past
        if self.finished == 0 or self.finished < floor(quantile * self.submitted):
            return INFINITY
        past = multiplier * self._median_of_recent()
        return past if past > min_runtime else min_runtime


def stragglers(launches, double now, double threshold):
    """The tasks of ``launches`` (``{task: launched at}``, in launch order) that have run
    for more than ``threshold`` seconds at ``now``, oldest first."""
    cdef list found = []
    cdef double launched_at
    for task, at in launches.items():
        launched_at = at
        if now - launched_at <= threshold:
            break
        found.append(task)
    return found


cdef object _seconds_left(double until, double now):
    cdef double left = until - now
    return round(left if left > 0.0 else 0.0, 3)


cdef class HealthTracker:
    """Failures of task attempts per executor, and the executors and hosts they exclude."""

    cdef public long max_failed_tasks_per_executor
    cdef public long max_failed_executors_per_host
    cdef public double timeout
    cdef public dict executors  # executor id -> (until, host, reason): excluded
    cdef public dict hosts      # host -> (until, reason): excluded
    cdef dict _failures         # executor id -> deque of the times its attempts failed
    cdef list _lifted           # (kind, name): lifted, for expire to report

    def __init__(self, long max_failed_tasks_per_executor, long max_failed_executors_per_host,
                 double timeout):
        self.max_failed_tasks_per_executor = max_failed_tasks_per_executor
        self.max_failed_executors_per_host = max_failed_executors_per_host
        self.timeout = timeout
        self._failures = {}
        self.executors = {}
        self.hosts = {}
        self._lifted = []

    def task_failed(self, executor_id, host, double now, reason):
        """An attempt failed on ``executor_id`` (on ``host``) at ``now`` for ``reason``:
        the exclusions it makes, ``[(kind, name, why), ...]``, kind "executor" or "host".
        The exclusions over at ``now`` are lifted first (``expire`` reports them)."""
        cdef list made = []
        cdef double since = now - self.timeout
        self._lift(now)
        times = self._failures.get(executor_id)
        if times is None:
            times = self._failures[executor_id] = deque()
        times.append(now)
        while times and times[0] <= since:
            times.popleft()
        if executor_id in self.executors or len(times) < self.max_failed_tasks_per_executor:
            return made
        why = f"{len(times)} failed task attempts (the latest: {reason})"
        self.executors[executor_id] = (now + self.timeout, host, why)
        made.append(("executor", executor_id, why))
        if host in self.hosts:
            return made
        excluded_here = self._excluded_on(host)
        if excluded_here >= self.max_failed_executors_per_host:
            why = f"{excluded_here} of its executors excluded (the latest: {executor_id})"
            self.hosts[host] = (now + self.timeout, why)
            made.append(("host", host, why))
        return made

    cdef long _excluded_on(self, host) except -1:
        cdef long count = 0
        for _, on, _ in self.executors.values():
            if on == host:
                count += 1
        return count

    def is_excluded(self, executor_id, host):
        """Whether ``executor_id`` or its ``host`` is excluded, as of the last ``expire``
        or ``task_failed``."""
        return executor_id in self.executors or host in self.hosts

    def expire(self, double now):
        """Lift the exclusions whose time is up: ``[(kind, name), ...]``, with those that
        ``task_failed`` lifted since the last call, in the order they were lifted."""
        self._lift(now)
        lifted, self._lifted = self._lifted, []
        return lifted

    cdef int _lift(self, double now) except -1:
        cdef double until
        for executor_id, excluded in list(self.executors.items()):
            until = excluded[0]
            if until <= now:
                del self.executors[executor_id]
                self._failures.pop(executor_id, None)
                self._lifted.append(("executor", executor_id))
        for host, excluded in list(self.hosts.items()):
            until = excluded[0]
            if until <= now:
                del self.hosts[host]
                self._lifted.append(("host", host))
        return 0

    def forget_executor(self, executor_id):
        """``executor_id`` is gone: its failures go; an exclusion of it stays, counted
        against its host, until its time is up."""
        self._failures.pop(executor_id, None)

    def snapshot(self, double now):
        """``{"executors": [...], "hosts": [...]}``, each exclusion with its reason and the
        seconds it has left, in name order."""
        return {
            "executors": [{"executor_id": executor_id, "host": host, "reason": why,
                           "seconds_left": _seconds_left(until, now)}
                          for executor_id, (until, host, why) in sorted(self.executors.items())],
            "hosts": [{"host": host, "reason": why, "seconds_left": _seconds_left(until, now)}
                      for host, (until, why) in sorted(self.hosts.items())],
        }


cdef class LocalityQueue:
    """Queued tasks that prefer hosts: in the order they joined, and by host.

    A task taken by one way is skipped by the others (``_waiting`` holds the tasks still
    queued, by task id). A cancelled task is dropped when met."""

    cdef object _order    # a deque of the tasks in the order they joined
    cdef dict _by_host    # host -> deque of the tasks that prefer it
    cdef dict _waiting    # task id -> the hosts of a task still queued
    cdef dict _counts     # host -> tasks still queued that prefer it

    def __init__(self):
        self._order = deque()
        self._by_host = {}
        self._waiting = {}
        self._counts = {}

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

    def take_local(self, host, Py_ssize_t count):
        """Up to ``count`` tasks that prefer ``host``, oldest first."""
        cdef list taken = []
        queue = self._by_host.get(host)
        while queue and len(taken) < count:
            task = queue.popleft()
            if self._take(task):
                taken.append(task)
        if queue is not None and not queue:
            del self._by_host[host]
        return taken

    def take_any(self, Py_ssize_t count, double now, double wait, live_hosts):
        """Up to ``count`` tasks that may run on any host: those that waited ``wait`` or
        more, oldest first, then those none of whose hosts is in ``live_hosts``."""
        cdef list taken = []
        cdef double queued_at
        order = self._order
        while order and len(taken) < count:
            task = order[0]
            if task.task_id not in self._waiting or task.cancelled:
                order.popleft()
                self._forget(task.task_id)
                continue
            queued_at = task.queued_at
            if not now - queued_at >= wait:
                break
            order.popleft()
            self._take(task)
            taken.append(task)
        for host in [h for h in self._by_host if h not in live_hosts]:
            if len(taken) >= count:
                break
            self._take_homeless(host, taken, count, live_hosts)
        return taken

    cdef int _take_homeless(self, host, list taken, Py_ssize_t count, live_hosts) except -1:
        """Into ``taken``, up to ``count``, the tasks that prefer ``host`` (not live) and
        no live host."""
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
        return 0

    cdef bint _take(self, task) except -1:
        """Take ``task`` out if it still waits and is not cancelled: whether it did wait."""
        if self._forget(task.task_id) is None:
            return False
        return not task.cancelled

    cdef object _forget(self, task_id):
        """Take the task ``task_id`` out of the queued ones: its hosts, or None."""
        hosts = self._waiting.pop(task_id, None)
        if hosts is not None:
            for host in hosts:
                left = self._counts[host] - 1
                if left:
                    self._counts[host] = left
                else:
                    del self._counts[host]
        return hosts

    def waiting_by_host(self):
        """``{host: tasks still queued that prefer it}``."""
        return dict(self._counts)

    def oldest_wait(self, double now):
        """How long the oldest queued task has waited (0.0 if none)."""
        cdef double queued_at
        order = self._order
        while order and order[0].task_id not in self._waiting:
            order.popleft()
        if not order:
            return 0.0
        queued_at = order[0].queued_at
        return now - queued_at
