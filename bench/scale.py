"""One real driver with many executors: throughput, registration and queue memory.

    python bench/scale.py                  # 1,000 executors against 2, 10^6 no-op tasks
    python bench/scale.py --quick          # a smoke run: 50 executors, 20,000 tasks
    python bench/scale.py --profile DIR    # also py-spy the driver during each phase

The driver is real (``python -m zsched.driver``, its own process, no cluster manager) and
so is the client (``zsched.Client`` in this process). The executors are simulated: light
executors over real sockets, many per process (``--processes`` processes, one thread
each waiting on all its DEALER sockets with epoll, so that a wake-up costs what the
sockets that have something to read cost, as a real executor's does), that speak the
executor protocol as zsched/executor/ does: RegisterExecutor (id, host, cores, app id,
pid), Heartbeats at the interval the driver's settings give, and for every task of a
LaunchTasks the real work of an executor's task thread (unpickle the function once and
the arguments, call, pickle the result) reported FINISHED in one StatusUpdates per batch
with the seconds spent running them (the driver sizes each executor's window from
that). They ignore Probe, stop on StopExecutor, Shutdown or a foreign incarnation, leave
on DecommissionExecutor, and give up on a driver silent past the heartbeat timeout. What
they leave out: the task threads (tasks run one after another in the polling thread)
and the monitor sockets for a lost driver connection (they share the fate of this
script instead: each exits when its standard input closes).

Per configuration (``--executors`` and ``--baseline`` executors, each round with a fresh
driver, order rotated between rounds): registration time (every simulated executor holds
RegisteredExecutor, then the driver lists them all), the driver's CPU while the executors
are idle, one ``client.status()``, then ``submit`` (N x submit, then wait for all) and
``map`` (list(map(noop, range(N), chunksize=1)): one task per call) rates with the CPU
per task of the driver (split into its loop, the main thread, and the rest: ZeroMQ's I/O
thread), of the executor processes and of this process (the client), the client's full
collections of the cyclic GC (a flood's futures make each one long), and the tasks per
LaunchTasks the executors received; ``map`` as a user calls it (the client may make
tasks of several calls); and how long the driver takes to drop every executor when all
their connections close at once (as kill -9 would). Then, with a driver and no
executor: its RSS with N tasks queued minus its RSS before, per task (read with psutil).
``--profile DIR`` records the driver with py-spy during the submit and map phases.

The secret file lives in a temporary directory and the bus uses CURVE unless
``--insecure``. Every process started here ends with this script, also on Ctrl-C: the
children run in sessions of their own (Ctrl-C reaches this process only, which stops
them in order) and fate-share through their standard input (the driver with
``--exit-on-stdin-close``), so even a killed script leaves nothing running.

Output: a table, then one line ``JSON {...}`` with every figure. The machine may be
shared and noisy: compare ratios from one run, not absolute figures across runs.
"""
import argparse
import gc
import heapq
import json
import os
import pickle
import queue
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from _common import (PySpy, Stall, about_machine, about_zsched, add_profile_options, check_profile_options,
                     check_results, fmt, median, new_log_file, output_to_log, print_json, profile_path,
                     report_log, require_positive)


def noop(x):
    return x


# ================================================================ simulated executors

class SimExecutor:
    """One simulated executor: its socket and what it knows of its driver."""
    __slots__ = ("executor_id", "socket", "fd", "incarnation", "settings_interval", "last_heard",
                 "functions", "done", "alive")

    def __init__(self, executor_id, sock):
        self.executor_id = executor_id
        self.socket = sock
        self.fd = None
        self.incarnation = None      # set by RegisteredExecutor
        self.settings_interval = None
        self.last_heard = time.monotonic()
        self.functions = set()       # digests this executor was sent
        self.done = 0
        self.alive = True


def sim_main(argv):
    """``bench/scale.py --sim ...``: one process holding ``--count`` executors. It prints
    "ready", waits for "go" on its standard input, registers them all, prints "registered
    <count> <seconds>" and serves until its input closes; "stats" prints its message counts,
    "vanish" closes every connection without a word (as if the executors were killed)."""
    parser = argparse.ArgumentParser(prog="scale.py --sim")
    parser.add_argument("--sim", action="store_true")
    parser.add_argument("--driver-url", required=True)
    parser.add_argument("--app-id", required=True)
    parser.add_argument("--first-id", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--cores", type=int, required=True)
    parser.add_argument("--hostname", required=True)
    parser.add_argument("--secret-file", default=None)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the script stops us (stdin), not Ctrl-C

    import psutil
    import zmq
    from zsched import protocol as p
    from zsched.config import Config
    from zsched.errors import exception_payload
    from zsched.executor import dumps_value
    from zsched.protocol import MsgType, TaskState
    from zsched.executor.registration import executor_socket
    from zsched.security import load_keys

    keys = load_keys(args.secret_file, use_environment=False) if args.secret_file else None
    defaults = Config()
    context = zmq.Context()
    context.max_sockets = args.count + 64
    process = psutil.Process()
    process.cpu_percent(None)
    pid = os.getpid()
    out = sys.stdout

    def say(line):
        out.write(line + "\n")
        out.flush()

    say("ready")
    line = sys.stdin.readline()
    if line.strip() != "go":
        return 0

    # epoll on each socket's ZMQ_FD: zmq.Poller asks every socket at each call, which a real
    # executor (one socket) does not pay; a send can clear ZMQ_FD, hence ``check``
    poller = select.epoll()
    stdin_fd = sys.stdin.fileno()
    os.set_blocking(stdin_fd, False)
    poller.register(stdin_fd, select.EPOLLIN)
    by_fd = {}
    check = set()            # sims that sent since their socket was last drained
    sims = []
    started = time.monotonic()
    for i in range(args.count):
        sock = executor_socket(context, defaults, keys)  # a real executor's options
        sock.connect(args.driver_url)
        sim = SimExecutor(str(args.first_id + i), sock)
        sock.send(p.encode(p.RegisterExecutor(sim.executor_id, args.hostname, args.cores,
                                              args.app_id, pid)))
        sim.fd = sock.getsockopt(zmq.FD)
        poller.register(sim.fd, select.EPOLLIN)
        by_fd[sim.fd] = sim
        check.add(sim)
        sims.append(sim)

    unregistered = args.count
    config = defaults
    heartbeats = []          # heap of (when, index)
    functions = {}           # digest -> function, unpickled once per process
    loads, perf = pickle.loads, time.perf_counter
    FINISHED, FAILED = TaskState.FINISHED, TaskState.FAILED
    metrics = {"rss": 0, "cpu": 0.0, "busy_threads": 0}
    metrics_at = 0.0
    counts = {"launches": 0, "tasks": 0, "updates": 0, "heartbeats": 0}
    next_silence_check = time.monotonic() + 1.0

    def send(sim, msg):
        try:
            sim.socket.send(p.encode(msg), zmq.NOBLOCK)
        except zmq.Again:
            print(f"executor {sim.executor_id}: could not send {type(msg).__name__}: the driver is "
                  "not reading", file=sys.stderr, flush=True)
        check.add(sim)

    def stop(sim, leave_reason=None, charge_tasks=True):
        if not sim.alive:
            return
        if leave_reason is not None:  # as ExecutorBackend: say why, unless the driver sent the stop
            send(sim, p.RemoveExecutor(sim.executor_id, leave_reason, charge_tasks))
        sim.alive = False
        poller.unregister(sim.fd)
        sim.socket.close(linger=0 if leave_reason is None else 1000)

    def run_tasks(sim, msg):
        """LaunchTasks: what the task threads do, one task after another; the rows and the
        seconds they took."""
        for digest, blob in msg.functions.items():
            sim.functions.add(digest)
            if digest not in functions:
                functions[digest] = loads(blob)
        rows = []
        t0 = perf()
        for task_id, attempt, digest, args_blob in msg.tasks:
            try:
                call_args, call_kwargs = loads(args_blob)
                value = functions[digest](*call_args, **call_kwargs)
            except BaseException as exc:
                rows.append([task_id, attempt, FAILED, exception_payload(exc)])
                continue
            rows.append([task_id, attempt, FINISHED, dumps_value(value)])
        return rows, perf() - t0

    while True:
        now = time.monotonic()
        timeout = 1.0
        if heartbeats:
            timeout = min(timeout, max(0.0, heartbeats[0][0] - now))
        ready = [fd for fd, _ in poller.poll(0 if check else timeout)]
        for sim in check:
            if sim.alive and sim.socket.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                ready.append(sim.fd)
        check.clear()
        for fd in dict.fromkeys(ready):  # once each, in order
            if fd == stdin_fd:
                try:
                    data = os.read(stdin_fd, 4096)
                except BlockingIOError:
                    continue
                if not data:  # the script is gone or done with us
                    for sim in sims:
                        if sim.alive:
                            sim.alive = False
                            sim.socket.close(linger=0)
                    context.term()
                    return 0
                if b"stats" in data:
                    say("stats " + json.dumps(counts))
                if b"vanish" in data:
                    for sim in sims:
                        if sim.alive:
                            sim.alive = False
                            poller.unregister(sim.fd)
                            sim.socket.close(linger=0)
                    heartbeats.clear()
                    say("vanished")
                continue
            sim = by_fd[fd]
            if not sim.alive:
                continue
            sock = sim.socket
            rows, busy = [], 0.0
            while sim.alive:
                try:
                    frame = sock.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                sim.last_heard = time.monotonic()
                try:
                    msg = p.decode(frame)
                except p.ProtocolError as exc:
                    print(f"executor {sim.executor_id}: ignored a malformed message: {exc}",
                          file=sys.stderr, flush=True)
                    continue
                kind = msg.TYPE
                if kind == MsgType.LAUNCH_TASKS:
                    counts["launches"] += 1
                    counts["tasks"] += len(msg.tasks)
                    more, seconds = run_tasks(sim, msg)
                    rows.extend(more)
                    busy += seconds
                elif kind == MsgType.HEARTBEAT_ACK:
                    if msg.incarnation != sim.incarnation:
                        stop(sim)  # driver restarted
                elif kind in (MsgType.STOP_EXECUTOR, MsgType.SHUTDOWN):
                    stop(sim)
                elif kind == MsgType.DECOMMISSION_EXECUTOR:
                    if rows:  # finish what ran, then leave without charging anyone
                        sim.done += len(rows)
                        for batch in p.batch_rows(rows, 3, config.max_message_size):
                            send(sim, p.StatusUpdates(sim.incarnation, busy * len(batch) / len(rows), batch))
                        rows = []
                    stop(sim, "decommissioned", charge_tasks=False)
                elif kind == MsgType.REGISTERED_EXECUTOR:
                    if sim.incarnation is None:
                        sim.incarnation = msg.incarnation
                        config = Config.from_mapping(msg.settings)
                        sim.settings_interval = config.executor_heartbeat_interval
                        # the executor's loop sends its first heartbeat at once
                        heapq.heappush(heartbeats, (time.monotonic(),
                                                    int(sim.executor_id) - args.first_id))
                        unregistered -= 1
                        if unregistered == 0:
                            say(f"registered {args.count} {time.monotonic() - started:.6f}")
                elif kind == MsgType.REGISTER_EXECUTOR_FAILED:
                    say(f"error executor {sim.executor_id} refused: {msg.reason}")
                    stop(sim)
                # PROBE, KILL_TASK (tasks end as soon as they arrive): nothing to do
            if rows and sim.alive:
                sim.done += len(rows)
                for batch in p.batch_rows(rows, 3, config.max_message_size):
                    counts["updates"] += 1
                    send(sim, p.StatusUpdates(sim.incarnation, busy * len(batch) / len(rows), batch))
        now = time.monotonic()
        if heartbeats and heartbeats[0][0] <= now:
            if now - metrics_at >= 1.0:
                with process.oneshot():
                    metrics = {"rss": process.memory_info().rss,
                               "cpu": process.cpu_percent(None), "busy_threads": 0}
                metrics_at = now
            while heartbeats and heartbeats[0][0] <= now:
                _, index = heapq.heappop(heartbeats)
                sim = sims[index]
                if sim.alive:
                    counts["heartbeats"] += 1
                    send(sim, p.Heartbeat(sim.incarnation, sim.executor_id, metrics))
                    heapq.heappush(heartbeats, (now + sim.settings_interval, index))
        if now >= next_silence_check:
            next_silence_check = now + 1.0
            limit = config.executor_heartbeat_timeout
            for sim in sims:
                if sim.alive and sim.incarnation is not None and now - sim.last_heard > limit:
                    print(f"executor {sim.executor_id}: driver silent for {limit:g} s",
                          file=sys.stderr, flush=True)
                    stop(sim)


# ================================================================ the script

_children = []      # every Child started, so that any exit path stops them


class Child:
    """A process of ours with line-based standard output read by a thread."""

    def __init__(self, name, command, env):
        self.name = name
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        env=env, text=True, bufsize=1,
                                        start_new_session=True)
        _children.append(self)
        self.pid = self.process.pid
        self.lines = queue.Queue()
        threading.Thread(target=self._read, name=f"{name}-stdout", daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def send(self, text):
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()

    def expect(self, prefix, timeout):
        """The next line starting with ``prefix`` (others are skipped); Stall after timeout."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise Stall(f"{self.name}: no '{prefix}' within {timeout:g} s") from None
            if line is None:
                raise Stall(f"{self.name} exited (status {self.process.wait()}) before '{prefix}'")
            if line.startswith("error"):
                raise RuntimeError(f"{self.name}: {line}")
            if line.startswith(prefix):
                return line

    def stop(self, timeout):
        """Close its input (it exits by itself), then kill it if it has not after ``timeout``.
        True when it exited by itself."""
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout)
            clean = True
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            clean = False
        if self in _children:
            _children.remove(self)
        return clean


def stop_all_children(timeout=10.0):
    for child in list(_children):
        try:
            child.process.stdin.close()
        except OSError:
            pass
    deadline = time.monotonic() + timeout
    for child in list(_children):
        try:
            child.process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.process.kill()
            child.process.wait()
        _children.remove(child)


def cpu_seconds(pids):
    import psutil
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def main_thread_cpu_seconds(pid):
    """CPU seconds of the process's main thread (the driver's loop; the rest is ZeroMQ's
    I/O thread and the like)."""
    import psutil
    try:
        for thread in psutil.Process(pid).threads():
            if thread.id == pid:
                return thread.user_time + thread.system_time
    except psutil.Error:
        pass
    return 0.0


def rss(pid):
    import psutil
    return psutil.Process(pid).memory_info().rss


def split(n, parts):
    """``n`` as ``parts`` near-equal positive counts."""
    parts = max(1, min(parts, n))
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


class Cluster:
    """A driver process, a client here, and simulated executor processes."""

    def __init__(self, args, workdir):
        from zsched.cluster_managers.local import child_environment, module_command
        self.args = args
        self.env = child_environment()
        self.app_id = f"scale-{os.getpid()}-{time.monotonic_ns() % 10**9}"
        self.secret_file = None
        command = module_command("zsched.driver") + [
            "--host", "127.0.0.1", "--port", "0", "--app-id", self.app_id,
            "--log-level", "WARNING", "--exit-on-stdin-close"]
        if args.insecure:
            command.append("--insecure")
        else:
            from zsched.security import create_secret_file
            self.secret_file = os.path.join(workdir, "secret")
            create_secret_file(self.secret_file)
            command += ["--secret-file", self.secret_file]
        for pair in args.conf:
            command += ["--conf", pair]
        self.driver = Child("driver", command, self.env)
        line = self.driver.expect("zsched driver listening on ", 60)
        self.url = line.rsplit(" ", 1)[1]
        self.sims = []
        self.client = None
        self.profiler = None

    def connect_client(self):
        import zsched
        self.client = zsched.Client(self.url, secret_file=self.secret_file, timeout=120)
        return self.client

    def start_executors(self, n, processes, cores):
        """Start the executor processes and wait until they are ready (imports done)."""
        first = 1
        for index, count in enumerate(split(n, processes)):
            command = [sys.executable, os.path.abspath(__file__), "--sim",
                       "--driver-url", self.url, "--app-id", self.app_id,
                       "--first-id", str(first), "--count", str(count), "--cores", str(cores),
                       "--hostname", f"simhost{index}"]
            if self.secret_file:
                command += ["--secret-file", self.secret_file]
            self.sims.append(Child(f"executor process {index}", command, self.env))
            first += count
        for sim in self.sims:
            sim.expect("ready", 120)

    def register(self, n):
        """Have every simulated executor register; seconds until all hold RegisteredExecutor."""
        t0 = time.perf_counter()
        for sim in self.sims:
            sim.send("go")
        for sim in self.sims:
            sim.expect("registered", 60 + n / 10)
        elapsed = time.perf_counter() - t0
        listed = len(self.client.executor_ids())
        if listed != n:
            raise AssertionError(f"the driver lists {listed} executors, expected {n}")
        return elapsed

    def stats(self):
        """Messages the executor processes received and sent so far, summed."""
        for sim in self.sims:
            sim.send("stats")
        total = {}
        for sim in self.sims:
            for key, value in json.loads(sim.expect("stats ", 30)[6:]).items():
                total[key] = total.get(key, 0) + value
        return total

    def vanish(self, n, timeout):
        """Close every executor connection at once; seconds until the driver lists none."""
        t0 = time.perf_counter()
        for sim in self.sims:
            sim.send("vanish")
        for sim in self.sims:
            sim.expect("vanished", 30)
        deadline = time.monotonic() + timeout
        while True:
            left = len(self.client.executor_ids())
            if left == 0:
                return time.perf_counter() - t0, 0
            if time.monotonic() > deadline:
                return None, left
            time.sleep(0.02)

    def start_profile(self, path):
        if path:
            self.profiler = PySpy(self.driver.pid, path, self.args.profile_format)

    def stop_profile(self):
        if self.profiler is not None:
            self.profiler.stop()
            self.profiler = None

    def driver_view(self):
        try:
            status = self.client.status()
        except Exception as exc:
            return f"; client.status() failed: {type(exc).__name__}: {exc}"
        return f"; driver status: tasks {status.get('tasks')}, {len(status.get('executors', []))} executors"

    def close(self):
        """Client, driver, executor processes, each bounded; what had to be killed."""
        killed = []
        self.stop_profile()
        if self.client is not None:
            try:  # nothing is pending: its goodbye leaves at once
                self.client.close()
            except Exception:
                pass
        if not self.driver.stop(60):
            killed.append("driver")
        self.client = None
        for sim in self.sims:
            if not sim.stop(20):
                killed.append(sim.name)
        return killed


def wait_futures(cluster, futures, timeout, what):
    import concurrent.futures
    deadline = time.monotonic() + timeout
    pending = futures
    while pending:
        _, pending = concurrent.futures.wait(pending, timeout=max(0.0, min(5.0, deadline - time.monotonic())))
        if pending and time.monotonic() >= deadline:
            raise Stall(f"{what}: {len(pending)} unfinished after {timeout:.0f} s{cluster.driver_view()}")


def phase_timeout(n_tasks):
    return 60.0 + n_tasks / 4000.0


class FullCollections:
    """The cyclic GC's full collections in this process (the client) while it is active:
    how many, and the seconds they took. A flood holds many futures, which each full
    collection goes over."""

    def __init__(self):
        self.count = 0
        self.seconds = 0.0
        self._started = None

    def _callback(self, phase, info):
        if info["generation"] == 2:
            if phase == "start":
                self._started = time.perf_counter()
            elif self._started is not None:
                self.count += 1
                self.seconds += time.perf_counter() - self._started

    def __enter__(self):
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc):
        gc.callbacks.remove(self._callback)


def measure_phase(cluster, sim_pids, name, n_tasks, run, profile_path, log):
    """Run ``run()`` (which returns when all ``n_tasks`` are done); rate and CPU per task."""
    gc.collect()
    stats0 = cluster.stats()
    cluster.start_profile(profile_path)
    driver_cpu0 = cpu_seconds([cluster.driver.pid])
    driver_main0 = main_thread_cpu_seconds(cluster.driver.pid)
    sims_cpu0 = cpu_seconds(sim_pids)
    here0 = time.process_time()
    t0 = time.perf_counter()
    try:
        with FullCollections() as collections:
            run()
        elapsed = time.perf_counter() - t0
    finally:
        cluster.stop_profile()
    stats = cluster.stats()
    launches = stats["launches"] - stats0["launches"]
    updates = stats["updates"] - stats0["updates"]
    figures = {
        f"{name}_tasks_per_launch": (stats["tasks"] - stats0["tasks"]) / max(1, launches),
        f"{name}_tasks_per_update": (stats["tasks"] - stats0["tasks"]) / max(1, updates),
        f"{name}_heartbeats": stats["heartbeats"] - stats0["heartbeats"],
        f"{name}_tasks_per_s": n_tasks / elapsed,
        f"{name}_s": elapsed,
        f"{name}_driver_cpu_us": (cpu_seconds([cluster.driver.pid]) - driver_cpu0) / n_tasks * 1e6,
        f"{name}_driver_loop_cpu_us": (main_thread_cpu_seconds(cluster.driver.pid) - driver_main0) / n_tasks * 1e6,
        f"{name}_executors_cpu_us": (cpu_seconds(sim_pids) - sims_cpu0) / n_tasks * 1e6,
        f"{name}_client_cpu_us": (time.process_time() - here0) / n_tasks * 1e6,
        f"{name}_client_full_collections": collections.count,
        f"{name}_client_full_collections_s": collections.seconds,
    }
    figures[f"{name}_total_cpu_us"] = (figures[f"{name}_driver_cpu_us"] + figures[f"{name}_executors_cpu_us"]
                                       + figures[f"{name}_client_cpu_us"])
    log(f"    {name}: {n_tasks:,} tasks in {elapsed:.1f} s ({figures[f'{name}_tasks_per_s']:,.0f}/s)")
    return figures


def run_config(args, n_executors, round_index, log, killed):
    """One configuration of one round: a fresh driver and ``n_executors`` executors."""
    figures = {"executors": n_executors}
    workdir = tempfile.mkdtemp(prefix="zsched-scale-")
    cluster = None
    try:
        cluster = Cluster(args, workdir)
        processes = min(args.processes, n_executors)
        figures["processes"] = processes
        log(f"  {n_executors} executors x {args.cores} core(s) in {processes} process(es)")
        cluster.start_executors(n_executors, processes, args.cores)
        client = cluster.connect_client()
        driver_rss0 = rss(cluster.driver.pid)
        driver_cpu0 = cpu_seconds([cluster.driver.pid])
        figures["register_s"] = cluster.register(n_executors)
        if n_executors >= 50:  # the CPU clock ticks in 10 ms: meaningless for a handful
            figures["register_driver_cpu_ms"] = (
                (cpu_seconds([cluster.driver.pid]) - driver_cpu0) / n_executors * 1e3)
        figures["driver_rss_per_executor_kib"] = (
            (rss(cluster.driver.pid) - driver_rss0) / n_executors / 1024)
        log(f"    registered in {figures['register_s']:.2f} s")
        sim_pids = [sim.pid for sim in cluster.sims]

        # an idle cluster: heartbeats (ours and ZeroMQ's) and the driver's timers only
        time.sleep(0.5 if args.quick else 1.0)  # the first heartbeats are answered
        idle_s = 1.0 if args.quick else 6.0
        driver_cpu0 = cpu_seconds([cluster.driver.pid])
        driver_main0 = main_thread_cpu_seconds(cluster.driver.pid)
        time.sleep(idle_s)
        figures["idle_driver_cpu_pct"] = (cpu_seconds([cluster.driver.pid]) - driver_cpu0) / idle_s * 100
        figures["idle_driver_loop_cpu_pct"] = (
            (main_thread_cpu_seconds(cluster.driver.pid) - driver_main0) / idle_s * 100)
        t0 = time.perf_counter()
        client.status()
        figures["status_ms"] = (time.perf_counter() - t0) * 1e3

        # warm-up, untimed: every executor runs tasks once, so that its window is sized
        warm = list(range(min(args.tasks, max(2000, 5 * n_executors * args.cores))))
        check_results(list(client.map(noop, warm, timeout=phase_timeout(len(warm)), chunksize=1)),
                      warm, "warm-up")
        n = args.tasks
        xs = list(range(n))
        timeout = phase_timeout(n)

        def profile(phase):
            return profile_path(args, f"driver-{n_executors}ex-r{round_index + 1}-{phase}")

        def submit_all():
            futures = [client.submit(noop, x) for x in xs]
            wait_futures(cluster, futures, timeout, "submit")
            check_results([f.result() for f in futures], xs, "submit")

        def map_all():
            import concurrent.futures
            try:  # one task per call, whatever map's default chunking
                results = list(client.map(noop, xs, timeout=timeout, chunksize=1))
            except concurrent.futures.TimeoutError:
                raise Stall(f"map unfinished after {timeout:.0f} s{cluster.driver_view()}") from None
            check_results(results, xs, "map")

        windows = [0]
        for name, run in (("submit", submit_all), ("map", map_all)):
            if name in args.phases:
                figures.update(measure_phase(cluster, sim_pids, name, n, run, profile(name), log))
                # the windows the driver gives no-op tasks, read at once: an executor that
                # runs nothing for a whole revive_interval forgets its tasks' length
                windows.append(max(e["slots"] for e in client.status()["executors"]))
        status = client.status()
        done = [e["tasks_done"] for e in status["executors"]]
        figures["tasks_per_executor_min"] = min(done)
        figures["tasks_per_executor_max"] = max(done)
        figures["window_max"] = max(windows)
        figures["driver_rss_mib"] = rss(cluster.driver.pid) / 2**20
        if "map" in args.phases:
            # map as a user calls it: the client may make tasks of several calls (chunks)
            gc.collect()
            launched0 = cluster.stats()["tasks"]
            t0 = time.perf_counter()
            check_results(list(client.map(noop, xs, timeout=timeout)), xs, "map, default chunking")
            figures["map_default_calls_per_s"] = n / (time.perf_counter() - t0)
            figures["map_default_tasks"] = cluster.stats()["tasks"] - launched0
            log(f"    map, default chunking: {n:,} calls in {figures['map_default_tasks']:,} tasks, "
                f"{figures['map_default_calls_per_s']:,.0f} calls/s")

        loss_s, left = cluster.vanish(n_executors, 60 + n_executors / 10)
        figures["loss_s"] = loss_s
        if left:
            figures["loss_left"] = left
        log(f"    all connections closed: driver dropped them in "
            f"{'-' if loss_s is None else f'{loss_s:.2f} s'}")
        return figures
    finally:
        if cluster is not None:
            killed.extend(f"{n_executors} executors: {name}" for name in cluster.close())
        shutil.rmtree(workdir, ignore_errors=True)


def run_memory(args, log, killed):
    """Driver RSS with ``args.tasks`` tasks queued and no executors, per task."""
    figures = {}
    workdir = tempfile.mkdtemp(prefix="zsched-scale-")
    cluster = None
    try:
        cluster = Cluster(args, workdir)
        client = cluster.connect_client()
        first = [client.submit(noop, x) for x in range(10)]  # the function reaches the driver
        deadline = time.monotonic() + 30
        while client.status()["tasks"]["queued"] < 10:
            if time.monotonic() > deadline:
                raise Stall("10 tasks not queued after 30 s")
            time.sleep(0.05)
        time.sleep(0.5)
        before = rss(cluster.driver.pid)
        n = args.tasks
        t0 = time.perf_counter()
        pending = [client.submit(noop, x) for x in range(n)]
        deadline = time.monotonic() + phase_timeout(n)
        while True:
            queued = client.status()["tasks"]["queued"]
            if queued >= n + 10:
                break
            if time.monotonic() > deadline:
                raise Stall(f"only {queued - 10} of {n} tasks queued after {phase_timeout(n):.0f} s")
            time.sleep(0.2)
        figures["queue_s"] = time.perf_counter() - t0
        time.sleep(1.0)
        after = rss(cluster.driver.pid)
        figures["driver_rss_before_mib"] = before / 2**20
        figures["driver_rss_queued_mib"] = after / 2**20
        figures["bytes_per_queued_task"] = (after - before) / n
        log(f"  {n:,} tasks queued: driver RSS {before / 2**20:.0f} -> {after / 2**20:.0f} MiB "
            f"({figures['bytes_per_queued_task']:.0f} B per task)")
        # cancel them all, so that the client leaves with nothing pending
        for future in first + pending:
            future.cancel()
        deadline = time.monotonic() + phase_timeout(n)
        while client.status()["tasks"]["queued"] > 0:
            if time.monotonic() > deadline:
                raise Stall(f"cancelled tasks still queued after {phase_timeout(n):.0f} s")
            time.sleep(0.2)
        return figures
    finally:
        if cluster is not None:
            killed.extend(f"memory: {name}" for name in cluster.close())
        shutil.rmtree(workdir, ignore_errors=True)


# ---------------------------------------------------------------- output

ROWS = [
    # key, label, format; ratio: whether "big / baseline" is shown
    ("processes", "executor processes", "{}", False),
    ("register_s", "registration, s (all executors)", "{:.2f}", False),
    ("register_driver_cpu_ms", "  driver CPU per registration, ms", "{:.2f}", False),
    ("driver_rss_per_executor_kib", "  driver RSS per executor, KiB", "{:.1f}", False),
    ("idle_driver_cpu_pct", "driver CPU while idle, %", "{:.1f}", False),
    ("idle_driver_loop_cpu_pct", "  of which its loop (main thread), %", "{:.1f}", False),
    ("status_ms", "client.status() round trip, ms", "{:.1f}", False),
    ("submit_tasks_per_s", "submit: tasks/s", "{:,.0f}", True),
    ("submit_driver_cpu_us", "  driver CPU per task, us", "{:.1f}", True),
    ("submit_driver_loop_cpu_us", "    of which its loop (main thread), us", "{:.1f}", True),
    ("submit_executors_cpu_us", "  executor processes CPU per task, us", "{:.1f}", True),
    ("submit_client_cpu_us", "  client CPU per task, us", "{:.1f}", True),
    ("submit_total_cpu_us", "  all three, CPU per task, us", "{:.1f}", True),
    ("submit_client_full_collections", "  client's full GC collections", "{:.0f}", False),
    ("submit_client_full_collections_s", "    their time, s", "{:.3f}", False),
    ("submit_tasks_per_launch", "  tasks per LaunchTasks", "{:.1f}", True),
    ("map_tasks_per_s", "map: tasks/s", "{:,.0f}", True),
    ("map_driver_cpu_us", "  driver CPU per task, us", "{:.1f}", True),
    ("map_driver_loop_cpu_us", "    of which its loop (main thread), us", "{:.1f}", True),
    ("map_executors_cpu_us", "  executor processes CPU per task, us", "{:.1f}", True),
    ("map_client_cpu_us", "  client CPU per task, us", "{:.1f}", True),
    ("map_total_cpu_us", "  all three, CPU per task, us", "{:.1f}", True),
    ("map_client_full_collections", "  client's full GC collections", "{:.0f}", False),
    ("map_client_full_collections_s", "    their time, s", "{:.3f}", False),
    ("map_tasks_per_launch", "  tasks per LaunchTasks", "{:.1f}", True),
    ("window_max", "  largest executor window, tasks", "{}", False),
    ("map_default_calls_per_s", "map, default chunking: calls/s", "{:,.0f}", True),
    ("map_default_tasks", "  tasks", "{:,}", False),
    ("loss_s", "all connections closed: dropped in, s", "{:.2f}", False),
]


def print_table(args, configs, medians, memory):
    security = "insecure (no CURVE)" if args.insecure else "CURVE (secret file)"
    print(f"zsched scale: simulated executors of {args.cores} core(s), {args.tasks:,} no-op tasks "
          f"per phase, {security}; median of {args.rounds} round(s); {os.cpu_count()} CPUs")
    big, small = configs[0], configs[-1]
    width = max(len(label) for _, label, _, _ in ROWS) + 2
    names = [f"{n:,} executors" for n in configs]
    header = "".ljust(width) + "".join(name.rjust(16) for name in names)
    if len(configs) > 1:
        header += "ratio".rjust(8)
    print(header)
    print("-" * len(header))
    for key, label, spec, show_ratio in ROWS:
        values = [medians[n].get(key) for n in configs]
        if all(v is None for v in values):
            continue
        line = label.ljust(width) + "".join(fmt(v, spec).rjust(16) for v in values)
        if show_ratio and len(configs) > 1 and values[0] and values[-1]:
            line += f"{values[0] / values[-1]:.2f}".rjust(8)
        print(line)
    ratios = {}
    for key in ("submit_tasks_per_s", "map_tasks_per_s"):
        a, b = medians[big].get(key), medians[small].get(key)
        ratios[key] = a / b if a and b and len(configs) > 1 else None
    if len(configs) > 1:
        print(f"throughput {big:,} / {small:,} executors: submit {fmt(ratios['submit_tasks_per_s'], '{:.2f}')}, "
              f"map {fmt(ratios['map_tasks_per_s'], '{:.2f}')} (target >= 0.70)")
    if memory:
        print(f"driver memory per queued task: {fmt(memory.get('bytes_per_queued_task'), '{:,.0f}')} B "
              f"(RSS {fmt(memory.get('driver_rss_before_mib'), '{:.0f}')} -> "
              f"{fmt(memory.get('driver_rss_queued_mib'), '{:.0f}')} MiB with {args.tasks:,} tasks "
              f"queued, no executors; target <= 1,024 B)")
    print("registration: 'go' until every executor holds RegisteredExecutor.  submit: N x submit(), "
          "wait for all.")
    print("  map: list(map(noop, range(N), chunksize=1)); default chunking: the same without "
          "chunksize.")
    print("  CPU per task: CPU time of the process(es) during the phase / N; the client is this "
          "process.")
    print("  full GC collections: the client's, of the cyclic GC's oldest generation, during the phase.")
    print("  driver CPU while idle: executors registered, no tasks (heartbeats only).  The driver's "
          "CPU not")
    print("  in its loop is ZeroMQ's I/O thread (framing, CURVE, ZMTP heartbeats).")
    print("  all connections closed: every executor's socket closed at once (as kill -9), until the "
          "driver lists none.")
    return ratios


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="A real zsched driver and client with many simulated executors: throughput "
                    "against a 2-executor baseline, registration time, driver memory per queued task.")
    parser.add_argument("--executors", type=int, default=None, metavar="N",
                        help="simulated executors (default 1000; 50 with --quick)")
    parser.add_argument("--baseline", type=int, default=2, metavar="N",
                        help="executors of the comparison configuration (default 2; 0: none)")
    parser.add_argument("--cores", type=int, default=1, metavar="C", help="cores per executor (default 1)")
    parser.add_argument("--tasks", type=int, default=None, metavar="N",
                        help="no-op tasks per phase and queued for the memory figure "
                             "(default 1000000; 20000 with --quick)")
    parser.add_argument("--processes", type=int, default=4, metavar="P",
                        help="processes the simulated executors are spread over (default 4)")
    parser.add_argument("--rounds", type=int, default=None, metavar="R",
                        help="rounds, configurations interleaved; figures are medians (default 3; "
                             "1 with --quick)")
    parser.add_argument("--phases", default="submit,map",
                        help="comma-separated throughput phases: submit, map (default both)")
    parser.add_argument("--no-memory", action="store_true", help="skip the queued-task memory figure")
    parser.add_argument("--insecure", action="store_true", help="no secret, no CURVE")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="driver setting, as bin/driver --conf (repeatable)")
    add_profile_options(parser, "the driver during each throughput phase")
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--show-logs", action="store_true",
                        help="leave the driver's and executors' log output on stderr")
    args = parser.parse_args(argv)
    if args.executors is None:
        args.executors = 50 if args.quick else 1000
    if args.tasks is None:
        args.tasks = 20000 if args.quick else 1_000_000
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    args.phases = [x.strip() for x in args.phases.split(",") if x.strip()]
    if not set(args.phases) <= {"submit", "map"}:
        parser.error("--phases takes submit and map")
    require_positive(parser, args, ("executors", "cores", "tasks", "processes", "rounds"))
    if args.baseline < 0:
        parser.error("--baseline must be >= 0")
    check_profile_options(parser, args)
    return args


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None):
    args = parse_args(argv)
    started = time.perf_counter()
    signal.signal(signal.SIGTERM, _raise_interrupt)  # stop the children as on Ctrl-C
    configs = [args.executors] + ([args.baseline] if args.baseline and args.baseline != args.executors else [])
    per_round = {n: [] for n in configs}
    errors = {}
    killed = []
    memory = {}
    log_path = None if args.show_logs else new_log_file("zsched-scale-")
    interrupted = False
    # the driver, the executors and this process's log records all go to the log file
    with output_to_log(log_path, not args.show_logs) as progress:
        def log(message):
            print(message, file=progress, flush=True)

        try:
            for r in range(args.rounds):
                order = configs[r % len(configs):] + configs[:r % len(configs)]
                for n in order:
                    if n in errors:
                        continue
                    log(f"round {r + 1}/{args.rounds}: {n:,} executors")
                    try:
                        per_round[n].append(run_config(args, n, r, log, killed))
                    except KeyboardInterrupt:
                        raise
                    except Exception as exc:
                        errors[n] = f"round {r + 1}: {type(exc).__name__}: {exc}"
                        log(f"  FAILED: {errors[n]}\n{traceback.format_exc()}")
            if not args.no_memory:
                log(f"memory: {args.tasks:,} tasks queued, no executors")
                try:
                    memory = run_memory(args, log, killed)
                except KeyboardInterrupt:
                    raise
                except Exception as exc:
                    errors["memory"] = f"{type(exc).__name__}: {exc}"
                    log(f"  FAILED: {errors['memory']}\n{traceback.format_exc()}")
        except KeyboardInterrupt:
            interrupted = True
            log("interrupted: stopping every process started here")
        finally:
            left = list(_children)
            stop_all_children()
            killed.extend(f"left running: {c.name}" for c in left)
    if interrupted:
        kept = f"; log output kept in {log_path}" if log_path else ""
        print(f"interrupted{kept}", file=sys.stderr)
        return 130

    medians = {n: {k: median(per_round[n], k) for k in {k for r in per_round[n] for k in r}}
               for n in configs}
    ratios = print_table(args, configs, medians, memory)
    for name, text in errors.items():
        print(f"error ({name}): {text}")
    if killed:
        print(f"processes that had to be killed: {', '.join(killed)}")
    if log_path is not None:
        log_path, _ = report_log(log_path, keep=bool(errors),
                                 expected=("Removed executor", "the closed connections"))

    report = {
        "benchmark": "zsched-scale",
        **about_zsched(),
        **about_machine(),
        "params": {"executors": args.executors, "baseline": args.baseline, "cores": args.cores,
                   "tasks": args.tasks, "processes": args.processes, "rounds": args.rounds,
                   "phases": args.phases, "insecure": args.insecure, "conf": args.conf,
                   "quick": args.quick},
        "configs": {str(n): {"median": medians[n], "rounds": per_round[n]} for n in configs},
        "ratio_big_over_baseline": ratios,
        "memory": memory,
        "errors": errors,
        "killed": killed,
        "log_file": log_path,
        "elapsed_s": time.perf_counter() - started,
    }
    print_json(report)
    return 0 if not errors and not killed else 1


if __name__ == "__main__":
    if "--sim" in sys.argv[1:]:
        sys.exit(sim_main(sys.argv[1:]))
    sys.exit(main())
