"""Shared fixtures: real drivers and executors on loopback, and a check that every test
leaves no process behind."""
import faulthandler
import os
import re
import subprocess
import sys
import threading
import time
import uuid

import psutil
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(REPO, "bin")


# Every process this test run starts inherits this mark, also those that outlive their
# parent (an executor orphaned by a killed driver), and nobody else's processes carry it.
RUN_MARK = "ZSCHED_TEST_RUN"
os.environ[RUN_MARK] = uuid.uuid4().hex


def zsched_processes():
    """pid -> cmdline of every zsched driver or executor process this test run started (the
    remote ends of SSH executors, and their ssh clients, included)."""
    found = {}
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if not re.search(r"zsched[.-](driver|executor)|bin/(driver|executor)|zsched\.cluster\.ssh_remote",
                         cmdline):
            continue
        try:
            if proc.environ().get(RUN_MARK) != os.environ[RUN_MARK]:
                continue
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        found[proc.info["pid"]] = cmdline
    return found


def _alive(proc):
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _check_nothing_left(before_children, before_zsched):
    me = psutil.Process()
    deadline = time.monotonic() + 15
    while True:
        children = [c for c in me.children(recursive=True)
                    if c.pid not in before_children and _alive(c)]
        strays = {pid: cmd for pid, cmd in zsched_processes().items()
                  if pid not in before_zsched and pid != me.pid}
        if not children and not strays:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    left = {}
    for proc in children:
        try:
            left[proc.pid] = " ".join(proc.cmdline())[:200]
        except psutil.NoSuchProcess:
            pass
        proc.kill()
    for pid in strays:
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass
    pytest.fail(f"processes left running: children={left} zsched={strays}")


@pytest.fixture(scope="session", autouse=True)
def nothing_left_at_the_end():
    """Module-scoped clusters too must be gone when the session ends."""
    before_zsched = set(zsched_processes())
    yield
    _check_nothing_left(set(), before_zsched)


# A stand-in for ssh on PATH: it keeps the credential the driver hands an executor (in
# $CAPTURE/PID.credential) and holds the session open, starting nothing.
FAKE_SSH = """#!/bin/sh
# stands in for ssh: keeps the credential the driver hands over, then holds the session
IFS= read -r line
printf '%s\\n' "$line" > "$CAPTURE/$$.tmp" && mv "$CAPTURE/$$.tmp" "$CAPTURE/$$.credential"
exec cat > /dev/null
"""


# Processes a module's shared cluster started during a test in place of one the test
# stopped (hostile input may stop executors): the cluster's, as those it started before.
SHARED_PROCESSES = set()


@pytest.fixture(autouse=True)
def no_process_left_behind():
    """Fail a test that leaves a child process or a zsched process running (processes that
    existed before the test, such as a module's shared cluster, are not its doing)."""
    me = psutil.Process()
    before_children = {c.pid for c in me.children(recursive=True)}
    before_zsched = set(zsched_processes())
    yield
    _check_nothing_left(before_children | SHARED_PROCESSES, before_zsched | SHARED_PROCESSES)


class FakeClock:
    """A clock that moves only when told; counts how often it is read."""

    def __init__(self, now=1000.0):
        self.now = now
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return self.now

    def set(self, now):
        self.now = now


def wait_for(predicate, timeout=10.0, interval=0.02, message="condition"):
    """Poll ``predicate`` until true; fail with ``message`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message}")
        time.sleep(interval)


class DriverProcess:
    """``bin/driver`` as a subprocess; ``url`` once it printed its listening line."""

    def __init__(self, *args, env=None):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(BIN, "driver"), "--port", "0", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **(env or {})})
        line = self.proc.stdout.readline()
        match = re.match(r"zsched driver listening on (tcp://\S+)$", line.strip())
        if not match:
            self.proc.kill()
            out, err = self.proc.communicate()
            raise AssertionError(f"driver did not start: {line!r}{out}\n{err}")
        self.url = match.group(1)
        # drained all along: a driver that logs much must never block on a full pipe
        self._stderr_lines = []
        self._stderr_reader = threading.Thread(
            target=lambda: self._stderr_lines.extend(iter(self.proc.stderr.readline, "")), daemon=True)
        self._stderr_reader.start()
        self.secret_file = None
        second = self.proc.stdout.readline().strip() if "--insecure" not in args else ""
        if second.startswith("zsched secret file: "):
            self.secret_file = second[len("zsched secret file: "):]
        self._stdout_lines = [] if self.secret_file or not second else [second + "\n"]
        self._stdout_reader = threading.Thread(
            target=lambda: self._stdout_lines.extend(iter(self.proc.stdout.readline, "")), daemon=True)
        self._stdout_reader.start()

    def stop(self, timeout=30):
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("driver did not stop on SIGTERM") from None
        self._stderr_reader.join(10)
        self._stdout_reader.join(10)
        self.stdout, self.stderr = "".join(self._stdout_lines), "".join(self._stderr_lines)
        return self.proc.returncode

    def stderr_so_far(self):
        return "".join(self._stderr_lines)

    def stdout_so_far(self):
        return "".join(self._stdout_lines)


@pytest.fixture
def driver_factory(tmp_path):
    drivers = []

    def start(*args, **kwargs):
        driver = DriverProcess(*args, **kwargs)
        drivers.append(driver)
        return driver

    yield start
    for driver in drivers:
        driver.stop()


@pytest.fixture(scope="module", params=["driver process", "driver thread"])
def cluster(request):
    """A LocalCluster of two one-core executors for a module's tests: its driver a process
    of its own, or (driver thread) a thread of this one whose loop completes the client's
    futures. ``CLUSTER_SETTINGS`` in the module adds settings; a module may define its own."""
    import zsched
    settings = getattr(request.module, "CLUSTER_SETTINGS", {})
    with zsched.LocalCluster(n_executors=2, cores_per_executor=1,
                             in_process=request.param == "driver thread", **settings) as cluster:
        yield cluster


@pytest.fixture
def client(cluster):
    """A client of the module's cluster, shut down after the test."""
    client = cluster.client()
    yield client
    client.shutdown(cancel_futures=True)


def run_executor(*args, env=None, timeout=60):
    """Run ``bin/executor`` to completion: (exit status, stdout, stderr)."""
    result = subprocess.run([sys.executable, os.path.join(BIN, "executor"), *args],
                            capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, **(env or {})})
    return result.returncode, result.stdout, result.stderr


def start_executor(*args, env=None):
    return subprocess.Popen([sys.executable, os.path.join(BIN, "executor"), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


# tiers given by where a test lives; a module of unit tests says so itself (pytestmark)
_TIERS_BY_PATH = {"fault": "tests/fault/", "ssh": "tests/ssh/", "slurm": "tests/slurm/",
                  "browser": "tests/test_dashboard_browser.py"}


def pytest_collection_modifyitems(items):
    """Mark each test with its tier (``-m`` selects them). Ship the test modules' functions
    by value: executors that other processes start cannot import them."""
    import cloudpickle
    for item in items:
        path = os.path.relpath(str(item.fspath), REPO)
        tiers = [tier for tier, where in _TIERS_BY_PATH.items() if path.startswith(where)]
        if not tiers and item.get_closest_marker("unit") is None:
            tiers = ["integration"]
        for tier in tiers:
            item.add_marker(tier)
    for module in {item.module for item in items if getattr(item, "module", None)}:
        cloudpickle.register_pickle_by_value(module)


_REAL_STDERR = []  # under xdist, a copy of the worker's own stderr, made before any capture


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """Under xdist, a test past its timeout ends its worker, which xdist replaces: the
    signal method's one alarm cannot end, say, an asyncio loop that waits for its tasks'
    cancelling. Run in order, pytest's process keeps no thread: clusters fork drivers."""
    if hasattr(config, "workerinput"):
        if config.option.timeout_method is None:
            config.option.timeout_method = "thread"
        _REAL_STDERR.append(os.dup(2))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item):
    """The thread method leaves no trace under xdist: every thread's stack is printed a few
    seconds before it ends the worker."""
    if not _REAL_STDERR:
        yield
        return
    marker = item.get_closest_marker("timeout")
    timeout = float(marker.args[0] if marker else item.config.getini("timeout"))
    faulthandler.dump_traceback_later(max(timeout - 5, 1), file=_REAL_STDERR[0])
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
