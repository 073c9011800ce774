"""Executors forked from the driver's process (``zsched/driver/forked_executors.py``,
``bin/driver --fork-executors``, ``LocalClusterManager.fork_first``): a LocalCluster's
first executors are forks of its driver that look and behave as executor processes, and
a driver forks none where a fork could hold more than an executor may."""
import os
import signal
import socket
import subprocess
import sys

import psutil
import pytest

import zsched
from conftest import BIN, DriverProcess, wait_for
from zsched.cluster_managers.local import LocalClusterManager
from zsched.driver.forked_executors import ForkedProcess

WAIT = 60


def what_the_task_sees():
    """In the executor: whether it is a fork of its driver (the driver's modules are in
    it), its arguments, and where its standard input goes."""
    return {"forked": "zsched.driver.cli" in sys.modules, "argv": sys.argv[1:],
            "stdin": os.readlink("/proc/self/fd/0"), "pid": os.getpid()}


def descriptors(pid):
    """What the descriptors of process ``pid`` point to."""
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            found.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return found


def test_a_local_cluster_forks_its_first_executors_which_look_like_executors():
    with zsched.LocalCluster(n_executors=2) as cluster, cluster.client() as client:
        executors = client.status()["executors"]
        seen = [client.submit(what_the_task_sees).result(WAIT) for _ in range(4)]
        driver = psutil.Process(cluster.driver_pid)
        assert sorted(e["pid"] for e in executors) == sorted(c.pid for c in driver.children())
        for executor in executors:
            cmdline = psutil.Process(executor["pid"]).cmdline()
            assert "zsched.executor" in cmdline[2] and "zsched.driver" not in " ".join(cmdline)
            assert cmdline[cmdline.index("--executor-id") + 1] == executor["id"]
            # the driver's standard input (its starter's pipe) and other descriptors stay its own
            driver_only = descriptors(cluster.driver_pid) - descriptors(executor["pid"])
            assert os.readlink(f"/proc/{cluster.driver_pid}/fd/0") in driver_only
        for task in seen:
            assert task["forked"] and task["stdin"] == "/dev/null"
            assert task["argv"][task["argv"].index("--executor-id") + 1] in ("1", "2")


def test_the_executors_that_replace_forked_ones_are_new_processes():
    with zsched.LocalCluster(n_executors=2) as cluster, cluster.client() as client:
        for executor in client.status()["executors"]:
            os.kill(executor["pid"], signal.SIGKILL)
        wait_for(lambda: sorted(client.executor_ids()) == ["3", "4"], timeout=WAIT,
                 message="two new executors in place of the killed ones")
        assert not any(client.submit(what_the_task_sees).result(WAIT)["forked"] for _ in range(4))


def driver_with_two_executors(tmp_path, *args, env=None):
    """``bin/driver --local 2 --fork-executors``, its executors registered: (driver, what
    a task sees)."""
    driver = DriverProcess("--local", "2", "--fork-executors", "--insecure", *args, env=env)
    with zsched.Client(driver.url, insecure=True, timeout=WAIT) as client:
        wait_for(lambda: len(client.executor_ids()) == 2, timeout=WAIT,
                 message="both executors to register")
        seen = client.submit(what_the_task_sees).result(WAIT)
    return driver, seen


@pytest.mark.parametrize("where", ["ipc path", "no ipc path", "secret in the environment"])
def test_a_driver_forks_only_where_a_fork_holds_nothing_more(tmp_path, where):
    ipc = [] if where == "no ipc path" else ["--ipc-path", str(tmp_path / "driver.sock")]
    env = {"ZSCHED_SECRET": "a" * 40} if where == "secret in the environment" else None
    driver, seen = driver_with_two_executors(tmp_path, *ipc, env=env)
    try:
        assert seen["forked"] == (where == "ipc path")
    finally:
        assert driver.stop() == 0


def test_a_killed_driver_leaves_no_forked_executor(tmp_path):
    driver, seen = driver_with_two_executors(tmp_path, "--ipc-path", str(tmp_path / "d.sock"))
    assert seen["forked"]
    executors = [psutil.Process(c.pid) for c in psutil.Process(driver.proc.pid).children()]
    assert len(executors) == 2
    driver.proc.kill()
    driver.stop()
    wait_for(lambda: not any(e.is_running() and e.status() != psutil.STATUS_ZOMBIE
                             for e in executors),
             timeout=WAIT, message="the executors to leave when their driver's pipes close")


def test_a_driver_that_cannot_listen_leaves_no_forked_executor(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        out = subprocess.run(
            [sys.executable, os.path.join(BIN, "driver"), "--port", str(taken.getsockname()[1]),
             "--local", "2", "--fork-executors", "--insecure", "--ipc-path",
             str(tmp_path / "driver.sock"), "--log-level", "INFO"],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=WAIT)
    finally:
        taken.close()
    assert out.returncode == 1 and "cannot listen" in out.stderr
    assert "forked executor 2" in out.stderr  # and the fixture finds neither left running


# ---------------------------------------------------------------- the parts

def test_a_manager_hands_its_forked_executors_to_the_driver_first_and_stops_the_rest():
    started = []

    def fork(arguments, keep_fds):  # a stand-in executor: a real process given the pipes
        process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                   pass_fds=keep_fds)
        started.append((arguments, process))
        return process

    manager = LocalClusterManager(1, hostname="127.0.0.1")
    manager.fork_first(3, "ipc:///nowhere", "app-1", fork)
    assert [a[a.index("--executor-id") + 1] for a, _ in started] == ["1", "2", "3"]
    assert all("--driver-fds" in a and "--relief-fds" in a for a, _ in started)
    adopted = []
    manager.adopt_link = lambda executor_id, read_fd, write_fd: adopted.append(executor_id)
    manager.attach("ipc:///nowhere", "app-1", None)
    manager.request_total(2)
    assert manager.launched_ids() == ["1", "2"] and adopted == ["1", "1", "2", "2"]
    manager.stop(0)  # the third was never asked for: killed, with the others
    assert all(process.poll() is not None for _, process in started)


@pytest.mark.parametrize("how, code", [("exit", 3), ("signal", -signal.SIGKILL)])
def test_a_forked_process_tells_how_it_ended(how, code):
    pid = os.fork()
    if pid == 0:  # the child does nothing but end
        if how == "signal":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(3)
    process = ForkedProcess(pid)
    assert process.wait() == code and process.poll() == code and process.returncode == code
    process.kill()  # reaped: no signal, to a pid that may be another's by now
