"""Pure-Python twin of the compiled scheduling core (``_fastpath.pyx``, ``_slot_table.pyx``);
they must agree exactly. It does no I/O: frames are read and written by the wire.

- ``SlotTable`` holds, for every executor, its cores, its window (the tasks it may hold,
  running and queued: ``slots``) and the tasks it holds, and makes resource offers. Queued
  tasks are dealt round-robin, first one at a time to executors with an idle core, and only
  then to the queued part of the windows, each executor taking at most an equal share of
  the tasks left in one turn: a short task never waits behind a long one on a busy executor
  while another executor has a core free, a window sized for shorter tasks does not hoard
  the queue, and an executor's share still travels in one launch. Executors that
  may take tasks wait in two rings (idle cores, window room); each task costs O(1) whatever
  the number of executors.
- ``queue_tasks`` turns SubmitTasks rows into queued ``Task``s. ``launch_tasks`` takes an
  executor's share of the queue and hands back the launch decisions: LaunchTasks rows and
  the functions they use. The wire writes them as frames (``launch_frames``).
  ``offer_and_launch`` makes a SlotTable's offer, each executor's launch and its frames
  in one call, when no suspect waits. Here it is the plain composition of the two steps;
  the compiled one is fused, and writes each row as it decides it.
  ``apply_status_updates`` applies a StatusUpdates batch: frees the tasks, finds each
  one's client and queues its result in the client's ``ResultRows``.
  ``window`` (with ``slots_per_core``) sizes an executor's window after each of its
  reports. The rarer turns (suspects after a loss, removal of an executor) are the
  scheduler's, in Python, for both implementations.
- ``LatencyHistogram`` counts how long tasks waited in the queue.
"""
import math
from bisect import bisect_left
from collections import deque

from ._wire_py import launch_frames
from .task_state import TaskState

# An executor with a deep window takes at least 1 / BATCH_FRACTION of it per offer, when
# offered that many (see SlotTable._deal). Defined here alone: the compiled module imports it.
BATCH_FRACTION = 2

# Plain ints: comparing with an IntEnum member costs an attribute lookup per task.
FINISHED, FAILED, RETURNED = int(TaskState.FINISHED), int(TaskState.FAILED), int(TaskState.RETURNED)
KILLED, ERROR = int(TaskState.KILLED), int(TaskState.ERROR)
# The payload of a task ended ERROR by the driver because its executor reported it in a
# state that is no task state (no such state goes on to a client).
NO_TASK_STATE = b"its executor reported it in a state that is no task state"
# The payload of a task ended ERROR at submission: its function is not the driver's.
NO_FUNCTION = b"the driver does not hold the task's function"


class SlotTable:
    def __init__(self):
        self._cores = []
        self._total = []       # window: tasks the executor may hold
        self._held = []        # tasks the executor holds (running and queued)
        self._active = []
        self._in_idle = []     # waiting in the idle-core ring
        self._in_ring = []     # waiting in the window ring
        self._idle = deque()   # executors that may have an idle core, in offer order
        self._ring = deque()   # executors that may have room in their window, in offer order
        self._unused = []      # indices of removed executors, reused last-in first-out

    def add(self, cores, slots):
        """Register an executor of ``cores`` cores holding up to ``slots`` tasks; its index."""
        if cores < 1 or slots < 1:
            raise ValueError("an executor needs at least one core and one slot")
        if self._unused:
            index = self._unused.pop()
            self._cores[index] = cores
            self._total[index] = slots
            self._held[index] = 0
            self._active[index] = True
        else:
            index = len(self._cores)
            self._cores.append(cores)
            self._total.append(slots)
            self._held.append(0)
            self._active.append(True)
            self._in_idle.append(False)
            self._in_ring.append(False)
        self._enqueue(index)
        return index

    def remove(self, index):
        """Forget an executor: it is offered no more tasks."""
        self._check(index)
        self._active[index] = False
        self._cores[index] = self._total[index] = self._held[index] = 0
        self._unused.append(index)

    def release(self, index, n):
        """``n`` tasks of the executor ended."""
        self._check(index)
        if n < 0 or n > self._held[index]:
            raise ValueError("release of %d tasks: executor %d holds %d"
                             % (n, index, self._held[index]))
        self._held[index] -= n
        self._enqueue(index)

    def take(self, index, n):
        """The executor holds ``n`` more tasks, launched outside an offer (a copy of a
        straggler). It may go past its window: those slots come back as the tasks end."""
        self._check(index)
        if n < 0:
            raise ValueError("cannot take a negative number of tasks")
        self._held[index] += n

    def resize(self, index, slots):
        """Give the executor a window of ``slots`` tasks. Tasks keep the slots they hold, so
        the free count goes below zero after a shrink until enough of them end. A window
        of 0 closes the executor to offers."""
        self._check(index)
        if slots < 0:
            raise ValueError("a window cannot be negative")
        self._total[index] = slots
        self._enqueue(index)

    def free(self, index):
        self._check(index)
        return self._total[index] - self._held[index]

    def total(self, index):
        self._check(index)
        return self._total[index]

    def total_free(self):
        return sum(max(0, total - held) for total, held in zip(self._total, self._held))

    def offer(self, n_tasks):
        """Deal up to ``n_tasks`` tasks: ``[(executor index, count), ...]`` in the order each
        executor first received a task."""
        assigned = {}
        remaining = self._deal(self._idle, self._in_idle, True, n_tasks, n_tasks, assigned)  # idle cores
        self._deal(self._ring, self._in_ring, False, remaining, n_tasks, assigned)  # then queue room
        return list(assigned.items())

    def _deal(self, ring, in_ring, up_to_cores, remaining, n_offer, assigned):
        """Deal tasks round ``ring``, each executor up to its window (or up to its cores as
        well, unless it takes a batch); the tasks still to deal.

        An idle core takes one task a turn, so every idle core gets one before any queue;
        window room is taken up to an equal share of what waits, so a launch carries many
        tasks, yet a window sized for shorter tasks than these does not take them all.
        But an executor whose window is deep (its tasks are short: ``BATCH_FRACTION`` of
        its window, its batch, is more than its cores), offered at least a batch, takes an
        equal share among as few executors as the offer fills with batches, idle or not:
        a flood then leaves in launches of nearly a batch each, instead of a few tasks to
        each of many executors."""
        held, total, cores, active = self._held, self._total, self._cores, self._active
        start, n_ring = remaining, len(ring)
        share = 1 if up_to_cores or not ring else -(-remaining // n_ring)
        while remaining > 0 and ring:
            index = ring.popleft()
            batch = total[index] // BATCH_FRACTION
            batched = batch > cores[index] and n_offer >= batch
            keep_below = limit = total[index]
            if up_to_cores:
                keep_below = min(cores[index], total[index])  # the idle ring holds idle cores
                limit = batch if batched else keep_below
            if not active[index] or held[index] >= limit:
                in_ring[index] = False
                continue
            wanted = share
            if batched:  # as many as a batch at most, unless the equal share is more
                wanted = -(-start // min(n_ring, -(-start // batch)))
            take = min(wanted, remaining, limit - held[index])
            assigned[index] = assigned.get(index, 0) + take
            held[index] += take
            remaining -= take
            if held[index] < keep_below:
                ring.append(index)
            else:
                in_ring[index] = False
        return remaining

    def _enqueue(self, index):
        held = self._held[index]
        if held < self._cores[index] and held < self._total[index] and not self._in_idle[index]:
            self._in_idle[index] = True
            self._idle.append(index)
        if held < self._total[index] and not self._in_ring[index]:
            self._in_ring[index] = True
            self._ring.append(index)

    def _check(self, index):
        if not (0 <= index < len(self._active)) or not self._active[index]:
            raise KeyError(index)


# An executor's tasks launched and not yet reported, task id -> Task in launch order. The
# compiled class has a dict's reads (len, ``[]``, ``get``, ``in``, iteration, views) and ``clear``.
RunningTasks = dict

# A client's tasks in flight: client task id -> Task, in submission order (``client.tasks``).
# The compiled core has a class of its own, with the reads above, ``pop`` and ``clear``.
ClientTasks = dict


class Task:
    """A submitted task as the driver holds it: ``function`` is its function's digest,
    ``args`` its pickled arguments."""

    __slots__ = ("task_id", "client", "client_task_id", "retries", "function", "args",
                 "function_blob", "attempt", "executor", "failures", "loss", "cancelled",
                 "queued_at")

    def __init__(self, task_id, client, client_task_id, retries, function, args, queued_at=0.0,
                 function_blob=None):
        self.task_id = task_id
        self.client = client
        self.client_task_id = client_task_id
        self.retries = retries      # runs left after the task raises
        self.function = function
        self.args = args
        # its cloudpickled function: the task holds it until it ends, whatever the driver's
        # table of functions drops meanwhile (a client releases functions it no longer uses)
        self.function_blob = function_blob
        self.attempt = 0            # number of the latest launch
        self.executor = None        # the executor holding it, while launched
        self.failures = ()          # (attempt, executor id, reason) of each system failure
        self.loss = None            # id of the latest executor loss charged to it
        self.cancelled = False
        self.queued_at = queued_at  # when it last joined the queue


def queue_tasks(client, rows, next_id, now, pending, functions):
    """Append to ``pending`` a Task for each SubmitTasks row ``[client task id, digest,
    args, retries]`` of ``client`` (a ``SubmitRows``), numbered from ``next_id``:
    ``(next free id, missing)``. A row whose function the driver does not hold
    (``functions``, digest -> blob) ends at once in an ERROR result, ``NO_FUNCTION``
    (``missing`` of them). A row whose client task id the client has in flight already (in
    ``client.tasks``, or earlier in ``rows``) is refused: left out, and given no id. Each task
    holds its function's blob. Consecutive tasks of one function share one digest object:
    less memory per queued task, and ``launch_tasks`` knows it by identity."""
    client_tasks = client.tasks
    results = client.results
    last_function = blob = None
    missing = 0
    for client_task_id, function, args, retries in rows:
        if function == last_function:  # one digest object for a run of tasks of one function
            function = last_function
        else:
            blob = functions.get(function)
            last_function = function if blob is not None else None
        if blob is None:
            results.add(client_task_id, ERROR, NO_FUNCTION)
            missing += 1
            continue
        if client_task_id in client_tasks:  # one task per id: a second could not be reached
            continue
        task = Task(next_id, client, client_task_id, retries, function, args, now, blob)
        client_tasks[client_task_id] = task
        pending.append(task)
        next_id += 1
    return next_id, missing


def launch_tasks(tasks, count, executor, latency, now):
    """Launch up to ``count`` tasks taken from the front of the deque ``tasks`` (cancelled
    ones are dropped) on ``executor``: ``(rows, functions, launched)``, the launch
    decisions. ``rows`` are the LaunchTasks rows ``[task id, attempt, function digest,
    pickled arguments]``, ``functions`` the functions they use (``{digest: blob}``), for the
    wire to write (``launch_frames``)."""
    running = executor.running
    avoid = executor.suspect_losses
    rows, functions = [], {}
    last_digest = None
    launched = 0
    while launched < count and tasks:
        task = tasks.popleft()
        if task.cancelled:
            continue
        if task.failures:  # a suspect: no suspect of the same loss may join it here
            avoid[task.loss] = avoid.get(task.loss, 0) + 1
        task.attempt += 1
        task.executor = executor
        running[task.task_id] = task
        latency.observe_one(now - task.queued_at)
        digest = task.function
        if digest is not last_digest:  # a run of tasks of one function shares its digest
            last_digest = digest
            functions.setdefault(digest, task.function_blob)
        rows.append([task.task_id, task.attempt, digest, task.args])
        launched += 1
    return rows, functions, launched


def offer_and_launch(slots, executors_by_slot, pending, n_pending, limit, latency, now, header):
    """Deal ``n_pending`` queued tasks to the free slots of the SlotTable ``slots``, launch
    them from ``pending`` (``launch_tasks``) and have the wire write each executor's
    launch (``launch_frames``), when no suspect waits: ``(launches, launched)``,
    ``launches`` being ``[(executor, frames), ...]`` in the order of the offer. A slot the
    queue could not fill (cancelled tasks) is released. Here the decisions and then the
    frames, plainly: the compiled core writes each row as it decides it, and must make the
    same frames and leave the same state."""
    launches = []
    total = 0
    for slot, count in slots.offer(n_pending):
        executor = executors_by_slot[slot]
        rows, functions, launched = launch_tasks(pending, count, executor, latency, now)
        total += launched
        if launched < count:
            slots.release(slot, count - launched)
        if rows:
            launches.append((executor, launch_frames(header, rows, functions, executor.functions,
                                                     limit)))
    return launches, total


class _Tally:
    """What a StatusUpdates did: rows ``stale``, tasks ``freed``, tasks that ran (``done``
    finished, ``errors`` did not) and, of those, results ``finished`` and ``failed`` for
    their clients and tasks ``retried``."""

    __slots__ = ("stale", "freed", "done", "errors", "finished", "failed", "retried")

    def __init__(self):
        self.stale = self.freed = self.done = self.errors = 0
        self.finished = self.failed = self.retried = 0


def apply_status_updates(executor, updates, pending, now, counts):
    """Apply the StatusUpdates rows ``[task id, attempt, state, payload]`` of ``executor``
    (a ``StatusRows``): ``(stale, freed, ran, retried, returned)``.

    A row for a task the executor does not hold at that attempt is stale and ignored. A
    task that ran is counted in ``executor.tasks_done`` or ``tasks_failed``; if it raised
    and has retries left it goes back to the front of ``pending`` (``retried`` of them),
    else its result is queued for its client (``client.results``) and counted in
    ``counts`` (a state that is no task state ends it ERROR, ``NO_TASK_STATE``). Tasks
    given back unstarted are ``returned``, in order, for the scheduler
    to queue again. ``freed`` tasks left the executor, ``ran`` of them ran."""
    running = executor.running
    losses = executor.suspect_losses
    tally = _Tally()
    returned = []
    for task_id, attempt, state, payload in updates:
        task = _take_task(running, task_id, attempt, losses, tally)
        if task is not None and _settle(task, state, pending, now, returned, tally):
            _queue_result(task, state, payload)
    executor.tasks_done += tally.done
    executor.tasks_failed += tally.errors
    counts["finished"] += tally.finished
    counts["failed"] += tally.failed
    counts["retried"] += tally.retried
    return tally.stale, tally.freed, tally.done + tally.errors, tally.retried, returned


def _take_task(running, task_id, attempt, losses, tally):
    """The task of a row, taken from its executor (its loss, if a suspect, released), or
    None where the executor does not hold it at that attempt: a stale row."""
    task = running.get(task_id)
    if task is None or task.attempt != attempt:
        tally.stale += 1
        return None
    del running[task_id]
    tally.freed += 1
    task.executor = None
    if task.failures:
        left = losses[task.loss] - 1
        if left:
            losses[task.loss] = left
        else:
            del losses[task.loss]
    return task


def _settle(task, state, pending, now, returned, tally):
    """Count ``task``, which left its executor in ``state``; queue it again if it raised with
    retries left, or in ``returned`` if given back unstarted. Whether its result goes to its
    client."""
    if state == FINISHED:
        tally.done += 1
        if task.cancelled:
            return False
        tally.finished += 1
        return True
    if state == RETURNED:  # given back unstarted: not the task's failure
        if not task.cancelled:
            returned.append(task)
        return False
    tally.errors += 1
    if task.cancelled:
        return False
    if state == FAILED and task.retries > 0:
        task.retries -= 1
        task.queued_at = now
        pending.appendleft(task)
        tally.retried += 1
        return False
    tally.failed += 1
    return True


def _queue_result(task, state, payload):
    """``task``'s result, out of its client's tasks and into its client's results (a state
    that is no task state ends it ERROR, ``NO_TASK_STATE``)."""
    if state != FINISHED and state != FAILED and state != KILLED and state != ERROR:
        state, payload = ERROR, NO_TASK_STATE
    client = task.client
    client.tasks.pop(task.client_task_id, None)
    client.results.rows.append([task.client_task_id, state, payload])


def slots_per_core(task_seconds, prefetch_seconds, tasks_per_core):
    """Tasks an executor may hold per core when its tasks take ``task_seconds``: the one it
    runs, plus enough queued to cover ``prefetch_seconds`` of work, at least one queued, at
    most ``tasks_per_core`` (which is at least 1) in all."""
    queued = math.ceil(prefetch_seconds / max(task_seconds, 1e-7))
    return min(tasks_per_core, 1 + max(1, queued))


def window(executor, clamped, prefetch_seconds, tasks_per_core):
    """The tasks ``executor`` may hold: none while it is decommissioned or excluded, its cores while
    ``clamped`` (suspects wait), while it runs suspects or while the length of its tasks is
    not known, else its cores times ``slots_per_core``."""
    if executor.decommissioning or executor.excluded:
        return 0
    task_seconds = executor.task_seconds
    if clamped or executor.suspect_losses or task_seconds is None:
        return executor.cores
    return executor.cores * slots_per_core(task_seconds, prefetch_seconds, tasks_per_core)


LATENCY_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0)


class LatencyHistogram:
    """Seconds tasks waited, in fixed buckets counted in place; read as Prometheus-style
    cumulative buckets."""

    def __init__(self, bounds=LATENCY_BUCKETS):
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one: above every bound
        self.sum = 0.0
        self.count = 0

    def observe(self, seconds):
        self.observe_one(seconds)

    def observe_one(self, seconds):
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds
        self.count += 1

    def snapshot(self):
        """``{"buckets": [[bound, cumulative count], ..., ["+Inf", count]], "sum", "count"}``."""
        buckets, running = [], 0
        for bound, n in zip(self.bounds + ("+Inf",), self.counts):
            running += n
            buckets.append([bound, running])
        return {"buckets": buckets, "sum": self.sum, "count": self.count}
