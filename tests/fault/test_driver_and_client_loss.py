"""The other side of fault tolerance: the driver or a client goes away, for real.

Real ``bin/driver`` and ``bin/executor`` processes on loopback, killed or stopped with
signals. What is checked is only what the public contract promises (DESIGN.md): executors
fate-share with their driver and with their ``--worker-url`` (no orphans), a client's
futures fail with ``DriverConnectionError`` when its driver is gone (never hang), a dead
client's tasks are dropped so that they do not block other clients, and SIGTERM stops a
driver and its executors at once. No assertion is on a duration: waits are generous
bounds, each far below the timeout that would let a wrong implementation pass anyway
(the 60 s heartbeat timeout, the 500 s that 10,000 dead tasks would need, ...).
"""
import concurrent.futures
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest

import zsched
from conftest import REPO, start_executor, wait_for

pytestmark = pytest.mark.timeout(120)


# ---------------------------------------------------------------- tasks (shipped by value)

def nap(seconds):
    time.sleep(seconds)
    return seconds


def answer():
    return 42


# ---------------------------------------------------------------- helpers

def _gone(pid):
    """True once ``pid`` no longer runs (exited, or a zombie nobody reaped yet)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _executor_pids(client, n):
    """Pids of the ``n`` registered executors, once there are ``n``."""
    executors = wait_for(lambda: (lambda e: e if len(e) == n else None)(client.status()["executors"]),
                         timeout=30, message=f"{n} executor(s) registered")
    return [e["pid"] for e in executors]


def _child_env():
    paths = [REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _reap(proc):
    if proc.poll() is None:
        proc.kill()
    proc.communicate(timeout=30)


# ---------------------------------------------------------------- 1. driver SIGKILLed

def test_sigkilled_driver_its_executors_exit_and_client_futures_fail(driver_factory, tmp_path):
    driver = driver_factory("--local", "2", "--secret-file", str(tmp_path / "secret"))
    client = zsched.Client(driver.url, secret_file=driver.secret_file, timeout=20)
    try:
        pids = _executor_pids(client, 2)
        # the executors are the driver's children (started by its local cluster manager)
        assert set(pids) <= {c.pid for c in psutil.Process(driver.proc.pid).children()}
        running = [client.submit(nap, 300) for _ in range(2)]   # one per core
        queued = [client.submit(nap, 300) for _ in range(8)] + [client.submit(answer) for _ in range(5)]
        wait_for(lambda: client.status()["tasks"]["running"] == 2, timeout=20,
                 message="the two long tasks launched")

        driver.proc.send_signal(signal.SIGKILL)
        driver.proc.wait(10)

        # every pending future fails with DriverConnectionError, not a hang (the long tasks
        # would need 300 s)
        done, not_done = concurrent.futures.wait(running + queued, timeout=30)
        assert not not_done, f"{len(not_done)} future(s) still pending 30 s after the driver died"
        for future in running + queued:
            assert isinstance(future.exception(), zsched.DriverConnectionError), future.exception()
        with pytest.raises(zsched.DriverConnectionError):
            client.submit(answer)
        with pytest.raises(zsched.DriverConnectionError):
            client.map(answer)
        with pytest.raises(zsched.DriverConnectionError):
            client.status()

        # the orphaned executors exit by themselves (their tasks would run for 300 s; the
        # heartbeat timeout is 30 s)
        wait_for(lambda: all(_gone(pid) for pid in pids), timeout=20,
                 message=f"executors {pids} to exit after their driver was SIGKILLed")
    finally:
        client.shutdown(wait=False)


def test_submissions_racing_with_the_driver_death_all_complete(driver_factory):
    """Submitting from one thread while the driver dies: each submit() either raises
    DriverConnectionError or returns a future that completes (here: fails with it). None
    may stay pending forever. (A few rounds: the race is in how the two threads meet.)"""
    for _ in range(5):
        driver = driver_factory("--insecure")   # no executor: every task stays queued
        client = zsched.Client(driver.url, insecure=True, timeout=20)
        futures = []
        raised = []

        def flood():
            try:
                while True:
                    futures.append(client.submit(answer))
            except zsched.DriverConnectionError as exc:
                raised.append(exc)
        submitter = threading.Thread(target=flood)
        submitter.start()
        try:
            wait_for(lambda: len(futures) >= 2000, timeout=20, message="submissions under way")
        finally:
            driver.proc.send_signal(signal.SIGKILL)
            driver.proc.wait(10)
            submitter.join(30)
        assert not submitter.is_alive(), "submit() still accepts tasks 30 s after the driver died"
        assert raised, "submit() never raised after the driver died"
        _, not_done = concurrent.futures.wait(futures, timeout=15)
        client.shutdown(wait=False)
        assert not not_done, (f"{len(not_done)} of {len(futures)} futures submitted while the driver "
                              f"died never completed")
        for future in futures:
            assert isinstance(future.exception(), zsched.DriverConnectionError)


# ---------------------------------------------------------------- 2. driver SIGTERMed

def test_sigterm_driver_stops_executors_at_once(driver_factory):
    # neither the executors' heartbeat timeout (60 s) nor the driver's shutdown_timeout
    # (50 s, after which it would terminate them) can explain a stop within 20 s: the
    # executors stopped because the driver told them
    driver = driver_factory("--insecure", "--local", "2",
                            "--conf", "executor_heartbeat_timeout=60",
                            "--conf", "shutdown_timeout=50")
    client = zsched.Client(driver.url, insecure=True, timeout=20)
    try:
        pids = _executor_pids(client, 2)
        futures = [client.submit(nap, 300) for _ in range(4)]
        wait_for(lambda: client.status()["tasks"]["running"] == 2, timeout=20,
                 message="two tasks running")
        executors = [psutil.Process(pid) for pid in pids]

        driver.proc.send_signal(signal.SIGTERM)

        _, alive = psutil.wait_procs(executors, timeout=20)
        assert not alive, f"executors {[p.pid for p in alive]} still run 20 s after SIGTERM to the driver"
        assert driver.proc.wait(20) == 0
        # the client hears of it: nothing hangs
        done, not_done = concurrent.futures.wait(futures, timeout=20)
        assert not not_done
        for future in futures:
            assert isinstance(future.exception(), (zsched.TaskFailed, zsched.DriverConnectionError))
        assert all(_gone(pid) for pid in pids)
    finally:
        client.shutdown(wait=False)
    assert driver.stop() == 0


# ---------------------------------------------------------------- 3. a client SIGKILLed

FLOODING_CLIENT = textwrap.dedent("""\
    import sys, time
    import zsched

    def nap():
        time.sleep(0.05)

    client = zsched.Client(sys.argv[1], insecure=True, timeout=20)
    futures = [client.submit(nap) for _ in range(10_000)]
    # the driver handles a client's messages in order: once it answers, it holds all 10,000
    print("submitted", client.status()["tasks"]["submitted"], flush=True)
    time.sleep(600)
""")


def test_sigkilled_client_tasks_are_dropped_and_do_not_block_others(driver_factory, tmp_path):
    driver = driver_factory("--insecure", "--local", "1")
    script = tmp_path / "flooding_client.py"
    script.write_text(FLOODING_CLIENT)
    flooder = subprocess.Popen([sys.executable, str(script), driver.url], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=_child_env())
    client = None
    try:
        line = flooder.stdout.readline()
        assert line.split() == ["submitted", "10000"], (line, flooder.poll())
        client = zsched.Client(driver.url, insecure=True, timeout=20)
        wait_for(lambda: client.status()["tasks"]["finished"] >= 1, timeout=30,
                 message="the flooding client's tasks to run")

        flooder.send_signal(signal.SIGKILL)
        flooder.wait(10)

        # 10,000 tasks of 0.05 s on one core would take 500 s: this one does not wait for them
        assert client.submit(answer).result(timeout=30) == 42

        def settled():
            counts = client.status()["tasks"]
            return counts if counts["queued"] == 0 and counts["running"] == 0 else None
        counts = settled() or wait_for(settled, timeout=20, message="no task queued or running")
        assert counts["submitted"] == 10_001
        # every one of the dead client's tasks is accounted for; most were dropped
        assert counts["finished"] + counts["failed"] + counts["cancelled"] == 10_001, counts
        assert counts["cancelled"] >= 9_000, counts
    finally:
        _reap(flooder)
        if client is not None:
            client.shutdown(wait=False)


OWNER_OF_A_LOCAL_CLUSTER = textwrap.dedent("""\
    import time
    import zsched

    cluster = zsched.LocalCluster(n_executors=2)
    client = cluster.client()
    future = client.submit(time.sleep, 300)
    while client.status()["tasks"]["running"] < 1:
        time.sleep(0.01)
    print("executors", *[e["pid"] for e in client.status()["executors"]], flush=True)
    time.sleep(600)
""")


def test_sigkilled_program_leaves_no_process_of_its_local_cluster(tmp_path):
    """The program that made a LocalCluster dies without closing it (SIGKILL: no atexit):
    its driver and executors stop by themselves, tasks running or not."""
    script = tmp_path / "owner.py"
    script.write_text(OWNER_OF_A_LOCAL_CLUSTER)
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=_child_env())
    try:
        words = owner.stdout.readline().split()
        assert words[:1] == ["executors"] and len(words) == 3, (words, owner.poll())
        executor_pids = [int(w) for w in words[1:]]
        (driver_pid,) = [c.pid for c in psutil.Process(owner.pid).children()]
        assert set(executor_pids) <= {c.pid for c in psutil.Process(driver_pid).children()}

        owner.send_signal(signal.SIGKILL)
        owner.wait(10)

        pids = [driver_pid] + executor_pids
        wait_for(lambda: all(_gone(pid) for pid in pids), timeout=30,
                 message=f"the cluster's driver and executors {pids} to stop after their owner died")
    finally:
        _reap(owner)


# ---------------------------------------------------------------- 4. --worker-url fate-sharing

WORKER = textwrap.dedent("""\
    import time
    import zmq
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    monitor = router.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    print(port, flush=True)
    print("connected" if monitor.poll(30_000) else "nobody connected", flush=True)
    time.sleep(600)
""")


def _executor_args(driver, executor_id, app_id, worker_url):
    return ["--driver-url", driver.url, "--executor-id", executor_id, "--hostname", "127.0.0.1",
            "--cores", "1", "--app-id", app_id, "--worker-url", worker_url, "--insecure"]


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "running-a-long-task"])
def test_executor_exits_when_its_worker_dies(driver_factory, tmp_path, busy):
    """Also while its loop's thread runs a long lone task: the relief thread watches the
    worker too, with a connection of its own."""
    driver = driver_factory("--insecure", "--app-id", "worker-test")
    worker = subprocess.Popen([sys.executable, "-c", WORKER], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=_child_env())
    executor = client = None
    try:
        port = int(worker.stdout.readline())
        worker_url = f"tcp://127.0.0.1:{port}"
        executor = start_executor(*_executor_args(driver, "w1", "worker-test", worker_url))
        client = zsched.Client(driver.url, insecure=True, timeout=20)
        wait_for(lambda: "w1" in client.executor_ids(), timeout=30, message="executor w1 registered")
        assert worker.stdout.readline().strip() == "connected"  # the executor watches it
        assert client.submit(answer).result(timeout=30) == 42
        assert executor.poll() is None
        if busy:  # a lone task on the idle executor: its loop's thread runs it
            client.submit(nap, 120)
            wait_for(lambda: client.status()["executors"][0].get("busy_threads") == 1,
                     timeout=30, message="the relief thread's heartbeat during the task")

        worker.send_signal(signal.SIGKILL)
        worker.wait(10)

        try:
            _, err = executor.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError("the executor still runs 30 s after its worker was SIGKILLed") from None
        assert executor.returncode != 0, err
        assert "lost the connection to worker" in err and worker_url in err, err
        # and the driver heard why it left (its last message, read before its closed
        # connection is acted on)
        losses = wait_for(lambda: [loss for loss in client.status()["losses"] if loss["id"] == "w1"],
                          timeout=10, message="the loss of w1 in status()")
        assert "worker" in losses[0]["reason"], losses
        assert "w1" not in client.executor_ids()
    finally:
        _reap(worker)
        if executor is not None:
            _reap(executor)
        if client is not None:
            client.shutdown(wait=False)


def test_executor_exits_when_nobody_listens_at_its_worker_url(driver_factory):
    driver = driver_factory("--insecure", "--app-id", "worker-test")
    worker_url = f"tcp://127.0.0.1:{_free_port()}"
    executor = start_executor(*_executor_args(driver, "w2", "worker-test", worker_url),
                              env={"ZSCHED_REGISTRATION_TIMEOUT": "3"})
    client = zsched.Client(driver.url, insecure=True, timeout=20)
    try:
        try:
            _, err = executor.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError("an executor whose worker URL nobody serves still runs after "
                                 "30 s (registration timeout 3 s)") from None
        assert executor.returncode != 0, err
        assert "worker" in err and worker_url in err, err
        assert "w2" not in client.executor_ids()
    finally:
        _reap(executor)
        client.shutdown(wait=False)


# ---------------------------------------------------------------- 5. driver SIGSTOPped

def test_executor_exits_when_its_driver_is_stopped_and_the_driver_recovers(driver_factory):
    driver = driver_factory("--insecure", "--local", "1",
                            "--conf", "zmq_heartbeat_interval=0.5", "--conf", "zmq_heartbeat_timeout=2",
                            "--conf", "executor_heartbeat_interval=0.5",
                            "--conf", "executor_heartbeat_timeout=4")
    client = zsched.Client(driver.url, insecure=True, timeout=20)
    try:
        (pid,) = _executor_pids(client, 1)
        old_ids = client.executor_ids()
        assert client.submit(answer).result(timeout=30) == 42
        pending = client.submit(nap, 300)
        wait_for(lambda: client.status()["tasks"]["running"] == 1, timeout=20, message="the task launched")

        os.kill(driver.proc.pid, signal.SIGSTOP)
        try:
            # the ZMTP heartbeat (2 s) or the application heartbeat (4 s) times out: the
            # executor leaves by itself while its driver cannot do anything
            wait_for(lambda: _gone(pid), timeout=30,
                     message=f"executor {pid} to exit while its driver is stopped")
            # and the client, to which the driver is unreachable, fails its future (the task
            # would take 300 s)
            concurrent.futures.wait([pending], timeout=30)
            assert isinstance(pending.exception(0), zsched.DriverConnectionError)
            with pytest.raises(zsched.DriverConnectionError):
                client.submit(answer)
        finally:
            os.kill(driver.proc.pid, signal.SIGCONT)
    finally:
        client.shutdown(wait=False)

    # the driver still serves: a new client connects, a new executor registers, tasks run
    with zsched.Client(driver.url, insecure=True, timeout=20) as client:
        new = wait_for(lambda: [i for i in client.executor_ids() if i not in old_ids], timeout=30,
                       message="a new executor registered after SIGCONT")
        assert client.submit(answer).result(timeout=30) == 42
        status = client.status()
        assert [e["id"] for e in status["executors"]] == new
        assert pid not in [e["pid"] for e in status["executors"]]
        assert {loss["id"] for loss in status["losses"]} >= set(old_ids), status["losses"]
    assert driver.stop() == 0
