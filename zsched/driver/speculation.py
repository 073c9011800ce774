"""Speculative execution (Spark's ``spark.speculation``): a second attempt of a straggler.

It is off unless the ``speculation`` setting is on. Tasks are grouped by client and
function. The scheduler notes when each task launched, and each FINISHED row gives its
group a run time. Every ``speculation_interval`` the driver looks for stragglers: tasks of
a group running longer than the group's threshold (``policies.Runtimes``). Each gets a
copy, launched at once on an idle core of another executor.

The first result wins. The other attempt is killed, and whatever it reports is ignored,
so the future completes once. A copy that fails, is lost or is given back is dropped: the
original runs on, and may be speculated again.

A copy is a Task of its own under a stand-in client (``Copies``), so the scheduling core
treats it like any other task. Its result lands in the stand-in's rows, and goes on to
the real client only if it wins. A task submitted with ``speculative=False`` never gets a
copy.
"""
import math

from ..policies import Runtimes, stragglers
from ..scheduling import ClientTasks
from ..task_state import TaskState
from ..wire import ResultRows

FINISHED, FAILED, RETURNED = int(TaskState.FINISHED), int(TaskState.FAILED), int(TaskState.RETURNED)


class Copies:
    """The stand-in client of one client's copies: the core puts their results here."""

    __slots__ = ("client", "tasks", "results", "originals", "routing_id", "held")

    def __init__(self, client):
        self.client = client
        self.routing_id = client.routing_id
        self.tasks = ClientTasks()  # stays empty: a copy is none of its client's tasks
        self.results = ResultRows()
        self.originals = {}  # client task id -> the original Task of a running copy
        self.held = None


class Speculation:
    """Run times by group, launch times, and the copies running. It decides; the
    scheduler launches, kills and passes results on."""

    def __init__(self, config):
        self.config = config
        self._groups = {}     # (client, function digest) -> Runtimes
        self._launches = {}   # (client, function digest) -> {task: launched at}, in launch order
        self._copies = {}     # client -> its Copies
        self.copy_of = {}     # original task id -> its running copy
        self.opted_out = set()  # ids of tasks submitted with speculative=False
        self.speculated = 0   # copies launched
        self.won = 0          # copies whose result was the task's
        self._copy_ended = False

    # -- what the scheduler tells it

    def submitted(self, tasks):
        """New tasks joined the queue."""
        groups = self._groups
        for task in tasks:
            key = (task.client, task.function)
            group = groups.get(key)
            if group is None:
                group = groups[key] = Runtimes()
                self._launches[key] = {}
            group.submit(1)

    def launched(self, executor, rows, now):
        """``executor`` was sent these LaunchTasks rows at ``now``."""
        running = executor.running
        for row in rows:
            task = running[row[0]]
            launches = self._launches.get((task.client, task.function))
            if launches is not None:  # None for a copy
                launches[task] = now

    def before_status(self, executor, updates, now):
        """Read a StatusUpdates of ``executor`` before the core applies it: run times of
        finished tasks, and the copies whose original has ended (to kill)."""
        running = executor.running
        kills = []
        for task_id, attempt, state, _ in updates:
            task = running.get(task_id)
            if task is None or task.attempt != attempt:
                continue
            client = task.client
            if type(client) is Copies:
                self._copy_ended = True
                continue
            key = (client, task.function)
            launches = self._launches.get(key)
            launched = launches.pop(task, None) if launches is not None else None
            if state == FINISHED and launched is not None:
                self._groups[key].finish(now - launched)
            if state == RETURNED or (state == FAILED and task.retries > 0):
                continue  # it goes back to the queue: its copy runs on
            self.opted_out.discard(task_id)
            copy = self.copy_of.pop(task_id, None)
            if copy is not None:
                self._copies[client].originals.pop(task.client_task_id, None)
                if not copy.cancelled:
                    copy.cancelled = True
                    kills.append(copy)
        return kills

    def copy_results(self):
        """The results of copies since the last call: ``(won, failed)``, ``won`` being
        ``[(original, payload), ...]`` for copies that finished first, ``failed`` the
        number of the others (failed, killed or in error: dropped)."""
        won, failed = [], 0
        if not self._copy_ended:
            return won, failed
        self._copy_ended = False
        for copies in self._copies.values():
            if not len(copies.results):
                continue
            for client_task_id, state, payload in copies.results.take_rows():
                original = copies.originals.pop(client_task_id, None)
                if original is None:
                    continue
                self.copy_of.pop(original.task_id, None)
                if state == FINISHED:
                    won.append((original, payload))
                    self.won += 1
                else:
                    failed += 1
        return won, failed

    def copy_left(self, copy):
        """``copy`` left its executor without a result (lost, or given back): dropped."""
        original = self.copies_for(copy.client.client).originals.pop(copy.client_task_id, None)
        if original is not None:
            self.copy_of.pop(original.task_id, None)

    def withdrawn(self, task):
        """``task`` left for good (cancelled, or its copy won): its copy, if any, to kill."""
        self.opted_out.discard(task.task_id)
        launches = self._launches.get((task.client, task.function))
        if launches is not None:
            launches.pop(task, None)
        copy = self.copy_of.pop(task.task_id, None)
        if copy is None:
            return None
        self._copies[task.client].originals.pop(task.client_task_id, None)
        copy.cancelled = True
        return copy

    def lost(self, task):
        """``task``'s executor was lost: its launch no longer runs."""
        launches = self._launches.get((task.client, task.function))
        if launches is not None:
            launches.pop(task, None)

    def drop_client(self, client):
        """``client`` left (its tasks were withdrawn first)."""
        for key in [key for key in self._groups if key[0] is client]:
            del self._groups[key]
            del self._launches[key]
        self._copies.pop(client, None)

    # -- deciding

    def copies_for(self, client):
        copies = self._copies.get(client)
        if copies is None:
            copies = self._copies[client] = Copies(client)
        return copies

    def stragglers(self, now):
        """Running tasks that deserve a copy now, oldest first within a group."""
        config = self.config
        found = []
        for key, group in self._groups.items():
            launches = self._launches[key]
            if not launches:
                continue
            threshold = group.threshold(config.speculation_quantile, config.speculation_multiplier,
                                        config.speculation_min_runtime)
            if threshold == math.inf:
                continue
            found.extend(task for task in stragglers(launches, now, threshold)
                         if task.task_id not in self.copy_of and task.task_id not in self.opted_out)
        return found

    def launched_at(self, task):
        """When ``task`` (running) launched, by the driver's clock."""
        return self._launches[(task.client, task.function)][task]

    def made_copy(self, original, copy):
        """``copy`` of ``original`` is about to launch."""
        self.copies_for(original.client).originals[original.client_task_id] = original
        self.copy_of[original.task_id] = copy
        self.speculated += 1

