"""The task scheduler: queued tasks, running tasks per executor, attempts and failures.

It makes the scheduling decisions and keeps their state; it does no I/O. The driver
feeds it submissions, status updates and executor losses, and sends what it returns.
Task payloads are opaque bytes here.

Its offers are launch decisions (``resource_offers``): for each executor, the rows of the
tasks it takes and their functions. The wire writes them as LaunchTasks frames
(``wire.launch_frames``). The driver asks for both steps at once (``offer_frames``), which
the compiled core fuses in the common case.
"""
import itertools
import logging
import math
import time
from collections import deque

from ..protocol import LaunchTasks, TaskState, frame_header
from ..scheduling import (LatencyHistogram, SlotTable, Task,
                          apply_status_updates, launch_tasks, offer_and_launch, queue_tasks,
                          slots_per_core, window)
from ..wire import launch_frames
from .records import ExecutorData, untracked
from .placement import Placement
from .speculation import Copies

log = logging.getLogger(__name__)

_LAUNCH_HEADER = frame_header(LaunchTasks)  # the wire writes LaunchTasks frames whole


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

    It is given the ``config``, the function table (``functions``: digest -> FunctionBlob,
    which the driver's client sessions own; read when tasks are queued) and the ``clock``.
    """

    def __init__(self, config, functions=None, clock=time.monotonic):
        self.config = config
        self._functions = {} if functions is None else functions  # digest -> FunctionBlob
        self.clock = clock
        self.latency = LatencyHistogram()  # seconds from joining the queue to launch
        self.slots = SlotTable()
        self.executors_by_slot = {}
        self.pending = untracked(deque())  # Tasks waiting for a slot, oldest first
        self.suspects = {}           # loss id -> deque of Tasks charged with it, waiting
        self.n_pending = 0           # tasks not cancelled in pending and suspects
        self.clamped = False         # windows are held to the cores while suspects wait
        self._next_task_id = 1
        self._losses = 0             # executor losses charged to tasks
        self._prefetch_seconds = config.prefetch_seconds  # read at each status update
        self._tasks_per_core = config.tasks_per_core
        self.counts = {"submitted": 0, "finished": 0, "failed": 0, "cancelled": 0, "retried": 0}
        # locality, exclusion and speculation; the parts read on this class's paths too
        self.placement = placement = Placement(self, config)
        self.locality, self.failed_on = placement.locality, placement.failed_on
        self.speculation, self.exclusion = placement.speculation, placement.exclusion
        self.kills = placement.kills  # (executor, task, reason): attempts the driver must kill

    # -- executors

    def add_executor(self, executor_id, routing_id, hostname, cores, pid, now):
        slots = cores  # nothing queued behind a task until the length of its tasks is known
        slot = self.slots.add(cores, slots)
        executor = ExecutorData(executor_id, routing_id, hostname, cores, pid, slot, slots, now)
        self.executors_by_slot[slot] = executor
        if self.exclusion is not None:  # a host may be excluded; or the last executor was
            self.placement.refresh_exclusions()
        return executor

    def slots_per_core(self, task_seconds):
        """Tasks an executor holds per core: the one it runs, plus enough queued to cover
        ``prefetch_seconds`` of work (so it never waits for the driver), at least one
        queued, at most ``tasks_per_core``. Short tasks get a deep window, long tasks a
        shallow one, so no executor hoards the queue."""
        return slots_per_core(task_seconds, self.config.prefetch_seconds, self.config.tasks_per_core)

    def apply_window(self, executor):
        """Set the tasks ``executor`` may hold (see ``window``)."""
        slots = window(executor, self.clamped, self._prefetch_seconds, self._tasks_per_core)
        if slots != executor.slots:
            executor.slots = slots
            self.slots.resize(executor.slot, slots)

    def forget_idle_task_lengths(self):
        """Called once per ``revive_interval``: an executor that held no task since the last
        call forgets the length of its tasks, so its next launch is one task per core and
        its window grows again from what those measure. Without this, a window measured on
        short tasks would hand a later batch of long tasks out all at once, to be held by
        whichever executors the first offer reached while others run out of work."""
        for executor in self.executors_by_slot.values():
            ended = executor.tasks_done + executor.tasks_failed
            if (ended == executor.ended_at_check and not executor.running
                    and executor.task_seconds is not None):
                self.forget_task_length(executor)
            executor.ended_at_check = ended

    def forget_task_length(self, executor):
        """One task per core again, until what it reports measures its tasks anew."""
        executor.task_seconds = None
        self.apply_window(executor)

    def _set_clamped(self, clamped):
        self.clamped = clamped
        for executor in self.executors_by_slot.values():
            self.apply_window(executor)

    def decommission(self, executor):
        """Offer ``executor`` nothing more; it gives back what it has not started."""
        executor.decommissioning = True
        self.apply_window(executor)

    def remove_executor(self, executor, reason, count_failure=True):
        """Forget ``executor``; its tasks go back to the queue (before newer submissions),
        or fail once they have used up ``max_failures``. ``count_failure`` is False when the
        driver itself caused the loss (kill, decommission)."""
        self.slots.remove(executor.slot)
        del self.executors_by_slot[executor.slot]
        if count_failure:
            self._losses += 1
        speculation = self.speculation
        for task in reversed(list(executor.running.values())):
            task.executor = None
            if task.cancelled:
                continue
            if speculation is not None:
                if type(task.client) is Copies:  # a copy lost: its original runs on
                    speculation.copy_left(task)
                    continue
                speculation.lost(task)
            if count_failure:
                task.failures += ((task.attempt, executor.executor_id, reason),)
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
        if count_failure and self.exclusion is not None and executor.running:
            self.exclusion.failed(executor, len(executor.running), f"lost: {reason}", self.clock())
        executor.running.clear()
        executor.suspect_losses.clear()
        if self.exclusion is not None:
            self.exclusion.forget(executor)
            self.placement.refresh_exclusions()

    def _requeue(self, task):
        task.queued_at = self.clock()
        if task.failures:
            group = self.suspects.get(task.loss)
            if group is None:
                group = self.suspects[task.loss] = untracked(deque())
            group.appendleft(task)
        else:
            self.pending.appendleft(task)
        self.n_pending += 1

    def queued_suspects(self):
        return [task for group in self.suspects.values() for task in group if not task.cancelled]

    # -- submissions

    def submit(self, client, tasks, placement=None):
        """Queue the rows ``[client task id, digest, args, retries]`` of a SubmitTasks from
        ``client`` (``tasks``, as ``protocol.decode`` read them). A task whose function the
        driver does not hold ends at once in an ERROR result. ``placement`` maps client
        task ids to the ``(hosts, speculative)`` they were submitted with. Returns how many
        were refused for an id of a task the client has in flight (see ``queue_tasks``)."""
        first_id = self._next_task_id
        held = client.held
        queue = self.pending if held is None else deque()
        self._next_task_id, missing = queue_tasks(client, tasks, first_id, self.clock(),
                                                  queue, self._functions)
        queued = self._next_task_id - first_id
        if queued and (placement or self.speculation is not None):
            new = list(itertools.islice(reversed(queue), queued))[::-1]
            if self.speculation is not None:
                self.speculation.submitted(new)
            if placement:
                self.placement.place(new, queue, placement)
        if held is None:
            self.n_pending += queued
        else:
            held.update((task.task_id, task) for task in queue)
        self.counts["submitted"] += queued
        return len(tasks) - queued - missing

    def hold_client(self, client):
        """Launch none of ``client``'s queued tasks, nor those it submits from now on, until
        ``release_client``. Tasks already launched run on; one that fails and is retried,
        or is lost with its executor, may be launched again meanwhile."""
        if client.held is not None:
            return
        held = client.held = {}
        kept = []
        for task in self.pending:
            if task.client is client and not task.cancelled:
                held[task.task_id] = task
            else:
                kept.append(task)
        self.pending.clear()
        self.pending.extend(kept)
        self.n_pending -= len(held)

    def release_client(self, client):
        """Queue ``client``'s held tasks again, first in the queue: they waited long enough."""
        held, client.held = client.held, None
        if held:
            self.pending.extendleft(reversed(held.values()))
            self.n_pending += len(held)
            for task in held.values():
                task.queued_at = self.clock()

    def cancel(self, client, client_task_ids):
        """Cancel tasks of ``client``; returns ``[(executor, task)]`` to be killed."""
        to_kill = []
        for client_task_id in client_task_ids:
            task = client.tasks.get(client_task_id)
            if task is None or task.cancelled:
                continue
            self.counts["cancelled"] += 1
            to_kill.extend(self.withdraw(task))
        if self.n_pending == 0 and (self.pending or self.suspects or self.locality):
            # only cancelled tasks wait: no offer would take them out, and they hold their
            # arguments and functions
            self.pending.clear()
            self.suspects.clear()
            self.locality.clear()
            if self.clamped:
                self._set_clamped(False)
        return to_kill

    def withdraw(self, task):
        """Take ``task`` out of flight for good: ``[(executor, attempt), ...]`` to kill, its
        own and its copy's."""
        client = task.client
        client.tasks.pop(task.client_task_id, None)
        task.cancelled = True
        self.failed_on.pop(task.task_id, None)
        to_kill = []
        if task.executor is not None:
            to_kill.append((task.executor, task))
        elif client.held is None or client.held.pop(task.task_id, None) is None:
            self.n_pending -= 1
            if self.locality:
                self.locality.discard(task)
        if self.speculation is not None:
            copy = self.speculation.withdrawn(task)
            if copy is not None and copy.executor is not None:
                to_kill.append((copy.executor, copy))
        return to_kill

    def cancel_queued(self, client):
        """Cancel the tasks of ``client`` that no executor holds; their client task ids."""
        queued = [client_task_id for client_task_id, task in client.tasks.items()
                  if task.executor is None and not task.cancelled]
        self.cancel(client, queued)  # nothing to kill: none of them runs
        return queued

    def drop_client(self, client):
        """A client left: its queued tasks are dropped, running ones killed."""
        to_kill = self.cancel(client, list(client.tasks))
        if self.speculation is not None:
            self.speculation.drop_client(client)
        return to_kill

    # -- offers

    def next_queued(self, avoid):
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
        """Deal queued tasks to free slots and launch them: the launch decisions,
        ``[(executor, rows, functions), ...]`` in the order of the offer. ``rows`` are an
        executor's LaunchTasks rows ``[task id, attempt, function digest, pickled
        arguments]``, ``functions`` the functions they use (``{digest: blob}``); the wire
        writes them as frames (``launch_frames``). See ``offer_frames``, which the driver
        calls."""
        if self.n_pending == 0:
            return []
        if self.suspects and not self.clamped:
            self._set_clamped(True)
        now = self.clock()
        launches = []
        choose = self.suspects or self.locality or self.failed_on
        live_hosts = self.placement.live_hosts() if self.locality else None
        for slot, count in self.slots.offer(self.n_pending):
            executor = self.executors_by_slot[slot]
            tasks = self.placement.choose(executor, count, now, live_hosts) if choose else self.pending
            rows, functions, launched = launch_tasks(tasks, count, executor, self.latency, now)
            self.n_pending -= launched
            if launched < count:
                self.slots.release(slot, count - launched)
            if rows:
                if self.speculation is not None:
                    self.speculation.launched(executor, rows, now)
                launches.append((executor, rows, functions))
        if self.clamped and not self.suspects:  # the last suspects ended: the windows open again
            self._set_clamped(False)
        return launches

    def offer_frames(self, before_launch=None):
        """``resource_offers`` with each launch written by the wire: ``[(executor, [frame,
        ...]), ...]``, each executor's LaunchTasks frames, ready to send. It is the fused
        form of the two steps, so that the compiled core writes the common offer (no suspect
        waits) straight from its task tables, with no Python object per task.
        ``before_launch(executor, rows)``, if given, sees each launch's rows first."""
        if self.n_pending == 0:
            return []
        if (self.suspects or before_launch is not None or self.locality or self.failed_on
                or self.speculation is not None):  # the decisions, then the frames
            return self.launch_frames(self.resource_offers(), before_launch)
        launches, launched = offer_and_launch(self.slots, self.executors_by_slot, self.pending,
                                              self.n_pending, self.config.max_message_size,
                                              self.latency, self.clock(), _LAUNCH_HEADER)
        self.n_pending -= launched
        if self.clamped:  # the last suspects ended: the windows open again
            self._set_clamped(False)
        return launches

    def launch_frames(self, launches, before_launch=None):
        """The launch decisions ``[(executor, rows, functions), ...]`` written by the wire:
        ``[(executor, [frame, ...]), ...]``. ``before_launch(executor, rows)``, if given,
        sees each launch's rows first."""
        limit = self.config.max_message_size
        written = []
        for executor, rows, functions in launches:
            if before_launch is not None:
                before_launch(executor, rows)
            written.append((executor, launch_frames(_LAUNCH_HEADER, rows, functions,
                                                    executor.functions, limit)))
        return written

    # -- status updates

    def status_updates(self, executor, updates, busy=0.0):
        """Apply ``[[task id, attempt, state, payload], ...]`` from ``executor``, which spent
        ``busy`` seconds running those tasks (see ``apply_status_updates``).

        Returns the number of updates that were stale (for an attempt no longer current)."""
        now = executor.last_report = self.clock()
        speculation = self.speculation
        copies_ended = speculation.before_status(executor, updates, now) if speculation else None
        stale, freed, ran, retried, returned = apply_status_updates(
            executor, updates, self.pending, now, self.counts)
        if retried:
            self.n_pending += retried
            if self.exclusion is not None:
                self.placement.attempts_failed(executor, retried, now)
        if returned:
            for task in reversed(returned):  # first in the queue, in their order
                if speculation is not None and type(task.client) is Copies:
                    speculation.copy_left(task)  # a copy given back unstarted: dropped
                else:
                    self._requeue(task)
        if speculation is not None:
            self.placement.settle_copies(copies_ended)
        if freed:
            self.slots.release(executor.slot, freed)
            if ran and 0.0 <= busy < math.inf:  # the moving average of its tasks' run time
                sample = busy / ran
                average = executor.task_seconds
                executor.task_seconds = sample if average is None else 0.8 * average + 0.2 * sample
            # apply_window, inlined: this runs for every StatusUpdates
            slots = window(executor, self.clamped, self._prefetch_seconds, self._tasks_per_core)
            if slots != executor.slots:
                executor.slots = slots
                self.slots.resize(executor.slot, slots)
        return stale

    def launch_copy(self, original, client, executor, now):
        """Launch a copy of ``original`` under ``client`` on ``executor``, outside an offer:
        ``(copy, (executor, rows, functions))``, its launch decision."""
        copy = Task(self._next_task_id, client, original.client_task_id, 0, original.function,
                    original.args, now, original.function_blob)
        self._next_task_id += 1
        self.slots.take(executor.slot, 1)
        rows, functions, _ = launch_tasks(deque([copy]), 1, executor, self.latency, now)
        return copy, (executor, rows, functions)

    def _finish(self, task, state, payload):
        client = task.client
        client.tasks.pop(task.client_task_id, None)
        client.results.add(task.client_task_id, state, payload)
        self.counts["finished" if state == TaskState.FINISHED else "failed"] += 1

    # -- figures

    def running_count(self):
        return sum(len(e.running) for e in self.executors_by_slot.values())
