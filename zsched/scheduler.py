"""The task scheduler: queued tasks, running tasks per executor, attempts and failures.

It makes the scheduling decisions and keeps their state; it does no I/O. The driver
feeds it submissions, status updates and executor losses, and sends what it returns.
Task payloads are opaque bytes here.
"""
import logging
import math
from collections import deque

from .fastpath import SlotTable
from .protocol import TaskState

log = logging.getLogger(__name__)


class ClientData:
    """A connected client: its tasks in flight and the functions it has sent."""

    __slots__ = ("routing_id", "pid", "functions", "tasks", "results")

    def __init__(self, routing_id, pid):
        self.routing_id = routing_id
        self.pid = pid
        self.functions = set()  # digests of the functions it sent
        self.tasks = {}      # client task id -> Task
        self.results = []    # [client task id, state, payload] waiting to be sent


class ExecutorData:
    """A registered executor as the driver sees it."""

    __slots__ = ("executor_id", "routing_id", "hostname", "cores", "pid", "slot", "slots",
                 "task_seconds", "running", "functions", "registered_at", "last_seen", "metrics",
                 "tasks_done", "tasks_failed")

    def __init__(self, executor_id, routing_id, hostname, cores, pid, slot, slots, now):
        self.executor_id = executor_id
        self.routing_id = routing_id
        self.hostname = hostname
        self.cores = cores
        self.pid = pid
        self.slot = slot          # index in the SlotTable
        self.slots = slots        # tasks it may hold, running and queued
        self.task_seconds = None  # moving average of its tasks' run time
        self.running = {}         # task id -> Task launched here and not yet reported
        self.functions = set()    # function digests this executor already holds
        self.registered_at = now
        self.last_seen = now
        self.metrics = {}
        self.tasks_done = 0
        self.tasks_failed = 0


class Task:
    __slots__ = ("task_id", "client", "client_task_id", "function", "args",
                 "attempt", "executor", "failures", "cancelled")

    def __init__(self, task_id, client, client_task_id, function, args):
        self.task_id = task_id
        self.client = client
        self.client_task_id = client_task_id
        self.function = function  # digest
        self.args = args          # pickled (args, kwargs)
        self.attempt = 0          # number of the latest launch
        self.executor = None      # ExecutorData while launched
        self.failures = []        # (executor id, reason) of each system failure
        self.cancelled = False


class TaskScheduler:
    def __init__(self, config):
        self.config = config
        self.slots = SlotTable()
        self.executors_by_slot = {}
        self.pending = deque()       # Tasks waiting for a slot, oldest first
        self.n_pending = 0           # pending tasks not cancelled
        self._next_task_id = 1
        self.counts = {"submitted": 0, "finished": 0, "failed": 0, "cancelled": 0, "retried": 0}

    # -- executors

    def add_executor(self, executor_id, routing_id, hostname, cores, pid, now):
        slots = cores  # nothing queued behind a task until the length of its tasks is known
        slot = self.slots.add(cores, slots)
        executor = ExecutorData(executor_id, routing_id, hostname, cores, pid, slot, slots, now)
        self.executors_by_slot[slot] = executor
        return executor

    def slots_per_core(self, task_seconds):
        """Tasks an executor holds per core: the one it runs, plus enough queued to cover
        ``prefetch_seconds`` of work (so it never waits for the driver), at least one
        queued, at most ``tasks_per_core``. Short tasks get a deep window, long tasks a
        shallow one, so no executor hoards the queue."""
        queued = math.ceil(self.config.prefetch_seconds / max(task_seconds, 1e-7))
        return max(1, min(self.config.tasks_per_core, 1 + max(1, queued)))

    def _adapt_window(self, executor, busy, n_tasks):
        sample = busy / n_tasks
        average = executor.task_seconds
        executor.task_seconds = sample if average is None else 0.8 * average + 0.2 * sample
        slots = executor.cores * self.slots_per_core(executor.task_seconds)
        if slots != executor.slots:
            executor.slots = slots
            self.slots.resize(executor.slot, slots)

    def remove_executor(self, executor, reason, count_failure=True):
        """Forget ``executor``; its running tasks go back to the queue, or fail once they
        have used up ``max_failures``. Returns the clients that got results."""
        self.slots.remove(executor.slot)
        del self.executors_by_slot[executor.slot]
        touched = set()
        requeue = []
        for task in executor.running.values():
            task.executor = None
            if task.cancelled:
                continue
            if count_failure:
                task.failures.append((executor.executor_id, reason))
            if len(task.failures) >= self.config.max_failures:
                attempts = "; ".join(f"attempt {i + 1} on executor {eid}: {why}"
                                     for i, (eid, why) in enumerate(task.failures))
                self._finish(task, TaskState.ERROR,
                             f"task {task.client_task_id} failed {len(task.failures)} times "
                             f"(max_failures={self.config.max_failures}): {attempts}".encode())
                touched.add(task.client)
            else:
                self.counts["retried"] += 1
                requeue.append(task)
        executor.running.clear()
        # lost tasks run before newer submissions
        for task in reversed(requeue):
            self.pending.appendleft(task)
            self.n_pending += 1
        return touched

    # -- submissions

    def submit(self, client, tasks):
        """Queue ``[[client task id, digest, args], ...]`` from ``client``."""
        next_id = self._next_task_id
        pending_append = self.pending.append
        client_tasks = client.tasks
        for client_task_id, digest, args in tasks:
            task = Task(next_id, client, client_task_id, digest, args)
            next_id += 1
            client_tasks[client_task_id] = task
            pending_append(task)
        self.n_pending += len(tasks)
        self.counts["submitted"] += len(tasks)
        self._next_task_id = next_id

    def cancel(self, client, client_task_ids):
        """Cancel tasks of ``client``; returns ``[(executor, task)]`` to be killed."""
        to_kill = []
        for client_task_id in client_task_ids:
            task = client.tasks.pop(client_task_id, None)
            if task is None or task.cancelled:
                continue
            task.cancelled = True
            self.counts["cancelled"] += 1
            if task.executor is not None:
                to_kill.append((task.executor, task))
            else:
                self.n_pending -= 1
        return to_kill

    def drop_client(self, client):
        """A client left: its queued tasks are dropped, running ones killed."""
        return self.cancel(client, list(client.tasks))

    # -- offers

    def resource_offers(self):
        """Deal queued tasks to free slots: ``[(executor, [Task, ...]), ...]``."""
        if self.n_pending == 0:
            return []
        launches = []
        pending = self.pending
        for slot, count in self.slots.offer(self.n_pending):
            executor = self.executors_by_slot[slot]
            batch = []
            running = executor.running
            while len(batch) < count and pending:
                task = pending.popleft()
                if task.cancelled:
                    continue
                task.attempt += 1
                task.executor = executor
                running[task.task_id] = task
                batch.append(task)
            self.n_pending -= len(batch)
            if len(batch) < count:
                self.slots.release(slot, count - len(batch))
            if batch:
                launches.append((executor, batch))
        return launches

    # -- status updates

    def status_updates(self, executor, updates, busy=0.0):
        """Apply ``[[task id, attempt, state, payload], ...]`` from ``executor``, which spent
        ``busy`` seconds running those tasks.

        Returns the number of updates that were stale (for an attempt no longer current)."""
        running = executor.running
        stale = 0
        freed = 0
        for task_id, attempt, state, payload in updates:
            task = running.get(task_id)
            if task is None or task.attempt != attempt:
                stale += 1
                continue
            del running[task_id]
            freed += 1
            task.executor = None
            if state == TaskState.FINISHED:
                executor.tasks_done += 1
            else:
                executor.tasks_failed += 1
            if task.cancelled:
                continue
            self._finish(task, state, payload)
        if freed:
            self.slots.release(executor.slot, freed)
            self._adapt_window(executor, busy, freed)
        return stale

    def _finish(self, task, state, payload):
        client = task.client
        client.tasks.pop(task.client_task_id, None)
        client.results.append([task.client_task_id, state, payload])
        self.counts["finished" if state == TaskState.FINISHED else "failed"] += 1

    # -- figures

    def running_count(self):
        return sum(len(e.running) for e in self.executors_by_slot.values())
