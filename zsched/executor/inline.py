"""Lone tasks of an idle one-core executor, run by the loop's own thread, and the relief
thread that stands in for the loop while one runs long.

Such a task's status update leaves at once: two thread hand-offs fewer, which is most of
what an executor adds to one task's latency. While the task runs the loop stands still;
if it runs longer than ``INLINE_GRACE`` the relief thread, woken by a kernel timer (no
wake-up at all for shorter tasks), covers for it until the task ends: heartbeats, kills,
stops, launches (they wait for the one core) and requests to give tasks back.

The relief thread has a connection of its own (a DEALER, or a pipe pair of its own). The
driver sends it a copy of every kill and stop, and, once it hears a heartbeat there,
everything, until the loop's connection speaks again. What the relief thread reads while
it does not cover goes to the loop's thread, which obeys it in its next turn; what the
loop's thread has not taken when a cover begins (a kill of the task that has just
started) the relief thread obeys itself. During a cover it also reads the loop's
connection, which the loop's thread leaves alone until the hand-back: what the driver
sent there before it heard the cover begin (tasks dealt behind the long one) can then
be given back.
"""
import collections
import logging
import os
import sys
import threading

import zmq

from .. import protocol as p
from ..liveness import DRIVER
from ..pipe_link import PipeLink
from ..poller import Poller
from .connection import DriverConnection
from .registration import executor_socket
from .timer import KernelTimer
from .worker import WorkerWatch

log = logging.getLogger("zsched.executor")

# Until a task run inline has run this long, heartbeats, kills and new launches wait (at
# most this long); after it, the hand-over costs about two thread wake-ups.
INLINE_GRACE = 0.005


def open_relief(backend):
    """A connection of its own for ``backend``'s relief thread: its pipe pair, or a new
    DEALER; None for an executor over pipes given no pair for it."""
    limit = p.frame_limit(backend.config.max_message_size)
    if backend.relief_fds is not None:
        return DriverConnection(link=PipeLink(*backend.relief_fds, limit))
    if backend.link is not None:
        return None
    # a context of its own: closing it waits for a goodbye to leave, while the loop's
    # socket, which only its own thread may close, stays open
    context = zmq.Context()
    sock = executor_socket(context, backend.config, backend.keys)
    sock.connect(backend.driver_url)
    return DriverConnection(socket=sock, context=context)


class InlinePath:
    """The lone task kept to run in the loop's thread, and the relief thread that covers
    for the loop while it runs long."""

    @classmethod
    def create(cls, backend):
        """An InlinePath for ``backend``, or None where there is no kernel timer or no
        connection for the relief thread."""
        if backend.link is not None and backend.relief_fds is None:
            return None
        timer = KernelTimer.create(INLINE_GRACE)
        return None if timer is None else cls(backend, timer)

    def __init__(self, backend, timer):
        self._backend = backend
        self._timer = timer
        self._relief = threading.Thread(target=self._relief_thread, name="relief", daemon=True)
        self._lone = None                    # a task received, to run inline after this turn
        self._inline_task = None             # the task running inline, until the loop is back
        self._deferred = []                  # tasks launched meanwhile (the one core is busy)
        self._forwarded = collections.deque()  # frames the relief read for the loop's thread
        self._resent = set()                 # functions sent again during a cover, still held
        self._handover = threading.Lock()    # guards _inline_running and _covering
        self._inline_running = False
        self._covering = False               # the relief thread stands in for the loop
        self._loop_connection = None         # the loop's, read by the relief during a cover
        self._reading_loop_connection = False  # what is handled was sent before the cover
        self._handed_back = threading.Event()
        self._relief_lost = False            # the relief's connection ended: so did the driver
        self._worker = None                  # the relief's own WorkerWatch of --worker-url
        self._worker_lost = None             # why, once that watch saw the worker go
        self._exit = False

    def start(self):
        self._relief.start()

    def take(self, tasks, idle):
        """Of the tasks of a LaunchTasks, those to queue for the task threads now: a lone
        task reaching an ``idle`` executor is kept to run inline."""
        if self._lone is not None:  # more came before the lone task started: it queues first
            tasks = [self._lone, *tasks]
            self._lone = None
        elif idle and len(tasks) == 1 and self._inline_task is None:
            self._lone = tasks[0]  # run by the loop's thread at the end of this turn
            return []
        if self._inline_task is not None:  # launched to the relief thread while it covers
            self._deferred.extend(tasks)
            return []
        return tasks

    def note_functions(self, functions, holds):
        """A launch brought ``functions``: one sent again during a cover while still held
        here (``holds(digest)``) means a ForgetFunctions of it waits on the loop's
        connection, sent before the cover; it must not drop the function sent since."""
        if self._covering:
            self._resent.update(digest for digest in functions if holds(digest))

    def to_forget(self, digests):
        """Of the digests of a ForgetFunctions, those to drop (see ``note_functions``): of
        one sent before a cover, not those sent again during it."""
        resent = self._resent
        if not resent or (self._covering and not self._reading_loop_connection):
            return digests
        kept = resent.intersection(digests)
        resent -= kept
        return [digest for digest in digests if digest not in kept]

    def forwarded(self):
        """The frames the relief thread read for the loop's thread since the last call."""
        forwarded = self._forwarded
        if not forwarded:  # the usual case, once per turn of the loop
            return ()
        return [forwarded.popleft() for _ in range(len(forwarded))]

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
        thread may cover meanwhile; it hands back before this returns."""
        backend = self._backend
        tasks = backend.tasks
        task = self._inline_task = self._lone
        self._lone = None
        with self._handover:
            self._inline_running = True
        self._timer.arm()
        row = tasks.run_here(task)
        self._timer.disarm()
        with self._handover:
            self._inline_running = False
            covered = self._covering
        if covered:  # the relief thread covers: have it hand back
            self._timer.fire_now()
            self._handed_back.wait()
            self._handed_back.clear()
        self._inline_task = None
        tasks.results.append(row)  # after the hand-back: its update leaves on this connection
        if self._deferred:
            tasks.queue(self._deferred)
            self._deferred = []
        backend.send_status_updates()

    # ------------------------------------------------------------ the relief thread

    def _relief_thread(self):
        """Open the relief's connection, then sleep until an inline task has run for
        ``INLINE_GRACE`` and cover until it ends; meanwhile pass what the driver sends on
        to the loop's thread."""
        backend = self._backend
        try:
            connection = open_relief(backend)
        except zmq.ZMQError as exc:
            log.warning("the relief thread has no connection to the driver: %s", exc)
            connection = None
        poller = Poller()
        poller.register(self._timer.fd, zmq.POLLIN)
        if connection is not None:
            connection.send(p.AttachRelief(backend.incarnation, backend.executor_id, os.getpid(),
                                           backend.relief_token))
            connection.watch(poller)
        if backend.worker_url:  # the loop's thread connects by its deadline: none here
            self._worker = WorkerWatch(backend.context, backend.worker_url, backend.config,
                                       None, backend.clock)
            poller.register(self._worker.monitor, zmq.POLLIN)
        try:
            while not self._exit:
                events = dict(poller.poll())
                self._watch_worker(events)
                before = len(self._forwarded)
                connection = self._read(connection, poller, events, self._forwarded.append)
                if len(self._forwarded) != before:
                    backend.wake()
                if self._timer.fd in events:
                    self._timer.clear()
                    if not self._exit:
                        connection = self._cover(connection, poller)
        finally:
            if connection is not None:
                connection.close(linger=0)
            if self._worker is not None:
                self._worker.close()

    def _watch_worker(self, events):
        """Note why to exit if the worker watch saw the worker go."""
        worker = self._worker
        if worker is not None and worker.monitor in events:
            reason = worker.event()
            if reason is not None and self._worker_lost is None:
                self._worker_lost = reason

    def _read(self, connection, poller, events, handle):
        """Pass what came on the relief's connection to ``handle``; the connection, or
        None once it is lost."""
        if connection is None:
            return None
        if not connection.flush(events) or connection.lost(events) is not None:
            connection.unwatch(poller)
            connection.close(linger=0)
            self._relief_lost = True
            return None
        if connection.readable(events):
            connection.read(handle, lambda: False)
        return connection

    def _cover(self, connection, poller):
        """Stand in for the loop while the inline task runs, then hand back. Returns the
        relief's connection."""
        backend = self._backend
        with self._handover:
            if not self._inline_running:
                return connection  # it ended meanwhile
            self._covering = True
        if connection is not None:  # the driver sends everything here once it hears this
            backend.send_heartbeat(connection)
        for frame in self.forwarded():  # not taken by the loop's thread before the task
            backend.handle_frame(frame)
        # what the driver sent the loop's connection before it heard that heartbeat (a
        # launch dealt behind the task) is read here too: the loop's thread is in the task
        self._loop_connection = backend.driver
        poller.register(backend.driver.key, zmq.POLLIN)
        if connection is None and self._relief_lost:  # lost before this cover began
            backend.driver_lost(connection_lost=True)
        if self._worker_lost is not None:
            backend.fail(self._worker_lost)
        poller.register(backend.wakeup.fd, zmq.POLLIN)  # a stop asked by a signal
        while True:
            with self._handover:
                if not self._inline_running:
                    self._covering = False
                    break
            if backend.stopping is not None:
                exit_while_a_task_runs(backend, connection)
            connection = self._cover_turn(connection, poller)
        poller.unregister(backend.wakeup.fd)
        if self._loop_connection is not None:
            poller.unregister(self._loop_connection.key)
            self._loop_connection = None
        self._handed_back.set()
        return connection

    def _cover_turn(self, connection, poller):
        """One turn of the cover: a heartbeat when due, then wait for the driver (on
        either connection), the timer or a stop; the relief's connection (None once it
        is lost)."""
        backend = self._backend
        liveness = backend.liveness
        now = backend.clock()
        if connection is not None and liveness.due_to_send(now):
            backend.send_heartbeat(connection)
        events = dict(poller.poll(min(liveness.until_send(now), 1.0) * 1000))
        if self._timer.fd in events:
            self._timer.clear()
        if backend.wakeup.fd in events:
            backend.wakeup.drain()
        self._watch_worker(events)
        if self._worker_lost is not None:
            backend.fail(self._worker_lost)
        self._read_loop_connection(poller, events)
        if connection is not None:
            heard = connection.readable(events)
            connection = self._read(connection, poller, events, backend.handle_frame)
        if connection is None:
            if self._relief_lost:  # perhaps before this cover began
                backend.driver_lost(connection_lost=True)
            return None  # none from the start: the task's end is all to wait for
        if heard:
            liveness.heard(DRIVER, backend.clock())
        elif liveness.is_silent(DRIVER, backend.clock()):
            backend.driver_lost()
        if backend.data.to_ask:  # the task wants a broadcast value: only this thread can ask
            backend.ask_for_data(backend.data.take_asked(), connection)
        backend.send_status_updates(connection)
        backend.reap_killed_tasks()
        return connection


    def _read_loop_connection(self, poller, events):
        """During a cover, handle what came on the loop's connection: all of it was sent
        before the driver heard the cover begin. Once that connection ends, it is left to
        the loop's thread, which finds its end after the task."""
        loop_connection = self._loop_connection
        if loop_connection is None or not loop_connection.readable(events):
            return
        self._reading_loop_connection = True
        try:
            loop_connection.read(self._backend.handle_frame, lambda: False)
        finally:
            self._reading_loop_connection = False
        if loop_connection.lost(events) is not None:
            poller.unregister(loop_connection.key)
            self._loop_connection = None


def exit_while_a_task_runs(backend, connection):
    """The loop must end while the loop's own thread is in a task, which may never
    return: say goodbye over ``connection`` (the relief thread's), close it and end the
    process from here."""
    log.info("executor %s stopped: %s (a task was still running)", backend.executor_id,
             backend.stopping)
    if connection is not None:
        backend._leave(connection)
        # the loop thread's connection is its own: the process's end closes it
        connection.close(0 if backend._driver_gone else 2000)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(backend._exit_code)
