"""The task scheduler: queued tasks, running tasks per executor, attempts and failures.

It makes the scheduling decisions and keeps their state; it does no I/O. The driver
feeds it submissions, status updates and executor losses, and sends what it returns.
Task payloads are opaque bytes here.
"""
import logging
import math
import time
from collections import deque

from .fastpath import SlotTable
from .protocol import TaskState

log = logging.getLogger(__name__)

# Plain ints for the per-task comparisons: on Python 3.11 reading a member of an Enum class
# (TaskState.FINISHED) goes through EnumType.__getattr__ and costs about 0.2 us.
_FINISHED, _FAILED, _RETURNED = (int(TaskState.FINISHED), int(TaskState.FAILED),
                                 int(TaskState.RETURNED))


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
                 "task_seconds", "running", "suspect_losses", "decommissioning", "functions",
                 "registered_at", "last_seen", "metrics", "tasks_done", "tasks_failed")

    def __init__(self, executor_id, routing_id, hostname, cores, pid, slot, slots, now):
        self.executor_id = executor_id
        self.routing_id = routing_id
        self.hostname = hostname
        self.cores = cores
        self.pid = pid
        self.slot = slot          # index in the SlotTable
        self.slots = slots        # tasks it may hold, running and queued
        self.task_seconds = None  # moving average of its tasks' run time
        self.running = {}         # task id -> Task launched here and not yet reported, in launch order
        self.suspect_losses = {}  # loss id -> tasks running here that were lost together before
        self.decommissioning = False
        self.functions = set()    # function digests this executor already holds
        self.registered_at = now
        self.last_seen = now
        self.metrics = {}
        self.tasks_done = 0
        self.tasks_failed = 0

    @property
    def suspects(self):
        """Tasks among ``running`` that were on a lost executor before."""
        return sum(self.suspect_losses.values())


class Task:
    __slots__ = ("task_id", "client", "client_task_id", "function", "args", "retries",
                 "attempt", "executor", "failures", "loss", "cancelled", "queued_at")

    def __init__(self, task_id, client, client_task_id, function, args, retries, queued_at=0.0):
        self.task_id = task_id
        self.client = client
        self.client_task_id = client_task_id
        self.function = function  # digest
        self.args = args          # pickled (args, kwargs)
        self.retries = retries    # runs left after the task raises
        self.attempt = 0          # number of the latest launch
        self.executor = None      # ExecutorData while launched
        self.failures = []        # (attempt, executor id, reason) of each system failure
        self.loss = None          # id of the latest executor loss charged to it
        self.cancelled = False
        self.queued_at = queued_at  # when it last joined the queue (scheduler clock)


class TaskScheduler:
    """Queued tasks, the tasks each executor holds, and the decisions between them.

    An executor holds more tasks than it has cores (its window, see ``slots_per_core``), so
    when it is lost the driver cannot tell which of them had started. All of them are
    charged a failure, and from then on they are *suspects*: a suspect is launched only
    onto an idle core, its executor queues nothing behind it while it runs, and no suspect
    of the same loss runs beside it, so a later loss is charged only to tasks that were
    really running (as Spark charges the tasks running on a lost executor) and a task that
    kills its executor cannot take the same neighbours down with it again and again. While
    suspects wait, every window shrinks to its cores so that idle cores appear even under
    a flood of short tasks.
    """

    def __init__(self, config, clock=time.monotonic):
        self.config = config
        self.clock = clock
        self.slots = SlotTable()
        self.executors_by_slot = {}
        self.pending = deque()       # Tasks waiting for a slot, oldest first
        self.suspects = {}           # loss id -> deque of Tasks charged with it, waiting
        self.n_pending = 0           # tasks not cancelled in pending and suspects
        self.clamped = False         # windows are held to the cores while suspects wait
        self._next_task_id = 1
        self._losses = 0             # executor losses charged to tasks
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

    def _window(self, executor):
        if executor.decommissioning:
            return 0
        if self.clamped or executor.suspect_losses or executor.task_seconds is None:
            return executor.cores
        return executor.cores * self.slots_per_core(executor.task_seconds)

    def _apply_window(self, executor):
        slots = self._window(executor)
        if slots != executor.slots:
            executor.slots = slots
            self.slots.resize(executor.slot, slots)

    def _adapt_window(self, executor, busy, n_tasks):
        sample = busy / n_tasks
        average = executor.task_seconds
        executor.task_seconds = sample if average is None else 0.8 * average + 0.2 * sample
        self._apply_window(executor)

    def _set_clamped(self, clamped):
        self.clamped = clamped
        for executor in self.executors_by_slot.values():
            self._apply_window(executor)

    def decommission(self, executor):
        """Offer ``executor`` nothing more; it gives back what it has not started."""
        executor.decommissioning = True
        self._apply_window(executor)

    def remove_executor(self, executor, reason, count_failure=True):
        """Forget ``executor``; its tasks go back to the queue (before newer submissions),
        or fail once they have used up ``max_failures``. ``count_failure`` is False when the
        driver itself caused the loss (kill, decommission)."""
        self.slots.remove(executor.slot)
        del self.executors_by_slot[executor.slot]
        if count_failure:
            self._losses += 1
        for task in reversed(list(executor.running.values())):
            task.executor = None
            if task.cancelled:
                continue
            if count_failure:
                task.failures.append((task.attempt, executor.executor_id, reason))
                task.loss = self._losses
            if len(task.failures) >= self.config.max_failures:
                attempts = "; ".join(f"attempt {attempt} on executor {eid}: {why}"
                                     for attempt, eid, why in task.failures)
                self._finish(task, TaskState.ERROR,
                             f"task {task.client_task_id} failed {len(task.failures)} times "
                             f"(max_failures={self.config.max_failures}): {attempts}".encode())
            else:
                self.counts["retried"] += 1
                self._requeue(task)
        executor.running.clear()
        executor.suspect_losses.clear()

    def _requeue(self, task):
        task.queued_at = self.clock()
        if task.failures:
            self.suspects.setdefault(task.loss, deque()).appendleft(task)
        else:
            self.pending.appendleft(task)
        self.n_pending += 1

    def queued_suspects(self):
        return [task for group in self.suspects.values() for task in group if not task.cancelled]

    # -- submissions

    def submit(self, client, tasks):
        """Queue ``[[client task id, digest, args, retries], ...]`` from ``client``."""
        next_id = self._next_task_id
        pending_append = self.pending.append
        client_tasks = client.tasks
        now = self.clock()
        for client_task_id, digest, args, retries in tasks:
            task = Task(next_id, client, client_task_id, digest, args, retries, now)
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

    def _next_queued(self, avoid):
        """The next task to launch, or None: the oldest suspect of a loss not in ``avoid``
        (the losses of suspects its executor runs), else the oldest queued task."""
        if self.suspects:
            emptied = []
            found = None
            for loss, group in self.suspects.items():
                while group and group[0].cancelled:
                    group.popleft()
                if not group:
                    emptied.append(loss)
                elif loss not in avoid:
                    found = group.popleft()
                    if not group:
                        emptied.append(loss)
                    break
            for loss in emptied:
                del self.suspects[loss]
            if found is not None:
                return found
        pending = self.pending
        while pending:
            task = pending.popleft()
            if not task.cancelled:
                return task
        return None

    def resource_offers(self):
        """Deal queued tasks to free slots: ``[(executor, [Task, ...]), ...]``."""
        if self.n_pending == 0:
            return []
        if self.suspects and not self.clamped:
            self._set_clamped(True)
        launches = []
        pending = self.pending
        suspects = self.suspects  # _next_queued empties it in place; nothing is added meanwhile
        for slot, count in self.slots.offer(self.n_pending):
            executor = self.executors_by_slot[slot]
            batch = []
            running = executor.running
            avoid = executor.suspect_losses  # suspects lost together never run together again
            while len(batch) < count:
                if suspects:
                    task = self._next_queued(avoid)
                    if task is None:
                        break
                elif pending:  # no suspects: _next_queued without the call
                    task = pending.popleft()
                    if task.cancelled:
                        continue
                else:
                    break
                if task.failures:
                    avoid[task.loss] = avoid.get(task.loss, 0) + 1
                task.attempt += 1
                task.executor = executor
                running[task.task_id] = task
                batch.append(task)
            self.n_pending -= len(batch)
            if len(batch) < count:
                self.slots.release(slot, count - len(batch))
            if batch:
                launches.append((executor, batch))
        if self.clamped and not self.suspects:
            self._set_clamped(False)
        return launches

    # -- status updates

    def status_updates(self, executor, updates, busy=0.0):
        """Apply ``[[task id, attempt, state, payload], ...]`` from ``executor``, which spent
        ``busy`` seconds running those tasks.

        Returns the number of updates that were stale (for an attempt no longer current)."""
        running = executor.running
        stale = 0
        freed = 0
        ran_finished = 0  # ran, and FINISHED
        ran_failed = 0    # ran, and FAILED, KILLED or ERROR
        finished = 0      # reported to their client as FINISHED (as _finish does) ...
        failed = 0        # ... or as failed
        returned = []
        for task_id, attempt, state, payload in updates:
            task = running.get(task_id)
            if task is None or task.attempt != attempt:
                stale += 1
                continue
            del running[task_id]
            freed += 1
            task.executor = None
            if task.failures:
                left = executor.suspect_losses[task.loss] - 1
                if left:
                    executor.suspect_losses[task.loss] = left
                else:
                    del executor.suspect_losses[task.loss]
            if state == _FINISHED:
                ran_finished += 1
                if task.cancelled:
                    continue
                finished += 1
            elif state == _RETURNED:  # given back unstarted: not the task's failure
                if not task.cancelled:
                    returned.append(task)
                continue
            else:
                ran_failed += 1
                if task.cancelled:
                    continue
                if state == _FAILED and task.retries > 0:
                    task.retries -= 1
                    self.counts["retried"] += 1
                    task.queued_at = self.clock()
                    self.pending.appendleft(task)
                    self.n_pending += 1
                    continue
                failed += 1
            client = task.client
            client.tasks.pop(task.client_task_id, None)
            client.results.append([task.client_task_id, state, payload])
        executor.tasks_done += ran_finished
        executor.tasks_failed += ran_failed
        self.counts["finished"] += finished
        self.counts["failed"] += failed
        for task in reversed(returned):  # first in the queue, in their order
            self._requeue(task)
        if freed:
            self.slots.release(executor.slot, freed)
            ran = ran_finished + ran_failed
            if ran:
                self._adapt_window(executor, busy, ran)
            else:
                self._apply_window(executor)
        return stale

    def _finish(self, task, state, payload):
        client = task.client
        client.tasks.pop(task.client_task_id, None)
        client.results.append([task.client_task_id, state, payload])
        self.counts["finished" if state == TaskState.FINISHED else "failed"] += 1

    # -- figures

    def running_count(self):
        return sum(len(e.running) for e in self.executors_by_slot.values())
