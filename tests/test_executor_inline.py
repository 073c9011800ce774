"""A lone task on an idle one-core executor runs in the executor's loop thread (see
zsched/executor/inline.py), with real drivers and executor processes on loopback: it
still can be killed, heartbeats still flow while it runs, tasks launched meanwhile wait
for the one core, and an executor of more cores runs every task in its task threads.

Nothing here asserts on timings: waits are generous ``wait_for`` on an outcome.
"""
import os
import threading
import time

import psutil
import pytest

import zsched

from conftest import wait_for

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


def touch_then_wait(path, seconds):
    """Say it runs, then sleep in short steps: a kill reaches it between them."""
    say_started(path, threading.current_thread().name)
    for _ in range(int(seconds * 100)):
        time.sleep(0.01)


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
        assert client.status()["executors"][0]["relief"] is False  # no relief thread
        client.shutdown()


@pytest.mark.parametrize("link", ["pipe", "socket"])
def test_heartbeats_flow_while_a_lone_task_runs_in_the_loop_thread(tmp_path, link):
    """While the loop's own thread runs a long task the relief thread covers for it, over
    a connection of its own (pipes or a socket, as the executor's): the driver hears
    heartbeats sent during the task (they count one busy thread)."""
    with zsched.LocalCluster(n_executors=1, cores_per_executor=1, local_executor_link=link,
                             executor_heartbeat_interval=0.1) as cluster:
        client = cluster.client()
        wait_for(lambda: client.status()["executors"][0]["relief"], timeout=30,
                 message="the relief thread's connection attached")
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


@pytest.mark.parametrize("link", ["pipe", "socket"])
def test_tasks_held_behind_a_long_inline_task_go_to_an_executor_that_joins(tmp_path, link):
    """While the relief thread covers, the driver sends to it: when an idle executor joins,
    the tasks launched behind the long one are given back and run there meanwhile."""
    with zsched.LocalCluster(n_executors=1, cores_per_executor=1, tasks_per_core=4,
                             prefetch_seconds=10, local_executor_link=link) as cluster:
        client = cluster.client()
        assert len(list(client.map(abs, range(200)))) == 200  # short tasks: a deep window
        started = tmp_path / "started"
        long = client.submit(touch_then_wait, started, 120)
        wait_for(started.exists, timeout=30, message="the long task running")
        wait_for(lambda: client.status()["executors"][0].get("busy_threads") == 1, timeout=30,
                 message="the relief thread's first heartbeat")
        later = [client.submit(os.getpid) for _ in range(3)]
        wait_for(lambda: client.status()["tasks"]["running"] == 4, timeout=30,
                 message="three more tasks launched behind the long one")
        assert client.request_total_executors(2)
        pids = {f.result(60) for f in later}  # long before the long task ends
        assert not long.done()
        [first] = [e["pid"] for e in client.status()["executors"] if e["id"] == "1"]
        assert first not in pids
        assert long.cancel()
        client.shutdown()


@pytest.mark.parametrize("link", ["pipe", "socket"])
def test_cancel_interrupts_a_python_loop_running_in_the_loop_thread(tmp_path, link):
    with zsched.LocalCluster(n_executors=1, cores_per_executor=1,
                             local_executor_link=link) as cluster:
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


@pytest.mark.unit
def test_a_forget_read_from_the_loop_s_connection_spares_functions_sent_during_the_cover():
    # During a cover the relief reads both connections. A ForgetFunctions on the relief's
    # was sent after a launch sent the function again; one on the loop's, before it.
    from zsched.executor.inline import InlinePath
    path = InlinePath(None, None)
    path._covering = True
    path.note_functions([b"f"], holds=lambda digest: True)
    assert path.to_forget([b"f", b"g"]) == [b"f", b"g"]
    path._reading_loop_connection = True
    assert path.to_forget([b"f", b"g"]) == [b"g"]
