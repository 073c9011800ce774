"""The executor backend: registers with the driver, runs tasks, sends status updates.

The main thread owns the DEALER socket and runs the loop; ``cores`` task threads run
tasks taken from a local queue and hand results back through a deque and a wake-up pipe,
so status updates leave in batches of whatever finished meanwhile.
"""
import argparse
import ctypes
import logging
import os
import pickle
import queue
import signal
import sys
import threading
import time
from collections import deque

import cloudpickle
import psutil
import zmq
from zmq.utils.monitor import recv_monitor_message

from . import protocol as p
from .config import Config
from .errors import ConfigError, MessageTooLarge, exception_payload
from .protocol import MsgType, TaskState
from .security import HandshakeWatch, load_keys, make_client
from .wakeup import WakeupPipe

log = logging.getLogger("zsched.executor")  # also when run as __main__

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
   --log-level <level>
"""


class TaskKilled(BaseException):
    """Raised inside a task's thread to interrupt it (KillTask)."""


class RegistrationError(Exception):
    pass


def dumps_value(value):
    """Pickle a result: plain pickle when it can, cloudpickle for lambdas and the like."""
    try:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


class ExecutorBackend:
    def __init__(self, driver_url, executor_id, hostname, cores, app_id, *, keys=None,
                 worker_url=None, registration_timeout=30.0, clock=time.monotonic):
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
        self._work = queue.SimpleQueue()     # (task id, attempt, digest, args) for task threads
        self._results = deque()              # [task id, attempt, state, payload] for the loop
        self._function_blobs = {}            # digest -> cloudpickled function
        self._functions = {}                 # digest -> function, unpickled by a task thread
        self._running = {}                   # task id -> (attempt, thread ident)
        self._killed = set()                 # (task id, attempt) killed before or while running
        self._lock = threading.Lock()        # guards _running and _killed
        self._wakeup = WakeupPipe()
        self._busy = 0.0                     # seconds spent in tasks since the last StatusUpdates
        self._outstanding = 0                # tasks launched here and not yet reported
        self._decommissioning = False
        self._kill_deadlines = {}            # (task id, attempt) -> when the task reaper acts
        self._monitor = None                 # events of the driver connection
        self._worker = None                  # (socket, monitor) of the --worker-url connection
        self._threads = []
        self._stopping = None                # reason, once the loop must end
        self._exit_code = 0
        self._driver_gone = False            # nothing more to tell the driver
        self._charge_tasks = True            # the driver counts this exit against its tasks
        self._reaper_exit = False            # a task thread cannot be stopped: leave at once
        self._worker_deadline = None
        self._process = psutil.Process()

    # ------------------------------------------------------------ registration

    def connect(self):
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
        self.socket = sock
        return watch

    def register(self):
        """Send RegisterExecutor and wait for the answer; RegistrationError says why not."""
        watch = self.connect()
        try:
            self.socket.send(p.encode(p.RegisterExecutor(
                self.executor_id, self.hostname, self.cores, self.app_id, os.getpid())))
            deadline = self.clock() + self.registration_timeout
            poller = zmq.Poller()
            poller.register(self.socket, zmq.POLLIN)
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
                if self.socket not in events:
                    continue
                try:
                    msg = p.decode(self.socket.recv())
                except p.ProtocolError as exc:
                    log.warning("ignored a malformed message from the driver: %s", exc)
                    continue
                if isinstance(msg, p.RegisterExecutorFailed):
                    raise RegistrationError(f"Registration refused by driver {self.driver_url}: "
                                            f"{msg.reason}")
                if isinstance(msg, p.RegisteredExecutor):
                    self.incarnation = msg.incarnation
                    self.config = Config.from_mapping(msg.settings)
                    log.info("Successfully registered with driver %s as executor %s",
                             self.driver_url, self.executor_id)
                    return
                log.warning("ignored %s before registration", type(msg).__name__)
        finally:
            watch.close()

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
        poller = zmq.Poller()
        poller.register(self.socket, zmq.POLLIN)
        poller.register(self._wakeup.fd, zmq.POLLIN)
        # registered: from now on a lost connection to the driver ends this executor (the
        # driver has dropped it too: a reconnection would be a stranger to it)
        self._monitor = self.socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        poller.register(self._monitor, zmq.POLLIN)
        if self.worker_url:
            self._worker = self._watch_worker()
            poller.register(self._worker[1], zmq.POLLIN)
        handlers = self._handlers
        interval = self.config.executor_heartbeat_interval
        last_heard = self.clock()
        next_heartbeat = self.clock()
        while self._stopping is None:
            now = self.clock()
            if now >= next_heartbeat:
                self._send_heartbeat()
                next_heartbeat = now + interval
            events = dict(poller.poll(max(0.0, min(next_heartbeat - now, 1.0)) * 1000))
            # silence counts only when nothing is waiting: after this process itself was
            # stalled (a task holding the GIL), the driver's answers are already here
            if (self.socket not in events
                    and self.clock() - last_heard > self.config.executor_heartbeat_timeout):
                self._stop(f"driver silent for {self.config.executor_heartbeat_timeout:g} s", 1,
                           driver_gone=True)
                break
            if self._worker is not None and self._worker[1] in events:
                self._worker_event()
            if self._wakeup.fd in events:
                self._wakeup.clear()
            self._send_status_updates()
            if self._kill_deadlines:
                self._reap_killed_tasks()
            self._check_worker()
            if self._decommissioning and self._outstanding == 0:
                self._stop("decommissioned", 0, charge_tasks=False)
                break
            if self.socket in events:
                last_heard = self.clock()
                while self._stopping is None:
                    try:
                        frame = self.socket.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    try:
                        msg = p.decode(frame)
                    except p.ProtocolError as exc:
                        log.warning("ignored a malformed message from the driver: %s", exc)
                        continue
                    handler = handlers.get(msg.TYPE)
                    if handler is None:
                        log.warning("ignored %s: not a message for an executor", type(msg).__name__)
                    else:
                        handler(self, msg)
            if self._monitor in events:  # after what the driver sent before it went
                self._stop("lost the connection to the driver", 1, driver_gone=True)
        if not self._driver_gone:
            # finished work and why this executor leaves reach the driver at once, rather
            # than leave it to notice the lost connection
            self._send_status_updates()
            self._send(p.RemoveExecutor(self.executor_id, self._stopping, self._charge_tasks))

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
        self._function_blobs.update(msg.functions)
        self._outstanding += len(msg.tasks)
        if self._decommissioning:  # launched before the driver knew: give them back
            self._results.extend([task_id, attempt, TaskState.RETURNED, b""]
                                 for task_id, attempt, _, _ in msg.tasks)
            self._wakeup.wake()
            return
        put = self._work.put
        for task in msg.tasks:
            put(task)

    def _on_decommission_executor(self, msg):
        """Take nothing new, give back what has not started, finish what runs, then exit 0."""
        log.info("executor %s decommissioned: %s", self.executor_id, msg.reason)
        self._decommissioning = True
        self._wakeup.wake()
        while True:
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                break
            task_id, attempt, _, _ = item
            self._results.append([task_id, attempt, TaskState.RETURNED, b""])

    def _on_kill_task(self, msg):
        with self._lock:
            self._killed.add((msg.task_id, msg.attempt))
            running = self._running.get(msg.task_id)
        if running is not None and running[0] == msg.attempt:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(running[1]),
                                                       ctypes.py_object(TaskKilled))
            # an exception reaches a thread only when it runs Python code: a task blocked in
            # C (sleep, I/O, a lock) may not stop, and then the task reaper ends this process
            self._kill_deadlines[(msg.task_id, msg.attempt)] = (
                self.clock() + self.config.task_kill_timeout)

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

    _handlers = {
        MsgType.LAUNCH_TASKS: _on_launch_tasks,
        MsgType.KILL_TASK: _on_kill_task,
        MsgType.STOP_EXECUTOR: _on_stop_executor,
        MsgType.SHUTDOWN: _on_shutdown,
        MsgType.HEARTBEAT_ACK: _on_heartbeat_ack,
        MsgType.DECOMMISSION_EXECUTOR: _on_decommission_executor,
        MsgType.PROBE: _on_probe,
    }

    def _send(self, msg):
        try:
            self.socket.send(p.encode(msg), zmq.NOBLOCK)
        except zmq.Again:
            log.warning("could not send %s: the driver is not reading", type(msg).__name__)

    def _send_heartbeat(self):
        with self._process.oneshot():
            metrics = {"rss": self._process.memory_info().rss,
                       "cpu": self._process.cpu_percent(None),
                       "busy_threads": len(self._running)}
        self._send(p.Heartbeat(self.incarnation, self.executor_id, metrics))

    def _send_status_updates(self):
        results = self._results
        if not results:
            return
        rows = []
        while results:
            rows.append(results.popleft())
        self._outstanding -= len(rows)
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
        event = recv_monitor_message(self._worker[1])["event"]
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
        ident = threading.get_ident()
        get = self._work.get
        while True:
            item = get()
            if item is None:
                return
            task_id, attempt, digest, args = item
            with self._lock:
                if (task_id, attempt) in self._killed:
                    self._killed.discard((task_id, attempt))
                    killed = True
                else:
                    self._running[task_id] = (attempt, ident)
                    killed = False
            if killed:
                state, payload = TaskState.KILLED, b"killed before it started"
            else:
                started = time.perf_counter()
                state, payload = self._run_task(task_id, digest, args)
                self._busy += time.perf_counter() - started
                with self._lock:
                    self._running.pop(task_id, None)
                    self._killed.discard((task_id, attempt))
            self._results.append([task_id, attempt, state, payload])
            self._wakeup.wake()

    def _run_task(self, task_id, digest, args):
        try:
            try:
                function = self._functions.get(digest)
                if function is None:
                    function = self._functions[digest] = pickle.loads(self._function_blobs[digest])
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
        except TaskKilled:  # the kill arrived just after the task ended
            return TaskState.KILLED, b"killed while running"

    # ------------------------------------------------------------ closing

    def _close(self, linger=2000):
        for _ in self._threads:
            self._work.put(None)
        if self._worker is not None:
            for sock in self._worker:
                sock.close(linger=0)
        if self._monitor is not None:
            self.socket.disable_monitor()
            self._monitor.close(linger=0)
        if self.socket is not None:
            self.socket.close(linger=linger)
        self.context.term()
        self._wakeup.close()


# ---------------------------------------------------------------- command line

class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _UsageError(message)


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
    args = parser.parse_args(argv)
    if args.cores < 1:
        raise _UsageError(f"--cores must be at least 1, got {args.cores}")
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
        timeout = float(os.environ.get(REGISTRATION_TIMEOUT_ENV) or Config().registration_timeout)
    except (ConfigError, ValueError) as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    backend = ExecutorBackend(args.driver_url, args.executor_id, args.hostname, args.cores,
                              args.app_id, keys=keys, worker_url=args.worker_url,
                              registration_timeout=timeout)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: backend.request_stop(
            f"received signal {signal.Signals(signum).name}"))
    return backend.run()


if __name__ == "__main__":
    sys.exit(main())
