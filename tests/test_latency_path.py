"""The short paths one task takes, with real drivers and executor processes on loopback:
a lone task on an idle one-core executor runs in the executor's loop thread (and still can
be killed, and heartbeats still flow while it runs), a flood still travels in batches, the
driver's ZMTP heartbeat settings govern the executors' end of the connection, and a
``LocalCluster(in_process=True)`` runs its driver in a thread with an inproc:// way in.

Nothing here asserts on timings: waits are generous ``wait_for`` on an outcome.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import psutil
import pytest
import zmq

import zsched
from zsched import protocol as p

from conftest import start_executor, wait_for

pytestmark = pytest.mark.timeout(180)


# ---------------------------------------------------------------- tasks (shipped by value)

def thread_name():
    return threading.current_thread().name


def say_started(path, text):
    """Write text to path in one step: a reader that sees the file sees all of it."""
    partial = f"{path}.partial"
    with open(partial, "w") as f:
        f.write(text)
    os.replace(partial, path)


def touch_then_sleep(path, seconds):
    say_started(path, str(os.getpid()))
    time.sleep(seconds)
    return threading.current_thread().name


def busy_python(path):
    """Spin in Python (an interrupt stops it) after saying it runs, in which thread."""
    say_started(path, threading.current_thread().name)
    x = 0
    while True:
        x += 1


def blocked_sleep(path, seconds):
    """Block in C (time.sleep): an interrupt cannot reach it."""
    say_started(path, threading.current_thread().name)
    time.sleep(seconds)


def process_gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# ---------------------------------------------------------------- lone tasks run inline

def test_a_lone_task_on_an_idle_one_core_executor_runs_in_its_loop_thread():
    with zsched.LocalCluster(n_executors=1, cores_per_executor=1) as cluster:
        client = cluster.client()
        # the loop's thread is the executor's main thread; task threads are task-N
        assert [client.submit(thread_name).result(30) for _ in range(20)] == ["MainThread"] * 20
        # a batch goes to the task thread as before
        names = set(client.map(lambda _: threading.current_thread().name, range(2000)))
        assert "task-0" in names
        client.shutdown()


def test_an_executor_of_two_cores_runs_every_task_in_its_task_threads():
    with zsched.LocalCluster(n_executors=1, cores_per_executor=2) as cluster:
        client = cluster.client()
        assert {client.submit(thread_name).result(30) for _ in range(10)} <= {"task-0", "task-1"}
        client.shutdown()


def test_heartbeats_flow_while_a_lone_task_runs_in_the_loop_thread(tmp_path):
    """While the loop's own thread runs a long task the relief thread runs the loop: the
    driver hears heartbeats sent during the task (they count one busy thread)."""
    with zsched.LocalCluster(n_executors=1, cores_per_executor=1,
                             executor_heartbeat_interval=0.1) as cluster:
        client = cluster.client()
        started = tmp_path / "started"
        future = client.submit(touch_then_sleep, started, 3)
        wait_for(started.exists, timeout=30, message="the task running")
        wait_for(lambda: client.status()["executors"][0].get("busy_threads") == 1, timeout=30,
                 message="a heartbeat sent while the task runs")
        assert future.result(30) == "MainThread"
        wait_for(lambda: client.status()["executors"][0].get("busy_threads") == 0, timeout=30,
                 message="a heartbeat after the task")
        status = client.status()
        assert status["losses"] == [] and status["tasks"]["finished"] == 1
        client.shutdown()


def test_tasks_launched_while_a_lone_task_runs_inline_wait_for_the_one_core(tmp_path):
    """A one-core executor runs one task at a time, also while its loop's thread runs one:
    what arrives meanwhile runs after it, in the task thread, and all results arrive."""
    with zsched.LocalCluster(n_executors=1, cores_per_executor=1, tasks_per_core=4,
                             prefetch_seconds=10) as cluster:
        client = cluster.client()
        # teach the driver the tasks are short, so that it queues several behind a running one
        assert len(list(client.map(abs, range(200)))) == 200
        started = tmp_path / "started"
        first = client.submit(touch_then_sleep, started, 1.5)
        wait_for(started.exists, timeout=30, message="the first task running")
        later = [client.submit(os.getpid) for _ in range(3)]
        wait_for(lambda: client.status()["tasks"]["running"] == 4, timeout=30,
                 message="three more tasks launched to the busy executor")
        assert not any(f.done() for f in later)  # the one core is busy
        assert first.result(30) == "MainThread"
        pid = int(started.read_text())
        assert [f.result(30) for f in later] == [pid] * 3
        client.shutdown()


def test_cancel_interrupts_a_python_loop_running_in_the_loop_thread(tmp_path):
    with zsched.LocalCluster(n_executors=1, cores_per_executor=1) as cluster:
        client = cluster.client()
        [before] = client.status()["executors"]
        started = tmp_path / "started"
        future = client.submit(busy_python, started)
        wait_for(started.exists, timeout=30, message="the loop running")
        assert started.read_text() == "MainThread"
        assert future.cancel()
        # the same executor goes on: its loop's thread was interrupted and took the loop back
        assert client.submit(os.getpid).result(45) == before["pid"]
        assert client.submit(thread_name).result(45) == "MainThread"
        status = client.status()
        [after] = status["executors"]
        assert (after["id"], after["pid"]) == (before["id"], before["pid"])
        assert status["losses"] == [] and status["tasks"]["cancelled"] == 1
        client.shutdown()


def test_an_unkillable_task_in_the_loop_thread_is_reaped_and_its_executor_replaced(tmp_path):
    """Blocked in C, a cancelled task ignores the interrupt: after task_kill_timeout the
    relief thread ends the executor process, which is replaced."""
    with zsched.LocalCluster(n_executors=1, cores_per_executor=1, task_kill_timeout=1) as cluster:
        client = cluster.client()
        [old] = client.status()["executors"]
        started = tmp_path / "started"
        future = client.submit(blocked_sleep, started, 120)
        wait_for(started.exists, timeout=30, message="the sleep running")
        assert started.read_text() == "MainThread"
        assert future.cancel()
        wait_for(lambda: process_gone(old["pid"]), timeout=45,
                 message="the executor of the unkillable task exits")
        losses = wait_for(lambda: client.status()["losses"], timeout=30, message="a loss reported")
        assert [loss["id"] for loss in losses] == [old["id"]]
        assert "task_kill_timeout" in losses[0]["reason"]
        assert client.submit(os.getpid).result(60) not in (old["pid"], None)
        client.shutdown()


# ---------------------------------------------------------------- floods still batch

def test_a_flood_travels_in_large_frames_both_ways():
    with zsched.LocalCluster(n_executors=1, cores_per_executor=1, in_process=True) as cluster:
        client = cluster.client()
        assert client.submit(abs, -1).result(30) == 1
        counters = cluster._driver.counters
        before = counters["messages_in"], counters["messages_out"]
        n = 5000
        assert list(client.map(abs, range(-n, 0), chunksize=1)) == list(range(n, 0, -1))
        messages_in = counters["messages_in"] - before[0]
        messages_out = counters["messages_out"] - before[1]
        # one message per task either way would be 2 x 5000 and more
        assert messages_in < n / 5, messages_in
        assert messages_out < n / 5, messages_out
        client.shutdown()


# ---------------------------------------------------------------- the driver's ZMTP settings

def test_the_drivers_zmtp_heartbeat_timeout_reaches_its_executors(driver_factory):
    """With the driver stopped (SIGSTOP), its executor must notice through ZMTP within the
    driver's zmq_heartbeat_timeout (1 s), well before its own silence check
    (executor_heartbeat_timeout, 6 s) fires: which of the two ends it says so. With ZeroMQ's
    defaults on the executor's side (10 s) the silence check would come first."""
    driver = driver_factory("--insecure", "--app-id", "zmtp-app",
                            "--conf", "zmq_heartbeat_interval=0.2s",
                            "--conf", "zmq_heartbeat_timeout=1s",
                            "--conf", "executor_heartbeat_interval=0.5s",
                            "--conf", "executor_heartbeat_timeout=6s")
    executor = start_executor("--driver-url", driver.url, "--executor-id", "1",
                              "--hostname", "127.0.0.1", "--cores", "1", "--app-id", "zmtp-app")
    try:
        wait_for(lambda: "Registered executor 1" in driver.stderr_so_far(), timeout=30,
                 message="the executor registered")
        time.sleep(0.5)  # a few of the driver's pings reach the executor
        os.kill(driver.proc.pid, signal.SIGSTOP)
        try:
            executor.wait(60)
        finally:
            os.kill(driver.proc.pid, signal.SIGCONT)
        _, err = executor.communicate(timeout=30)
        assert executor.returncode == 1, err
        assert "lost the connection to the driver" in err, err
        assert "driver silent" not in err, err
    finally:
        if executor.poll() is None:
            executor.kill()
            executor.communicate()


# ---------------------------------------------------------------- the driver in a thread

def test_in_process_cluster_serves_tcp_and_inproc_clients_and_leaves_nothing_behind():
    with zsched.LocalCluster(n_executors=2, cores_per_executor=1, in_process=True) as cluster:
        assert cluster.address.startswith("tcp://")
        assert cluster.inproc_address.startswith("inproc://")
        client = cluster.client()
        assert sorted(client.executor_ids()) == ["1", "2"]
        assert list(client.map(abs, range(-50, 0))) == list(range(50, 0, -1))
        # a peer in this process that shares the cluster's context needs no secret
        sock = cluster.context.socket(zmq.DEALER)
        try:
            sock.connect(cluster.inproc_address)
            sock.send(p.encode(p.ClientHello(os.getpid())))
            assert sock.poll(10000)
            welcome = p.decode(sock.recv())
            assert isinstance(welcome, p.ClientWelcome) and welcome.app_id == cluster.app_id
            sock.send(p.encode(p.ClientGoodbye()))
        finally:
            sock.close(linger=1000)
        pids = [e["pid"] for e in client.status()["executors"]]
        client.shutdown()
    assert not cluster._driver.is_running()
    assert all(process_gone(pid) for pid in pids)


CHILD = """
import os, sys, zsched
cluster = zsched.LocalCluster(n_executors=2, cores_per_executor=1, in_process=True)
client = cluster.client()
print(" ".join(str(e["pid"]) for e in client.status()["executors"]), flush=True)
print(os.path.dirname(cluster.secret_file), flush=True)
sys.stdin.readline()
os._exit(0)  # no clean-up at all: the executors must notice by themselves
"""


def test_executors_of_an_in_process_cluster_exit_when_its_process_dies():
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    private = ""
    try:
        pids = [int(pid) for pid in child.stdout.readline().split()]
        assert len(pids) == 2
        private = child.stdout.readline().strip()
        child.stdin.close()
        assert child.wait(60) == 0
        wait_for(lambda: all(process_gone(pid) for pid in pids), timeout=60,
                 message="the executors exit after their driver's process died")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if private.startswith(tempfile.gettempdir()):  # its private directory: nothing of
            shutil.rmtree(private, ignore_errors=True)  # the dead process could remove it
