"""The ``bin/driver`` command line, with real processes on loopback.

Contract (DESIGN.md, "Command line"): ``--port 0`` picks a free port and prints
``zsched driver listening on tcp://HOST:PORT`` (flushed) when ready; ``--local N``
starts N executor processes; SIGINT/SIGTERM stop the executors, then exit 0; settings
are validated at start-up and a bad one is an error naming it.
"""
import os
import re
import signal
import subprocess
import shutil
import sys
import threading
import time

import psutil
import pytest

import zsched
from conftest import BIN, REPO, wait_for

pytestmark = pytest.mark.timeout(120)

LISTENING = re.compile(r"zsched driver listening on (tcp://([^:\s]+):(\d+))$")


@pytest.fixture(autouse=True)
def no_secret_in_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("ZSCHED_SECRET", raising=False)
    monkeypatch.delenv("ZSCHED_SECRET_FILE", raising=False)
    # A driver run without --secret-file must never touch the real ~/.zsched.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def alive(proc):
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def executor_children(driver_pid):
    """psutil processes of the executors the driver started."""
    try:
        children = psutil.Process(driver_pid).children()
    except psutil.NoSuchProcess:
        return []
    found = []
    for child in children:
        try:
            if "zsched.executor" in " ".join(child.cmdline()):
                found.append(child)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            pass
    return found


def option_value(cmdline, option):
    return cmdline[cmdline.index(option) + 1] if option in cmdline else None


def readline_within(stream, timeout):
    """One line from ``stream``, or None when none arrives within ``timeout`` seconds."""
    box = []
    reader = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return box[0] if box else None


class Started:
    """A driver started here with Popen; stopped (and its output kept) by ``stop``."""

    def __init__(self, command, **kwargs):
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, **kwargs)
        self.first_line = readline_within(self.proc.stdout, 30)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.out, self.err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.out, self.err = self.proc.communicate()
            raise AssertionError(f"driver did not stop on {sig!r}") from None
        return self.proc.returncode


@pytest.fixture
def started():
    drivers = []

    def start(command, **kwargs):
        driver = Started(command, **kwargs)
        drivers.append(driver)
        return driver

    yield start
    for driver in drivers:
        if driver.proc.poll() is None:  # a failed test: stop it the polite way first
            driver.proc.terminate()
            try:
                driver.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                driver.proc.kill()
        driver.proc.communicate()


# ---------------------------------------------------------------- start-up line

def test_port_0_prints_listening_line_first_and_flushed(started):
    driver = started([sys.executable, os.path.join(BIN, "driver"), "--port", "0", "--insecure"])
    # Read while the driver keeps running: a line left in a buffer would never arrive.
    assert driver.first_line is not None, "no line on stdout within 30 s (not flushed?)"
    match = LISTENING.match(driver.first_line.strip())
    assert match, driver.first_line
    url, host, port = match.group(1), match.group(2), int(match.group(3))
    assert host == "127.0.0.1" and port > 0
    assert driver.proc.poll() is None
    with zsched.Client(url, insecure=True, timeout=30) as client:  # the URL printed is the one to use
        assert client.executor_ids() == []
    assert driver.stop() == 0, driver.err


def test_port_0_twice_gives_two_ports(driver_factory):
    first = driver_factory("--insecure")
    second = driver_factory("--insecure")
    assert first.url != second.url
    for driver in (first, second):
        with zsched.Client(driver.url, insecure=True, timeout=30) as client:
            assert client.executor_ids() == []


def test_local_executors_carry_app_id_and_run_tasks(driver_factory, tmp_path):
    secret = str(tmp_path / "secret")
    driver = driver_factory("--local", "2", "--app-id", "myapp", "--secret-file", secret)
    assert driver.secret_file == secret
    executors = wait_for(lambda: (lambda e: e if len(e) == 2 else None)(
        executor_children(driver.proc.pid)), timeout=20, message="two executor processes")
    cmdlines = [e.cmdline() for e in executors]
    for cmdline in cmdlines:
        assert option_value(cmdline, "--app-id") == "myapp", cmdline
        assert option_value(cmdline, "--driver-url") == driver.url, cmdline
    assert sorted(option_value(c, "--executor-id") for c in cmdlines) == ["1", "2"]
    pids = {e.pid for e in executors}

    with zsched.Client(driver.url, secret_file=secret, timeout=30) as client:
        assert client.app_id == "myapp"
        wait_for(lambda: client.executor_ids() == ["1", "2"], timeout=20,
                 message="both executors to register")
        assert {e["pid"] for e in client.status()["executors"]} == pids
        assert list(client.map(lambda x: x * x, range(50))) == [x * x for x in range(50)]
        ran_on = {f.result(timeout=30) for f in [client.submit(os.getpid) for _ in range(20)]}
        assert ran_on <= pids

    assert driver.stop() == 0, driver.stderr
    wait_for(lambda: not any(alive(e) for e in executors), timeout=15,
             message="executors to be gone after the driver stopped")


def test_ipc_path_serves_local_executors_and_clients(driver_factory, tmp_path):
    private = tmp_path / "run"
    private.mkdir(mode=0o700)
    path = str(private / "driver.sock")
    secret = str(tmp_path / "secret")
    open(path, "w").close()  # left behind by a driver that is gone: taken over
    driver = driver_factory("--local", "2", "--ipc-path", path, "--secret-file", secret,
                            "--private-dir", str(private))
    executors = wait_for(lambda: (lambda e: e if len(e) == 2 else None)(
        executor_children(driver.proc.pid)), timeout=20, message="two executor processes")
    for executor in executors:  # on this host: the Unix socket
        assert option_value(executor.cmdline(), "--driver-url") == f"ipc://{path}"
    with zsched.Client(f"ipc://{path}", secret_file=secret, timeout=30) as client:
        wait_for(lambda: client.executor_ids() == ["1", "2"], timeout=20,
                 message="both executors to register")
        assert list(client.map(lambda x: x * x, range(50))) == [x * x for x in range(50)]
    with zsched.Client(driver.url, secret_file=secret, timeout=30) as client:  # TCP as well
        assert client.submit(lambda: 5).result(30) == 5
    assert driver.stop() == 0, driver.stderr
    assert not private.exists()  # the socket, and the directory made for the driver, go with it


def test_ipc_path_of_a_live_driver_is_refused(driver_factory, tmp_path):
    path = str(tmp_path / "driver.sock")
    first = driver_factory("--insecure", "--ipc-path", path)
    with zsched.Client(f"ipc://{path}", insecure=True, timeout=30) as client:
        assert client.executor_ids() == []
    result = subprocess.run([sys.executable, os.path.join(BIN, "driver"), "--insecure",
                             "--ipc-path", path], capture_output=True, text=True, timeout=30)
    assert result.returncode == 1, result.stdout
    assert f"--ipc-path {path!r} is in use by another process" in result.stderr
    with zsched.Client(f"ipc://{path}", insecure=True, timeout=30) as client:  # the first one still serves
        assert client.executor_ids() == []
    assert first.proc.poll() is None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_executors_then_exits_0(driver_factory, tmp_path, sig):
    secret = str(tmp_path / "secret")
    driver = driver_factory("--local", "2", "--secret-file", secret)
    with zsched.Client(driver.url, secret_file=secret, timeout=30) as client:
        wait_for(lambda: client.executor_ids() == ["1", "2"], timeout=20,
                 message="both executors to register")
        assert client.submit(pow, 2, 5).result(timeout=30) == 32
    executors = executor_children(driver.proc.pid)
    assert len(executors) == 2

    driver.proc.send_signal(sig)
    assert driver.proc.wait(timeout=30) == 0
    wait_for(lambda: not any(alive(e) for e in executors), timeout=15,
             message="executors to be gone after the driver exited")
    assert driver.stop() == 0
    assert "Traceback" not in driver.stderr, driver.stderr


def test_sigterm_with_a_running_task_fails_its_future_and_exits_0(driver_factory, tmp_path):
    secret = str(tmp_path / "secret")
    driver = driver_factory("--local", "1", "--secret-file", secret)
    client = zsched.Client(driver.url, secret_file=secret, timeout=30)
    try:
        wait_for(lambda: client.executor_ids() == ["1"], timeout=20, message="executor 1")
        executors = executor_children(driver.proc.pid)
        future = client.submit(time.sleep, 120)
        wait_for(lambda: client.status()["tasks"]["running"] == 1, timeout=20,
                 message="the task to run")
        driver.proc.send_signal(signal.SIGTERM)
        assert driver.proc.wait(timeout=30) == 0
        wait_for(lambda: not any(alive(e) for e in executors), timeout=15,
                 message="executor to be gone after the driver exited")
        # No task is lost: the caller hears about it.
        try:
            future.result(timeout=30)
        except zsched.ZschedError:
            pass  # the task failed with the driver: the expected outcome
        except TimeoutError:
            raise AssertionError("the task's future never completed after the driver stopped") from None
        else:
            raise AssertionError("a 120 s task cannot have finished")
    finally:
        client.shutdown(wait=True, cancel_futures=True)


def test_sigterm_before_executors_registered_leaves_none_behind(started, tmp_path):
    # Executors that were launched but never registered never hear "Shutdown": the
    # driver must still stop them (shutdown_timeout bounds the wait for them).
    driver = started([sys.executable, os.path.join(BIN, "driver"), "--port", "0",
                      "--local", "2", "--secret-file", str(tmp_path / "secret"),
                      "--conf", "shutdown_timeout=2"])
    assert driver.first_line is not None and LISTENING.match(driver.first_line.strip())
    executors = wait_for(lambda: (lambda e: e if len(e) == 2 else None)(
        executor_children(driver.proc.pid)), timeout=20, message="two executor processes")
    assert driver.stop(signal.SIGTERM) == 0, driver.err
    wait_for(lambda: not any(alive(e) for e in executors), timeout=15,
             message="executors to be gone after the driver exited")


def start_with_two_executors(started, tmp_path, *extra, **popen):
    """A ``bin/driver --local 2`` whose executors have registered; (driver, their processes)."""
    secret = str(tmp_path / "secret")
    driver = started([sys.executable, os.path.join(BIN, "driver"), "--port", "0",
                      "--local", "2", "--secret-file", secret, *extra], **popen)
    match = LISTENING.match((driver.first_line or "").strip())
    assert match, driver.first_line
    with zsched.Client(match.group(1), secret_file=secret, timeout=30) as client:
        wait_for(lambda: client.executor_ids() == ["1", "2"], timeout=20,
                 message="both executors to register")
    return driver, executor_children(driver.proc.pid)


def test_ctrl_c_to_the_process_group_exits_0_and_leaves_no_executor(started, tmp_path):
    # Ctrl-C in a terminal sends SIGINT to the driver and to its executors at once.
    driver, executors = start_with_two_executors(started, tmp_path, start_new_session=True)
    os.killpg(driver.proc.pid, signal.SIGINT)
    assert driver.proc.wait(timeout=30) == 0
    wait_for(lambda: not any(alive(e) for e in executors), timeout=15,
             message="executors to be gone after Ctrl-C")


def test_killed_driver_leaves_no_orphan_executors(started, tmp_path):
    # Fate-sharing: with the driver gone for good (SIGKILL, no goodbye), executors
    # notice the silence and exit on their own.
    driver, executors = start_with_two_executors(
        started, tmp_path, "--conf", "executor_heartbeat_interval=0.5",
        "--conf", "executor_heartbeat_timeout=3")
    assert len(executors) == 2
    driver.proc.kill()
    driver.proc.wait(timeout=30)
    wait_for(lambda: not any(alive(e) for e in executors), timeout=20,
             message="orphaned executors to exit by themselves")

# ---------------------------------------------------------------- bad settings

@pytest.mark.parametrize("conf, named", [
    ("max_failures=abc", "max_failures"),
    ("max_failures=0", "max_failures"),
    ("no_such_setting=1", "no_such_setting"),
    ("max_failures", "max_failures"),
    ("executor_heartbeat_timeout=-1", "executor_heartbeat_timeout"),
    ("max_message_size=lots", "max_message_size"),
    ("driver_memory_cache=-1", "driver_memory_cache"),
])
def test_bad_conf_exits_nonzero_naming_the_setting(conf, named, tmp_path):
    result = subprocess.run(
        [sys.executable, os.path.join(BIN, "driver"), "--port", "0",
         "--secret-file", str(tmp_path / "secret"), "--conf", conf],
        capture_output=True, text=True, timeout=30)
    assert result.returncode == 1, result.stdout
    assert named in result.stderr, result.stderr
    assert "listening" not in result.stdout
    assert "Traceback" not in result.stderr, result.stderr


def test_good_conf_is_accepted_and_reaches_clients(driver_factory):
    driver = driver_factory("--insecure", "--conf", "max_failures=7",
                            "--conf", "executor_heartbeat_timeout=20s")
    with zsched.Client(driver.url, insecure=True, timeout=30) as client:
        assert client.config.max_failures == 7
        assert client.config.executor_heartbeat_timeout == 20.0


@pytest.mark.parametrize("size, kept", [
    ("64m", "up to 64 MiB"),
    ("0", "none (driver_memory_cache is 0)"),
])
def test_the_driver_says_how_much_freed_memory_it_keeps(started, size, kept):
    from zsched.fastpath import COMPILED
    driver = started([sys.executable, os.path.join(BIN, "driver"), "--port", "0", "--insecure",
                      "--log-level", "INFO", "--conf", f"driver_memory_cache={size}"])
    assert driver.first_line is not None
    assert driver.stop() == 0, driver.err
    if not COMPILED:
        kept = "none (the compiled modules are not in use)"
    assert f"freed memory kept for reuse: {kept}" in driver.err, driver.err


@pytest.mark.parametrize("args, named", [
    (["--local", "-1"], "--local"),
    (["--local", "1", "--cores-per-executor", "0"], "--cores-per-executor"),
    (["--local", "1", "--cores-per-executor", "65537"], "from 1 to 65536"),
    (["--port", "abc"], "--port"),
    (["--no-such-option"], "--no-such-option"),
    (["--local", "1", "--hosts", "hosts"], "not allowed with argument --local"),
    (["--hosts", "no-such-file"], "cannot read hosts file no-such-file"),
    (["--ssh-option", "Port=22"], "--ssh-option needs --hosts FILE"),
    (["--hosts", "bad-hosts"], "hosts file bad-hosts, line 2: the number of executors must be"),
    (["--dynamic-allocation"], "needs a cluster manager: --local N, --hosts FILE or --slurm"),
    (["--dashboard-port", "70000"], "argument --dashboard-port: must be from 0 to 65535, got '70000'"),
    (["--ipc-path", "/tmp/" + "x" * 110], "--ipc-path must be at most 107 bytes long"),
    (["--ipc-path", "no-such-dir/driver.sock"], "--ipc-path: no directory"),
])
def test_bad_option_exits_nonzero(args, named, tmp_path):
    (tmp_path / "bad-hosts").write_text("node1 2\nnode2 many\n")
    result = subprocess.run(
        [sys.executable, os.path.join(BIN, "driver"), "--insecure", *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1, result.stdout
    assert named in result.stderr, result.stderr
    assert "listening" not in result.stdout
    assert "Traceback" not in result.stderr, result.stderr


@pytest.mark.parametrize("args, named", [
    (["--conf", "zmq_heartbeat_timeout=1e400"],
     "invalid value for setting zmq_heartbeat_timeout: '1e400' "
     "(expected a duration from 0.01 s to 3600 s)"),
    (["--conf", "max_message_size=1e30"], "setting max_message_size: '1e30' (expected a size"),
    (["--conf", "zmq_heartbeat_interval=nan"], "setting zmq_heartbeat_interval: 'nan'"),
    (["--conf", "executor_start_timeout=inf"], "setting executor_start_timeout: 'inf'"),
    (["--conf", "shutdown_timeout=1e9"], "setting shutdown_timeout: '1e9'"),
    (["--initial-executors", "-1"], "argument --initial-executors: must be from 0 to 100000, got '-1'"),
    (["--min-executors", "3", "--max-executors", "2"], "--min-executors 3 is above --max-executors 2"),
    (["--local", "1", "--dynamic-allocation", "--min-executors", "3", "--max-executors", "2"],
     "--min-executors 3 is above --max-executors 2"),
    (["--max-executors", "1e400"], "argument --max-executors: must be an integer from 0 to 100000"),
    (["--local", "1", "--dynamic-allocation", "--max-executors", "4", "--initial-executors", "9"],
     "initial executors must be from 0 to 4, within the dynamic allocation's bounds, got 9"),
    (["--local", "1", "--dynamic-allocation", "--min-executors", "2", "--initial-executors", "1"],
     "initial executors must be at least 2, within the dynamic allocation's bounds, got 1"),
    (["--port", "-1"], "argument --port: must be from 0 to 65535, got '-1'"),
    (["--port", "99999999999999999999"], "argument --port: must be from 0 to 65535"),
    (["--dashboard-port", "1e400"], "argument --dashboard-port: must be an integer from 0 to 65535"),
    (["--local", "99999999"], "argument --local: must be from 0 to 8192, got '99999999'"),
    (["--local", "1", "--cores-per-executor", "1e400"], "argument --cores-per-executor: must be an integer"),
    (["--slurm", "--executors-per-job", "0"], "argument --executors-per-job: must be from 1 to"),
    (["--backlog-timeout", "nan"], "argument --backlog-timeout: must be from 0.001 s to 604800 s, got 'nan'"),
    (["--backlog-timeout", "inf"], "argument --backlog-timeout: must be from 0.001 s to 604800 s"),
    (["--executor-idle-timeout=-inf"], "argument --executor-idle-timeout: must be from 0.001 s"),
    (["--executor-idle-timeout", "1e400"], "argument --executor-idle-timeout: must be from 0.001 s"),
    (["--executor-idle-timeout", "-5"], "argument --executor-idle-timeout: must be from 0.001 s"),
    (["--secret-file", "/dev/null/secret"], "cannot create secret file /dev/null/secret"),
    (["--hosts", "many-hosts"], "--hosts many-hosts lists 100000000000000000000 executors, more than 100000"),
])
def test_bad_input_is_a_usage_error_exit_1_no_traceback(args, named, tmp_path):
    (tmp_path / "many-hosts").write_text("node1 99999999999999999999\nnode2 1\n")
    result = subprocess.run([sys.executable, os.path.join(BIN, "driver"), "--port", "0", *args],
                            cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1, result.stdout
    assert named in result.stderr, result.stderr
    assert result.stderr.startswith("usage: zsched-driver"), result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "listening" not in result.stdout


@pytest.mark.parametrize("args", [
    ["--conf", "zmq_heartbeat_interval=1ms", "--conf", "zmq_heartbeat_timeout=3600",
     "--conf", "max_message_size=2g", "--conf", "driver_memory_cache=0",
     "--conf", "executor_heartbeat_timeout=86400"],
    ["--dashboard-port", "0", "--local", "0", "--dynamic-allocation",
     "--min-executors", "0", "--max-executors", "100000", "--initial-executors", "0",
     "--backlog-timeout", "604800", "--executor-idle-timeout", "0.001"],
])
def test_the_bounds_themselves_are_accepted(started, args):
    driver = started([sys.executable, os.path.join(BIN, "driver"), "--port", "0", "--insecure", *args])
    assert driver.first_line is not None and LISTENING.match(driver.first_line.strip())
    assert driver.stop() == 0, driver.err
    assert "Traceback" not in driver.err, driver.err


# ---------------------------------------------------------------- python -m

def test_python_m_zsched_driver(started, tmp_path):
    secret = str(tmp_path / "secret")
    driver = started([sys.executable, "-m", "zsched.driver", "--port", "0", "--local", "1",
                      "--secret-file", secret],
                     cwd=tmp_path, env={**os.environ, "PYTHONPATH": REPO})
    assert driver.first_line is not None
    match = LISTENING.match(driver.first_line.strip())
    assert match, driver.first_line
    executors = []
    with zsched.Client(match.group(1), secret_file=secret, timeout=30) as client:
        wait_for(lambda: client.executor_ids() == ["1"], timeout=20, message="executor 1")
        executors = executor_children(driver.proc.pid)
        assert client.submit(lambda: "hello").result(timeout=30) == "hello"
    assert driver.stop(signal.SIGINT) == 0, driver.err
    wait_for(lambda: not any(alive(e) for e in executors), timeout=15,
             message="executor to be gone")


def test_python_m_zsched_driver_help(tmp_path):
    result = subprocess.run([sys.executable, "-m", "zsched.driver", "--help"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=30,
                            env={**os.environ, "PYTHONPATH": REPO})
    assert result.returncode == 0, result.stderr
    for option in ("--port", "--local", "--secret-file", "--insecure", "--conf", "--app-id"):
        assert option in result.stdout


@pytest.mark.skipif(shutil.which("zsched-driver") is None or shutil.which("zsched-executor") is None,
                    reason="console scripts are not on PATH (zsched is not pip-installed here)")
def test_console_scripts_are_installed():
    for script in ("zsched-driver", "zsched-executor"):
        result = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert "--app-id" in result.stdout


def square(x):
    return x * x


def test_client_of_a_stopped_driver_gets_errors_not_hangs(tmp_path):
    secret = str(tmp_path / "secret")
    port = _free_port()
    args = [sys.executable, os.path.join(BIN, "driver"), "--port", str(port), "--local", "1",
            "--secret-file", secret]
    first = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    first.stdout.readline()
    client = zsched.Client(f"tcp://127.0.0.1:{port}", secret_file=secret, timeout=10)
    assert client.submit(square, 3).result(30) == 9
    pending = client.submit(time.sleep, 60)
    first.terminate()
    assert first.wait(30) == 0
    with pytest.raises((zsched.TaskFailed, zsched.DriverConnectionError), match="driver stopped|lost the connection"):
        pending.result(30)
    wait_for(lambda: client.connection_error is not None, timeout=30)
    second = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        second.stdout.readline()
        # the old client does not silently talk to the new driver
        with pytest.raises(zsched.DriverConnectionError, match="lost the connection"):
            client.submit(square, 4)
        with pytest.raises(zsched.DriverConnectionError, match="lost the connection"):
            client.executor_ids()
        client.shutdown()
        # a new client of the new driver works
        with zsched.Client(f"tcp://127.0.0.1:{port}", secret_file=secret, timeout=10) as fresh:
            assert fresh.submit(square, 5).result(30) == 25
    finally:
        second.terminate()
        second.wait(30)
        first.stdout.close()
        second.stdout.close()


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
