"""An executor's task threads: the tasks they run, the results they hand back, kills.

``cores`` task threads take tasks from a deque and append their status rows to another,
which the loop sends in batches. The per-task path takes no lock and makes no system call
while work is queued: task threads wait on a condition only when the deque is empty,
write the wake-up pipe only while the loop sleeps, and take the kill lock only while a
KillTask is pending (see ``TaskRunner.run_here``).
"""
import ctypes
import pickle
import threading
import time
from collections import deque
from operator import itemgetter

import cloudpickle

from ..errors import MessageTooLarge
from .. import payload as pl
from ..payload import REF, REF_BYTE
from ..payload import small_buffers_in_band as _in_band
from ..protocol import ResultData, TaskState
from .failure import failure_payload

_digest_of = itemgetter(2)  # of a LaunchTasks row
_dumps = pickle.dumps
_PROTOCOL = pickle.HIGHEST_PROTOCOL
_PART_MIN = pl.DATA_PART_MIN


class TaskKilled(BaseException):
    """Raised inside a task's thread to interrupt it (KillTask)."""


def dumps_value(value):
    """Pickle a result: plain pickle when it can, cloudpickle for lambdas and the like."""
    try:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def _raise_in_thread(ident, exception_class):
    """Have ``exception_class`` raised in thread ``ident`` when it next runs Python code;
    ``None`` withdraws one that has not been raised yet."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(ident),
        ctypes.py_object(exception_class) if exception_class is not None else ctypes.c_void_p())


class TaskRunner:
    """The tasks of one executor: the functions they call, the queue the task threads take
    them from, the status rows they leave in ``results``, and kills of running tasks.

    A task is a LaunchTasks row ``[task id, attempt, function entry, pickled args]``; a
    status row is ``[task id, attempt, state, payload]``. ``max_result_size`` bounds a
    pickled result (the driver's max_message_size): a larger one fails its task; a larger
    exception is cut to fit (``failure``)."""

    def __init__(self, wakeup, max_result_size):
        self.max_result_size = max_result_size
        self.results = deque()               # status rows, for the loop to send
        self._wakeup = wakeup                # written when a row is added while the loop sleeps
        self._work = deque()                 # tasks for the task threads; None ends one
        self._work_ready = threading.Condition()  # task threads wait on it while _work is empty
        # digest -> [cloudpickled function, the function once a task thread unpickled it];
        # each task's row holds its function's entry (``bind_functions``)
        self._functions = {}
        self._running = {}                   # task id -> (attempt, thread ident)
        self._killed = set()                 # (task id, attempt) killed before or while running
        self._lock = threading.Lock()        # serialises kills with task threads (see run_here)
        self._busy = 0.0                     # seconds spent in tasks since take_busy
        self._threads = []
        self.data = None                     # the executor's ExecutorData
        self.kill_deadlines = {}             # (task id, attempt) -> when the task reaper acts
        self.data_out = deque()              # ResultData of large results, sent before their rows
        self._data_keys = pl.DataKeys()

    # ------------------------------------------------------------ the loop's side

    def start(self, count):
        """Start ``count`` task threads (task-0, task-1, ...)."""
        for i in range(count):
            thread = threading.Thread(target=self._task_thread, name=f"task-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def bind_functions(self, functions, tasks):
        """Keep ``functions`` (digest -> cloudpickled function) and put each task's function
        entry in place of its digest: a ForgetFunctions that comes before the task runs
        cannot take its function away (None: a function the driver did not send)."""
        known = self._functions
        for digest, blob in functions.items():
            known[digest] = [blob, None]
        for row, entry in zip(tasks, list(map(known.get, map(_digest_of, tasks)))):
            row[2] = entry

    def holds(self, digest):
        """Whether the function of ``digest`` is kept here."""
        return digest in self._functions

    def forget_functions(self, digests):
        """Drop these functions; tasks bound to them before keep theirs."""
        functions = self._functions
        for digest in digests:
            functions.pop(digest, None)

    def metrics(self):
        """Busy task threads and functions held, for a heartbeat."""
        return {"busy_threads": len(self._running), "functions": len(self._functions)}

    def queue(self, tasks):
        """Hand ``tasks`` to the task threads: one notification for the lot."""
        self._work.extend(tasks)
        with self._work_ready:
            self._work_ready.notify(len(tasks))

    def take_unstarted(self, count=None):
        """Take back up to ``count`` queued tasks (all by default) that no thread started:
        the oldest first for all, the newest first for a count."""
        taken = []
        work = self._work
        while count is None or len(taken) < count:
            try:  # task threads take from the left meanwhile
                task = work.popleft() if count is None else work.pop()
            except IndexError:
                break
            if task is None:  # closing: the task threads' stop signals stay
                if count is None:
                    work.appendleft(task)
                else:
                    work.append(task)
                break
            taken.append(task)
        return taken

    def take_busy(self):
        """Seconds spent in tasks since the last call."""
        busy, self._busy = self._busy, 0.0
        return busy

    def all_reported(self):
        """Nothing launched here is left: kills that came late are moot."""
        if self._killed:
            with self._lock:
                self._killed.clear()

    def kill(self, task_id, attempt):
        """Interrupt the attempt if it runs, or keep it from starting; True if it runs
        (an exception reaches a thread only when it runs Python code: a task blocked in C
        may not stop)."""
        key = (task_id, attempt)
        with self._lock:
            again = key in self._killed  # a second kill (a copy) interrupts nothing more
            self._killed.add(key)  # before _running is read: see run_here
            running = self._running.get(task_id)
            if running is None or running[0] != attempt:
                return False
            # under the lock: the task's thread withdraws it when the task leaves _running
            if not again:
                _raise_in_thread(running[1], TaskKilled)
        return True

    def overdue_kill(self, now):
        """The id of a killed task still running past its deadline, or None; the deadlines
        of tasks that have stopped are dropped."""
        for key, deadline in list(self.kill_deadlines.items()):
            task_id, attempt = key
            if self.running_attempt(task_id) != attempt:
                del self.kill_deadlines[key]
            elif now >= deadline:
                return task_id
        return None

    def running_attempt(self, task_id):
        """The attempt of ``task_id`` running now, or None."""
        with self._lock:
            running = self._running.get(task_id)
        return None if running is None else running[0]

    def stop(self):
        """End the task threads once they finish their tasks (they are not waited for)."""
        if self._threads:
            self._work.extend([None] * len(self._threads))  # each task thread takes one and ends
            with self._work_ready:
                self._work_ready.notify_all()

    # ------------------------------------------------------------ the task threads' side

    def _task_thread(self):
        work, ready, results, wakeup = self._work, self._work_ready, self.results, self._wakeup
        run = self.run_here
        while True:
            try:
                task = work.popleft()
            except IndexError:
                with ready:
                    while not work:
                        ready.wait()
                continue
            if task is None:
                return
            results.append(run(task))
            if not wakeup.pending:  # else the loop is awake and takes this row too
                wakeup.wake()

    def run_here(self, task):
        """Run a task in this thread, where a kill can interrupt it; its status row.

        No lock is taken while no kill is pending. The task is published in ``_running``
        before ``_killed`` is looked at, and ``kill`` adds to ``_killed`` before it looks
        at ``_running`` (under ``_lock``, raising TaskKilled in the thread it finds): so
        either this thread sees the kill, or the kill sees the task. Whenever ``_killed``
        is not empty as a task starts or ends, this thread takes ``_lock``, which also waits
        for a kill in progress, and withdraws a TaskKilled not yet raised that was meant
        for this task (see ``_consume_kill``)."""
        task_id, attempt, function_entry, args = task
        running = self._running
        running[task_id] = (attempt, threading.get_ident())
        started = time.perf_counter()
        try:
            if self._killed and self._consume_kill(task_id, attempt):
                state, payload = TaskState.KILLED, b"killed before it started"
                if args[:1] == REF_BYTE:
                    self.data.discard([args])
            else:
                state, payload = self._run_task(task_id, attempt, function_entry, args)
            running.pop(task_id, None)
            if self._killed:
                self._consume_kill(task_id, attempt)
        except TaskKilled:  # the kill arrived as the task ended
            running.pop(task_id, None)
            self._consume_kill(task_id, attempt)
            state, payload = TaskState.KILLED, b"killed while running"
        self._busy += time.perf_counter() - started
        return [task_id, attempt, state, payload]

    def _consume_kill(self, task_id, attempt):
        """Whether a kill of this attempt is pending; if so it is used up, and the
        TaskKilled it may have raised in this thread, if not raised yet, is withdrawn: it
        must not hit this thread later, in another task."""
        key = (task_id, attempt)
        with self._lock:
            if key not in self._killed:
                return False
            self._killed.discard(key)
            _raise_in_thread(threading.get_ident(), None)
            return True

    def _run_task(self, task_id, attempt, function_entry, args):
        """Call the task's function (its function entry); (state, payload) of its status
        row. A TaskKilled after the call has returned reaches ``run_here``."""
        if function_entry is None:
            if args[:1] == REF_BYTE:
                self.data.discard([args])
            return TaskState.ERROR, b"the driver did not send the task's function to this executor"
        try:
            function = function_entry[1]
            if function is None:  # unpickled once per executor, by the first task to need it
                function = function_entry[1] = pickle.loads(function_entry[0])
            if args[0] == REF:  # its data was fetched apart (``data``)
                call_args, call_kwargs = self.data.load(args)
            else:
                call_args, call_kwargs = pickle.loads(args)
            value = function(*call_args, **call_kwargs)
        except TaskKilled:
            return TaskState.KILLED, b"killed while running"
        except BaseException as exc:  # SystemExit and MemoryError fail the task only
            return TaskState.FAILED, failure_payload(exc, self.max_result_size)
        try:  # payload.quick_pickle, inlined: once per task
            payload = _dumps(value, _PROTOCOL, buffer_callback=_in_band)
            size = len(payload)
        except Exception:
            size = _PART_MIN
        try:
            if size >= _PART_MIN:  # large, or cloudpickle's
                payload, size = self._result_payload(task_id, attempt, value)
        except Exception as exc:
            return TaskState.ERROR, f"the result of task {task_id} could not be pickled: {exc!r}".encode()
        if size > self.max_result_size:
            return TaskState.ERROR, str(MessageTooLarge(
                f"the result of task {task_id}", size, self.max_result_size)).encode()
        return TaskState.FINISHED, payload

    def _result_payload(self, task_id, attempt, value):
        """``(payload, size)`` of a result that ``quick_pickle`` refused: the row payload,
        and its bytes in all. A result with large buffers travels apart: its ResultData is
        queued in ``data_out``, sent before the row (unless the result is over
        ``max_result_size``)."""
        data, buffers, _ = pl.dumps(value)
        size = len(data) + sum(buffer.nbytes for buffer in buffers)
        if size > self.max_result_size:
            return None, size
        if not buffers and size < pl.DATA_PART_MIN:
            return data, size
        key = self._data_keys()
        self.data_out.append(ResultData(task_id, attempt, key, size, [data, *buffers]))
        return pl.reference(key, [], None), size
