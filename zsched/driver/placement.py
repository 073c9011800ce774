"""Where a queued task may go beyond the plain offer, and which deserve a second attempt:
the TaskScheduler's locality, exclusion and speculation (``Placement``).

- Locality: a task that prefers hosts waits in a ``LocalityQueue``. An executor takes the
  tasks that prefer its host first, then the queue's, then those that waited
  ``locality_wait`` (delay scheduling).
- Exclusion (``exclusion.Exclusion``): an excluded executor's window is 0, and a task
  that raised is not offered again to the executor where it raised while another executor
  may take it.
- Speculation (``speculation.Speculation``): copies of stragglers, launched on idle cores
  of other executors; the first result wins.

Each costs nothing while unused: the scheduler's fused offer runs while no task needs a
choice and speculation is off.
"""
import logging
from collections import deque

from ..policies import LocalityQueue
from ..protocol import TaskState
from .exclusion import Exclusion
from .records import untracked
from .speculation import Speculation

log = logging.getLogger("zsched.driver.scheduler")


class Placement:
    """The state and the choices of locality, exclusion and speculation, for the
    ``scheduler`` that owns it (its queues, slots and executors)."""

    def __init__(self, scheduler, config):
        self._scheduler = scheduler
        self._config = config
        self.locality = LocalityQueue()  # queued tasks that prefer hosts
        self.failed_on = {}  # task id -> executor id where it just raised (exclude_on_failure)
        self.speculation = Speculation(config) if config.speculation else None
        self.exclusion = Exclusion(config) if config.exclude_on_failure else None
        self.kills = []      # (executor, task, reason): attempts the driver must kill

    def needs_choice(self):
        """Whether an offer must choose among the queued tasks (not take them in order)."""
        return bool(self.locality) or bool(self.failed_on)

    def place(self, new, queue, placement):
        """Give the ``new`` tasks at the end of ``queue`` their options: a task that
        prefers hosts moves to the locality queue, one not speculative is never copied."""
        local = []
        for task in new:
            hosts, speculative = placement.get(task.client_task_id, ((), True))
            if not speculative and self.speculation is not None:
                self.speculation.opted_out.add(task.task_id)
            if hosts:
                local.append((task, hosts))
        if not local or queue is not self._scheduler.pending:
            return  # a client behind on its results: its tasks wait in order, anywhere
        for _ in new:
            queue.pop()
        moved = {task.task_id for task, _ in local}
        queue.extend(task for task in new if task.task_id not in moved)
        for task, hosts in local:
            self.locality.add(task, hosts)

    def choose(self, executor, count, now, live_hosts):
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
            task = self._scheduler.next_queued(avoid)
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
            chosen.extend(self.locality.take_any(count - len(chosen), now, self._config.locality_wait,
                                                 live_hosts))
        return chosen

    def _put_back(self, task):
        if task.failures:
            suspects = self._scheduler.suspects
            group = suspects.get(task.loss)
            if group is None:
                group = suspects[task.loss] = untracked(deque())
            group.appendleft(task)
        else:
            self._scheduler.pending.appendleft(task)

    def _usable(self):
        """Executors that may be offered tasks."""
        return [e for e in self._scheduler.executors_by_slot.values() if not (e.decommissioning or e.excluded)]

    def _others_usable(self, executor):
        return any(e is not executor for e in self._usable())

    def live_hosts(self):
        return {e.hostname for e in self._usable()}

    def settle_copies(self, copies_ended):
        """Pass on the results of copies that won (their originals withdrawn and killed),
        drop those of copies that failed, and kill the copies whose original ended."""
        won, failed = self.speculation.copy_results()
        for original, payload in won:
            for executor, task in self._scheduler.withdraw(original):
                self.kills.append((executor, task, "its speculative copy finished first"))
            original.client.results.add(original.client_task_id, TaskState.FINISHED, payload)
        self._scheduler.counts["failed"] -= failed  # a copy's failure is not its task's
        for copy in copies_ended:
            if copy.executor is not None:
                self.kills.append((copy.executor, copy, "the task it copied finished first"))

    def speculate(self):
        """Launch a copy of each straggler on an idle core of another executor:
        ``[(executor, rows, functions), ...]``, as ``resource_offers`` returns them."""
        now = self._scheduler.clock()
        launches = []
        for original in self.speculation.stragglers(now):
            executor = self._idle_executor_besides(original.executor)
            if executor is None:
                break
            copies = self.speculation.copies_for(original.client)
            copy, launch = self._scheduler.launch_copy(original, copies, executor, now)
            self.speculation.made_copy(original, copy)
            log.info("speculating task %s (running %.3f s on executor %s): a copy on executor %s",
                     original.client_task_id, now - self.speculation.launched_at(original),
                     original.executor.executor_id, executor.executor_id)
            launches.append(launch)
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

    def attempts_failed(self, executor, retried, now):
        """``retried`` tasks raised on ``executor`` and wait first in the queue: none of them
        runs there again while another executor may take it; the failures count against
        the executor."""
        for i in range(retried):
            self.failed_on[self._scheduler.pending[i].task_id] = executor.executor_id
        self.exclusion.failed(executor, retried, "a task raised (retried)", now)
        self.refresh_exclusions()

    def refresh_exclusions(self):
        """Apply the exclusions to the executors: ``[executor, ...]`` newly excluded. None is
        applied while it would leave no executor to offer tasks to."""
        exclusion = self.exclusion
        exclusion.expire(self._scheduler.clock())
        executors = [e for e in self._scheduler.executors_by_slot.values() if not e.decommissioning]
        excluded = [e for e in executors if exclusion.is_excluded(e)]
        exclusion.suspended = bool(executors) and len(excluded) == len(executors)
        newly = []
        for executor in executors:
            flag = not exclusion.suspended and executor in excluded
            if flag != executor.excluded:
                executor.excluded = flag
                self._scheduler.apply_window(executor)
                if flag:
                    newly.append(executor)
        exclusion.newly.extend(newly)
        return newly

    def take_kills(self):
        """The attempts to kill, ``[(executor, task, reason), ...]``; none afterwards."""
        kills = list(self.kills)
        self.kills.clear()
        return kills
