"""The ``bin/executor`` command line, with real processes on loopback.

Contract (DESIGN.md, "Command line"): a missing required argument, an unknown argument
or ``--cores`` outside 1..65536 prints usage on stderr and exits 1; a refused registration prints the
driver's reason and exits 1; an unreachable driver prints
``Cannot register with driver: URL`` and exits 1.
"""
import os
import socket
import subprocess
import sys

import pytest

import zsched
from conftest import BIN, REPO, run_executor, start_executor, wait_for

pytestmark = pytest.mark.timeout(120)

# Every executor run here gives up registering quickly if something is wrong, so a
# regression shows as a failure instead of a 30 s hang.
FAST = {"ZSCHED_REGISTRATION_TIMEOUT": "2"}

VALID = {
    "--driver-url": "tcp://127.0.0.1:1",
    "--executor-id": "1",
    "--hostname": "127.0.0.1",
    "--cores": "1",
    "--app-id": "app",
}


def argv(**overrides):
    """A full executor command line, with ``overrides`` (None drops an argument)."""
    values = {**VALID, **{"--" + k.replace("_", "-"): v for k, v in overrides.items()}}
    out = []
    for flag, value in values.items():
        if value is not None:
            out += [flag, value]
    return out


@pytest.fixture(autouse=True)
def no_secret_in_environment(monkeypatch):
    monkeypatch.delenv("ZSCHED_SECRET", raising=False)
    monkeypatch.delenv("ZSCHED_SECRET_FILE", raising=False)


def assert_usage_error(status, out, err):
    assert status == 1, (status, out, err)
    assert "Usage" in err, err


def stop_process(proc, grace=20, timeout=20):
    """Wait ``grace`` seconds for a Popen started here to exit, then terminate it;
    collect its output."""
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.terminate()
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()


# ---------------------------------------------------------------- usage errors

@pytest.mark.parametrize("missing", ["driver_url", "executor_id", "hostname", "cores", "app_id"])
def test_missing_required_argument_prints_usage_and_exits_1(missing):
    status, out, err = run_executor(*argv(**{missing: None}), env=FAST, timeout=30)
    assert_usage_error(status, out, err)
    assert "--" + missing.replace("_", "-") in err


def test_no_arguments_at_all_prints_usage_and_exits_1():
    status, out, err = run_executor(env=FAST, timeout=30)
    assert_usage_error(status, out, err)


def test_unknown_argument_prints_usage_and_exits_1():
    status, out, err = run_executor(*argv(), "--no-such-option", "x", env=FAST, timeout=30)
    assert_usage_error(status, out, err)
    assert "--no-such-option" in err


@pytest.mark.parametrize("cores", ["0", "-1", "65537", str(1 << 70)])
def test_cores_out_of_range_prints_usage_and_exits_1(cores):
    status, out, err = run_executor(*argv(cores=cores), env=FAST, timeout=30)
    assert_usage_error(status, out, err)
    assert "Cannot register" not in err  # refused before any attempt to connect


@pytest.mark.parametrize("cores", ["abc", "1.5", ""])
def test_non_integer_cores_prints_usage_and_exits_1(cores):
    status, out, err = run_executor(*argv(cores=cores), env=FAST, timeout=30)
    assert_usage_error(status, out, err)


@pytest.mark.parametrize("option", ["executor_id", "app_id"])
@pytest.mark.parametrize("value", ["\u00b2", "\u2460", "9" * 5000, "a/b", "a\nb", "a b", "-x"])
def test_an_odd_id_prints_usage_and_exits_1(option, value):
    status, out, err = run_executor(*argv(**{option: value}), env=FAST, timeout=30)
    assert_usage_error(status, out, err)
    assert f"--{option.replace('_', '-')} " in err
    assert "Traceback" not in err and "Cannot register" not in err


@pytest.mark.parametrize("option", ["driver_url", "worker_url"])
@pytest.mark.parametrize("url", ["bogus", "", "http://x:1", "tcp://", "tcp://127.0.0.1",
                                 "tcp://127.0.0.1:abc", "tcp://127.0.0.1:0",
                                 "tcp://127.0.0.1:99999", "ipc://"])
def test_a_malformed_url_prints_usage_and_exits_1(option, url):
    status, out, err = run_executor(*argv(**{option: url}), env=FAST, timeout=30)
    assert_usage_error(status, out, err)
    assert f"--{option.replace('_', '-')} must be tcp://HOST:PORT" in err and repr(url) in err
    assert "Traceback" not in err and "Cannot register" not in err


def test_credential_fd_with_secret_file_prints_usage_and_exits_1(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("x" * 64)
    status, out, err = run_executor(*argv(credential_fd="0", secret_file=str(secret)), env=FAST,
                                    timeout=30)
    assert_usage_error(status, out, err)
    assert "--credential-fd and --secret-file" in err


@pytest.mark.parametrize("content, says", [(None, "file descriptor 7"), (b"", "not a zsched credential"),
                                            (b"not a credential\n", "not a zsched credential")])
def test_a_credential_fd_that_is_closed_empty_or_junk_exits_1_saying_so(content, says):
    """The descriptor: 7, which is not open, or the executor's standard input."""
    fd = "7" if content is None else "0"
    proc = subprocess.Popen([sys.executable, os.path.join(BIN, "executor"), *argv(credential_fd=fd)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, **FAST})
    out, err = proc.communicate(content or b"", timeout=30)
    assert proc.returncode == 1, (out, err)
    assert says in err.decode(), err
    assert b"Traceback" not in err and b"Cannot register" not in err


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_exits_0(flag):
    status, out, err = run_executor(flag, env=FAST, timeout=30)
    assert status == 0, (out, err)
    assert "Usage" in out
    for required in VALID:
        assert required in out


# ---------------------------------------------------------------- registration

def test_unreachable_driver_prints_cannot_register_and_exits_1():
    # A bound TCP socket that does not listen: nothing can accept on that port.
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        url = f"tcp://127.0.0.1:{placeholder.getsockname()[1]}"
        status, out, err = run_executor(*argv(driver_url=url), "--insecure",
                                        env={"ZSCHED_REGISTRATION_TIMEOUT": "1"}, timeout=20)
    assert status == 1, (out, err)
    assert f"Cannot register with driver: {url}" in err.splitlines(), err


def test_duplicate_executor_id_is_refused_and_first_keeps_working(driver_factory, tmp_path):
    secret = str(tmp_path / "secret")
    driver = driver_factory("--secret-file", secret, "--app-id", "dup-app")
    common = dict(driver_url=driver.url, executor_id="7", app_id="dup-app", secret_file=secret)
    first = start_executor(*argv(**common), env=FAST)
    try:
        with zsched.Client(driver.url, secret_file=secret, timeout=30) as client:
            wait_for(lambda: client.executor_ids() == ["7"], timeout=20,
                     message="executor 7 to register")
            first_pid = client.status()["executors"][0]["pid"]
            assert first_pid == first.pid

            status, out, err = run_executor(*argv(**common), env=FAST, timeout=30)
            assert status == 1, (out, err)
            assert "Duplicate executor ID: 7" in err, err

            # The first executor 7 is untouched: still registered, still running tasks.
            assert first.poll() is None
            assert client.executor_ids() == ["7"]
            assert client.is_executor_active("7")
            assert client.submit(os.getpid).result(timeout=30) == first.pid
            assert client.submit(lambda x: x * 2, 21).result(timeout=30) == 42
    finally:
        driver.stop()
        out, err = stop_process(first)  # it leaves by itself when its driver shuts down
    assert first.returncode == 0, err


def test_wrong_app_id_is_refused_with_a_reason_naming_it(driver_factory, tmp_path):
    secret = str(tmp_path / "secret")
    driver = driver_factory("--secret-file", secret, "--app-id", "right-app")
    status, out, err = run_executor(
        *argv(driver_url=driver.url, app_id="wrong-app", secret_file=secret), env=FAST, timeout=30)
    assert status == 1, (out, err)
    assert "wrong-app" in err, err
    with zsched.Client(driver.url, secret_file=secret, timeout=30) as client:
        assert client.executor_ids() == []


def test_registered_executor_runs_tasks_and_exits_0_when_driver_stops(driver_factory, tmp_path):
    secret = str(tmp_path / "secret")
    driver = driver_factory("--secret-file", secret, "--app-id", "app")
    executor = start_executor(*argv(driver_url=driver.url, executor_id="exec-a", cores="2",
                                    secret_file=secret), env=FAST)
    try:
        with zsched.Client(driver.url, secret_file=secret, timeout=30) as client:
            wait_for(lambda: client.executor_ids() == ["exec-a"], timeout=20,
                     message="executor exec-a to register")
            (info,) = client.status()["executors"]
            assert info["cores"] == 2 and info["pid"] == executor.pid
            assert list(client.map(pow, range(10), [2] * 10)) == [x * x for x in range(10)]
        assert driver.stop() == 0
    finally:
        out, err = stop_process(executor)
    assert executor.returncode == 0, err


def test_python_m_zsched_executor_help(tmp_path):
    result = subprocess.run([sys.executable, "-m", "zsched.executor", "--help"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=30,
                            env={**os.environ, "PYTHONPATH": REPO})
    assert result.returncode == 0, result.stderr
    assert "Usage" in result.stdout


def test_python_m_zsched_executor_usage_error(tmp_path):
    result = subprocess.run([sys.executable, "-m", "zsched.executor", "--cores", "0"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=30,
                            env={**os.environ, "PYTHONPATH": REPO, **FAST})
    assert result.returncode == 1
    assert "Usage" in result.stderr
