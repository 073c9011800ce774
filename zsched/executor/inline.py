"""Lone tasks of an idle one-core executor, run by the loop's own thread.

Such a task's status update leaves at once: two thread hand-offs fewer, which is most of
what an executor adds to one task's latency. While the task runs the loop stands still;
if it runs longer than ``INLINE_GRACE`` the relief thread, woken by a kernel timer (no
wake-up at all for shorter tasks), takes the loop over (heartbeats, KillTask,
StopExecutor, ...) until the task ends, then hands it back. The driver's socket or link
is used by one thread at a time: the loop's own, or the relief thread while it covers;
the hand-over goes through a lock, which orders each thread's use after the other's.
"""
import select
import threading

from .timer import KernelTimer

# Until a task run inline has run this long, heartbeats, kills and new launches wait (at
# most this long); after it, the hand-over costs about two thread wake-ups.
INLINE_GRACE = 0.005


class InlinePath:
    """The lone task kept to run in the loop's thread, the tasks that wait for it, and the
    relief thread that runs the loop (``backend.turn``) while it runs long."""

    @classmethod
    def create(cls, backend):
        """An InlinePath for ``backend``, or None where there is no kernel timer."""
        timer = KernelTimer.create(INLINE_GRACE)
        return None if timer is None else cls(backend, timer)

    def __init__(self, backend, timer):
        self._backend = backend
        self._timer = timer
        self._relief = threading.Thread(target=self._relief_thread, name="relief", daemon=True)
        self._lone = None                    # a task received, to run inline after this turn
        self._inline_task = None             # the task running inline, until the loop is back
        self._deferred = []                  # tasks launched meanwhile (the one core is busy)
        self._handover = threading.Lock()    # guards _inline_running and _covering
        self._inline_running = False
        self._covering = False               # the relief thread runs the loop
        self._handed_back = threading.Event()
        self._exit = False

    def start(self):
        self._relief.start()

    def take(self, tasks, idle):
        """Of the tasks of a LaunchTasks, those to queue for the task threads now: a lone
        task reaching an ``idle`` executor is kept to run inline, and tasks that come while
        one runs inline wait for it."""
        if self._lone is not None:  # more came before the lone task started: it queues first
            tasks = [self._lone, *tasks]
            self._lone = None
        elif idle and len(tasks) == 1 and not self._covering:
            self._lone = tasks[0]  # run by the loop's thread at the end of this turn
            return []
        if self._inline_task is not None:
            self._deferred.extend(tasks)
            return []
        return tasks

    def run_pending(self):
        """Run the lone task kept by ``take``, if any, unless the loop is ending."""
        if self._lone is not None and self._backend.stopping is None:
            self._run_inline()

    def unstarted(self):
        """Take back every task kept here that has not started."""
        tasks = self._deferred + ([self._lone] if self._lone is not None else [])
        self._deferred = []
        self._lone = None
        return tasks

    def take_newest(self, count):
        """Take back up to ``count`` of the tasks waiting for the inline one, newest first."""
        taken = []
        while len(taken) < count and self._deferred:
            taken.append(self._deferred.pop())
        return taken

    def close(self):
        """End the relief thread, unless it is the caller."""
        if self._relief is threading.current_thread():
            return
        self._exit = True
        self._timer.fire_now()
        if self._relief.is_alive():
            self._relief.join(5)
        self._timer.close()

    def _run_inline(self):
        """Run the lone task in this thread (the loop's) and report it at once. The relief
        thread may take the loop meanwhile; it is taken back before this returns."""
        backend = self._backend
        tasks = backend.tasks
        task = self._inline_task = self._lone
        self._lone = None
        with self._handover:
            self._inline_running = True
        self._timer.arm()
        row = tasks.run_here(task)
        self._timer.disarm()
        tasks.results.append(row)
        with self._handover:
            self._inline_running = False
            covered = self._covering
        if covered:  # the relief thread runs the loop: have it back
            backend.wake()
            self._handed_back.wait()
            self._handed_back.clear()
        self._inline_task = None
        if self._deferred:
            tasks.queue(self._deferred)
            self._deferred = []
        backend.send_status_updates()

    def _relief_thread(self):
        """Sleep until an inline task has run for ``INLINE_GRACE``, then run the loop until
        that task ends (so that heartbeats, kills and stops are handled meanwhile)."""
        backend = self._backend
        timer = self._timer
        while True:
            select.select([timer.fd], [], [])
            timer.clear()
            if self._exit:
                return
            with self._handover:
                if not self._inline_running:
                    continue  # ended meanwhile
                self._covering = True
            while True:
                with self._handover:
                    if not self._inline_running:
                        self._covering = False
                        break
                if backend.stopping is not None:
                    backend.exit_while_a_task_runs()
                backend.turn()
            self._handed_back.set()
