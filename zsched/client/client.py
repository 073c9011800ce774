"""``Client``, the ``concurrent.futures.Executor`` of zsched, and its ``ClientOptions`` view.

A client is made of three parts, each owning its state: an ``Outbox`` (what waits to leave
for the driver, the function table, the submit lock), a ``FutureTable`` (futures by id,
completing them, the callback thread) and a transport (``transport.py``: a socket, pipes,
or the channel of a driver in this process). The client itself is the Executor contract
and the administration requests.

Threads: calling threads submit (they write the outbox and the future table); the thread
that talks to the driver (the transport's I/O thread, or a driver's thread in this
process) sends the outbox and completes futures; the table's callback thread runs the
done-callbacks of futures completed by a driver's thread.
"""
import concurrent.futures
import logging
import os
import pickle
import threading
import weakref


from .. import protocol as p
from ..config import Config, check_url
from ..async_closing import AsyncClosing
from ..embedded import start_cluster
from ..broadcast import Broadcast, made_here
from ..errors import ConfigError, DriverConnectionError, MessageTooLarge, TaskFailed
from ..payload import DATA_PART_MIN as _PART_MIN
from ..payload import small_buffers_in_band as _in_band
from ..runtime import gc_untrack
from ..secret_file import SECRET_ENV, SECRET_FILE_ENV
from ..security import load_keys
from .channel_transport import ChannelTransport
from .cluster_admin import ClusterAdmin
from .future import TaskFuture
from .future_table import FutureTable
from .map_tasks import run_map
from .options import ClientOptions
from .outbox import Outbox
from .task_data import stored_or_refused
from .pipe_transport import PipeTransport
from .socket_transport import SocketTransport

_dumps = pickle.dumps
_PROTOCOL = pickle.HIGHEST_PROTOCOL
_connected = []  # weak references to the clients, in the order they connected: current()

log = logging.getLogger(__package__)



def _keys_to_connect(address, secret_file, insecure):
    """The CURVE keys a client connects to ``address`` with (None: ``insecure``); ConfigError
    when it has no credential and is not told insecure, or holds an executor's."""
    if insecure:
        return None
    keys = load_keys(secret_file)
    if keys is None:
        raise ConfigError(
            f"no credential to connect to {address}: give secret_file=..., set "
            f"{SECRET_FILE_ENV} or {SECRET_ENV}, or pass insecure=True to connect "
            f"without authentication or encryption")
    if keys.role == "executor":
        raise ConfigError(f"the credential of executor {keys.executor_id} cannot connect a "
                          "client: give the cluster secret or a client credential")
    return keys


class Client(ClusterAdmin, AsyncClosing, concurrent.futures.Executor):
    """Submit Python callables to a zsched driver.

    ``Client()`` starts an embedded local cluster (its driver in a thread of this process,
    and one executor process per core) and stops it at shutdown; the driver's thread takes
    this client's tasks and completes its futures itself (their done-callbacks run in a
    thread of the client's, and results are unpickled by the thread that asks for them).
    ``Client("tcp://host:port", secret_file=...)`` connects to a running driver. Its
    credential is ``secret_file``, else the secret in ``ZSCHED_SECRET``, else the file
    named by ``ZSCHED_SECRET_FILE``. Without one it raises ``ConfigError`` and connects to
    nothing. ``insecure=True`` connects without authentication or encryption, which only a
    driver started with ``--insecure`` accepts; it ignores a credential in the environment.
    ``Client.in_process(channel)`` and ``Client.over_pipes(link, address)`` connect to a
    driver in this process, or over pipes whose other end it holds
    (``LocalCluster.client()`` makes both).
    """

    def __init__(self, address=None, *, secret_file=None, insecure=False, timeout=30, retries=0):
        if insecure and secret_file is not None:
            raise ValueError("secret_file and insecure=True contradict each other")
        self._set_up(address, timeout, retries)
        if address is None:
            # the driver in a thread of this process: no socket, no CURVE, no TCP, and no
            # thread of the client's between the caller and the driver
            cluster = start_cluster(os.cpu_count() or 1)
            try:
                self._connect(ChannelTransport(cluster.channel, timeout, self._outbox, self._futures))
            except BaseException:
                cluster.close()
                raise
            self._owned_cluster = cluster
            cluster.keep(self)  # closed first when its cluster closes (at exit too)
            return
        check_url("address", address)
        keys = _keys_to_connect(address, secret_file, insecure)
        self._connect(SocketTransport(address, timeout, self._outbox, self._futures, keys))

    @classmethod
    def in_process(cls, channel, *, timeout=30, retries=0):
        """A client of the driver running in this process that serves ``channel`` (a
        ``zsched.channel.Channel``): no socket and no I/O thread; the driver's thread takes
        this client's tasks and completes its futures (their done-callbacks run in a thread
        of the client's)."""
        client = cls.__new__(cls)
        client._set_up(channel.address, timeout, retries)
        client._connect(ChannelTransport(channel, timeout, client._outbox, client._futures))
        return client

    @classmethod
    def over_pipes(cls, link, address, *, timeout=30, retries=0):
        """A client that talks to a driver over ``link``, a ``PipeLink`` whose other end the
        driver holds (``LocalCluster.client()``); ``address`` names the driver in messages.
        The pipes reach the driver alone: nothing to authenticate."""
        client = cls.__new__(cls)
        client._set_up(address, timeout, retries)
        client._connect(PipeTransport(address, timeout, client._outbox, client._futures, link))
        return client

    def _set_up(self, address, timeout, retries):
        """The parts every client starts with, connected to nothing yet."""
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.address = address
        self.timeout = timeout
        self.retries = retries
        self._owned_cluster = None
        self._shutdown = False
        self._closed = False
        self._transport = None
        self._cores_answer = None  # Future of the total cores, for the next map
        self._futures = FutureTable(self._cancelled, self._in_driver_thread)
        self._outbox = Outbox(self._futures, self._wake)

    def _cancelled(self, task_id):
        self._outbox.queue_cancel(task_id)

    def _in_driver_thread(self):
        return self._transport is not None and self._transport.in_driver_thread()

    def _wake(self):
        self._wakeup.wake()

    def _connect(self, transport):
        """Connect over ``transport``, then have it serve."""
        self._transport = transport
        self._wakeup = transport.wakeup
        self.address = transport.address
        try:
            welcome = transport.connect()
            config = Config.from_driver(welcome.settings)
        except BaseException:
            transport.close()
            raise
        self.app_id = welcome.app_id
        self.incarnation = welcome.incarnation
        self.config = config
        self._outbox.max_message_size = self.config.max_message_size
        transport.welcomed(self.config)
        self._cores_answer = self._request(p.AdminTotalCores)  # for the first map
        transport.start()
        _connected.append(weakref.ref(self))

    @classmethod
    def current(cls):
        """The open client this process connected last; ValueError when there is none."""
        while _connected:
            client = _connected[-1]()
            if client is not None and not client.closed:
                return client
            _connected.pop()
        raise ValueError("no zsched client is open in this process")

    def _repr_html_(self):
        """The client in a notebook: its driver's address, executors, cores and tasks."""
        from ..notebook import status_table
        title = "zsched Client" + (" (closed)" if self.closed else "")
        if self.closed:
            return status_table(title, self.address)
        try:
            return status_table(title, self.address, status=self._admin(p.AdminStatus, timeout=5))
        except Exception as exc:  # a repr never raises: it says why it has no figures
            return status_table(title, self.address, error=f"cannot ask the driver: {exc}")

    @property
    def closed(self):
        """Whether this client is shut down (or shutting down): it takes no more tasks."""
        return self._shutdown

    # ------------------------------------------------------------ submitting

    def submit(self, fn, /, *args, **kwargs):
        return self._submit(self.retries, fn, args, kwargs)

    def map(self, fn, *iterables, timeout=None, chunksize=None, buffersize=None, progress=False):
        """Like ``Executor.map``: results in order, each call's exception raised at its place.

        ``chunksize`` runs that many calls per task. By default a large map chooses the
        calls per task from the number of calls and the executors' cores, fewer towards its
        end so that the cores finish together. ``buffersize`` (as in Python 3.14)
        keeps at most that many calls submitted ahead of the caller, and reads the
        iterables only as needed. ``progress=True`` shows a live bar of the calls."""
        return self._map(self.retries, fn, iterables, timeout, chunksize, buffersize, progress)

    def options(self, *, retries=None, hosts=None, speculative=True):
        """A view of this client whose ``submit`` and ``map`` use these options (see
        ``ClientOptions``)."""
        return ClientOptions(self, self.retries if retries is None else retries, hosts, speculative)

    def broadcast(self, value, timeout=None):
        """A ``Broadcast`` of ``value`` (Spark's ``sc.broadcast``): the driver keeps the
        value, pickled once, and sends it to each executor at most once, at its first task
        that uses it. Give tasks the handle, as an argument or in a closure; in a task,
        ``handle.value`` is the value. ``handle.destroy()`` frees it everywhere. Raises
        ``DataRefused`` past the driver's ``driver_data_limit``. A value larger than
        ``max_message_size`` travels in chunks."""
        puts, size = self._outbox.task_data.broadcast(value, self._outbox.max_message_size)
        keys = [put.key for put in puts]
        with self._outbox.lock:
            self._check_open()
            stored = [self._futures.broadcasts.setdefault(key, concurrent.futures.Future())
                      for key in keys]
            for put in puts:
                self._outbox.queue_control(put)
        refused = stored_or_refused(stored, self.timeout if timeout is None else timeout, size)
        if refused is not None:
            for key in keys:
                self._futures.broadcasts.pop(key, None)
            self._outbox.queue_control(p.ForgetData(keys))
            raise refused
        return made_here(Broadcast(keys[-1], value, lambda key: self._destroy_broadcast(keys)))

    def _destroy_broadcast(self, keys):
        if not self._shutdown and self._futures.lost is None:
            self._outbox.queue_control(p.ForgetData(keys))

    def _check_open(self):
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        if self._futures.lost is not None:
            raise self._futures.lost

    def _submit(self, retries, fn, args, kwargs, placement=None):
        # a flood's hot path, without a lock: shutdown and a lost driver are checked again
        # once the future is registered, so one racing with them never stays pending
        futures = self._futures
        if self._shutdown or futures.lost is not None:
            self._check_open()
        outbox = self._outbox
        last = outbox.last_function  # one tuple: read at once, whatever other threads do
        lock = None
        if fn is last[0]:
            digest, fn_size = last[1], last[2]
        else:
            # held until the row is queued: the function (pickled now, or held by the
            # driver) is not released meanwhile (``Outbox._pinned_functions``)
            lock = outbox.lock
            lock.acquire()
        try:
            if lock is not None:
                digest, fn_size = outbox.function_digest(fn)
            task_id = next(futures.task_ids)
            future = TaskFuture(futures, task_id, futures.condition)
            try:  # payload.quick_pickle, inlined: this is a flood's path
                payload = _dumps((args, kwargs), _PROTOCOL, buffer_callback=_in_band)
            except Exception:
                payload = None
            put = None
            if payload is None or len(payload) >= _PART_MIN:  # large, or cloudpickle's: see task_data
                payload, size, put = outbox.task_data.payload(task_id, (args, kwargs))
            else:
                size = len(payload)
            if size + fn_size > outbox.max_message_size:
                return self._too_large(future, size + fn_size)
            futures.tasks[task_id] = future
            if put is not None:
                outbox.queue_data(future, put)
            row = [task_id, digest, payload, retries]
            if placement is not None:
                row.append(placement)
                outbox.placed = True
            gc_untrack(row)  # ints and bytes: in no cycle
            outbox.rows.append(row)
        finally:
            if lock is not None:
                lock.release()
        wakeup = self._wakeup
        if not wakeup.pending:  # else the sending thread is awake and takes this row too
            wakeup.wake()
        if self._shutdown or futures.lost is not None:
            self._submitted_while_closing(future)
        return future

    def _too_large(self, future, size):
        future.set_exception(MessageTooLarge(f"task {future.task_id}", size,
                                             self._outbox.max_message_size))
        return future

    def _map(self, retries, fn, iterables, timeout, chunksize, buffersize, progress, placement=None):
        self._outbox.placed |= placement is not None
        return run_map(self._outbox, self._futures, self._check_open, self._total_cores,
                       retries, fn, iterables, timeout, chunksize, buffersize, progress, placement)

    def _submitted_while_closing(self, future):
        """``future`` was registered while the client shut down or lost its driver: the
        shutdown or the failing sweep may have missed it. After a lost driver it fails
        like the others; after a shutdown the submission is withdrawn (cancelled, and
        ``RuntimeError`` as for any submit after shutdown) unless it already completed."""
        lost = self._futures.lost
        if lost is not None:
            self._futures.fail(future.task_id, lost)
            return
        if future.cancel():
            raise RuntimeError("cannot schedule new futures after shutdown")

    def _total_cores(self):
        """Cores of the registered executors, as the driver counted them when last asked.
        Each map takes the answer to the request sent before it (at connection, or by the
        previous map) and asks again for the next one: a map does not wait on the driver."""
        with self._outbox.lock:
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
        with self._outbox.lock:
            if self._futures.lost is not None:
                raise self._futures.lost
            if self._outbox.stopped:
                raise RuntimeError("the client is shut down")
            request_id = next(self._futures.request_ids)
            msg = message_type(request_id, *args)
            p.check(msg)  # what the driver's decode would refuse fails here, not there
            future = self._futures.add_request(request_id)
            self._outbox.queue_control(msg)
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

    # ------------------------------------------------------------ the connection

    @property
    def transport(self):
        """How this client reaches its driver: "socket", "pipes" or "in-process"."""
        return self._transport.kind

    @property
    def socket(self):
        """The DEALER connected to the driver (None over pipes or in process). Its options
        may be read; only the client's I/O thread uses it."""
        return getattr(self._transport, "socket", None)

    @property
    def link(self):
        """The ``PipeLink`` to the driver (None unless the client talks over pipes)."""
        return getattr(self._transport, "link", None)

    @property
    def connection_error(self):
        """The DriverConnectionError that ended the connection, or None while it holds."""
        return self._futures.lost

    # ------------------------------------------------------------ shutting down

    def shutdown(self, wait=True, *, cancel_futures=False):
        with self._outbox.lock:
            already = self._shutdown
            self._shutdown = True
        if already and self._closed:
            return
        if cancel_futures:
            self._cancel_queued()
        if wait:
            concurrent.futures.wait(list(self._futures.tasks.values()))
            self._close()
        else:
            threading.Thread(target=self._close_when_done, name="zsched-client-close",
                             daemon=True).start()

    def _cancel_queued(self):
        """Cancel the futures of the tasks no executor holds yet, as the driver finds them;
        those an executor holds go on, as ``Executor.shutdown(cancel_futures=True)``
        leaves running futures alone."""
        if self._futures.tasks and not self._in_driver_thread():
            try:
                self._admin(p.CancelQueuedTasks)  # cancelled when it returns
                return
            except (DriverConnectionError, RuntimeError) as exc:
                log.warning("cancelling every pending future: %s", exc)
        for future in list(self._futures.tasks.values()):
            future.cancel()

    def close(self):
        """Shut down at once: tasks not started are cancelled, and futures of tasks still
        running fail with TaskFailed. Used when the cluster itself goes away."""
        with self._outbox.lock:
            self._shutdown = True
        for future in list(self._futures.tasks.values()):
            future.cancel()
        self._close()

    def _close_when_done(self):
        concurrent.futures.wait(list(self._futures.tasks.values()))
        self._close()

    def _close(self):
        if self._closed:
            return
        self._closed = True
        if not self._outbox.stopped:
            with self._outbox.lock:
                self._outbox.queue_control(p.ClientGoodbye())
            # the I/O thread, or the driver's thread in this process, sends it or stops
            self._transport.wait_stopped(self.timeout)
        self._futures.fail_all(TaskFailed("the client was shut down"))
        self._futures.stop_callbacks()
        self._transport.close()
        if self._owned_cluster is not None:
            self._owned_cluster.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.shutdown(wait=True)
        return False
