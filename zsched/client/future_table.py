"""The client's futures: tasks and requests by id, and completing them.

Threads: calling threads add futures (``add_task``, ``add_request``); the thread that talks
to the driver (the I/O thread, or the thread of a driver in this process) completes them
(``from_driver``, ``lose``); any thread cancels one. Done-callbacks of futures completed by
the driver's thread run in the table's callback thread, never in the driver's.
"""
import concurrent.futures
import itertools
import logging
import queue
import threading

from .. import protocol as p
from ..errors import DataRefused, DriverConnectionError
from ..protocol import MsgType
from ..payload import is_reference
from .future import DataResult, FuturesCondition, TaskFuture, complete_batch

log = logging.getLogger(__package__)  # zsched.client, for every module of the client


class FutureTable:
    """The futures of one client, by task id and by request id, until they complete.

    ``tasks`` maps a task id to its ``TaskFuture``: calling threads add to it, with an id
    from ``task_ids``. ``requests`` maps a request id to the ``Future`` of an
    administration request. ``lost`` is the ``DriverConnectionError`` that
    ended the connection, or None while it holds. ``cancelled(task_id)`` is called when a
    caller cancels a task the driver may hold; ``in_driver_thread()`` tells whether the
    caller is the thread of a driver in this process."""

    def __init__(self, cancelled, in_driver_thread=None):
        self.condition = FuturesCondition()  # shared by this client's TaskFutures
        self.tasks = {}
        self.requests = {}
        self.lost = None
        self.task_ids = itertools.count(1)  # calling threads take ids with next()
        self.request_ids = itertools.count(1)
        self.broadcasts = {}  # key -> Future of the driver's DataStored, for Client.broadcast
        self.result_parts = {}  # task id -> {key: parts} of large results, until their row
        self._cancelled = cancelled
        self._in_driver_thread = in_driver_thread
        # futures completed by the driver's thread run their done-callbacks in this thread
        # of the client's, started at the first one (see TaskFuture._invoke_callbacks)
        self._callback_queue = None
        self._callback_lock = threading.Lock()

    # ------------------------------------------------------------ adding

    def new_task(self):
        """A future for a new task, not in ``tasks`` yet."""
        return TaskFuture(self, next(self.task_ids), self.condition)

    def add_request(self, request_id):
        """The future of the answer to request ``request_id`` (an id from ``request_ids``)."""
        future = self.requests[request_id] = concurrent.futures.Future()
        return future

    def waiting(self):
        """Whether a task or a request waits for the driver."""
        return bool(self.tasks or self.requests or self.broadcasts)

    # ------------------------------------------------------------ what futures ask

    def cancel_task(self, task_id):
        """A caller cancelled this task's future: the driver is told unless it completed."""
        if self.tasks.pop(task_id, None) is not None:
            self._cancelled(task_id)

    def in_driver_thread(self):
        """Whether the caller is the thread of a driver in this process, which must never
        run the user's code: it completes this client's futures."""
        return self._in_driver_thread is not None and self._in_driver_thread()

    def run_callbacks_later(self, future):
        """Run ``future``'s done-callbacks in the callback thread, in order."""
        with self._callback_lock:
            if self._callback_queue is None:
                self._callback_queue = queue.SimpleQueue()
                threading.Thread(target=_callback_loop, args=(self._callback_queue,),
                                 name="zsched-client-callbacks", daemon=True).start()
            self._callback_queue.put(future)

    def stop_callbacks(self):
        """The callbacks queued so far still run; one queued later starts a thread of its own."""
        with self._callback_lock:
            if self._callback_queue is not None:
                self._callback_queue.put(None)
                self._callback_queue = None

    # ------------------------------------------------------------ completing

    def from_driver(self, msg):
        """Act on a TaskResults, an AdminReply or a DataStored from the driver."""
        if msg.TYPE == MsgType.TASK_RESULTS:
            self.complete(msg.results)
        elif msg.TYPE == MsgType.TASK_DATA:
            if msg.client_task_id in self.tasks:  # else it ended: its result is moot
                self.result_parts.setdefault(msg.client_task_id, {})[msg.key] = msg.parts
        elif msg.TYPE == MsgType.DATA_STORED:
            self._data_stored(msg)
        elif msg.TYPE == MsgType.ADMIN_REPLY:
            future = self.requests.pop(msg.request_id, None)
            if future is not None:
                if msg.ok:
                    future.set_result(msg.value)
                elif msg.value == p.UNKNOWN_CLIENT:
                    future.set_exception(DriverConnectionError(msg.value))
                else:
                    future.set_exception(ValueError(msg.value))

    def _data_stored(self, msg):
        """The driver kept a broadcast value, or refused data (``msg.error``)."""
        if msg.task_id >= 0:
            self.fail(msg.task_id, DataRefused(f"task {msg.task_id}: its arguments were refused: "
                                               f"{msg.error}"))
            return
        future = self.broadcasts.pop(msg.key, None)
        if future is not None and not future.done():
            future.set_result(msg.error)

    def complete(self, results):
        """Complete the futures of a TaskResults batch (see ``future.complete_batch``)."""
        if self.result_parts:
            results = self._with_parts(results)
        complete_batch(self.tasks.pop, self.condition, results)

    def _with_parts(self, results):
        """The rows, each large result's payload given the parts that came before it."""
        parts_of = self.result_parts
        rows = []
        for row in results:
            parts = parts_of.pop(row[0], None)
            if parts is not None and is_reference(row[2]):
                row = [row[0], row[1], DataResult(row[2], parts)]
            rows.append(row)
        return rows

    def fail(self, task_id, error):
        """Fail the task ``task_id`` with ``error``, unless it completed or was cancelled."""
        future = self.tasks.pop(task_id, None)
        if future is not None:
            try:
                future.set_exception(error)
            except concurrent.futures.InvalidStateError:
                pass  # cancelled meanwhile

    def fail_all(self, error):
        """Fail every pending task with ``error``."""
        for task_id in list(self.tasks):
            self.fail(task_id, error)

    def lose(self, error):
        """The connection ended with ``error``: every pending task and request fails with
        it, and ``lost`` says so to later calls. The caller holds the outbox's lock, so no
        future is registered after the sweep."""
        self.lost = error
        self.fail_all(error)
        self.result_parts.clear()
        for future in [*self.requests.values(), *self.broadcasts.values()]:
            if not future.done():
                future.set_exception(error)


def _callback_loop(futures):
    while True:
        future = futures.get()
        if future is None:
            return
        future._invoke_callbacks_now()  # logs and goes on when a callback raises
        del future  # nor held, with its result, until the next one comes
