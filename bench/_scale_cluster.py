"""The processes of bench/scale.py: a driver process, the client in this process, and the
processes of simulated executors (``_scale_sim.py``), each with line-based standard
output read by a thread. Every one of them ends with this script: they fate-share through
their standard input, and ``stop_all_children`` stops those still running.
"""
import json
import os
import queue
import subprocess
import sys
import threading
import time

from _common import PySpy, Stall

SIMULATED_EXECUTORS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_scale_sim.py")

# ``-m`` with the working directory last on sys.path: a child started in a checkout imports
# the zsched that this process imports (PYTHONPATH), not the checkout's sources
_RUN_MODULE = ("import runpy, sys; sys.path.append(sys.path.pop(0)); "
               "runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")


def module_command(module):
    """The command that runs ``module`` like ``python -m module`` in a child process."""
    return [sys.executable, "-c", _RUN_MODULE.format(module=module)]


def child_environment():
    """The environment of a child process: it imports the zsched this process imports."""
    import zsched
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(zsched.__file__)))
    paths = [package_parent] + [p for p in sys.path if p and os.path.isdir(p)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}


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
    """Close the input of every child still running, kill those that have not exited
    after ``timeout``; the names of the children that were still running."""
    left = [child.name for child in _children]
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
    return left


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
            from zsched.secret_file import create_secret_file
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
        self.client = zsched.Client(self.url, secret_file=self.secret_file,
                                    insecure=self.secret_file is None, timeout=120)
        return self.client

    def start_executors(self, n, processes, cores):
        """Start the executor processes and wait until they are ready (imports done, the
        driver's settings fetched for each executor)."""
        first = 1
        for index, count in enumerate(split(n, processes)):
            command = [sys.executable, SIMULATED_EXECUTORS,
                       "--driver-url", self.url, "--app-id", self.app_id,
                       "--first-id", str(first), "--count", str(count), "--cores", str(cores),
                       "--hostname", f"simhost{index}"]
            if self.secret_file:
                command += ["--secret-file", self.secret_file]
            self.sims.append(Child(f"executor process {index}", command, self.env))
            first += count
        for sim in self.sims:
            sim.expect("ready", 120 + n / 20)

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
