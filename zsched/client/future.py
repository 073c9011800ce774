"""``TaskFuture``: the ``concurrent.futures.Future`` of a task submitted to a zsched client."""
import _thread
import concurrent.futures
import pickle
import threading
import time
from concurrent.futures._base import CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED, PENDING

from .. import payload as pl
from ..errors import TaskFailed, load_exception
from ..task_state import TaskState
from ..runtime import gc_track, gc_untrack

DONE_STATES = frozenset((CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED))
_FINISHED, _FAILED, _KILLED = int(TaskState.FINISHED), int(TaskState.FAILED), int(TaskState.KILLED)


class FuturesCondition(_thread.RLock):
    """The condition a client's futures share: a ``threading.Condition`` whose lock it is.

    ``concurrent.futures`` takes a future's condition with ``with`` (``wait``,
    ``as_completed``, ``Future.done``, ``add_done_callback``, ...): on a
    ``threading.Condition`` that calls two Python methods, ``__enter__`` and ``__exit__``;
    here they are the lock's own, in C. ``wait``, ``wait_for``, ``notify`` and
    ``notify_all`` are a ``threading.Condition``'s, on this lock."""

    __slots__ = ("_condition",)

    def __init__(self):
        self._condition = threading.Condition(self)

    def wait(self, timeout=None):
        return self._condition.wait(timeout)

    def wait_for(self, predicate, timeout=None):
        return self._condition.wait_for(predicate, timeout)

    def notify(self, n=1):
        self._condition.notify(n)

    def notify_all(self):
        self._condition.notify_all()


class Waiters(list):
    """A future's waiters: ``concurrent.futures.wait`` and ``as_completed`` put theirs in
    and take them out. The future empties it once it has told them it is done
    (``complete_batch``, ``TaskFuture.cancel`` and ``set_exception``): it has nothing
    more to tell them, and a waiter keeps the futures it was told of (its
    ``finished_futures``), so a waiter left in would make a cycle with the future. With
    none, a future waited for stays out of the cyclic GC, and so does this list. A waiter
    may thus be gone when its ``wait`` takes it out: ``remove`` allows that."""

    __slots__ = ()

    def remove(self, waiter):
        if waiter in self:
            list.remove(self, waiter)


class TaskFuture(concurrent.futures.Future):
    """A Future whose ``cancel`` also removes the task from the cluster.

    A plain ``Future`` makes a Condition (a lock, a deque and bound methods) and two lists
    of its own, which made it the largest cost of a submission, and with 100,000 futures
    alive their objects made the cyclic GC run often and traverse much. The futures of one
    client share the client's condition instead, and make their lists of waiters and
    done-callbacks only when something asks for one (under the condition, like every use
    of them): a future is one object for the GC. A batch of results completes under one
    acquisition of the condition (``complete_batch``). The attributes that
    ``concurrent.futures.wait``, ``as_completed`` and the base methods use stay.
    A notification on the shared condition wakes every thread waiting on one of the
    client's futures, so ``result`` and ``exception`` wait in a loop until their own
    future is done.

    A future is also kept out of the cyclic GC (``gc_untrack``) for as long as it can be in
    no reference cycle: with a flood of futures alive, the GC's full collections traversed
    them all, again and again (a fifth of the client's time). What it refers to while it is
    out is its client's FutureTable (alive while the client is), its result (unpickled: new
    objects, and objects pickled by name, which modules hold anyway), plain values, and the waiters of
    ``concurrent.futures.wait`` and ``as_completed`` until it tells them it is done (see
    ``Waiters``). It goes back in before it can be in a cycle: when a list of
    done-callbacks is made (they may refer to the future), and when it gets an exception
    (once raised, its traceback refers to the frames it went through, which may hold the
    future). An attribute set on a future by its user, that refers back to it, would make
    a cycle never collected.

    A finished task's result (or exception) stays as the bytes that came from the executor
    until ``result`` or ``exception`` asks for it, and is unpickled then, in the asking
    thread: never in the thread that completes the futures, which for a client in the
    driver's process is the driver's own (the driver unpickles nothing).
    """

    __slots__ = ("_waiter_list", "_callback_list", "_payload", "_failure_payload")

    def __init__(self, table, task_id, condition):
        # Future.__init__'s attributes in its order: they stay in CPython's shared-key
        # storage, so no dict is made per future (one more object for the GC)
        self._condition = condition
        self._state = PENDING
        self._result = None
        self._exception = None
        self._waiter_list = None
        self._callback_list = None
        self._payload = None          # a pickled result, not unpickled yet
        self._failure_payload = None  # a pickled exception (exception_payload), not yet either
        self._table = table  # its client's FutureTable
        self._task_id = task_id
        gc_untrack(self)

    @property
    def task_id(self):
        """The id of this future's task at its client."""
        return self._task_id

    def __await__(self):
        """``await future`` in a running event loop: its result, or its exception raised.
        No thread waits: the future's completion wakes the awaiting task's loop, which
        resumes the task in the same turn (``awaiting.py``). Cancelling the awaiting task
        cancels this future, and so the task."""
        if self._state not in DONE_STATES:
            yield _loop_waiter(self)
        return self.result()

    @property
    def _waiters(self):
        waiters = self._waiter_list
        if waiters is None:
            waiters = self._waiter_list = Waiters()
            gc_untrack(waiters)  # in no cycle (see Waiters)
        return waiters

    @property
    def _done_callbacks(self):
        callbacks = self._callback_list
        if callbacks is None:
            gc_track(self)
            callbacks = self._callback_list = []
        return callbacks

    def cancel(self):
        if not super().cancel():
            return False
        with self._condition:
            # Future.cancel leaves wait()'s and as_completed()'s waiters to the runner:
            # nothing else would tell them, so they are told here
            first = self._state == CANCELLED
            if first:
                self._state = CANCELLED_AND_NOTIFIED
                waiters = self._waiter_list
                if waiters:
                    for waiter in waiters:
                        waiter.add_cancelled(self)
                    waiters.clear()  # see Waiters
        if first and self._table is not None:
            self._table.cancel_task(self._task_id)
        return True

    def set_exception(self, exception):
        gc_track(self)
        super().set_exception(exception)
        if self._waiter_list:  # told: see Waiters
            self._waiter_list.clear()

    def _invoke_callbacks(self):
        if self._callback_list:  # without making the list when there is none
            table = self._table
            if table is not None and table.in_driver_thread():
                # the user's code never runs in the driver's loop: a slow or waiting
                # callback would stall the cluster (its heartbeats, its other clients)
                table.run_callbacks_later(self)
            else:
                super()._invoke_callbacks()

    def _invoke_callbacks_now(self):
        super()._invoke_callbacks()

    def result(self, timeout=None):
        if self._state != FINISHED:
            self._wait_until_done(timeout)
        if self._payload is not None or self._failure_payload is not None:
            self._load()  # the payload was set before the state, and is cleared after the result
        if self._state != FINISHED:
            return super().result(0)  # raises: cancelled, or not done in time
        error = self._exception
        if error is None:
            return self._result  # final once the payload is cleared
        try:
            raise error  # also one whose __bool__ is false, which Python 3.11's own result misses
        finally:
            error = self = None  # no cycle through the traceback's frame

    def exception(self, timeout=None):
        if self._state != FINISHED:
            self._wait_until_done(timeout)
        if self._payload is not None or self._failure_payload is not None:
            self._load()
        return super().exception(0)

    def _load(self):
        """Unpickle the result or exception left as bytes, once, outside the condition
        (which completes the client's other futures meanwhile); of two threads asking at
        once, the first to finish sets it and both return that. The condition is
        taken through ``acquire`` and ``release``, not ``with``: this runs once per result,
        and a ``with`` costs about twice as much (looking up and calling ``__enter__`` and
        ``__exit__``), even on ``FuturesCondition``."""
        payload = self._payload
        if payload is not None:
            try:
                value = payload.load() if type(payload) is DataResult else pickle.loads(payload)
                error = None
            except Exception as exc:
                value, error = None, TaskFailed(
                    f"the result of task {self._task_id} cannot be unpickled here: {exc!r}")
                gc_track(self)
            condition = self._condition
            condition.acquire()
            try:
                if self._payload is not None:
                    self._result, self._exception = value, error
                    self._payload = None
            finally:
                condition.release()
            return
        payload = self._failure_payload
        if payload is not None:
            error = load_exception(payload)
            with self._condition:
                if self._failure_payload is not None:
                    self._exception = error
                    self._failure_payload = None

    def _wait_until_done(self, timeout):
        condition = self._condition
        condition.acquire()  # as in _load
        try:
            if timeout is None:
                while self._state not in DONE_STATES:
                    condition.wait()
                return
            end = time.monotonic() + timeout
            while self._state not in DONE_STATES:
                remaining = end - time.monotonic()
                if remaining <= 0:
                    return
                condition.wait(remaining)
        finally:
            condition.release()


class DataResult:
    """A result whose data travelled apart: its row's reference and the parts that came."""

    __slots__ = ("reference", "parts")

    def __init__(self, reference, parts):
        self.reference = reference
        self.parts = parts  # key -> parts

    def load(self):
        key, _, _ = pl.read_reference(self.reference)
        parts = self.parts.get(key)
        if parts is None:
            raise TaskFailed(f"the data of the result {key.hex()} did not arrive")
        return pl.loads(parts[0], parts[1:])


def _loop_waiter(future):
    """A ``LoopWaiter`` of ``future``. Its module is imported at the first await: a
    process that never awaits does not import asyncio."""
    global _loop_waiter
    from .awaiting import LoopWaiter
    _loop_waiter = LoopWaiter
    return LoopWaiter(future)


def complete_batch(pop_future, condition, results):
    """Complete the futures of a TaskResults batch, under one acquisition of their shared
    ``condition`` (``Future.set_result`` would take and notify it once per future).
    ``pop_future(task_id, None)`` takes a pending future out of its table."""
    with_callbacks = []
    killed = []
    with condition:
        for task_id, state, payload in results:
            future = pop_future(task_id, None)
            if future is None:
                continue  # unknown, or cancelled by the caller meanwhile
            if future._state in DONE_STATES:
                continue  # cancelled by the caller meanwhile
            # results and exceptions stay bytes until asked for (TaskFuture._load): not
            # unpickled here, which may be the thread of a driver in this process
            if state == _FINISHED:
                future._payload = payload
            elif state == _FAILED:
                future._failure_payload = payload
                gc_track(future)  # it will hold an exception (see TaskFuture)
            elif state == _KILLED:
                killed.append(future)
                continue
            else:
                future._exception = TaskFailed(payload.decode(errors="replace"))
                gc_track(future)
            future._state = FINISHED
            if future._waiter_list or future._callback_list:
                _notify_one(future, state != _FINISHED, with_callbacks)
        condition.notify_all()
    for future in with_callbacks:  # outside the lock, as Future.set_result does
        future._invoke_callbacks()
    for future in killed:
        future.cancel()


def _notify_one(future, failed, with_callbacks):
    """What ``Future.set_result`` does besides notifying the condition: tell the waiters of
    ``concurrent.futures.wait`` and ``as_completed``, and note the callbacks to run."""
    waiters = future._waiter_list
    if waiters:
        if not failed:
            for waiter in waiters:
                waiter.add_result(future)
        else:
            for waiter in waiters:
                waiter.add_exception(future)
        waiters.clear()  # told, once for all (see Waiters)
    if future._callback_list:
        with_callbacks.append(future)
