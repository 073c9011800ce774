"""``Client``, the ``concurrent.futures.Executor`` of zsched, and its ``ClientOptions`` view:
connecting, submitting and mapping, the administration requests, and shutting down."""
import concurrent.futures
import itertools
import logging
import os
import threading
import time
from collections import deque

import zmq

from .. import protocol as p
from ..config import Config, check_url
from ..errors import DriverConnectionError, TaskFailed
from .future import FuturesCondition
from .held_functions import HeldFunctions
from .map_calls import TASKS_PER_CORE, auto_chunk_size, check_chunk_arguments, MapResults, tasks_ahead
from ..security import load_keys
from ..wakeup import WakeupPipe
from ..embedded import start_cluster
from .in_process import InProcess
from .map_tasks import MapTasks, counted
from .pipe_io import PipeIO
from .results import Results
from .socket_io import SocketIO
from .submission import Submission

log = logging.getLogger(__package__)

_MAP_BATCH = 4096  # map hands tasks to the I/O thread in groups of this many


class Client(Submission, Results, SocketIO, PipeIO, InProcess,
             concurrent.futures.Executor):
    """Submit Python callables to a zsched driver.

    Its parts share one state, set up by ``_set_up``: ``Submission`` queues tasks and
    turns the queue into messages, ``Results`` completes futures, and ``SocketIO``,
    ``PipeIO`` and ``InProcess`` talk to the driver over a socket, pipes or a channel.

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
            self._owned_cluster = start_cluster(os.cpu_count() or 1)
            try:
                self._start_in_process(self._owned_cluster.channel)
            except BaseException:
                self._owned_cluster.close()
                raise
            return
        check_url("address", address)
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
        self._admin_futures = {}          # request id -> Future of a request not answered
        self._cores_answer = None         # Future of the total cores, for the next map
        # tasks ([id, digest, args, retries]) and control tuples, in order: callers append,
        # only the thread that sends pops, all at once, so a flood leaves in large frames
        self._outbox = deque()
        self._cancels = deque()           # task ids cancelled since the I/O thread's last turn
        self._function_blobs = {}         # digest -> cloudpickled function not yet sent
        self._held_functions = HeldFunctions()  # the functions the driver holds for this client
        self._function_cache = {}         # function -> (digest, size)
        self._last_function = (None, None, 0)  # (function, digest, size) of the last submit
        self._mapping = {}                # digest -> maps submitting tasks of it now
        # held while submitting may be stopped (shutdown, a lost driver); submit re-checks
        # instead, to keep a lock off its path. Reentrant: done-callbacks may submit
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

    def _welcomed(self, welcome):
        self.app_id = welcome.app_id
        self.incarnation = welcome.incarnation
        self.config = Config.from_mapping(welcome.settings)
        self._max_message_size = self.config.max_message_size
        self._cores_answer = self._request(p.AdminTotalCores)  # for the first map

    def submit(self, fn, /, *args, **kwargs):
        return self._submit(self.retries, fn, args, kwargs)

    def map(self, fn, *iterables, timeout=None, chunksize=None, buffersize=None, progress=False):
        """Like ``Executor.map``: results in order, each call's exception raised at its place.

        ``chunksize`` runs that many calls per task. By default a large map chooses it from
        the number of calls and the executors' cores. ``buffersize`` (as in Python 3.14)
        keeps at most that many calls submitted ahead of the caller, and reads the
        iterables only as needed. ``progress=True`` shows a live bar of the calls."""
        return self._map(self.retries, fn, iterables, timeout, chunksize, buffersize, progress)

    def options(self, *, retries=None):
        """A view of this client whose ``submit`` and ``map`` use these options."""
        return ClientOptions(self, self.retries if retries is None else retries)

    def _map(self, retries, fn, iterables, timeout, chunksize, buffersize, progress):
        check_chunk_arguments(chunksize, buffersize)
        end_time = None if timeout is None else timeout + time.monotonic()
        calls = None  # unknown with a buffersize: the iterables may not end
        if buffersize is None and (chunksize is None or progress):
            iterables, calls = counted(iterables)
        if chunksize is None:
            wanted = calls if buffersize is None else buffersize
            chunksize = 1 if wanted < 2 * TASKS_PER_CORE else auto_chunk_size(wanted, self._total_cores())
        tasks = MapTasks(self, fn, iterables, chunksize, retries, calls if progress else False)
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

    def _total_cores(self):
        """Cores of the registered executors, as the driver counted them when last asked.
        Each map takes the answer to the request sent before it (at connection, or by the
        previous map) and asks again for the next one: a map does not wait on the driver."""
        with self._submit_lock:
            answer = self._cores_answer
            self._cores_answer = self._request(p.AdminTotalCores)
        return self._answer(answer or self._cores_answer, p.AdminTotalCores)

    # ------------------------------------------------------------ administration

    def _admin(self, message_type, *args, timeout=None):
        """Send admin message ``message_type`` with these arguments; what the driver
        answers (a ValueError when it refused; ``ProtocolError``, a ValueError, for
        arguments of the wrong types)."""
        return self._answer(self._request(message_type, *args), message_type, timeout)

    def _request(self, message_type, *args):
        """Send admin message ``message_type`` with these arguments: the future of the
        driver's answer."""
        with self._submit_lock:
            if self._lost is not None:
                raise self._lost
            if self._io_stopped:
                raise RuntimeError("the client is shut down")
            request_id = next(self._admin_ids)
            msg = message_type(request_id, *args)
            p.check(msg)  # what the driver's decode would refuse fails here, not there
            future = self._admin_futures[request_id] = concurrent.futures.Future()
            self._queue_control(("admin", msg))
        return future

    def _answer(self, future, message_type, timeout=None):
        """The driver's answer to a request of ``message_type``, waited for ``timeout``
        seconds at most (default: the client's timeout)."""
        try:
            return future.result(self.timeout if timeout is None else timeout)
        except concurrent.futures.TimeoutError:
            operation = getattr(message_type, "OP", message_type.TYPE).name.lower()
            raise DriverConnectionError(
                f"driver {self.address} did not answer {operation} within {self.timeout:g} s") from None

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

    # ------------------------------------------------------------ the connection

    @property
    def transport(self):
        """How this client reaches its driver: "socket", "pipes" or "in-process"."""
        if self._channel is not None:
            return "in-process"
        return "pipes" if self._link is not None else "socket"

    @property
    def socket(self):
        """The DEALER connected to the driver (None over pipes or in process). Its options
        may be read; only the client's I/O thread uses it."""
        return self._socket

    @property
    def link(self):
        """The ``PipeLink`` to the driver (None unless the client talks over pipes)."""
        return self._link

    @property
    def connection_error(self):
        """The DriverConnectionError that ended the connection, or None while it holds."""
        return self._lost

    # ------------------------------------------------------------ shutting down

    def shutdown(self, wait=True, *, cancel_futures=False):
        with self._submit_lock:
            already = self._shutdown
            self._shutdown = True
        if already and self._closed:
            return
        if cancel_futures:
            self._cancel_queued()
        if wait:
            concurrent.futures.wait(list(self._futures.values()))
            self._close()
        else:
            threading.Thread(target=self._close_when_done, name="zsched-client-close",
                             daemon=True).start()

    def _cancel_queued(self):
        """Cancel the futures of the tasks no executor holds yet, as the driver finds them;
        those an executor holds go on, as ``Executor.shutdown(cancel_futures=True)``
        leaves running futures alone."""
        if self._futures and not self._in_driver_thread():
            try:
                self._admin(p.CancelQueuedTasks)  # cancelled when it returns
                return
            except (DriverConnectionError, RuntimeError) as exc:
                log.warning("cancelling every pending future: %s", exc)
        for future in list(self._futures.values()):
            future.cancel()

    def close(self):
        """Shut down at once: tasks not started are cancelled, and futures of tasks still
        running fail with TaskFailed. Used when the cluster itself goes away."""
        with self._submit_lock:
            self._shutdown = True
        for future in list(self._futures.values()):
            future.cancel()
        self._close()

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
        if self._io_thread is not None and self._io_thread.is_alive():
            # one thread owns the socket: one that did not stop in time keeps it
            log.warning("the client's I/O thread did not stop within %s s", self.timeout)
            return
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
