"""The short paths tasks take, with real drivers and executor processes on loopback: a
flood still travels in batches, the driver's ZMTP heartbeat settings govern the
executors' end of the connection, and a ``LocalCluster(in_process=True)`` runs its driver
in a thread with an inproc:// way in. A lone task run in an executor's loop thread is in
test_executor_inline.py.

Nothing here asserts on timings: waits are generous ``wait_for`` on an outcome.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

import psutil
import pytest
import zmq

import zsched
from zsched import protocol as p

from conftest import start_executor, wait_for

pytestmark = pytest.mark.timeout(180)


# ---------------------------------------------------------------- helpers

def read_lines_meanwhile(stream):
    """The lines of ``stream`` as a list that a thread fills as they come, and the thread."""
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(iter(stream.readline, "")), daemon=True)
    reader.start()
    return lines, reader


def process_gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# ---------------------------------------------------------------- floods still batch

def test_a_flood_travels_in_large_frames_both_ways():
    with zsched.LocalCluster(n_executors=1, cores_per_executor=1, in_process=True) as cluster:
        client = cluster.client()
        assert client.submit(abs, -1).result(30) == 1
        counters = client.status()["counters"]
        before = counters["messages_in"], counters["messages_out"]
        n = 5000
        assert list(client.map(abs, range(-n, 0), chunksize=1)) == list(range(n, 0, -1))
        counters = client.status()["counters"]
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
                              "--hostname", "127.0.0.1", "--cores", "1", "--app-id", "zmtp-app",
                              "--insecure")
    err_lines, err_reader = read_lines_meanwhile(executor.stderr)
    try:
        wait_for(lambda: "Registered executor 1" in driver.stderr_so_far(), timeout=30,
                 message="the executor registered")
        # the executor has the driver's answer: its connection, made with the driver's
        # ZMTP settings, is the one that stays
        wait_for(lambda: "Successfully registered" in "".join(err_lines), timeout=30,
                 message="the executor to take the driver's answer")
        os.kill(driver.proc.pid, signal.SIGSTOP)
        try:
            executor.wait(60)
        finally:
            os.kill(driver.proc.pid, signal.SIGCONT)
        err_reader.join(30)
        err = "".join(err_lines)
        assert executor.returncode == 1, err
        assert "lost the connection to the driver" in err, err
        assert "driver silent" not in err, err
    finally:
        if executor.poll() is None:
            executor.kill()
            executor.wait()
        err_reader.join(30)
        executor.stdout.close()
        executor.stderr.close()


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
    assert not cluster.driver_running
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
