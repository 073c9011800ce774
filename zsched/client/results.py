"""Completing futures: from the driver's TaskResults and AdminReplies, or failing them all
when the driver is lost."""
import concurrent.futures
import logging
from concurrent.futures._base import FINISHED

from .. import protocol as p
from ..errors import DriverConnectionError, TaskFailed
from .future import DONE_STATES
from ..protocol import MsgType, TaskState
from ..runtime import gc_track

log = logging.getLogger(__package__)  # zsched.client, for every module of the client

_FINISHED, _FAILED, _KILLED = int(TaskState.FINISHED), int(TaskState.FAILED), int(TaskState.KILLED)


class Results:
    """The part of ``Client`` that acts on the driver's messages and completes futures."""

    def _from_driver_frame(self, frame):
        try:
            msg = p.decode(frame)
        except p.ProtocolError as exc:
            log.warning("ignored a malformed message from the driver: %s", exc)
            return
        self._from_driver(msg)

    def _from_driver(self, msg):
        """Act on a message from the driver: in the I/O thread, or in the thread of a driver
        in this process."""
        if msg.TYPE == MsgType.TASK_RESULTS:
            self._complete(msg.results)
        elif msg.TYPE == MsgType.ADMIN_REPLY:
            future = self._admin_futures.pop(msg.request_id, None)
            if future is not None:
                if msg.ok:
                    future.set_result(msg.value)
                elif msg.value == p.UNKNOWN_CLIENT:
                    future.set_exception(DriverConnectionError(msg.value))
                else:
                    future.set_exception(ValueError(msg.value))
        elif msg.TYPE == MsgType.CLIENT_WELCOME and self._channel is not None:
            self._welcome = msg
            self._welcome_event.set()

    def _complete(self, results):
        """Complete the futures of a TaskResults batch, under one acquisition of the shared
        condition (``Future.set_result`` would take and notify it once per future)."""
        pop_future = self._futures.pop
        with_callbacks = []
        killed = []
        with self._condition:
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
                    self._notify_one(future, state != _FINISHED, with_callbacks)
            self._condition.notify_all()
        for future in with_callbacks:  # outside the lock, as Future.set_result does
            future._invoke_callbacks()
        for future in killed:
            future.cancel()

    @staticmethod
    def _notify_one(future, failed, with_callbacks):
        """What ``Future.set_result`` does besides notifying the condition: tell the waiters
        of ``concurrent.futures.wait`` and ``as_completed``, and note the callbacks to run."""
        waiters = future._waiter_list
        if waiters:
            if not failed:
                for waiter in waiters:
                    waiter.add_result(future)
            else:
                for waiter in waiters:
                    waiter.add_exception(future)
            waiters.clear()  # told, once for all (see future.Waiters)
        if future._callback_list:
            with_callbacks.append(future)

    def _fail_all(self, error):
        futures = self._futures
        for task_id in list(futures):
            future = futures.pop(task_id, None)
            if future is not None:
                try:
                    future.set_exception(error)
                except concurrent.futures.InvalidStateError:
                    pass  # cancelled meanwhile

    def _driver_silent(self, timeout):
        error = DriverConnectionError(
            f"driver {self.address} answered nothing for {timeout:g} s "
            "(executor_heartbeat_timeout) while tasks waited: it is stopped or hung; its "
            "pending tasks fail")
        log.error("%s", error)
        self._connection_failed(error)

    def _driver_lost(self):
        """The connection to the driver is gone (the driver stopped or died, or was silent
        past the heartbeat timeout): the driver has forgotten this client, so every pending
        future fails now rather than wait forever."""
        error = DriverConnectionError(
            f"lost the connection to driver {self.address} (it stopped, died or became "
            "unreachable); its pending tasks cannot complete")
        log.error("%s", error)
        self._connection_failed(error)

    def _connection_failed(self, error):
        """Fail every pending future and request with ``error``; later calls raise it. Under
        the submission lock, so no future is registered after the failing sweep."""
        with self._submit_lock:
            self._lost = error
            self._fail_all(error)
            for future in list(self._admin_futures.values()):
                if not future.done():
                    future.set_exception(error)
