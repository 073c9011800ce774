"""Simulated executors for bench/scale.py: many in one process, over real sockets.

    python bench/_scale_sim.py --driver-url URL --app-id ID --first-id N --count N \
        --cores C --hostname HOST [--secret-file FILE]

Each is built of the executor's own parts (``zsched.executor``): its DEALER
(``executor_socket``), its connection to the driver (``DriverConnection``: frames made by
``protocol.encode``, read while ZMQ_EVENTS says more wait), ``protocol.decode``, and a
handler per message type as ``ExecutorBackend`` has. As a real executor, each first asks
the driver's settings over a connection of its own (ExecutorHello), and makes its lasting
connection with their ZMTP heartbeats. It registers (RegisterExecutor: id, host, cores,
app id, pid), sends Heartbeats at the interval its registration's settings give,
and for every task of a LaunchTasks does the real work of an executor's task thread
(unpickle the function once per process and the arguments, call, pickle the result),
reported in one StatusUpdates per batch with the seconds spent running them (the driver
sizes each executor's window from that). It ignores Probe, KillTask (its tasks end as soon
as they arrive), ReturnTasks and ForgetFunctions; it stops on StopExecutor, Shutdown or a
foreign incarnation, leaves on DecommissionExecutor, and gives up on a driver silent past
the heartbeat timeout. What it leaves out: the task threads (tasks run one after another
in the polling thread), the relief thread's connection, and the monitor socket for a lost
connection (it shares the fate of the script instead).

One thread waits on all the sockets of the process with epoll, so that a wake-up costs
what the sockets that have something to read cost, as a real executor's does.

The process asks the driver's settings for every executor, prints "ready", waits for "go"
on its standard input, registers every executor,
prints "registered <count> <seconds>" and serves until its input closes; "stats" prints its
message counts, "vanish" closes every connection without a word (as if the executors were
killed).
"""
import argparse
import heapq
import json
import os
import pickle
import select
import signal
import sys
import time

import psutil
import zmq
from zsched import protocol as p
from zsched.config import Config
from zsched.errors import exception_payload
from zsched.executor import dumps_value
from zsched.executor.connection import DriverConnection
from zsched.executor.registration import executor_socket
from zsched.protocol import MsgType, TaskState
from zsched.security import load_keys


# executors of a process that connect at once: more would overflow the driver's queue of
# connections to accept (a kernel's SYN backlog), and their connects would back off for seconds
WAVE = 256


class SimExecutor:
    """One simulated executor: its connection to the driver and what it knows of it. Its
    ``host`` is the SimProcess that polls it and runs its tasks."""

    __slots__ = ("host", "executor_id", "index", "connection", "fd", "incarnation",
                 "heartbeat_interval", "next_heartbeat", "last_heard", "alive", "rows", "busy",
                 "_stopped")

    def __init__(self, host, index, executor_id, connection):
        self.host = host
        self.index = index
        self.executor_id = executor_id
        self.connection = connection
        self.fd = connection.socket.getsockopt(zmq.FD)
        self.incarnation = None        # set by RegisteredExecutor
        self.heartbeat_interval = None
        self.next_heartbeat = None     # when its next heartbeat is due
        self.last_heard = time.monotonic()
        self.alive = True
        self.rows = []                 # status rows of the tasks run in this read
        self.busy = 0.0                # and the seconds they took
        self._stopped = lambda: not self.alive

    def send(self, msg):
        self.connection.send(msg)
        self.host.check.add(self)  # a send can take the edge of ZMQ_FD: look at the socket again

    def read(self):
        """Handle every frame the driver sent, then report the tasks they launched."""
        self.connection.read(self.handle_frame, self._stopped)
        if self.rows and self.alive:
            self.report()

    def handle_frame(self, frame):
        self.last_heard = time.monotonic()
        try:
            msg = p.decode(frame)
        except p.ProtocolError as exc:
            print(f"executor {self.executor_id}: ignored a malformed message: {exc}",
                  file=sys.stderr, flush=True)
            return
        handler = self._handlers.get(msg.TYPE)
        if handler is not None:
            handler(self, msg)

    def report(self):
        """Send the status rows of the tasks run since the last report, in batches."""
        rows, busy = self.rows, self.busy
        self.rows, self.busy = [], 0.0
        counts = self.host.counts
        for batch in p.batch_rows(rows, 3, self.host.config.max_message_size):
            counts["updates"] += 1
            self.send(p.StatusUpdates(self.incarnation, busy * len(batch) / len(rows), batch))

    def stop(self, leave_reason=None, charge_tasks=True):
        """Stop serving; as ExecutorBackend, say why unless the driver sent the stop."""
        if not self.alive:
            return
        if leave_reason is not None:
            self.send(p.RemoveExecutor(self.executor_id, leave_reason, charge_tasks))
        self.alive = False
        self.host.close_later(self, 0 if leave_reason is None else 1000)

    # ------------------------------------------------------------ the driver's messages

    def _on_launch_tasks(self, msg):
        counts = self.host.counts
        counts["launches"] += 1
        counts["tasks"] += len(msg.tasks)
        self.busy += self.host.run_tasks(msg, self.rows)

    def _on_heartbeat_ack(self, msg):
        if msg.incarnation != self.incarnation:
            self.stop()  # the driver restarted
        elif msg.next_in > 0:  # the driver's pace
            self.host.heartbeat_at(self, time.monotonic() + msg.next_in)

    def _on_stop(self, msg):
        self.stop()

    def _on_decommission_executor(self, msg):
        if self.rows:  # finish what ran, then leave without charging anyone
            self.report()
        self.stop("decommissioned", charge_tasks=False)

    def _on_registered_executor(self, msg):
        if self.incarnation is None:
            self.incarnation = msg.incarnation
            self.host.registered(self, msg.settings)

    def _on_register_executor_failed(self, msg):
        self.host.say(f"error executor {self.executor_id} refused: {msg.reason}")
        self.stop()

    _handlers = {
        MsgType.LAUNCH_TASKS: _on_launch_tasks,
        MsgType.HEARTBEAT_ACK: _on_heartbeat_ack,
        MsgType.STOP_EXECUTOR: _on_stop,
        MsgType.SHUTDOWN: _on_stop,
        MsgType.DECOMMISSION_EXECUTOR: _on_decommission_executor,
        MsgType.REGISTERED_EXECUTOR: _on_registered_executor,
        MsgType.REGISTER_EXECUTOR_FAILED: _on_register_executor_failed,
        # Probe, KillTask, ReturnTasks, ForgetFunctions: nothing to do
    }


class SimProcess:
    """The simulated executors of this process: their epoll, their heartbeats, the
    functions their tasks call, and the commands of the script on standard input."""

    def __init__(self, args, context, keys):
        self.args = args
        self.context = context
        self.keys = keys
        self.config = Config()             # the driver's settings, once registered
        self.poller = select.epoll()
        self.stdin_fd = sys.stdin.fileno()
        self.by_fd = {}
        self.check = set()                 # executors that sent since their socket was read
        self.sims = []
        self.heartbeats = []               # heap of (when, index)
        self.functions = {}                # digest -> function, unpickled once per process
        self.counts = {"launches": 0, "tasks": 0, "updates": 0, "heartbeats": 0}
        self.unregistered = args.count
        self.welcomes = []                 # the driver's settings for each executor's connection
        self.started = None
        self._closing = []                 # (executor, linger) to close after this turn's reads
        self._process = psutil.Process()
        self._process.cpu_percent(None)
        self._metrics = {"rss": 0, "cpu": 0.0, "busy_threads": 0}
        self._metrics_at = 0.0
        self._next_silence_check = time.monotonic() + 1.0

    def say(self, line):
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def ask_settings(self):
        """Ask the driver's settings for every executor, each over a connection of its own
        made with the defaults, as a real executor does before it registers; ``WAVE`` at a
        time."""
        for first in range(0, self.args.count, WAVE):
            sockets = []
            for _ in range(min(WAVE, self.args.count - first)):
                sock = executor_socket(self.context, self.config, self.keys)
                sock.connect(self.args.driver_url)
                sock.send(p.encode(p.ExecutorHello(os.getpid())))
                sockets.append(sock)
            for sock in sockets:
                if not sock.poll(600_000):
                    raise RuntimeError("no answer to an ExecutorHello within 600 s")
                self.welcomes.append(Config.from_mapping(p.decode(sock.recv()).settings))
            for sock in sockets:
                sock.close(linger=0)

    def start(self):
        """Start connecting the executors, each sending its RegisterExecutor."""
        # epoll on each socket's ZMQ_FD: zmq.Poller asks every socket at each call, which a
        # real executor (one socket) does not pay
        os.set_blocking(self.stdin_fd, False)
        self.poller.register(self.stdin_fd, select.EPOLLIN)
        self.started = time.monotonic()
        self._connect_more()

    def _connect_more(self):
        """Connect executors while fewer than ``WAVE`` wait for their registration's answer."""
        args, pid = self.args, os.getpid()
        while len(self.sims) < args.count and len(self.sims) - (args.count - self.unregistered) < WAVE:
            i = len(self.sims)
            sock = executor_socket(self.context, self.welcomes[i], self.keys)  # a real executor's options
            sock.connect(args.driver_url)
            sim = SimExecutor(self, i, str(args.first_id + i), DriverConnection(socket=sock))
            sim.send(p.RegisterExecutor(sim.executor_id, args.hostname, args.cores, args.app_id, pid))
            self.poller.register(sim.fd, select.EPOLLIN)
            self.by_fd[sim.fd] = sim
            self.sims.append(sim)

    def registered(self, sim, settings):
        """``sim`` holds RegisteredExecutor with the driver's ``settings``."""
        self.config = Config.from_mapping(settings)
        sim.heartbeat_interval = self.config.executor_heartbeat_interval
        self.heartbeat_at(sim, time.monotonic())  # an executor's loop sends its first at once
        self.unregistered -= 1
        if self.unregistered == 0:
            self.say(f"registered {self.args.count} {time.monotonic() - self.started:.6f}")

    def run_tasks(self, msg, rows):
        """What the task threads do with a LaunchTasks, one task after another: its status
        rows appended to ``rows``; the seconds they took."""
        functions, loads, perf = self.functions, pickle.loads, time.perf_counter
        for digest, blob in msg.functions.items():
            if digest not in functions:
                functions[digest] = loads(blob)
        finished, failed, append = TaskState.FINISHED, TaskState.FAILED, rows.append
        t0 = perf()
        for task_id, attempt, digest, args_blob in msg.tasks:
            try:
                call_args, call_kwargs = loads(args_blob)
                value = functions[digest](*call_args, **call_kwargs)
            except BaseException as exc:
                append([task_id, attempt, failed, exception_payload(exc)])
                continue
            append([task_id, attempt, finished, dumps_value(value)])
        return perf() - t0

    def serve(self):
        """Serve until standard input closes."""
        by_fd, stdin_fd = self.by_fd, self.stdin_fd
        while True:
            for fd in self._ready():
                if fd == stdin_fd:
                    if not self._command():
                        return
                    continue
                sim = by_fd[fd]
                if sim.alive:
                    sim.read()
            if len(self.sims) < self.args.count:
                self._connect_more()
            self._close_pending()
            now = time.monotonic()
            if self.heartbeats and self.heartbeats[0][0] <= now:
                self._send_heartbeats(now)
            if now >= self._next_silence_check:
                self._next_silence_check = now + 1.0
                self._check_silence(now)

    def _ready(self):
        """The file descriptors with something to read, once each, in order."""
        timeout = 1.0
        if self.heartbeats:
            timeout = min(timeout, max(0.0, self.heartbeats[0][0] - time.monotonic()))
        check = self.check
        ready = [fd for fd, _ in self.poller.poll(0 if check else timeout)]
        for sim in check:
            if sim.alive and sim.connection.socket.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                ready.append(sim.fd)
        check.clear()
        return dict.fromkeys(ready)

    def _command(self):
        """Obey the script's line on standard input; False once it is closed."""
        try:
            data = os.read(self.stdin_fd, 4096)
        except BlockingIOError:
            return True
        if not data:  # the script is gone or done with us
            return False
        if b"stats" in data:
            self.say("stats " + json.dumps(self.counts))
        if b"vanish" in data:
            for sim in self.sims:
                if sim.alive:
                    sim.alive = False
                    self.close_later(sim, 0)
            self._close_pending()
            self.heartbeats.clear()
            self.say("vanished")
        return True

    def heartbeat_at(self, sim, when):
        """``sim``'s next heartbeat is due at ``when`` (an earlier entry is skipped)."""
        sim.next_heartbeat = when
        heapq.heappush(self.heartbeats, (when, sim.index))

    def _send_heartbeats(self, now):
        if now - self._metrics_at >= 1.0:
            with self._process.oneshot():
                self._metrics = {"rss": self._process.memory_info().rss,
                                 "cpu": self._process.cpu_percent(None), "busy_threads": 0}
            self._metrics_at = now
        heartbeats = self.heartbeats
        while heartbeats and heartbeats[0][0] <= now:
            when, index = heapq.heappop(heartbeats)
            sim = self.sims[index]
            if sim.alive and when == sim.next_heartbeat:
                self.counts["heartbeats"] += 1
                sim.send(p.Heartbeat(sim.incarnation, sim.executor_id, self._metrics))
                self.heartbeat_at(sim, now + sim.heartbeat_interval)

    def _check_silence(self, now):
        limit = self.config.executor_heartbeat_timeout
        for sim in self.sims:
            if sim.alive and sim.incarnation is not None and now - sim.last_heard > limit:
                print(f"executor {sim.executor_id}: driver silent for {limit:g} s",
                      file=sys.stderr, flush=True)
                sim.stop()

    def close_later(self, sim, linger):
        """Stop polling ``sim``; its connection closes once this turn's reads are over."""
        self.poller.unregister(sim.fd)
        self._closing.append((sim, linger))

    def _close_pending(self):
        closing, self._closing = self._closing, []
        for sim, linger in closing:
            sim.connection.close(linger)

    def close(self):
        """Close every connection at once, without a word."""
        for sim in self.sims:
            if sim.alive:
                sim.alive = False
                sim.connection.close(0)
        self._close_pending()
        self.context.term()


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="_scale_sim.py",
                                     description="Simulated executors for bench/scale.py.")
    parser.add_argument("--driver-url", required=True)
    parser.add_argument("--app-id", required=True)
    parser.add_argument("--first-id", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--cores", type=int, required=True)
    parser.add_argument("--hostname", required=True)
    parser.add_argument("--secret-file", default=None)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the script stops us (stdin), not Ctrl-C
    keys = load_keys(args.secret_file, use_environment=False) if args.secret_file else None
    context = zmq.Context()
    context.max_sockets = 2 * args.count + 64  # the settings' connections, then the lasting ones
    sims = SimProcess(args, context, keys)
    sims.ask_settings()
    sims.say("ready")
    if sys.stdin.readline().strip() != "go":
        return 0
    sims.start()
    try:
        sims.serve()
    finally:
        sims.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
