"""No silent plaintext: a client or an executor given no credential refuses to connect
unless told ``insecure=True`` / ``--insecure``, with real drivers, executors and clients
on loopback.
"""
import os
import socket

import psutil
import pytest

import zsched
from conftest import run_executor, start_executor, wait_for
from zsched.cluster_managers.local import executor_command

pytestmark = pytest.mark.timeout(120)

# an executor that tried to register would wait this long: one that ends within the
# test's bounds never tried
SLOW_REGISTRATION = {"ZSCHED_REGISTRATION_TIMEOUT": "3600"}


@pytest.fixture(autouse=True)
def no_secret_in_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("ZSCHED_SECRET", raising=False)
    monkeypatch.delenv("ZSCHED_SECRET_FILE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture
def listener():
    """A TCP port that listens and accepts nothing by itself: the URL, and a function that
    tells whether anyone connected to it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        sock.settimeout(0.5)

        def connected():
            try:
                sock.accept()[0].close()
                return True
            except TimeoutError:
                return False
        yield f"tcp://127.0.0.1:{sock.getsockname()[1]}", connected


def executor_args(url, executor_id="1", app_id="open-app"):
    return ["--driver-url", url, "--executor-id", executor_id, "--hostname", "127.0.0.1",
            "--cores", "1", "--app-id", app_id]


def secret_file(tmp_path):
    path = tmp_path / "secret"
    path.write_text("s" * 64 + "\n")
    path.chmod(0o600)
    return str(path)


# ---------------------------------------------------------------- clients

def test_a_client_without_credential_refuses_naming_insecure_and_connects_nowhere(listener):
    url, connected = listener
    with pytest.raises(zsched.ConfigError) as info:
        zsched.Client(url, timeout=5)
    message = str(info.value)
    for name in (url, "secret_file=", "ZSCHED_SECRET_FILE", "ZSCHED_SECRET", "insecure=True"):
        assert name in message, message
    assert not connected()


def test_an_insecure_client_is_served_by_an_insecure_driver(driver_factory):
    driver = driver_factory("--insecure", "--local", "1")
    with zsched.Client(driver.url, insecure=True, timeout=30) as client:
        wait_for(lambda: client.executor_ids() == ["1"], timeout=30, message="executor 1")
        assert client.submit(pow, 2, 10).result(30) == 1024


def test_an_insecure_client_ignores_a_credential_in_the_environment(driver_factory, monkeypatch):
    # with the secret it holds, a client is refused by an insecure driver
    # (tests/test_security.py): served, this one did not use it
    driver = driver_factory("--insecure")
    monkeypatch.setenv("ZSCHED_SECRET", "s" * 64)
    with zsched.Client(driver.url, insecure=True, timeout=30) as client:
        assert client.executor_ids() == []


def test_secret_file_and_insecure_contradict_each_other(listener, tmp_path):
    url, connected = listener
    with pytest.raises(ValueError, match="secret_file and insecure=True contradict each other"):
        zsched.Client(url, secret_file=secret_file(tmp_path), insecure=True, timeout=5)
    assert not connected()


# ---------------------------------------------------------------- executors

def test_an_executor_without_credential_exits_1_naming_the_options(listener):
    url, connected = listener
    status, out, err = run_executor(*executor_args(url), env=SLOW_REGISTRATION, timeout=60)
    assert status == 1, (out, err)
    for name in (url, "--secret-file", "ZSCHED_SECRET_FILE", "ZSCHED_SECRET", "--insecure"):
        assert name in err, err
    assert "Usage" not in err and "Cannot register" not in err and "Traceback" not in err, err
    assert not connected()


@pytest.mark.parametrize("option", ["--secret-file", "--credential-fd"])
def test_insecure_with_a_credential_is_a_usage_error(listener, tmp_path, option):
    url, connected = listener
    value = secret_file(tmp_path) if option == "--secret-file" else "0"
    status, out, err = run_executor(*executor_args(url), "--insecure", option, value,
                                    env=SLOW_REGISTRATION, timeout=60)
    assert status == 1, (out, err)
    assert "Usage" in err and f"--insecure and {option} exclude each other" in err, err
    assert not connected()


def test_an_insecure_executor_registers_with_an_insecure_driver_and_runs_tasks(driver_factory):
    driver = driver_factory("--insecure", "--app-id", "open-app")
    executor = start_executor(*executor_args(driver.url, "open-1"), "--insecure")
    try:
        with zsched.Client(driver.url, insecure=True, timeout=30) as client:
            wait_for(lambda: client.executor_ids() == ["open-1"], timeout=30,
                     message="executor open-1 to register")
            assert client.submit(os.getpid).result(30) == executor.pid
        assert driver.stop() == 0
        out, err = executor.communicate(timeout=30)  # it leaves when its driver stops
    finally:
        if executor.poll() is None:
            executor.kill()
            executor.communicate()
    assert executor.returncode == 0, err


# ---------------------------------------------------------------- executors zsched starts

@pytest.mark.unit
def test_a_local_executor_is_told_insecure_only_over_a_socket_without_secret():
    def command(**kwargs):
        return executor_command("tcp://127.0.0.1:1", "1", "127.0.0.1", 1, "app", **kwargs)
    assert "--insecure" in command()
    secure = command(credential_fd=7)
    assert "--insecure" not in secure and secure[secure.index("--credential-fd") + 1] == "7"
    over_pipes = command(driver_fds=(3, 4), relief_fds=(5, 6))
    assert "--insecure" not in over_pipes and "--credential-fd" not in over_pipes


@pytest.mark.parametrize("link", ["socket", "pipe"])
def test_an_insecure_local_cluster_starts_executors_that_connect(link):
    with zsched.LocalCluster(n_executors=1, insecure=True, local_executor_link=link) as cluster:
        client = cluster.client()
        pid = client.submit(os.getpid).result(30)
        assert ("--insecure" in psutil.Process(pid).cmdline()) == (link == "socket")
        with zsched.Client(cluster.address, insecure=True, timeout=30) as over_tcp:
            assert over_tcp.submit(pow, 3, 2).result(30) == 9
