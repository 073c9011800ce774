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
from ..runtime import gc_untrack
from ..policies import LocalityQueue
from ..scheduling import (ClientTasks, LatencyHistogram, RunningTasks, SlotTable, Task,
                          apply_status_updates, launch_tasks, offer_and_launch, queue_tasks,
                          slots_per_core, window)
from ..wire import ResultRows, launch_frames
from .exclusion import Exclusion
from .speculation import Copies, Speculation

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
                 "in_flight_rows", "in_flight_size", "held", "placement")

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
        # client task id -> (hosts, speculative) of tasks in its next SubmitTasks (TaskPlacement)
        self.placement = None


class ExecutorData:
    """A registered executor as the driver sees it."""

    __slots__ = ("executor_id", "routing_id", "hostname", "cores", "pid", "slot", "slots",
                 "task_seconds", "running", "suspect_losses", "decommissioning", "excluded", "functions",
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
        self.excluded = False     # offered nothing for its failures (exclude_on_failure)
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
        self.locality = LocalityQueue()  # queued tasks that prefer hosts (delay scheduling)
        self.failed_on = {}  # task id -> executor id where it just raised (exclude_on_failure)
        self.speculation = Speculation(config) if config.speculation else None
        self.exclusion = Exclusion(config) if config.exclude_on_failure else None
        self.kills = []      # (executor, task, reason): attempts the driver must kill

    # -- executors

    def add_executor(self, executor_id, routing_id, hostname, cores, pid, now):
        slots = cores  # nothing queued behind a task until the length of its tasks is known
        slot = self.slots.add(cores, slots)
        executor = ExecutorData(executor_id, routing_id, hostname, cores, pid, slot, slots, now)
        self.executors_by_slot[slot] = executor
        if self.exclusion is not None:  # a host may be excluded; or the last executor was
            self.refresh_exclusions()
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
            self.refresh_exclusions()

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
                self._place(new, queue, placement)
        if held is None:
            self.n_pending += queued
        else:
            held.update((task.task_id, task) for task in queue)
        self.counts["submitted"] += queued
        return len(tasks) - queued - missing

    def _place(self, new, queue, placement):
        """Give the ``new`` tasks at the end of ``queue`` their options: a task that
        prefers hosts moves to the locality queue, one not speculative is never copied."""
        local = []
        for task in new:
            hosts, speculative = placement.get(task.client_task_id, ((), True))
            if not speculative and self.speculation is not None:
                self.speculation.opted_out.add(task.task_id)
            if hosts:
                local.append((task, hosts))
        if not local or queue is not self.pending:
            return  # a client behind on its results: its tasks wait in order, anywhere
        for _ in new:
            queue.pop()
        moved = {task.task_id for task, _ in local}
        queue.extend(task for task in new if task.task_id not in moved)
        for task, hosts in local:
            self.locality.add(task, hosts)

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
            to_kill.extend(self._withdraw(task))
        if self.n_pending == 0 and (self.pending or self.suspects or self.locality):
            # only cancelled tasks wait: no offer would take them out, and they hold their
            # arguments and functions
            self.pending.clear()
            self.suspects.clear()
            self.locality = LocalityQueue()
            if self.clamped:
                self._set_clamped(False)
        return to_kill

    def _withdraw(self, task):
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
        choose = self.suspects or self.locality or self.failed_on
        live_hosts = self._live_hosts() if self.locality else None
        for slot, count in self.slots.offer(self.n_pending):
            executor = self.executors_by_slot[slot]
            tasks = self._choose(executor, count, now, live_hosts) if choose else self.pending
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

    def _choose(self, executor, count, now, live_hosts):
        """Up to ``count`` tasks for ``executor``, in a deque, while some queued task needs
        a choice: first those that prefer its host, then the queue's, then those that
        waited ``locality_wait`` for their hosts. No two suspects of one loss together, nor
        with one of that loss it already runs; no task where it just raised while another
        executor may take it."""
        chosen = deque()
        if self.locality:
            chosen.extend(self.locality.take_local(executor.hostname, count))
        avoid = dict(executor.suspect_losses)
        failed_on, skipped, others = self.failed_on, [], None
        while len(chosen) < count:
            task = self._next_queued(avoid)
            if task is None:
                break
            if failed_on and failed_on.get(task.task_id) == executor.executor_id:
                if others is None:
                    others = self._others_usable(executor)
                if others:
                    skipped.append(task)
                    continue
            failed_on.pop(task.task_id, None)
            if task.failures:
                avoid[task.loss] = avoid.get(task.loss, 0) + 1
            chosen.append(task)
        for task in reversed(skipped):  # back where they were, first in line
            self._put_back(task)
        if len(chosen) < count and self.locality:
            chosen.extend(self.locality.take_any(count - len(chosen), now, self.config.locality_wait,
                                                 live_hosts))
        return chosen

    def _put_back(self, task):
        if task.failures:
            group = self.suspects.get(task.loss)
            if group is None:
                group = self.suspects[task.loss] = untracked(deque())
            group.appendleft(task)
        else:
            self.pending.appendleft(task)

    def _usable(self):
        """Executors that may be offered tasks."""
        return [e for e in self.executors_by_slot.values() if not (e.decommissioning or e.excluded)]

    def _others_usable(self, executor):
        return any(e is not executor for e in self._usable())

    def _live_hosts(self):
        return {e.hostname for e in self._usable()}

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
                self._attempts_failed(executor, retried, now)
        if returned:
            for task in reversed(returned):  # first in the queue, in their order
                if speculation is not None and type(task.client) is Copies:
                    speculation.copy_left(task)  # a copy given back unstarted: dropped
                else:
                    self._requeue(task)
        if speculation is not None:
            self._settle_copies(copies_ended)
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

    # -- speculation and exclusion

    def _settle_copies(self, copies_ended):
        """Pass on the results of copies that won (their originals withdrawn and killed),
        drop those of copies that failed, and kill the copies whose original ended."""
        won, failed = self.speculation.copy_results()
        for original, payload in won:
            for executor, task in self._withdraw(original):
                self.kills.append((executor, task, "its speculative copy finished first"))
            original.client.results.add(original.client_task_id, TaskState.FINISHED, payload)
        self.counts["failed"] -= failed  # a copy's failure is not its task's
        for copy in copies_ended:
            if copy.executor is not None:
                self.kills.append((copy.executor, copy, "the task it copied finished first"))

    def speculate(self):
        """Launch a copy of each straggler on an idle core of another executor:
        ``[(executor, rows, functions), ...]``, as ``resource_offers`` returns them."""
        now = self.clock()
        launches = []
        for original in self.speculation.stragglers(now):
            executor = self._idle_executor_besides(original.executor)
            if executor is None:
                break
            copies = self.speculation.copies_for(original.client)
            copy = Task(self._next_task_id, copies, original.client_task_id, 0, original.function,
                        original.args, now, original.function_blob)
            self._next_task_id += 1
            self.speculation.made_copy(original, copy)
            self.slots.take(executor.slot, 1)
            rows, functions, _ = launch_tasks(deque([copy]), 1, executor, self.latency, now)
            log.info("speculating task %s (running %.3f s on executor %s): a copy on executor %s",
                     original.client_task_id, now - self.speculation.launched_at(original),
                     original.executor.executor_id, executor.executor_id)
            launches.append((executor, rows, functions))
        return launches

    def _idle_executor_besides(self, executor):
        """The usable executor with the most idle cores but ``executor``, one on another
        host first; None if none has an idle core."""
        best, best_key = None, None
        for other in self._usable():
            idle = other.cores - len(other.running)
            if other is executor or idle <= 0:
                continue
            key = (executor is None or other.hostname != executor.hostname, idle)
            if best_key is None or key > best_key:
                best, best_key = other, key
        return best

    def _attempts_failed(self, executor, retried, now):
        """``retried`` tasks raised on ``executor`` and wait first in the queue: none of them
        runs there again while another executor may take it; the failures count against
        the executor."""
        for i in range(retried):
            self.failed_on[self.pending[i].task_id] = executor.executor_id
        self.exclusion.failed(executor, retried, "a task raised (retried)", now)
        self.refresh_exclusions()

    def refresh_exclusions(self):
        """Apply the exclusions to the executors: ``[executor, ...]`` newly excluded. None is
        applied while it would leave no executor to offer tasks to."""
        exclusion = self.exclusion
        exclusion.expire(self.clock())
        executors = [e for e in self.executors_by_slot.values() if not e.decommissioning]
        excluded = [e for e in executors if exclusion.is_excluded(e)]
        exclusion.suspended = bool(executors) and len(excluded) == len(executors)
        newly = []
        for executor in executors:
            flag = not exclusion.suspended and executor in excluded
            if flag != executor.excluded:
                executor.excluded = flag
                self.apply_window(executor)
                if flag:
                    newly.append(executor)
        exclusion.newly.extend(newly)
        return newly

    def take_kills(self):
        """The attempts to kill, ``[(executor, task, reason), ...]``; none afterwards."""
        kills, self.kills = self.kills, []
        return kills

    def _finish(self, task, state, payload):
        client = task.client
        client.tasks.pop(task.client_task_id, None)
        client.results.add(task.client_task_id, state, payload)
        self.counts["finished" if state == TaskState.FINISHED else "failed"] += 1

    # -- figures

    def running_count(self):
        return sum(len(e.running) for e in self.executors_by_slot.values())
