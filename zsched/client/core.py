"""The ``Client`` class and its ``ClientOptions`` view."""
import concurrent.futures
import itertools
import logging
import os
import pickle
import queue
import select
import threading
import time
import types
from concurrent.futures._base import FINISHED
from collections import deque
from operator import itemgetter

import cloudpickle
import zmq

from .. import protocol as p
from ..config import Config
from ..errors import DriverConnectionError, MessageTooLarge, TaskFailed
from ..runtime import gc_track, gc_untrack
from ..socket_state import SocketState
from ..future import DONE_STATES, FuturesCondition, TaskFuture
from ..held_functions import HeldFunctions
from ..map_calls import (TASKS_PER_CORE, CallsRunner, auto_chunk_size, check_chunk_arguments, chunks,
                        count_calls, MapResults, tasks_ahead)
from ..progress_bar import ProgressBar
from ..protocol import MsgType, TaskState
from ..security import HandshakeWatch, load_keys, make_client
from ..channel import Endpoint
from ..wakeup import WakeupPipe

log = logging.getLogger(__name__)

_FUNCTION_CACHE_SIZE = 1024
_MAP_BATCH = 4096  # map hands tasks to the I/O thread in groups of this many

_POLLIN = int(zmq.POLLIN)  # a plain int: an IntFlag & makes an enum
_dumps = pickle.dumps
_first = itemgetter(0)
_PICKLE_PROTOCOL = pickle.HIGHEST_PROTOCOL
_FINISHED, _FAILED, _KILLED = int(TaskState.FINISHED), int(TaskState.FAILED), int(TaskState.KILLED)
_FRAME_TASKS = 8192  # tasks per SubmitTasks frame at most: the driver starts on a flood early


# What a client over pipes sends a silent driver while it waits on it: a request with no
# future (ids of requests start at 1), which the driver's loop answers.
_PING = p.encode(p.AdminPing(0))


def _heartbeat_options(config):
    """The ZMTP heartbeat socket options for ``config``'s ``zmq_heartbeat_*`` (as executors
    set them): ping every interval, drop a silent peer after the timeout, and ask the peer
    to drop this side after as long."""
    timeout_ms = int(config.zmq_heartbeat_timeout * 1000)
    return {zmq.HEARTBEAT_IVL: int(config.zmq_heartbeat_interval * 1000),
            zmq.HEARTBEAT_TIMEOUT: timeout_ms,
            zmq.HEARTBEAT_TTL: timeout_ms}


class Client(concurrent.futures.Executor):
    """Submit Python callables to a zsched driver.

    ``Client()`` starts an embedded local cluster (its driver in a thread of this process,
    and one executor process per core; see ``LocalCluster`` and its ``in_process``) and
    stops it at shutdown; the driver's thread takes this client's tasks and completes its
    futures itself (their done-callbacks run in a thread of the client's, and results are
    unpickled by the thread that asks for them). ``Client("tcp://host:port",
    secret_file=...)`` connects to a running driver; without a secret file (argument,
    ``ZSCHED_SECRET_FILE`` or ``ZSCHED_SECRET``) it connects without security, which only
    a driver started with ``--insecure`` accepts. ``Client.in_process(channel)`` and
    ``Client.over_pipes(link, address)`` connect to a driver in this process, or over pipes
    whose other end it holds (``LocalCluster.client()`` makes both).
    """

    def __init__(self, address=None, *, secret_file=None, timeout=30, retries=0):
        self._set_up(address, timeout, retries)
        if address is None:
            # the driver in a thread of this process: no socket, no CURVE, no TCP, and no
            # thread of the client's between the caller and the driver
            from ..local_cluster import LocalCluster
            self._owned_cluster = LocalCluster(n_executors=os.cpu_count() or 1, in_process=True)
            try:
                self._start_in_process(self._owned_cluster.channel)
            except BaseException:
                self._owned_cluster.close()
                raise
            return
        keys = load_keys(secret_file)
        self._context = zmq.Context()
        self._start_io(lambda: self._open_socket(keys))

    @classmethod
    def in_process(cls, channel, *, timeout=30, retries=0):
        """A client of the driver running in this process that serves ``channel`` (a
        ``zsched.channel.Channel``): no socket and no I/O thread; the driver's thread takes
        this client's tasks and completes its futures (their done-callbacks run in a thread
        of the client's)."""
        client = cls.__new__(cls)
        client._set_up(channel.address, timeout, retries)
        client._start_in_process(channel)
        return client

    @classmethod
    def over_pipes(cls, link, address, *, timeout=30, retries=0):
        """A client that talks to a driver over ``link``, a ``PipeLink`` whose other end the
        driver holds (``LocalCluster.client()``); ``address`` names the driver in messages.
        The pipes reach the driver alone: nothing to authenticate."""
        client = cls.__new__(cls)
        client._set_up(address, timeout, retries)
        client._link = link
        client._start_io(client._connect_link)
        return client

    def _set_up(self, address, timeout, retries):
        """The state every client starts with, connected to nothing yet."""
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self._closed = False
        self._owned_cluster = None
        self._channel = None              # to a driver in this process
        self._lost = None                 # DriverConnectionError once the driver is gone
        self.timeout = timeout
        self.retries = retries
        self.address = address
        self._context = None
        self._socket = None
        self._socket_state = None
        self._link = None
        self._task_ids = itertools.count(1)
        self._admin_ids = itertools.count(1)
        self._futures = {}                # task id -> TaskFuture not yet completed
        self._admin_futures = {}          # request id -> Future
        # Calling threads append; each turn the I/O thread (or, for a driver in this process,
        # the driver's thread) takes all that is queued as one SubmitTasks (a lone task
        # leaves at once, a flood in large frames). Tasks are [task id, digest, args,
        # retries] lists; control messages, tuples with a name first, keep their place
        # among them. Only that thread pops.
        self._outbox = deque()
        self._cancels = deque()           # task ids cancelled since the I/O thread's last turn
        self._function_blobs = {}         # digest -> cloudpickled function not yet sent
        self._held_functions = HeldFunctions()  # the functions the driver holds for this client
        self._function_cache = {}         # function -> (digest, size)
        self._last_function = (None, None, 0)  # (function, digest, size) of the last submit
        self._mapping = {}                # digest -> maps submitting tasks of it now
        # Taken by what changes whether tasks may be submitted (shutdown, a lost driver),
        # by map and by control messages; submit checks those states before and after it
        # registers its future instead (a lock there cost 0.5 us a task). Reentrant:
        # done-callbacks may submit.
        self._submit_lock = threading.RLock()
        self._condition = FuturesCondition()  # shared by this client's TaskFutures
        self._shutdown = False
        # True once no message leaves for the driver any more (goodbye sent, driver lost)
        self._io_stopped = False
        self._io_done = threading.Event()  # set then
        self._io_thread = None
        # futures completed by the driver's thread run their done-callbacks in this thread
        # of the client's, started at the first one (see TaskFuture._invoke_callbacks)
        self._callback_queue = None
        self._callback_lock = threading.Lock()

    def _start_in_process(self, channel):
        self._channel = channel
        self.address = channel.address
        # the driver's loop polls this pipe: writing it wakes the driver itself
        self._wakeup = channel.wakeup
        self._connect_local(channel)

    def _start_io(self, connect):
        """Connect (``connect()``: over the socket or the link), then start the I/O thread."""
        self._wakeup = WakeupPipe(keep_gil=True)
        try:
            connect()
        except BaseException:
            self._close_resources()
            raise
        self._io_thread = threading.Thread(target=self._io_loop, name="zsched-client-io", daemon=True)
        self._io_thread.start()

    def _open_socket(self, keys):
        self._socket = self._connect(keys)
        self._socket_state = SocketState(self._socket)  # its ZMQ_EVENTS, read cheaply

    # ------------------------------------------------------------ connection

    def _connect(self, keys):
        """The DEALER socket connected to the driver, after its ClientWelcome.

        Its ZMTP heartbeats are the driver's (``zmq_heartbeat_*``): ZeroMQ copies a socket's
        heartbeat options into a connection when it makes it, and the driver's settings
        arrive only over a connection, in ClientWelcome. So the first connection uses the
        defaults; when the driver's settings differ, the client says goodbye on it and
        connects again with the driver's values (one more handshake, only then)."""
        deadline = time.monotonic() + self.timeout
        heartbeats = _heartbeat_options(Config())
        sock, welcome = self._hello(keys, heartbeats, deadline)
        wanted = _heartbeat_options(Config.from_mapping(welcome.settings))
        if wanted != heartbeats:
            try:
                sock.send(p.encode(p.ClientGoodbye()))
            finally:
                sock.close(linger=1000)  # the goodbye still leaves; close does not wait
            sock, welcome = self._hello(keys, wanted, deadline)
        self._welcomed(welcome)
        self._monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        return sock

    def _welcomed(self, welcome):
        self.app_id = welcome.app_id
        self.incarnation = welcome.incarnation
        self.config = Config.from_mapping(welcome.settings)
        self._max_message_size = self.config.max_message_size

    def _connect_local(self, channel):
        """Connect through ``channel`` to the driver in this process, without a socket: its
        thread takes this client's messages and hands back its own (see zsched.channel)."""
        self._welcome = None
        self._welcome_event = threading.Event()
        self._outbox.append(("hello", os.getpid()))
        channel.connect(Endpoint(self._messages_for_driver, self._from_driver,
                                 self._driver_stopped))
        deadline = time.monotonic() + self.timeout
        while not self._welcome_event.wait(0.05):
            if self._lost is not None:
                raise self._lost
            if not channel.is_open():
                raise DriverConnectionError(f"cannot connect to driver {self.address}: "
                                            "it is not running")
            if time.monotonic() > deadline:
                raise DriverConnectionError(f"cannot connect to driver {self.address}: "
                                            f"no answer within {self.timeout:g} s")
        self._welcomed(self._welcome)

    def _connect_link(self):
        """Say hello over ``_link`` and wait for the driver's ClientWelcome. The pipes were
        inherited by the driver from this process: nothing to authenticate."""
        link = self._link
        deadline = time.monotonic() + self.timeout
        gone = DriverConnectionError(f"cannot connect to driver {self.address}: "
                                     "it closed its end of the pipes")
        try:
            link.send(p.encode(p.ClientHello(os.getpid())))
        except BrokenPipeError:
            raise gone from None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DriverConnectionError(
                    f"cannot connect to driver {self.address}: no answer within {self.timeout:g} s")
            select.select([link.read_fd], [link.write_fd] if link.wants_write else [], [],
                          remaining)
            try:
                link.flush()
            except BrokenPipeError:
                raise gone from None
            for frame in link.receive():
                msg = p.decode(frame)
                if isinstance(msg, p.ClientWelcome):
                    self._welcomed(msg)
                    link.max_frame = p.frame_limit(self._max_message_size)
                    return
            if link.error is not None:
                raise DriverConnectionError(f"cannot connect to driver {self.address}: {link.error}")
            if link.closed_by_peer:
                raise gone

    def _hello(self, keys, heartbeats, deadline):
        """A new connection with these heartbeat options, and the driver's ClientWelcome."""
        sock = self._context.socket(zmq.DEALER)
        sock.linger = 1000
        sock.sndhwm = 100_000
        sock.rcvhwm = 100_000
        for option, value in heartbeats.items():
            sock.set(option, value)
        if keys is not None:
            make_client(sock, keys)
        watch = HandshakeWatch(sock, has_secret=keys is not None)
        try:
            sock.connect(self.address)
            sock.send(p.encode(p.ClientHello(os.getpid())))
            poller = zmq.Poller()
            poller.register(sock, zmq.POLLIN)
            poller.register(watch.socket, zmq.POLLIN)
            while True:
                failure = watch.check()
                if failure:
                    raise DriverConnectionError(
                        f"cannot connect to driver {self.address}: authentication failed ({failure})")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise DriverConnectionError(
                        f"cannot connect to driver {self.address}: no answer within {self.timeout:g} s")
                if sock in dict(poller.poll(remaining * 1000)):
                    msg = p.decode(sock.recv())
                    if isinstance(msg, p.ClientWelcome):
                        return sock, msg
        except BaseException:
            sock.close(linger=0)
            raise
        finally:
            watch.close()

    # ------------------------------------------------------------ submitting

    def _function_digest(self, fn):
        """(digest, size) of ``fn``'s pickle; plain functions are pickled once per client."""
        if fn is self._last_function[0]:
            return self._last_function[1:]
        cacheable = isinstance(fn, (types.FunctionType, types.BuiltinFunctionType))
        if cacheable:
            entry = self._function_cache.get(fn)
            if entry is not None:
                self._last_function = (fn, *entry)
                return entry
        blob = cloudpickle.dumps(fn, protocol=pickle.HIGHEST_PROTOCOL)
        digest = p.function_digest(blob)
        self._function_blobs.setdefault(digest, blob)
        entry = (digest, len(blob))
        if cacheable:
            if len(self._function_cache) >= _FUNCTION_CACHE_SIZE:
                del self._function_cache[next(iter(self._function_cache))]
            self._function_cache[fn] = entry
            self._last_function = (fn, *entry)
        return entry

    def _check_open(self):
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        if self._lost is not None:
            raise self._lost

    def options(self, *, retries=None):
        """A view of this client whose ``submit`` and ``map`` use these options."""
        return ClientOptions(self, self.retries if retries is None else retries)

    def _new_future(self, digest, fn_size, args, kwargs, retries):
        """A future for one task and its outbox row (None when the task cannot be sent).
        Called under ``_submit_lock``; ``_submit`` has a copy of this, inlined."""
        task_id = next(self._task_ids)
        future = TaskFuture(self, task_id, self._condition)
        try:
            payload = pickle.dumps((args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            payload = cloudpickle.dumps((args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        if len(payload) + fn_size > self._max_message_size:
            return self._too_large(future, len(payload) + fn_size), None
        self._futures[task_id] = future
        # a list: the row of SubmitTasks as the driver decodes it (in this process, the
        # driver takes it as it is); ints and bytes, in no cycle: out of the GC
        row = [task_id, digest, payload, retries]
        gc_untrack(row)
        return future, row

    def _too_large(self, future, size):
        future.set_exception(MessageTooLarge(f"task {future._task_id}", size, self._max_message_size))
        return future

    def submit(self, fn, /, *args, **kwargs):
        return self._submit(self.retries, fn, args, kwargs)

    def _submit(self, retries, fn, args, kwargs):
        # The hot path of a flood: _new_future inlined, no lock, no call per task that can
        # be avoided. Shutdown and a lost driver are checked again once the future is
        # registered, so that one racing with them never stays pending.
        if self._shutdown or self._lost is not None:
            self._check_open()
        last = self._last_function  # one tuple: read at once, whatever other threads do
        lock = None
        if fn is last[0]:
            digest, fn_size = last[1], last[2]
        else:
            # held until the row is queued: the function (pickled now, or held by the
            # driver) is not released meanwhile (``_pinned_functions``)
            lock = self._submit_lock
            lock.acquire()
        try:
            if lock is not None:
                digest, fn_size = self._function_digest(fn)
            task_id = next(self._task_ids)
            future = TaskFuture(self, task_id, self._condition)
            try:
                payload = _dumps((args, kwargs), _PICKLE_PROTOCOL)
            except Exception:
                payload = cloudpickle.dumps((args, kwargs), protocol=_PICKLE_PROTOCOL)
            if len(payload) + fn_size > self._max_message_size:
                return self._too_large(future, len(payload) + fn_size)
            self._futures[task_id] = future
            row = [task_id, digest, payload, retries]
            gc_untrack(row)  # ints and bytes: in no cycle
            self._outbox.append(row)
        finally:
            if lock is not None:
                lock.release()
        if not self._wakeup.pending:  # else the I/O thread is awake and takes this row too
            self._wakeup.wake()
        if self._shutdown or self._lost is not None:
            self._submitted_while_closing(future)
        return future

    def _submitted_while_closing(self, future):
        """``future`` was registered while the client shut down or lost its driver: the
        shutdown or the failing sweep may have missed it. After a lost driver it fails
        like the others; after a shutdown the submission is withdrawn (cancelled, and
        ``RuntimeError`` as for any submit after shutdown) unless it already completed."""
        if self._lost is not None:
            if self._futures.pop(future._task_id, None) is not None:
                try:
                    future.set_exception(self._lost)
                except concurrent.futures.InvalidStateError:
                    pass  # the sweep came first
            return
        if future.cancel():
            raise RuntimeError("cannot schedule new futures after shutdown")

    def map(self, fn, *iterables, timeout=None, chunksize=None, buffersize=None, progress=False):
        """Like ``Executor.map``: results in order, each call's exception raised at its place.

        ``chunksize`` runs that many calls per task. By default a large map chooses it from
        the number of calls and the executors' cores. ``buffersize`` (as in Python 3.14)
        keeps at most that many calls submitted ahead of the caller, and reads the
        iterables only as needed. ``progress=True`` shows a live bar of the calls."""
        return self._map(self.retries, fn, iterables, timeout, chunksize, buffersize, progress)

    def _map(self, retries, fn, iterables, timeout, chunksize, buffersize, progress):
        check_chunk_arguments(chunksize, buffersize)
        end_time = None if timeout is None else timeout + time.monotonic()
        calls = None  # unknown with a buffersize: the iterables may not end
        if buffersize is None and (chunksize is None or progress):
            iterables, calls = _counted(iterables)
        if chunksize is None:
            wanted = calls if buffersize is None else buffersize
            chunksize = 1 if wanted < 2 * TASKS_PER_CORE else auto_chunk_size(wanted, self._total_cores())
        tasks = _MapTasks(self, fn, iterables, chunksize, retries, calls if progress else False)
        if buffersize is None:
            try:
                futures = deque()
                while True:
                    submitted = tasks.submit(max(1, _MAP_BATCH // chunksize))
                    if not submitted:
                        break
                    futures.extend(submitted)
            finally:
                tasks.release_function()
            return MapResults.of(futures, tasks.chunked, end_time)
        try:
            futures = deque(tasks.submit(tasks_ahead(buffersize, chunksize)))
        except BaseException:
            tasks.end()
            raise
        return MapResults.of(futures, tasks.chunked, end_time, tasks.submit_one, tasks.end)

    def _submit_groups(self, digest, fn_size, groups, retries):
        """``[(future, calls), ...]`` for tasks of these ``(args, calls)`` groups, queued."""
        submitted = []
        rows = []
        no_kwargs = {}
        with self._submit_lock:
            self._check_open()
            for args, calls in groups:
                future, row = self._new_future(digest, fn_size, args, no_kwargs, retries)
                submitted.append((future, calls))
                if row is not None:
                    rows.append(row)
            if rows:
                self._outbox.extend(rows)
                self._wakeup.wake()
        return submitted

    def _total_cores(self):
        """Cores of the registered executors, as the driver counts them now."""
        return self._admin(p.AdminTotalCores)

    def _cancel_task(self, task_id):
        if self._futures.pop(task_id, None) is not None and not self._io_stopped:
            self._cancels.append(task_id)
            self._wakeup.wake()

    def _queue_control(self, message):
        """Queue a control message after every task submitted so far."""
        self._outbox.append(message)
        self._wakeup.wake()

    # ------------------------------------------------------------ administration

    def _admin(self, message_type, *args, timeout=None):
        """Send admin message ``message_type`` with these arguments; what the driver
        answers (a ValueError when it refused; ``ProtocolError``, a ValueError, for
        arguments of the wrong types)."""
        with self._submit_lock:
            if self._lost is not None:
                raise self._lost
            if self._io_stopped:
                raise RuntimeError("the client is shut down")
            request_id = next(self._admin_ids)
            msg = message_type(request_id, *args)
            p.check(msg)  # what the driver's decode would refuse fails here, not there
            future = concurrent.futures.Future()
            self._admin_futures[request_id] = future
            self._queue_control(("admin", msg))
        operation = message_type.OP.name.lower()
        try:
            return future.result(self.timeout if timeout is None else timeout)
        except concurrent.futures.TimeoutError:
            raise DriverConnectionError(
                f"driver {self.address} did not answer {operation} within {self.timeout:g} s") from None
        finally:
            self._admin_futures.pop(request_id, None)

    def executor_ids(self):
        """Ids of the registered executors."""
        return self._admin(p.AdminExecutorIds)

    def is_executor_active(self, executor_id):
        return self._admin(p.AdminIsExecutorActive, executor_id)

    def status(self):
        """Executors, task counts and recent executor losses, as the driver sees them."""
        return self._admin(p.AdminStatus)

    def decommission_executors(self, executor_ids):
        """Decommission executors: they take no new tasks, finish their running ones
        (whose results arrive as usual), then exit; not counted as failures, not replaced.
        Their unstarted tasks run elsewhere. Returns the ids the driver acknowledged."""
        return self._admin(p.AdminDecommissionExecutors, list(executor_ids))

    def request_total_executors(self, n, locality_aware_tasks=0, host_to_local_task_count=None):
        """Have ``n`` executors (a later request overrides this one; running executors are
        never killed to reach a lower number). True when the driver acknowledged it."""
        if n < 0:
            raise ValueError(f"cannot request a negative number of executors ({n})")
        return self._admin(p.AdminRequestTotalExecutors, n, locality_aware_tasks,
                           host_to_local_task_count)

    def request_executors(self, n):
        """``n`` executors more than requested so far."""
        if n < 0:
            raise ValueError(f"cannot request a negative number of additional executors ({n})")
        return self._admin(p.AdminRequestExecutors, n)

    def kill_executors(self, executor_ids, *, replace=False, force=False):
        """Kill executors (busy ones only with ``force``); without ``replace`` none replaces
        them. Returns the ids the driver acknowledged."""
        return self._admin(p.AdminKillExecutors, list(executor_ids), bool(replace), bool(force))

    def kill_executors_on_host(self, host):
        """Kill every executor on ``host`` (they are replaced); True if there was one."""
        return self._admin(p.AdminKillExecutorsOnHost, host)

    def decommission_executors_on_host(self, host):
        """Decommission every executor on ``host``; True if there was one."""
        return self._admin(p.AdminDecommissionExecutorsOnHost, host)

    # ------------------------------------------------------------ I/O thread

    def _io_loop(self):
        try:
            if self._link is not None:
                self._serve_link()
            else:
                self._serve_socket()
            log.debug("client I/O thread ended: %s", self._lost or "shutdown")
        except Exception as exc:
            log.exception("client I/O thread ended by an error")
            self._connection_failed(DriverConnectionError(f"the client's connection failed: {exc!r}"))
        finally:
            self._io_stopped = True
            self._io_done.set()

    def _poll(self, poller, idle_ms=1000):
        """Wait for something to do (``idle_ms`` at most when nothing is queued): what poll
        returned.

        Calling threads write the wake-up pipe only while ``pending`` is False, that is while
        this thread sleeps in poll with nothing queued: during a flood they make no system
        call (which would also hand this thread the GIL for a turn that takes one row), and
        each turn takes all the rows queued meanwhile."""
        wakeup = self._wakeup
        if self._outbox or self._cancels:
            events = dict(poller.poll(0))
        else:
            wakeup.pending = False
            idle = not (self._outbox or self._cancels)  # after pending: none is missed
            events = dict(poller.poll(idle_ms if idle else 0))
            wakeup.pending = True
        if wakeup.fd in events:
            wakeup.drain()
        return events

    def _serve_socket(self):
        sock = self._socket
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self._wakeup.fd, zmq.POLLIN)
        poller.register(self._monitor, zmq.POLLIN)
        while True:
            events = self._poll(poller)
            if self._send_outbox(sock.send):
                return
            if self._monitor in events:  # after the results the driver sent before it went
                self._receive(drain=True)
                self._driver_lost()
                return
            if sock in events:
                self._receive()

    def _serve_link(self):
        """``_serve_socket`` for a client that talks to its driver over pipes (``_link``):
        the end of the driver's pipe is its connection lost.

        Pipes have no heartbeats, and a driver that is stopped (SIGSTOP) or hung keeps its
        end open. So while tasks or requests wait, a driver silent for
        ``executor_heartbeat_interval`` is pinged (an AdminPing its loop answers), and
        one silent for ``executor_heartbeat_timeout`` is lost, as its executors judge it:
        every pending future fails."""
        link = self._link
        poller = zmq.Poller()
        poller.register(link.read_fd, zmq.POLLIN)
        poller.register(self._wakeup.fd, zmq.POLLIN)
        polling_writes = False
        interval = self.config.executor_heartbeat_interval
        timeout = self.config.executor_heartbeat_timeout
        idle_ms = max(1, min(1000, int(interval * 1000)))
        heard = pinged = time.monotonic()
        while True:
            events = self._poll(poller, idle_ms)
            try:
                goodbye = self._send_outbox(link.send)
                if link.write_fd in events:
                    link.flush()
                if link.read_fd in events or not (self._futures or self._admin_futures):
                    heard = time.monotonic()  # silence counts only while something waits
                else:
                    now = time.monotonic()
                    if now - heard >= timeout:
                        self._driver_silent(timeout)
                        return
                    if now - max(heard, pinged) >= interval:
                        link.send(_PING)
                        pinged = now
            except BrokenPipeError:  # the driver is gone: after what it sent before
                if not self._receive_link():
                    self._driver_lost()
                return
            if goodbye:
                link.flush_within(1.0)  # as a closing socket lingers
                return
            if link.wants_write != polling_writes:  # poll for room in the pipe while output waits
                polling_writes = link.wants_write
                if polling_writes:
                    poller.register(link.write_fd, zmq.POLLOUT)
                else:
                    poller.unregister(link.write_fd)
            if link.read_fd in events and self._receive_link():
                return

    def _receive_link(self):
        """Handle the frames the link holds; True when the driver is gone (or broke the
        link), after the frames it sent before."""
        link = self._link
        for frame in link.receive():
            self._from_driver_frame(frame)
        if link.error is not None:
            error = DriverConnectionError(f"the driver {self.address} broke the link: {link.error}")
            log.error("%s", error)
            self._connection_failed(error)
            return True
        if link.closed_by_peer:
            self._driver_lost()
            return True
        return False

    def _send_outbox(self, send):
        """Send what the calling threads queued since the last turn, each frame with
        ``send`` (the socket's or the link's); True once a ClientGoodbye has gone."""
        goodbye = False
        for msg in self._messages_for_driver():
            send(p.encode(msg))
            goodbye = msg.TYPE == MsgType.CLIENT_GOODBYE
        return goodbye

    def _messages_for_driver(self):
        """The messages for the driver out of what the calling threads queued since the
        last turn, in their order, then a ForgetFunctions when this client holds too many
        functions at the driver; nothing after a ClientGoodbye. Called by the thread that
        talks to the driver: the I/O thread, or the thread of a driver in this process."""
        messages = self._queued_messages()
        held = self._held_functions
        if held.over_limit() and self._lost is None and not (
                messages and messages[-1].TYPE == MsgType.CLIENT_GOODBYE):
            with self._submit_lock:
                released = held.release(self._pinned_functions())
            if released:
                messages = [*messages, p.ForgetFunctions(released)]
        return messages

    def _queued_messages(self):
        """The messages for the driver out of what the calling threads queued since the
        last turn (see ``_messages_for_driver``)."""
        outbox = self._outbox
        if not self._cancels and len(outbox) <= 1:
            if not outbox:
                return ()
            if type(outbox[0][0]) is int:
                # a lone task (a caller that waits for each result): no pass over the
                # queue. Only this thread pops, so the row seen is the row taken.
                return self._lone_task_messages(outbox.popleft())
        # cancels first: a task cancelled before this turn's items were taken is among
        # them (sent now: withdrawn) or left in an earlier turn (its CancelTasks may go first)
        cancels = self._cancels
        cancels = list(itertools.islice(iter(cancels.popleft, None), len(cancels)))
        items = list(itertools.islice(iter(outbox.popleft, None), len(outbox)))
        if not (items or cancels):
            return ()
        messages = []
        has_control = set(map(type, map(_first, items))) - {int}
        if cancels:
            cancelled = set(cancels)
            unsent = cancelled.intersection(map(_first, items))
            if unsent:  # cancelled before they left: they never will
                items = [item for item in items if item[0] not in unsent]
            cancelled -= unsent
            if cancelled and self._lost is None:  # these left in earlier turns
                messages.append(p.CancelTasks(sorted(cancelled)))
        if not has_control:
            self._submit_messages(items, messages)
            return messages
        start = 0
        for index, item in enumerate(items):
            if type(item[0]) is int:  # a task
                continue
            self._submit_messages(items[start:index], messages)  # control messages keep their place
            start = index + 1
            if item[0] == "admin":
                messages.append(item[1])
            elif item[0] == "hello":
                messages.append(p.ClientHello(item[1]))
            elif item[0] == "goodbye":
                messages.append(p.ClientGoodbye())
                if self._channel is not None:  # no thread of ours ends: say so here
                    self._io_stopped = True
                    self._io_done.set()
                return messages
        self._submit_messages(items[start:], messages)
        return messages

    def _lone_task_messages(self, row):
        """``_submit_messages`` for one task row: it fits in a frame with its function
        (``submit`` checked that)."""
        if self._lost is not None:
            return ()
        digest = row[1]
        blob = self._function_to_send(digest)
        if blob is False:
            self._fail_unsendable([row])
            return ()
        if blob is None:
            return [p.SubmitTasks({}, [row])]
        self._held_functions.add(digest, len(self._function_blobs.pop(digest)))
        return [p.SubmitTasks({digest: blob}, [row])]

    def _function_to_send(self, digest):
        """For tasks of ``digest`` leaving now: None when the driver holds the function,
        else its pickle to send with them, or False when this client can no longer send it
        (``_fail_unsendable``)."""
        held = self._held_functions
        if digest in held:
            held.used(digest)
            self._function_blobs.pop(digest, None)  # pickled again by a submit: not needed
            return None
        return self._function_blobs.get(digest, False)

    def _submit_messages(self, tasks, messages):
        """Append to ``messages`` the SubmitTasks for these task rows, with the functions
        the driver does not hold; no frame larger than the limit."""
        if not tasks or self._lost is not None:
            return
        limit = self._max_message_size
        blobs, held = self._function_blobs, self._held_functions
        for start in range(0, len(tasks), _FRAME_TASKS):
            frame_tasks = tasks[start:start + _FRAME_TASKS]
            used = set(map(itemgetter(1), frame_tasks))
            new = set()
            for digest in used:
                blob = self._function_to_send(digest)
                if blob is False:
                    frame_tasks = self._fail_unsendable(frame_tasks, digest)
                elif blob is not None:
                    new.add(digest)
            size = sum(map(len, map(itemgetter(2), frame_tasks))) + sum(len(blobs[d]) for d in new)
            if size <= limit:  # the usual case: one frame, sized in C
                batches = [({digest: blobs[digest] for digest in new}, frame_tasks)]
            else:
                batches = p.batch_tasks(frame_tasks, 1, 2, blobs, used - new, limit)
            for functions, batch in batches:
                messages.append(p.SubmitTasks(functions, batch))
                for digest, blob in functions.items():  # the driver holds it now
                    held.add(digest, len(blob))
                    blobs.pop(digest, None)

    def _fail_unsendable(self, rows, digest=None):
        """Fail the tasks among ``rows`` (those of ``digest``, or all) whose function this
        client can no longer send, and return the others. It happens only to a task whose
        submitter took its function's digest from the cache just before a thousand other
        functions pushed it out and it was released (``HeldFunctions``)."""
        kept = []
        for row in rows:
            if digest is not None and row[1] != digest:
                kept.append(row)
                continue
            future = self._futures.pop(row[0], None)
            if future is not None:
                future.set_exception(TaskFailed(
                    f"task {row[0]}: its function was released while it was submitted; submit it again"))
        return kept

    def _pinned_functions(self):
        """Digests not to release now: those a submit or a map may use without pickling
        the function again, and those of tasks queued for the next turn (whose submitter
        may have found the function's pickle gone, taken by an earlier task of it). Called
        under ``_submit_lock``, which a submit that pickles its function holds until its
        task is queued."""
        pinned = {entry[0] for entry in list(self._function_cache.values())}
        pinned.add(self._last_function[1])
        pinned.update(list(self._mapping))
        pinned.update(item[1] for item in list(self._outbox) if type(item[0]) is int)
        return pinned

    def _receive(self, drain=False):
        """Handle the messages waiting from the driver. Unless ``drain``, stop after the
        first frame once new submissions wait to leave: while a calling thread floods the client, each
        ``recv`` gives that thread the GIL and waits to get it back, so a long run of them
        would leave the driver without tasks."""
        sock = self._socket
        state = self._socket_state
        # ZMQ_EVENTS rather than recv until zmq.Again: an exception per turn costs more
        first = True
        while state.events() & _POLLIN:
            if not (first or drain) and (self._outbox or self._cancels):
                return  # one frame per turn at least: results are never starved either
            first = False
            self._from_driver_frame(sock.recv(zmq.NOBLOCK))

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
            future = self._admin_futures.get(msg.request_id)
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

    def _in_driver_thread(self):
        """Whether the caller is the thread of a driver in this process, which must never
        run the user's code: it completes this client's futures."""
        return self._channel is not None and self._channel.in_driver_thread()

    def _run_callbacks_later(self, future):
        """Run ``future``'s done-callbacks in the client's callback thread, in order."""
        with self._callback_lock:
            if self._callback_queue is None:
                self._callback_queue = queue.SimpleQueue()
                threading.Thread(target=self._callback_loop, args=(self._callback_queue,),
                                 name="zsched-client-callbacks", daemon=True).start()
            self._callback_queue.put(future)

    @staticmethod
    def _callback_loop(futures):
        while True:
            future = futures.get()
            if future is None:
                return
            future._invoke_callbacks_now()  # logs and goes on when a callback raises
            del future  # nor held, with its result, until the next one comes

    def _driver_stopped(self):
        """The driver in this process stopped (its thread says so as it ends): what is
        pending fails, as when a remote driver's connection is lost."""
        self._io_stopped = True
        self._io_done.set()
        if self._lost is None:
            self._driver_lost()

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

    # ------------------------------------------------------------ shutting down

    def shutdown(self, wait=True, *, cancel_futures=False, _now=False):
        with self._submit_lock:
            already = self._shutdown
            self._shutdown = True
        if already and self._closed:
            return
        if cancel_futures:
            for future in list(self._futures.values()):
                future.cancel()
        if _now:  # the cluster is going away: close at once
            self._close()
        elif wait:
            concurrent.futures.wait(list(self._futures.values()))
            self._close()
        else:
            threading.Thread(target=self._close_when_done, name="zsched-client-close",
                             daemon=True).start()

    def _close_when_done(self):
        concurrent.futures.wait(list(self._futures.values()))
        self._close()

    def _close(self):
        if self._closed:
            return
        self._closed = True
        if not self._io_stopped:
            with self._submit_lock:
                self._queue_control(("goodbye",))
            # the I/O thread, or the driver's thread in this process, sends it or stops
            # (not waited for in the driver's thread itself: a done-callback that shuts down)
            if not self._in_driver_thread():
                self._io_done.wait(self.timeout)
            if self._io_thread is not None:
                self._io_thread.join(self.timeout)
        self._fail_all(TaskFailed("the client was shut down"))
        with self._callback_lock:
            if self._callback_queue is not None:
                self._callback_queue.put(None)  # the callbacks queued before it still run
                self._callback_queue = None     # one queued later starts a thread of its own
        self._close_resources()
        if self._owned_cluster is not None:
            self._owned_cluster.close()

    def _close_resources(self):
        if self._channel is not None:
            return  # no socket; the wake-up pipe is the channel's
        if self._link is not None:
            self._link.close()
        sock = self._socket
        if sock is not None:
            sock.disable_monitor()
            self._monitor.close(linger=0)
            sock.close(linger=0 if self._lost else 1000)
        if self._context is not None:
            self._context.term()
        self._wakeup.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.shutdown(wait=True)
        return False


class _MapTasks:
    """The tasks of one ``map``: its calls grouped into tasks, submitted on demand."""

    def __init__(self, client, fn, iterables, chunksize, retries, progress_total):
        self.client = client
        self.retries = retries
        self.chunked = chunksize > 1
        if self.chunked:
            fn, self.groups = CallsRunner(fn), chunks(iterables, chunksize)
        else:
            self.groups = ((args, 1) for args in zip(*iterables))
        with client._submit_lock:
            client._check_open()
            self.digest, self.fn_size = client._function_digest(fn)
            # pickled once for every task of this map: not released before the last is out
            client._mapping[self.digest] = client._mapping.get(self.digest, 0) + 1
        self.bar = None
        if progress_total is not False:
            self.bar = ProgressBar(progress_total, desc="map")

    def submit(self, n):
        """Futures of the next ``n`` tasks at most (fewer once the calls run out)."""
        submitted = self.client._submit_groups(self.digest, self.fn_size,
                                               itertools.islice(self.groups, n), self.retries)
        if self.bar is not None:
            count = count_calls if self.chunked else None
            for future, calls in submitted:
                self.bar.watch(future, calls, count)
        return [future for future, _ in submitted]

    def submit_one(self):
        """The next task's future, or None once the calls are all out."""
        return next(iter(self.submit(1)), None)

    def release_function(self):
        client = self.client
        with client._submit_lock:
            left = client._mapping.pop(self.digest) - 1
            if left:
                client._mapping[self.digest] = left

    def end(self):
        """The map is over before all its tasks ended: its bar closes now."""
        self.release_function()
        if self.bar is not None:
            self.bar.close()


def _counted(iterables):
    """``(iterables, calls)``: the iterables, read into lists where they have no length,
    and how many calls they make."""
    if all(hasattr(it, "__len__") for it in iterables):
        return iterables, min(map(len, iterables), default=0)
    if len(iterables) == 1:
        values = list(iterables[0])
        return [values], len(values)
    rows = list(zip(*iterables))
    return list(map(list, zip(*rows))) or [[]], len(rows)


class ClientOptions:
    """``client.options(retries=N)``: ``submit`` and ``map`` of a client with other options."""

    def __init__(self, client, retries):
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.client = client
        self.retries = retries

    def submit(self, fn, /, *args, **kwargs):
        return self.client._submit(self.retries, fn, args, kwargs)

    def map(self, fn, *iterables, timeout=None, chunksize=None, buffersize=None, progress=False):
        return self.client._map(self.retries, fn, iterables, timeout, chunksize, buffersize, progress)
