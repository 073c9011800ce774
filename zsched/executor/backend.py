"""The executor backend: registers with the driver, runs tasks, sends status updates.

The thread that calls ``run`` owns the DEALER socket and runs the loop; ``cores`` task
threads run tasks taken from a local queue and hand results back through a deque and a
wake-up pipe, so status updates leave in batches of whatever finished meanwhile. The
per-task path takes no lock and makes no system call while work is queued: task threads
take tasks from a deque (they wait on a condition only when it is empty), write the
wake-up pipe only while the loop sleeps, and take the kill lock only while a KillTask is
pending (see ``_run_here``).

A lone task reaching an idle one-core executor is run by the loop's own thread instead,
and its status update leaves at once: two thread hand-offs fewer, which is most of what
an executor adds to one task's latency. While such a task runs the loop stands still; if
it runs longer than ``INLINE_GRACE`` a relief thread, woken by a kernel timer (no wake-up
at all for shorter tasks), takes the socket and runs the loop (heartbeats, KillTask,
StopExecutor, ...) until the task ends and the loop's thread takes it back.

An executor that a driver started on its own host (``--driver-fds``) talks to it over the
pipe pair it inherited (``pipe_link``) instead of a DEALER: the same frames, with fewer
thread wake-ups per message.
"""
import argparse
import ctypes
import logging
import os
import pickle
import select
import signal
import sys
import threading
import time
from collections import deque
from operator import itemgetter

import cloudpickle
import psutil
import zmq

from .. import fastpath
from .. import protocol as p
from ..config import Config
from ..errors import ConfigError, MessageTooLarge, exception_payload
from ..fastpath import SocketState
from ..pipe_link import PipeLink
from ..protocol import MsgType, TaskState
from ..security import HandshakeWatch, load_keys, make_client
from ..socket_events import recv_event
from ..wakeup import WakeupPipe

log = logging.getLogger("zsched.executor")  # also when run as __main__
_POLLIN = int(zmq.POLLIN)  # a plain int: an IntFlag & makes an enum
_digest_of = itemgetter(2)  # of a LaunchTasks row

REGISTRATION_TIMEOUT_ENV = "ZSCHED_REGISTRATION_TIMEOUT"
USAGE = """\
Usage: zsched-executor [options]

 Options are:
   --driver-url <driverUrl>
   --executor-id <executorId>
   --hostname <hostname>
   --cores <cores>
   --app-id <appid>
   --worker-url <workerUrl>
   --secret-file <path>
   --driver-fds <readFd>,<writeFd>
   --log-level <level>
"""


class TaskKilled(BaseException):
    """Raised inside a task's thread to interrupt it (KillTask)."""


class RegistrationError(Exception):
    pass


# A task run by the loop's own thread that is still running after this long has the relief
# thread take over the loop: until then heartbeats, kills and new launches wait (at most
# this long), after it the hand-over costs about two thread wake-ups (small next to the task).
INLINE_GRACE = 0.005


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


class _TimerSpec(ctypes.Structure):
    """struct itimerspec on 64-bit Linux."""
    _fields_ = [("interval_sec", ctypes.c_long), ("interval_nsec", ctypes.c_long),
                ("value_sec", ctypes.c_long), ("value_nsec", ctypes.c_long)]


def _ctypes_set_timer(timerfd_settime):
    """``set_timer(fd, seconds, nanoseconds)`` through ctypes: a one-shot ``timerfd_settime``."""
    timerfd_settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    specs = {}  # (seconds, nanoseconds) -> its _TimerSpec: a timer is set to a few values

    def set_timer(fd, seconds, nanoseconds):
        spec = specs.get((seconds, nanoseconds))
        if spec is None:
            spec = specs[seconds, nanoseconds] = _TimerSpec(0, 0, seconds, nanoseconds)
        return timerfd_settime(fd, 0, ctypes.byref(spec), None)
    return set_timer


class KernelTimer:
    """A one-shot Linux timerfd: ``arm`` and ``disarm`` are one system call each and wake no
    thread; ``fd`` becomes readable when the time is up. ``create`` returns None where there
    is none (not Linux, or not 64-bit). The calls are compiled (``_pipe_link.set_timer``),
    or go through ctypes with the pure-Python fast path."""

    @classmethod
    def create(cls, seconds):
        if not sys.platform.startswith("linux") or ctypes.sizeof(ctypes.c_long) != 8:
            return None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            timerfd_create, timerfd_settime = libc.timerfd_create, libc.timerfd_settime
        except (OSError, AttributeError):
            return None
        clock_monotonic = 1
        fd = timerfd_create(clock_monotonic, os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            return None
        if fastpath.COMPILED:
            from .._pipe_link import set_timer
        else:
            set_timer = _ctypes_set_timer(timerfd_settime)
        return cls(fd, set_timer, seconds)

    def __init__(self, fd, set_timer, seconds):
        self.fd = fd
        self._set = set_timer  # (fd, seconds, nanoseconds)
        self._seconds = int(seconds)
        self._nanoseconds = max(1, int((seconds - self._seconds) * 1e9))

    def arm(self):
        self._set(self.fd, self._seconds, self._nanoseconds)

    def disarm(self):
        self._set(self.fd, 0, 0)

    def fire_now(self):
        self._set(self.fd, 0, 1)

    def clear(self):
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            pass

    def close(self):
        os.close(self.fd)


class ExecutorBackend:
    def __init__(self, driver_url, executor_id, hostname, cores, app_id, *, keys=None,
                 worker_url=None, registration_timeout=30.0, clock=time.monotonic,
                 driver_fds=None):
        self.driver_url = driver_url
        self.executor_id = executor_id
        self.hostname = hostname
        self.cores = cores
        self.app_id = app_id
        self.keys = keys
        self.worker_url = worker_url
        self.registration_timeout = registration_timeout
        self.clock = clock
        self.config = Config()
        self.incarnation = None
        self.context = zmq.Context()
        self.socket = None
        self._socket_state = None
        # (read fd, write fd) inherited from the driver that started this executor: its link
        # to the driver instead of the socket (see pipe_link)
        self.link = None
        if driver_fds is not None:
            self.link = PipeLink(*driver_fds, p.frame_limit(self.config.max_message_size))
        self._driver_key = None              # what the poller reports for the driver's input
        self._early_frames = []              # read from the link with the registration's answer
        self._work = deque()                 # [task id, attempt, function entry, args] for task threads
        self._work_ready = threading.Condition()  # task threads wait on it while _work is empty
        self._results = deque()              # [task id, attempt, state, payload] for the loop
        # digest -> [cloudpickled function, the function once a task thread unpickled it];
        # each task's row holds its function's entry (``_on_launch_tasks``)
        self._functions = {}
        self._running = {}                   # task id -> (attempt, thread ident)
        self._killed = set()                 # (task id, attempt) killed before or while running
        self._lock = threading.Lock()        # serialises KillTask with task threads (see _run_here)
        self._wakeup = WakeupPipe()
        self._busy = 0.0                     # seconds spent in tasks since the last StatusUpdates
        self._outstanding = 0                # tasks launched here and not yet reported
        self._decommissioning = False
        self._kill_deadlines = {}            # (task id, attempt) -> when the task reaper acts
        self._monitor = None                 # events of the driver connection
        self._worker = None                  # (socket, monitor) of the --worker-url connection
        self._poller = None
        self._next_heartbeat = 0.0
        self._last_heard = 0.0               # when the driver was last heard from
        self._threads = []
        self._stopping = None                # reason, once the loop must end
        self._exit_code = 0
        self._driver_gone = False            # nothing more to tell the driver
        self._charge_tasks = True            # the driver counts this exit against its tasks
        self._reaper_exit = False            # a task thread cannot be stopped: leave at once
        self._worker_deadline = None
        self._process = psutil.Process()
        # a lone task on an idle one-core executor runs in the loop's thread (see the
        # module's docstring); the relief thread covers the loop while such a task runs long
        self._timer = None                   # KernelTimer of the relief thread
        self._relief = None                  # the relief thread, when tasks may run inline
        self._lone = None                    # a task received, to run inline after this turn
        self._inline_task = None             # the task running inline, until the loop is back
        self._deferred = []                  # tasks launched meanwhile (the one core is busy)
        self._handover = threading.Lock()    # guards _inline_running and _covering
        self._inline_running = False
        self._covering = False               # the relief thread runs the loop
        self._handed_back = threading.Event()
        self._relief_exit = False

    # ------------------------------------------------------------ registration

    def connect(self):
        """A DEALER connected to the driver, with this executor's config's ZMTP heartbeats."""
        sock = self.context.socket(zmq.DEALER)
        sock.linger = 2000
        sock.sndhwm = 100_000
        sock.rcvhwm = 100_000
        sock.heartbeat_ivl = int(self.config.zmq_heartbeat_interval * 1000)
        sock.heartbeat_timeout = int(self.config.zmq_heartbeat_timeout * 1000)
        sock.heartbeat_ttl = int(self.config.zmq_heartbeat_timeout * 1000)
        if self.keys is not None:
            make_client(sock, self.keys)
        watch = HandshakeWatch(sock, has_secret=self.keys is not None)
        sock.connect(self.driver_url)
        return sock, watch

    def register(self):
        """Fetch the driver's settings, then register; RegistrationError says why not.

        ZeroMQ applies heartbeat options to connections made after they are set, so the
        connection that stays must be made with the driver's zmq_heartbeat_* settings: they
        come first over a connection of their own, as a client asks for them (Spark's
        executors fetch SparkAppConfig the same way before they register)."""
        deadline = self.clock() + self.registration_timeout
        if self.link is not None:
            msg = self._exchange_over_link(p.RegisterExecutor(
                self.executor_id, self.hostname, self.cores, self.app_id, os.getpid()), deadline)
            self.incarnation = msg.incarnation
            self.config = Config.from_mapping(msg.settings)
            self.link.max_frame = p.frame_limit(self.config.max_message_size)
            log.info("Successfully registered with driver %s (over pipes) as executor %s",
                     self.driver_url, self.executor_id)
            return
        sock, watch = self.connect()
        try:
            welcome = self._exchange(sock, watch, p.ClientHello(os.getpid()), deadline)
            sock.send(p.encode(p.ClientGoodbye()))
        finally:
            watch.close()
            sock.close(linger=200)
        self.config = Config.from_mapping(welcome.settings)
        sock, watch = self.connect()
        self.socket = sock
        self._socket_state = SocketState(sock)  # its ZMQ_EVENTS, read cheaply
        try:
            msg = self._exchange(sock, watch, p.RegisterExecutor(
                self.executor_id, self.hostname, self.cores, self.app_id, os.getpid()), deadline)
        finally:
            watch.close()
        self.incarnation = msg.incarnation
        self.config = Config.from_mapping(msg.settings)
        log.info("Successfully registered with driver %s as executor %s",
                 self.driver_url, self.executor_id)

    def _exchange(self, sock, watch, request, deadline):
        """Send ``request`` and wait until ``deadline`` for the driver's answer to it
        (ClientWelcome or RegisteredExecutor); RegistrationError says why not."""
        sock.send(p.encode(request))
        expected = p.ClientWelcome if isinstance(request, p.ClientHello) else p.RegisteredExecutor
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(watch.socket, zmq.POLLIN)
        poller.register(self._wakeup.fd, zmq.POLLIN)
        while True:
            if self._stopping is not None:
                raise RegistrationError(f"Registration with driver {self.driver_url} abandoned: "
                                        f"{self._stopping}")
            failure = watch.check()
            if failure:
                raise RegistrationError(f"Cannot register with driver: {self.driver_url} "
                                        f"(authentication failed: {failure})")
            remaining = deadline - self.clock()
            if remaining <= 0:
                raise RegistrationError(f"Cannot register with driver: {self.driver_url}")
            events = dict(poller.poll(remaining * 1000))
            if sock not in events:
                continue
            msg = self._answer_in(sock.recv(), expected)
            if msg is not None:
                return msg

    def _answer_in(self, frame, expected):
        """The driver's answer to a registration step if ``frame`` holds it (``expected``,
        a message class), else None; RegistrationError if the driver refused."""
        try:
            msg = p.decode(frame)
        except p.ProtocolError as exc:
            log.warning("ignored a malformed message from the driver: %s", exc)
            return None
        if isinstance(msg, p.RegisterExecutorFailed):
            raise RegistrationError(f"Registration refused by driver {self.driver_url}: "
                                    f"{msg.reason}")
        if isinstance(msg, expected):
            return msg
        log.warning("ignored %s before registration", type(msg).__name__)
        return None

    def _exchange_over_link(self, request, deadline):
        """``_exchange`` over the link: no handshake, and the settings come with the answer."""
        link = self.link
        try:
            link.send(p.encode(request))
        except BrokenPipeError:
            raise RegistrationError(f"Cannot register with driver {self.driver_url}: "
                                    "its pipe is closed") from None
        while True:
            if self._stopping is not None:
                raise RegistrationError(f"Registration with driver {self.driver_url} abandoned: "
                                        f"{self._stopping}")
            remaining = deadline - self.clock()
            if remaining <= 0:
                raise RegistrationError(f"Cannot register with driver: {self.driver_url}")
            wanted = [link.write_fd] if link.wants_write else []
            select.select([link.read_fd, self._wakeup.fd], wanted, [], remaining)
            try:
                link.flush()
            except BrokenPipeError:
                raise RegistrationError(f"Cannot register with driver {self.driver_url}: "
                                        "its pipe is closed") from None
            frames = link.receive()
            for i, frame in enumerate(frames):
                msg = self._answer_in(frame, p.RegisteredExecutor)
                if msg is not None:
                    # what came with the answer (tasks, at once) is for the loop
                    self._early_frames = frames[i + 1:]
                    return msg
            if link.error is not None:
                raise RegistrationError(f"Cannot register with driver {self.driver_url}: "
                                        f"it broke the link: {link.error}")
            if link.closed_by_peer:
                raise RegistrationError(f"Cannot register with driver {self.driver_url}: "
                                        "it closed its pipe")

    # ------------------------------------------------------------ loop

    def run(self):
        """Register, serve until stopped; returns the process exit code."""
        try:
            self.register()
        except RegistrationError as exc:
            print(str(exc), file=sys.stderr, flush=True)
            self._close(linger=0)
            return 1
        for i in range(self.cores):
            thread = threading.Thread(target=self._task_thread, name=f"task-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)
        if self.cores == 1:
            self._timer = KernelTimer.create(INLINE_GRACE)
            if self._timer is not None:
                self._relief = threading.Thread(target=self._relief_thread, name="relief",
                                                daemon=True)
                self._relief.start()
        try:
            self._loop()
        finally:
            self._close(linger=0 if self._driver_gone else 2000)
        log.info("executor %s stopped: %s", self.executor_id, self._stopping)
        if self._reaper_exit:  # a thread stuck in a task would block the interpreter's exit
            logging.shutdown()
            os._exit(self._exit_code)
        return self._exit_code

    def _loop(self):
        poller = self._poller = zmq.Poller()
        poller.register(self._wakeup.fd, zmq.POLLIN)
        if self.link is not None:  # its end of file ends this executor
            self._driver_key = self.link.read_fd
            poller.register(self._driver_key, zmq.POLLIN)
            if self.link.wants_write:
                poller.register(self.link.write_fd, zmq.POLLOUT)
        else:
            self._driver_key = self.socket
            poller.register(self.socket, zmq.POLLIN)
            # registered: from now on a lost connection to the driver ends this executor (the
            # driver has dropped it too: a reconnection would be a stranger to it)
            self._monitor = self.socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            poller.register(self._monitor, zmq.POLLIN)
        if self.worker_url:
            self._worker = self._watch_worker()
            poller.register(self._worker[1], zmq.POLLIN)
        self._last_heard = self._next_heartbeat = self.clock()
        if self.link is not None:  # what came with the registration's answer
            for frame in self._early_frames:
                self._handle_frame(frame)
            self._early_frames = []
            self._check_link()
            if self._lone is not None and self._stopping is None:
                self._run_inline()
        while self._stopping is None:
            self._turn()
            if self._lone is not None and self._stopping is None:
                self._run_inline()
        self._leave()

    def _turn(self):
        """One turn of the loop: wait for something to do, then do it. Run by the loop's
        thread, or by the relief thread while the loop's thread runs a task."""
        now = self.clock()
        if now >= self._next_heartbeat:
            self._send_heartbeat()
            self._next_heartbeat = now + self.config.executor_heartbeat_interval
        driver = self._driver_key
        # Task threads write the wake-up pipe only while ``pending`` is False, that is while
        # this thread sleeps in poll with no result to send: while it is awake they make no
        # system call, and this turn takes every row added meanwhile.
        wakeup = self._wakeup
        wakeup.pending = False
        if self._results:  # after pending: a row added later wakes the poll
            events = dict(self._poller.poll(0))
        else:
            events = dict(self._poller.poll(max(0.0, min(self._next_heartbeat - now, 1.0)) * 1000))
        wakeup.pending = True
        # silence counts only when nothing is waiting: after this process itself was
        # stalled (a task holding the GIL), the driver's answers are already here
        if (driver not in events
                and self.clock() - self._last_heard > self.config.executor_heartbeat_timeout):
            self._stop(f"driver silent for {self.config.executor_heartbeat_timeout:g} s", 1,
                       driver_gone=True)
            return
        if self._worker is not None and self._worker[1] in events:
            self._worker_event()
        if wakeup.fd in events:
            wakeup.drain()
        self._send_status_updates()
        if self._kill_deadlines:
            self._reap_killed_tasks()
        self._check_worker()
        if self._decommissioning and self._outstanding == 0:
            self._stop("decommissioned", 0, charge_tasks=False)
            return
        if self.link is not None:
            self._serve_link(events)
        elif driver in events:
            self._last_heard = self.clock()
            socket = self.socket
            while self._stopping is None:
                try:
                    frame = socket.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self._handle_frame(frame)
                # whether more waits: a recv that raises zmq.Again costs several times more
                if not self._socket_state.events() & _POLLIN:
                    break
        if self._monitor in events:  # after what the driver sent before it went
            self._stop("lost the connection to the driver", 1, driver_gone=True)

    def _handle_frame(self, frame):
        try:
            msg = p.decode(frame)
        except p.ProtocolError as exc:
            log.warning("ignored a malformed message from the driver: %s", exc)
            return
        handler = self._handlers.get(msg.TYPE)
        if handler is None:
            log.warning("ignored %s: not a message for an executor", type(msg).__name__)
        else:
            handler(self, msg)

    def _serve_link(self, events):
        """Write what the link holds, if the pipe takes it now; handle what came in."""
        link = self.link
        if link.write_fd in events:
            self._flush_link()
        if link.read_fd not in events:
            return
        self._last_heard = self.clock()
        for frame in link.receive():
            if self._stopping is not None:
                break
            self._handle_frame(frame)
        self._check_link()

    def _check_link(self):
        """Stop if the driver broke the link or closed it (after what it sent before)."""
        if self._stopping is not None:
            return
        if self.link.error is not None:
            self._stop(f"the driver broke the link: {self.link.error}", 1, driver_gone=True)
        elif self.link.closed_by_peer:
            self._stop("lost the connection to the driver", 1, driver_gone=True)

    def _flush_link(self):
        """Write the link's output; poll for room in the pipe while some is left."""
        link = self.link
        try:
            done = link.flush()
        except BrokenPipeError:
            self._stop("lost the connection to the driver", 1, driver_gone=True)
            return
        if done:
            self._poller.unregister(link.write_fd)

    def _leave(self):
        if not self._driver_gone:
            # finished work and why this executor leaves reach the driver at once, rather
            # than leave it to notice the lost connection
            self._send_status_updates()
            self._send(p.RemoveExecutor(self.executor_id, self._stopping, self._charge_tasks))

    # ------------------------------------------------------------ inline tasks

    def _run_inline(self):
        """Run the lone task in this thread (the loop's) and report it at once. The relief
        thread may take the loop meanwhile; it is taken back before this returns."""
        task = self._inline_task = self._lone
        self._lone = None
        with self._handover:
            self._inline_running = True
        self._timer.arm()
        row = self._run_here(task)
        self._timer.disarm()
        self._results.append(row)
        with self._handover:
            self._inline_running = False
            covered = self._covering
        if covered:  # the relief thread runs the loop: have it back
            self._wakeup.wake_always()
            self._handed_back.wait()
            self._handed_back.clear()
        self._inline_task = None
        if self._deferred:
            self._queue_tasks(self._deferred)
            self._deferred.clear()
        self._send_status_updates()

    def _relief_thread(self):
        """Sleep until an inline task has run for ``INLINE_GRACE``, then run the loop until
        that task ends (so that heartbeats, kills and stops are handled meanwhile)."""
        timer = self._timer
        while True:
            select.select([timer.fd], [], [])
            timer.clear()
            if self._relief_exit:
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
                if self._stopping is not None:
                    self._exit_while_a_task_runs()
                self._turn()
            self._handed_back.set()

    def _exit_while_a_task_runs(self):
        """The loop must end while the loop's own thread is in a task, which may never
        return: say goodbye, close and end the process from here."""
        log.info("executor %s stopped: %s (a task was still running)", self.executor_id,
                 self._stopping)
        self._leave()
        self._close(linger=0 if self._driver_gone else 2000)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(self._exit_code)

    def _stop(self, reason, exit_code, driver_gone=False, charge_tasks=True):
        """End the loop; unless the driver is gone or sent the stop, it hears why, and
        whether the tasks held here should count this as one of their failures."""
        if self._stopping is None:
            self._stopping = reason
            self._exit_code = exit_code
            self._driver_gone = driver_gone
            self._charge_tasks = charge_tasks

    def request_stop(self, reason):
        """Stop the loop (or registration); safe from signal handlers and other threads."""
        self._stop(reason, 0)
        self._wakeup.wake_always()

    def _on_launch_tasks(self, msg):
        functions = self._functions
        for digest, blob in msg.functions.items():
            functions[digest] = [blob, None]
        tasks = msg.tasks
        # each row holds its function's entry in place of the digest: a ForgetFunctions
        # that comes before the task runs cannot take its function away (None: a function
        # the driver did not send; the task reports that)
        for row, entry in zip(tasks, list(map(functions.get, map(_digest_of, tasks)))):
            row[2] = entry
        idle = self._outstanding == 0
        self._outstanding += len(tasks)
        if self._decommissioning:  # launched before the driver knew: give them back
            self._give_back(tasks)
            return
        if self._lone is not None:  # more came before the lone task started: it queues first
            tasks = [self._lone, *tasks]
            self._lone = None
        elif idle and len(tasks) == 1 and self._relief is not None and not self._covering:
            self._lone = tasks[0]  # run by the loop's thread at the end of this turn
            return
        if self._inline_task is not None:  # the one core runs a task inline: these wait
            self._deferred.extend(tasks)
            return
        self._queue_tasks(tasks)

    def _give_back(self, tasks):
        """Report ``tasks`` (not started) as RETURNED, in their order; the next turn sends
        the rows."""
        self._results.extend([task_id, attempt, TaskState.RETURNED, b""]
                             for task_id, attempt, _, _ in tasks)

    def _queue_tasks(self, tasks):
        """Hand ``tasks`` to the task threads: one notification for the lot."""
        self._work.extend(tasks)
        with self._work_ready:
            self._work_ready.notify(len(tasks))

    def _on_decommission_executor(self, msg):
        """Take nothing new, give back what has not started, finish what runs, then exit 0."""
        log.info("executor %s decommissioned: %s", self.executor_id, msg.reason)
        self._decommissioning = True
        self._wakeup.wake_always()  # the next turn does not sleep: it may be time to leave
        unstarted = self._deferred + ([self._lone] if self._lone is not None else [])
        self._deferred.clear()
        self._lone = None
        while True:
            try:
                unstarted.append(self._work.popleft())  # task threads may take some meanwhile
            except IndexError:
                break
        self._give_back(unstarted)

    def _on_return_tasks(self, msg):
        """Give back up to ``msg.count`` tasks not started yet, the newest first."""
        unstarted = []
        while len(unstarted) < msg.count:
            if self._deferred:
                unstarted.append(self._deferred.pop())
                continue
            try:
                task = self._work.pop()  # task threads take from the other end meanwhile
            except IndexError:
                break
            if task is None:  # closing: the task threads' stop signals stay
                self._work.append(task)
                break
            unstarted.append(task)
        self._give_back(reversed(unstarted))

    def _on_kill_task(self, msg):
        if self._outstanding == 0:
            return  # reported already: nothing here to kill
        key = (msg.task_id, msg.attempt)
        with self._lock:
            self._killed.add(key)  # before _running is read: see _run_here
            running = self._running.get(msg.task_id)
            if running is None or running[0] != msg.attempt:
                return
            # under the lock: the task's thread withdraws it when the task leaves _running
            _raise_in_thread(running[1], TaskKilled)
        # an exception reaches a thread only when it runs Python code: a task blocked in
        # C (sleep, I/O, a lock) may not stop, and then the task reaper ends this process
        self._kill_deadlines[key] = self.clock() + self.config.task_kill_timeout

    def _reap_killed_tasks(self):
        """Spark's task reaper: a killed task still running after ``task_kill_timeout``
        takes its executor down (the driver replaces it); nothing else can stop it."""
        now = self.clock()
        with self._lock:
            running = dict(self._running)
        for key, deadline in list(self._kill_deadlines.items()):
            task_id, attempt = key
            if running.get(task_id, (None,))[0] != attempt:
                del self._kill_deadlines[key]
            elif now >= deadline:
                reason = (f"task {task_id} did not stop within task_kill_timeout "
                          f"({self.config.task_kill_timeout:g} s) of being killed")
                log.error("%s: exiting (task reaper)", reason)
                self._stop(reason, 1, charge_tasks=False)  # the driver's kill caused it
                self._reaper_exit = True

    def _on_probe(self, msg):
        pass

    def _on_stop_executor(self, msg):
        log.info("driver asked executor %s to stop: %s", self.executor_id, msg.reason)
        self._stop(f"stopped by the driver: {msg.reason}", 0, driver_gone=True)

    def _on_shutdown(self, msg):
        self._stop("driver shut down", 0, driver_gone=True)

    def _on_heartbeat_ack(self, msg):
        if msg.incarnation != self.incarnation:
            self._stop("driver restarted (new incarnation)", 1, driver_gone=True)

    def _on_forget_functions(self, msg):
        """The driver dropped these functions (no client needs them): so does this
        executor. A task launched here before keeps its own (``_on_launch_tasks``)."""
        functions = self._functions
        for digest in msg.digests:
            functions.pop(digest, None)

    _handlers = {
        MsgType.LAUNCH_TASKS: _on_launch_tasks,
        MsgType.FORGET_FUNCTIONS: _on_forget_functions,
        MsgType.KILL_TASK: _on_kill_task,
        MsgType.STOP_EXECUTOR: _on_stop_executor,
        MsgType.SHUTDOWN: _on_shutdown,
        MsgType.HEARTBEAT_ACK: _on_heartbeat_ack,
        MsgType.DECOMMISSION_EXECUTOR: _on_decommission_executor,
        MsgType.RETURN_TASKS: _on_return_tasks,
        MsgType.PROBE: _on_probe,
    }

    def _send(self, msg):
        link = self.link
        if link is not None:
            waiting = link.wants_write
            try:
                link.send(p.encode(msg))
            except BrokenPipeError:
                self._stop("lost the connection to the driver", 1, driver_gone=True)
                return
            if link.wants_write and not waiting and self._poller is not None:
                self._poller.register(link.write_fd, zmq.POLLOUT)  # until the pipe takes it
            return
        try:
            self.socket.send(p.encode(msg), zmq.NOBLOCK)
        except zmq.Again:
            log.warning("could not send %s: the driver is not reading", type(msg).__name__)

    def _send_heartbeat(self):
        with self._process.oneshot():
            metrics = {"rss": self._process.memory_info().rss,
                       "cpu": self._process.cpu_percent(None),
                       "busy_threads": len(self._running),
                       "functions": len(self._functions)}
        self._send(p.Heartbeat(self.incarnation, self.executor_id, metrics))

    def _send_status_updates(self):
        results = self._results
        if not results:
            return
        popleft = results.popleft  # task threads append meanwhile: take what is there now
        rows = [popleft() for _ in range(len(results))]
        self._outstanding -= len(rows)
        if self._outstanding == 0 and self._killed:
            with self._lock:  # nothing launched here is left: kills that came late are moot
                self._killed.clear()
        busy, self._busy = self._busy, 0.0
        for batch in p.batch_rows(rows, 3, self.config.max_message_size):
            self._send(p.StatusUpdates(self.incarnation, busy * len(batch) / len(rows), batch))

    # ------------------------------------------------------------ worker watch

    def _watch_worker(self):
        """Connect to ``--worker-url`` (the ZeroMQ endpoint of the process that started
        this executor) only to share its fate, as Spark's WorkerWatcher: when that
        connection is lost, or cannot be made within the registration timeout, exit."""
        sock = self.context.socket(zmq.DEALER)
        sock.linger = 0
        sock.heartbeat_ivl = int(self.config.zmq_heartbeat_interval * 1000)
        sock.heartbeat_timeout = int(self.config.zmq_heartbeat_timeout * 1000)
        monitor = sock.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        sock.connect(self.worker_url)
        self._worker_deadline = self.clock() + self.registration_timeout
        return sock, monitor

    def _worker_event(self):
        event, _, _ = recv_event(self._worker[1])
        if event == zmq.EVENT_CONNECTED:
            self._worker_deadline = None
            log.info("watching worker %s", self.worker_url)
        elif event == zmq.EVENT_DISCONNECTED:
            self._stop(f"lost the connection to worker {self.worker_url}", 1)

    def _check_worker(self):
        if (self._worker is not None and self._worker_deadline is not None
                and self.clock() > self._worker_deadline):
            self._stop(f"cannot connect to worker {self.worker_url}", 1)

    # ------------------------------------------------------------ task threads

    def _task_thread(self):
        work, ready, results, wakeup = self._work, self._work_ready, self._results, self._wakeup
        run = self._run_here
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

    def _run_here(self, task):
        """Run a task in this thread, where KillTask can interrupt it; its status row.

        No lock is taken while no kill is pending. The task is published in ``_running``
        before ``_killed`` is looked at, and ``_on_kill_task`` adds to ``_killed`` before it
        looks at ``_running`` (under ``_lock``, raising TaskKilled in the thread it finds):
        so either this thread sees the kill, or the kill sees the task. Whenever ``_killed``
        is not empty as a task starts or ends, this thread takes ``_lock``, which also waits
        for a KillTask in progress, and withdraws a TaskKilled not yet raised that was meant
        for this task (see ``_consume_kill``)."""
        task_id, attempt, function_entry, args = task
        running = self._running
        running[task_id] = (attempt, threading.get_ident())
        started = time.perf_counter()
        try:
            if self._killed and self._consume_kill(task_id, attempt):
                state, payload = TaskState.KILLED, b"killed before it started"
            else:
                state, payload = self._run_task(task_id, function_entry, args)
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
        """Whether a KillTask for this attempt is pending; if so it is used up, and the
        TaskKilled it may have raised in this thread, if not raised yet, is withdrawn: it
        must not hit this thread later, in another task."""
        key = (task_id, attempt)
        with self._lock:
            if key not in self._killed:
                return False
            self._killed.discard(key)
            _raise_in_thread(threading.get_ident(), None)
            return True

    def _run_task(self, task_id, function_entry, args):
        """Call the task's function (its ``_functions`` entry); (state, payload) of its
        status row. A TaskKilled after the call has returned reaches ``_run_here``."""
        if function_entry is None:
            return TaskState.ERROR, b"the driver did not send the task's function to this executor"
        try:
            function = function_entry[1]
            if function is None:  # unpickled once per executor, by the first task to need it
                function = function_entry[1] = pickle.loads(function_entry[0])
            call_args, call_kwargs = pickle.loads(args)
            value = function(*call_args, **call_kwargs)
        except TaskKilled:
            return TaskState.KILLED, b"killed while running"
        except BaseException as exc:  # SystemExit and MemoryError fail the task only
            return TaskState.FAILED, exception_payload(exc)
        try:
            payload = dumps_value(value)
        except Exception as exc:
            return TaskState.ERROR, f"the result of task {task_id} could not be pickled: {exc!r}".encode()
        if len(payload) > self.config.max_message_size:
            return TaskState.ERROR, str(MessageTooLarge(
                f"the result of task {task_id}", len(payload), self.config.max_message_size)).encode()
        return TaskState.FINISHED, payload

    # ------------------------------------------------------------ closing

    def _close(self, linger=2000):
        if self._threads:
            self._work.extend([None] * len(self._threads))  # each task thread takes one and ends
            with self._work_ready:
                self._work_ready.notify_all()
        if self._relief is not None and self._relief is not threading.current_thread():
            self._relief_exit = True
            self._timer.fire_now()
            self._relief.join(5)
            self._timer.close()
        if self._worker is not None:
            for sock in self._worker:
                sock.close(linger=0)
        if self._monitor is not None:
            self.socket.disable_monitor()
            self._monitor.close(linger=0)
        if self.socket is not None:
            self.socket.close(linger=linger)
        if self.link is not None:
            try:
                self.link.flush_within(linger / 1000)
            except BrokenPipeError:
                pass  # the driver is gone: nobody to tell
            self.link.close()
        self.context.term()
        self._wakeup.close()


# ---------------------------------------------------------------- command line

class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _UsageError(message)


def _fd_pair(text):
    """``--driver-fds READ,WRITE``: two open descriptors inherited from the driver."""
    try:
        read_fd, write_fd = (int(part) for part in text.split(","))
        for fd in (read_fd, write_fd):
            os.fstat(fd)
    except (ValueError, OSError, OverflowError):
        raise argparse.ArgumentTypeError(
            f"--driver-fds must be two open file descriptors READ,WRITE, got {text!r}") from None
    return read_fd, write_fd


def _registration_timeout():
    """``ZSCHED_REGISTRATION_TIMEOUT`` if set, else the default; ConfigError naming it if bad."""
    value = os.environ.get(REGISTRATION_TIMEOUT_ENV)
    if not value:
        return Config().registration_timeout
    try:
        return Config(registration_timeout=value).registration_timeout
    except ConfigError as exc:
        raise ConfigError(f"{REGISTRATION_TIMEOUT_ENV}: {exc}") from None


def parse_args(argv):
    parser = _Parser(prog="zsched-executor", add_help=False)
    parser.add_argument("--driver-url", required=True)
    parser.add_argument("--executor-id", required=True)
    parser.add_argument("--hostname", required=True)
    parser.add_argument("--cores", required=True, type=int)
    parser.add_argument("--app-id", required=True)
    parser.add_argument("--worker-url", default=None)
    parser.add_argument("--secret-file", default=None)
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--driver-fds", default=None, type=_fd_pair)
    args = parser.parse_args(argv)
    if not 1 <= args.cores <= p.MAX_CORES:
        raise _UsageError(f"--cores must be from 1 to {p.MAX_CORES}, got {args.cores}")
    if not isinstance(logging.getLevelName(args.log_level.upper()), int):
        raise _UsageError(f"--log-level must be DEBUG, INFO, WARNING or ERROR, got {args.log_level}")
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv in (["--help"], ["-h"]):
        sys.stdout.write(USAGE)
        return 0
    try:
        args = parse_args(argv)
    except _UsageError as exc:
        sys.stderr.write(f"{exc}\n{USAGE}")
        return 1
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s executor {args.executor_id}: %(message)s")
    try:
        keys = load_keys(args.secret_file)
        timeout = _registration_timeout()
    except ConfigError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    backend = ExecutorBackend(args.driver_url, args.executor_id, args.hostname, args.cores,
                              args.app_id, keys=keys, worker_url=args.worker_url,
                              registration_timeout=timeout, driver_fds=args.driver_fds)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: backend.request_stop(
            f"received signal {signal.Signals(signum).name}"))
    return backend.run()

