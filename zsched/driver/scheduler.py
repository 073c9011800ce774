"""The task scheduler: queued tasks, running tasks per executor, attempts and failures.

It makes the scheduling decisions and keeps their state; it does no I/O. The driver
feeds it submissions, status updates and executor losses, and sends what it returns.
Task payloads are opaque bytes here.

Its offers are launch decisions (``resource_offers``): for each executor, the rows of the
tasks it takes and their functions. The wire writes them as LaunchTasks frames
(``wire.launch_frames``). The driver asks for both steps at once (``offer_frames``), which
the compiled core fuses in the common case.
"""
import logging
import math
import time
from collections import deque

from ..protocol import LaunchTasks, TaskState, frame_header
from ..runtime import gc_untrack
from ..scheduling import (ClientTasks, LatencyHistogram, RunningTasks, SlotTable, apply_status_updates,
                         launch_tasks, offer_and_launch, queue_tasks, slots_per_core, window)
from ..wire import ResultRows, launch_frames

log = logging.getLogger(__name__)

_LAUNCH_HEADER = frame_header(LaunchTasks)  # the wire writes LaunchTasks frames whole


def untracked(container):
    """``container`` (empty), taken out of the cyclic garbage collector: for the deques of
    queued Tasks, which may hold a million items (each full collection would otherwise
    visit every one). No cycle passes through them: nothing a Task refers to refers back to
    its queue."""
    gc_untrack(container)
    return container


class ClientData:
    """A connected client: its tasks in flight, the functions it has sent, and its results
    on their way (see ``ClientEndpoint.send_results``)."""

    __slots__ = ("routing_id", "pid", "functions", "tasks", "results", "unsent", "unsent_size",
                 "in_flight_rows", "in_flight_size", "held")

    def __init__(self, routing_id, pid):
        self.routing_id = routing_id
        self.pid = pid
        self.functions = set()  # digests of the functions it sent
        self.tasks = ClientTasks()  # client task id -> Task, in submission order
        self.results = ResultRows()  # [client task id, state, payload] waiting to be sent
        self.unsent = deque()   # TaskResults frames made, waiting for the client's window
        self.unsent_size = 0
        self.in_flight_rows = 0  # results sent that the client has not said it took
        self.in_flight_size = 0
        # task id -> Task of its queued tasks, none launched while it is behind on its
        # results (``hold_client``); None while it keeps up
        self.held = None


class ExecutorData:
    """A registered executor as the driver sees it."""

    __slots__ = ("executor_id", "routing_id", "hostname", "cores", "pid", "slot", "slots",
                 "task_seconds", "running", "suspect_losses", "decommissioning", "functions",
                 "registered_at", "metrics", "tasks_done", "tasks_failed",
                 "ended_at_check", "last_report", "last_reclaim")

    def __init__(self, executor_id, routing_id, hostname, cores, pid, slot, slots, now):
        self.executor_id = executor_id
        self.routing_id = routing_id
        self.hostname = hostname
        self.cores = cores
        self.pid = pid
        self.slot = slot          # index in the SlotTable
        self.slots = slots        # tasks it may hold, running and queued
        self.task_seconds = None  # moving average of its tasks' run time
        self.running = RunningTasks()  # task id -> Task launched here and not yet reported, in launch order
        self.suspect_losses = {}  # loss id -> tasks running here that were lost together before
        self.decommissioning = False
        self.functions = set()    # function digests this executor already holds
        self.registered_at = now
        self.metrics = {}
        self.tasks_done = 0
        self.tasks_failed = 0
        self.ended_at_check = 0   # tasks_done + tasks_failed at the last idleness check
        self.last_report = now    # when its last StatusUpdates arrived
        self.last_reclaim = now   # when it was last asked to give unstarted tasks back

    @property
    def suspects(self):
        """Tasks among ``running`` that were on a lost executor before."""
        return sum(self.suspect_losses.values())


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
                self._forget_task_length(executor)
            executor.ended_at_check = ended

    def reclaim_hoarded_tasks(self, silent_for):
        """``[(executor, count)]``: executors to ask for unstarted tasks back (they come back
        RETURNED, first in the queue, not charged). Looked for only while nothing is queued
        and some core is idle; each executor is asked at most once per ``silent_for``.

        A window measured on short tasks may have taken long ones, which then wait behind
        the first of them while cores elsewhere are idle. Two cases:

        - the executor holds tasks beyond its cores and has reported nothing for
          ``silent_for``: its measured task length is stale. It gives back its tasks beyond
          its cores and forgets that length, so its window is its cores until it reports
          again, and what it gives back goes to the idle cores, not behind its task again.
          Executors that hold no task forget theirs too (measured on the same short tasks,
          they would take what comes back in batches, to hold it the same way);
        - it reports, but holds more than the window its reports have shrunk to, and the
          tasks beyond the window would take ``silent_for`` or more: it gives those back."""
        counts = self.counts
        if (self.n_pending or self.clamped or counts["submitted"]
                <= counts["finished"] + counts["failed"] + counts["cancelled"]):
            return []  # something waits for a core, or suspects do, or no task is out
        executors = [e for e in self.executors_by_slot.values() if not e.decommissioning]
        if not any(len(e.running) < e.cores for e in executors):
            return []
        now = self.clock()
        requests = []
        stale = False
        for executor in executors:
            held = len(executor.running)
            if held <= executor.cores or now - executor.last_reclaim < silent_for:
                continue
            if now - executor.last_report >= silent_for:
                self._forget_task_length(executor)
                count = held - executor.cores
                stale = True
            elif executor.task_seconds is None:
                continue  # it reported nothing that ran since its length was forgotten
            else:
                count = held - max(executor.slots, executor.cores)
                if count <= 0 or count * executor.task_seconds < silent_for:
                    continue
            executor.last_reclaim = now
            requests.append((executor, count))
        if stale:  # the tasks out are longer than measured: idle executors' measures are as old
            for executor in executors:
                if not executor.running and executor.task_seconds is not None:
                    self._forget_task_length(executor)
        return requests

    def _forget_task_length(self, executor):
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
        for task in reversed(list(executor.running.values())):
            task.executor = None
            if task.cancelled:
                continue
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
        executor.running.clear()
        executor.suspect_losses.clear()

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

    def submit(self, client, tasks):
        """Queue the rows ``[client task id, digest, args, retries]`` of a SubmitTasks from
        ``client`` (``tasks``, as ``protocol.decode`` read them). A task whose function the
        driver does not hold ends at once in an ERROR result. Returns how many were refused
        for an id of a task the client has in flight (see ``queue_tasks``)."""
        first_id = self._next_task_id
        held = client.held
        queue = self.pending if held is None else deque()
        self._next_task_id, missing = queue_tasks(client, tasks, first_id, self.clock(),
                                                  queue, self._functions)
        queued = self._next_task_id - first_id
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
            task = client.tasks.pop(client_task_id, None)
            if task is None or task.cancelled:
                continue
            task.cancelled = True
            self.counts["cancelled"] += 1
            if task.executor is not None:
                to_kill.append((task.executor, task))
            elif client.held is None or client.held.pop(task.task_id, None) is None:
                self.n_pending -= 1
        if self.n_pending == 0 and (self.pending or self.suspects):
            # only cancelled tasks wait: no offer would take them out, and they hold their
            # arguments and functions
            self.pending.clear()
            self.suspects.clear()
            if self.clamped:
                self._set_clamped(False)
        return to_kill

    def cancel_queued(self, client):
        """Cancel the tasks of ``client`` that no executor holds; their client task ids."""
        queued = [client_task_id for client_task_id, task in client.tasks.items()
                  if task.executor is None and not task.cancelled]
        self.cancel(client, queued)  # nothing to kill: none of them runs
        return queued

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
        for slot, count in self.slots.offer(self.n_pending):
            executor = self.executors_by_slot[slot]
            tasks = self._choose_among_suspects(executor, count) if self.suspects else self.pending
            rows, functions, launched = launch_tasks(tasks, count, executor, self.latency, now)
            self.n_pending -= launched
            if launched < count:
                self.slots.release(slot, count - launched)
            if rows:
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
        limit = self.config.max_message_size
        if self.suspects or before_launch is not None:  # the decisions, then the frames
            launches = []
            for executor, rows, functions in self.resource_offers():
                if before_launch is not None:
                    before_launch(executor, rows)
                launches.append((executor, launch_frames(_LAUNCH_HEADER, rows, functions,
                                                         executor.functions, limit)))
            return launches
        launches, launched = offer_and_launch(self.slots, self.executors_by_slot, self.pending,
                                              self.n_pending, limit, self.latency, self.clock(),
                                              _LAUNCH_HEADER)
        self.n_pending -= launched
        if self.clamped:  # the last suspects ended: the windows open again
            self._set_clamped(False)
        return launches

    def _choose_among_suspects(self, executor, count):
        """Up to ``count`` tasks for ``executor`` while suspects wait, in a deque: no two
        suspects of one loss together, nor with one of that loss it already runs."""
        avoid = dict(executor.suspect_losses)
        chosen = deque()
        while len(chosen) < count:
            task = self._next_queued(avoid)
            if task is None:
                break
            if task.failures:
                avoid[task.loss] = avoid.get(task.loss, 0) + 1
            chosen.append(task)
        return chosen

    # -- status updates

    def status_updates(self, executor, updates, busy=0.0):
        """Apply ``[[task id, attempt, state, payload], ...]`` from ``executor``, which spent
        ``busy`` seconds running those tasks (see ``apply_status_updates``).

        Returns the number of updates that were stale (for an attempt no longer current)."""
        now = executor.last_report = self.clock()
        stale, freed, ran, retried, returned = apply_status_updates(
            executor, updates, self.pending, now, self.counts)
        if retried:
            self.n_pending += retried
        if returned:
            for task in reversed(returned):  # first in the queue, in their order
                self._requeue(task)
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

    def _finish(self, task, state, payload):
        client = task.client
        client.tasks.pop(task.client_task_id, None)
        client.results.add(task.client_task_id, state, payload)
        self.counts["finished" if state == TaskState.FINISHED else "failed"] += 1

    # -- figures

    def running_count(self):
        return sum(len(e.running) for e in self.executors_by_slot.values())
