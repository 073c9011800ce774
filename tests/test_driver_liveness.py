"""Liveness: heartbeats and timeouts on the driver's side, with a fake clock, and one real
stall.

The driver side runs an in-process ``Driver`` whose loop does not run in a thread of its
own: the test plays an executor (and a client) on real DEALER sockets over loopback and
steps the driver's loop by hand (``driver.step()``; with every timer, at the fake clock's
time, to check heartbeats), or runs the loop itself, in the test's thread, for one
scenario. Clocks are fake, so thresholds are checked exactly, without waiting. The
executor's side is in test_executor_backend.py, the heartbeat monitor alone in
test_liveness.py.

Contract (DESIGN.md, "Invariants"): an executor silent longer than
``executor_heartbeat_timeout`` is lost; one silent for max(timeout/3, 2*interval) is
reported (status "late" and one warning), not killed; any message from it clears that.
What an executor sent before its connection closed counts (its last results, why it
left). A heartbeat timeout not longer than the interval is refused at start-up. Finally a
real task holding the GIL in C for 3.5 s on a cluster with a 6 s timeout succeeds and its
executor is not lost (only reported late); and with heartbeats paced for a large cluster
(``executor_heartbeat_rate``), a real stopped executor is still lost after the timeout.
"""
import ctypes
import ctypes.util
import logging
import os
import signal
import threading
import time

import psutil
import pytest
import zmq

import zsched
from zsched import protocol as p
from zsched.config import Config
from zsched.errors import ConfigError
from zsched.driver import Driver, DriverOptions

from conftest import FakeClock


pytestmark = pytest.mark.timeout(120)

T0 = 1000.0
APP = "liveness"


# ================================================================ driver side

class DriverUnderTest:
    """A Driver whose loop never runs, and one executor (a DEALER) registered with it."""

    def __init__(self, interval, timeout, executor_id="e1"):
        self.clock = FakeClock()
        self.driver = Driver(DriverOptions(Config(executor_heartbeat_interval=interval,
                                                  executor_heartbeat_timeout=timeout),
                                           host="127.0.0.1", port=0, app_id=APP, clock=self.clock))
        self.context = zmq.Context()
        self.sockets = []
        self.executor = self.context.socket(zmq.DEALER)
        self.executor.linger = 0
        self.executor.connect(self.driver.url)
        self.executor_id = executor_id

    def register(self):
        self.send(p.RegisterExecutor(self.executor_id, "host-a", 1, APP, os.getpid()))
        reply = self.recv()
        assert isinstance(reply, p.RegisteredExecutor), reply
        assert reply.incarnation == self.driver.incarnation

    def send(self, msg):
        """The executor sends ``msg``; the driver handles it (in this thread)."""
        self.executor.send(p.encode(msg))
        assert self.driver.router.poll(5000), "the driver did not receive the message"
        self.driver.step()

    def recv(self, timeout=5000):
        assert self.executor.poll(timeout), "nothing from the driver"
        return p.decode(self.executor.recv())

    def recv_all(self):
        msgs = []
        while self.executor.poll(200):
            msgs.append(p.decode(self.executor.recv()))
        return msgs

    def check_at(self, now):
        self.clock.set(now)
        self.driver.step(all_timers=True)

    def state(self):
        status = self.driver.admin.status()
        states = {e["id"]: e["state"] for e in status["executors"]}
        return states.get(self.executor_id, "lost")

    def run_loop_for(self, seconds):
        """Run the driver's own loop in this thread for ``seconds``, then stop it (the
        driver is shut down at the end, as by ``request_stop``)."""
        stopper = threading.Timer(seconds, self.driver.request_stop)
        stopper.start()
        try:
            self.driver.run()
        finally:
            stopper.cancel()
            self.shut_down = True

    def close(self):
        for sock in [self.executor] + self.sockets:
            sock.close(linger=0)
        self.context.term()
        if not getattr(self, "shut_down", False):
            self.driver.close()


@pytest.fixture
def make_driver():
    made = []

    def make(interval, timeout):
        d = DriverUnderTest(interval, timeout)
        made.append(d)
        d.register()
        return d
    yield make
    for d in made:
        d.close()


def _late_warnings(caplog):
    return [r for r in caplog.records
            if r.name == "zsched.driver" and r.levelno == logging.WARNING and "silent" in r.getMessage()]


@pytest.mark.parametrize("interval, timeout, late_after", [
    (2.0, 30.0, 10.0),   # a third of the timeout
    (6.0, 30.0, 12.0),   # two heartbeat intervals, when that is longer
])
def test_driver_declares_an_executor_late_then_lost_at_the_thresholds(make_driver, caplog,
                                                                      interval, timeout, late_after):
    caplog.set_level(logging.INFO, logger="zsched.driver")
    d = make_driver(interval, timeout)
    assert d.state() == "active"

    d.check_at(T0 + late_after)            # silent exactly late_after: not yet
    assert d.state() == "active"
    assert not _late_warnings(caplog)

    d.check_at(T0 + late_after + 0.25)
    assert d.state() == "late"
    assert len(_late_warnings(caplog)) == 1

    d.check_at(T0 + (late_after + timeout) / 2)
    d.check_at(T0 + timeout)               # silent exactly the timeout: still there, reported once
    assert d.state() == "late"
    assert len(_late_warnings(caplog)) == 1
    assert d.driver.admin.status()["losses"] == []
    assert d.recv_all() == []              # a late executor is not told anything

    d.check_at(T0 + timeout + 0.25)
    assert d.state() == "lost"
    assert d.driver.admin.executor_ids() == []
    (loss,) = d.driver.admin.status()["losses"]
    assert loss["id"] == "e1" and loss["reason"].startswith("heartbeat timeout"), loss
    # the lost executor is told to exit (if it is alive, its tasks now run elsewhere)
    assert any(isinstance(m, p.StopExecutor) for m in d.recv_all())


@pytest.mark.parametrize("message", ["heartbeat", "status updates"])
def test_a_message_from_a_late_executor_clears_the_late_state(make_driver, caplog, message):
    caplog.set_level(logging.INFO, logger="zsched.driver")
    d = make_driver(2.0, 30.0)             # late after 10 s, lost after 30 s
    d.check_at(T0 + 20)
    assert d.state() == "late"

    d.clock.set(T0 + 25)
    if message == "heartbeat":
        d.send(p.Heartbeat(d.driver.incarnation, "e1", {"running": 1}))
        assert isinstance(d.recv(), p.HeartbeatAck)
    else:
        d.send(p.StatusUpdates(d.driver.incarnation, 0.0, []))
    assert d.state() == "active"

    # silence is counted again from T0 + 25: late after 10 s more, lost after 30 s more
    d.check_at(T0 + 35)
    assert d.state() == "active"
    d.check_at(T0 + 35.25)
    assert d.state() == "late"
    assert len(_late_warnings(caplog)) == 2   # once per episode
    d.check_at(T0 + 55)
    assert d.state() == "late"
    d.check_at(T0 + 55.25)
    assert d.state() == "lost"


def test_a_message_of_another_driver_incarnation_is_no_sign_of_life(make_driver):
    """From a registered executor, it is no heartbeat: the executor is told to exit and is
    removed at once (it holds no more tasks here), not kept until it is found silent."""
    d = make_driver(2.0, 30.0)
    d.check_at(T0 + 20)
    assert d.state() == "late"
    d.clock.set(T0 + 25)
    d.send(p.Heartbeat(d.driver.incarnation ^ 1, "e1", {}))
    assert isinstance(d.recv(), p.StopExecutor)   # refused, told to exit
    assert d.state() == "lost"


def test_what_an_executor_said_before_it_disconnected_counts(make_driver):
    """An executor that leaves sends its last results and why it leaves, then its
    connection closes. The driver must take in what it sent before acting on the closed
    connection: the task it finished is finished (not charged a failure and queued again),
    and its loss says why it left."""
    d = make_driver(5.0, 30.0)
    # a client, by hand: hello, then one task
    client = d.context.socket(zmq.DEALER)
    client.linger = 0
    d.sockets.append(client)
    client.connect(d.driver.url)
    client.send(p.encode(p.ClientHello(os.getpid())))
    assert d.driver.router.poll(5000)
    d.driver.step()
    assert client.poll(5000) and isinstance(p.decode(client.recv()), p.ClientWelcome)
    digest = p.function_digest(b"opaque function")
    client.send(p.encode(p.SubmitTasks({digest: b"opaque function"}, [[1, digest, b"opaque args", 0]])))
    assert d.driver.router.poll(5000)
    d.driver.step()  # takes the task in, then offers it
    launch = d.recv()
    assert isinstance(launch, p.LaunchTasks), launch
    [[task_id, attempt, _, _]] = launch.tasks

    # the executor finishes the task, says it leaves, and goes
    d.executor.send(p.encode(p.StatusUpdates(d.driver.incarnation, 0.01,
                                             [[task_id, attempt, p.TaskState.FINISHED, b"result"]])))
    d.executor.send(p.encode(p.RemoveExecutor("e1", "finished its work and left", True)))
    d.executor.close(linger=5000)
    # both its messages and the end of its connection are waiting for the driver
    assert d.driver.monitor.poll(5000), "no disconnection event"
    assert d.driver.router.poll(5000)

    d.run_loop_for(1.0)

    results = []
    while client.poll(500):
        msg = p.decode(client.recv())
        if isinstance(msg, p.TaskResults):
            results += msg.results
    assert results == [[1, p.TaskState.FINISHED, b"result"]], results
    status = d.driver.admin.status()
    assert [(loss["id"], loss["reason"]) for loss in status["losses"]] == [("e1", "finished its work and left")]
    assert status["tasks"]["finished"] == 1 and status["tasks"]["retried"] == 0, status["tasks"]


@pytest.mark.parametrize("interval, timeout", [(5, 2), (5, 5)])
def test_a_heartbeat_timeout_not_longer_than_the_interval_is_refused(interval, timeout):
    """With the timeout no longer than the interval, every healthy executor is declared
    lost between two heartbeats (and leaves by itself, its driver "silent"): a bad
    combination of settings is an error naming them, at start-up (as Spark refuses
    spark.network.timeout <= spark.executor.heartbeatInterval)."""
    with pytest.raises(ConfigError, match="executor_heartbeat"):
        Config(executor_heartbeat_interval=interval, executor_heartbeat_timeout=timeout)


def test_heartbeat_settings_used_by_these_tests_are_accepted():
    Config(executor_heartbeat_interval=0.5, executor_heartbeat_timeout=6)
    Config(executor_heartbeat_interval=6, executor_heartbeat_timeout=30)


# ================================================================ a real stall

def hold_the_gil(seconds):
    """Sleep in C with the GIL held (PyDLL does not release it); returns (sleep's result,
    how far a Python thread of this process got meanwhile)."""
    libc = ctypes.PyDLL(ctypes.util.find_library("c"))
    libc.usleep.argtypes = [ctypes.c_uint]
    ticks = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.005)
    counter = threading.Thread(target=count, daemon=True)
    counter.start()
    deadline = time.monotonic() + 60
    while ticks[0] < 2:  # the counter runs
        if time.monotonic() > deadline:
            raise RuntimeError("the counting thread never ran")
        time.sleep(0.005)
    before = ticks[0]
    result = libc.usleep(int(seconds * 1_000_000))
    during = ticks[0] - before
    stop.set()
    counter.join()
    return result, during


def test_a_task_holding_the_gil_does_not_lose_its_executor():
    with zsched.LocalCluster(n_executors=1, executor_heartbeat_interval=0.5,
                             executor_heartbeat_timeout=6) as cluster:
        client = cluster.client(timeout=20)
        (before,) = client.status()["executors"]
        states = set()
        future = client.submit(hold_the_gil, 3.5)
        while not future.done():
            states.update(e["state"] for e in client.status()["executors"])
            time.sleep(0.05)
        result, ticks_during = future.result()
        assert result == 0
        # the premise: the executor process ran no Python for those 3 s (its heartbeats too)
        assert ticks_during <= 2, ticks_during
        status = client.status()
        assert status["losses"] == [], status["losses"]
        (after,) = status["executors"]
        assert (after["id"], after["pid"]) == (before["id"], before["pid"])
        assert after["state"] == "active"
        assert status["tasks"]["retried"] == 0 and status["tasks"]["finished"] == 1
        # seen late while it held the GIL (reported, not lost)
        assert "late" in states, states
        # and it keeps working
        assert client.submit(pow, 2, 10).result(timeout=20) == 1024


def test_paced_heartbeats_still_find_a_stopped_executor_within_the_timeout():
    """At most 0.5 heartbeats a second from 2 executors: each sends one every 2 s (two
    thirds of the timeout), not every 0.5 s; a SIGSTOPped one is still lost for a silence of 3 s,
    found by the check that runs every 0.75 s (a quarter of the timeout)."""
    timeout, check_period = 3.0, 0.75
    with zsched.LocalCluster(2, executor_heartbeat_interval=0.5, executor_heartbeat_timeout=timeout,
                             executor_heartbeat_rate=0.5) as cluster:
        client = cluster.client(timeout=20)
        status = client.status()
        assert status["heartbeat_interval"] == pytest.approx(timeout * 2 / 3)
        victim = status["executors"][0]
        os.kill(victim["pid"], signal.SIGSTOP)
        stopped_at = time.time()
        try:
            deadline = time.monotonic() + 60
            while not [loss for loss in client.status()["losses"] if loss["id"] == victim["id"]]:
                assert time.monotonic() < deadline, "the stopped executor was not declared lost"
                time.sleep(0.05)
            (loss,) = client.status()["losses"]
            assert loss["reason"] == "heartbeat timeout (no message for 3 s)"
            # the bound: the timeout after its last heartbeat, then the check's period (and
            # room for a loaded machine); not a silence paced beyond the timeout
            assert loss["time"] - stopped_at < timeout + check_period + 5
        finally:
            os.kill(victim["pid"], signal.SIGCONT)
        psutil.Process(victim["pid"]).wait(60)  # woken, it learns it was lost, and leaves
        assert client.submit(pow, 2, 10).result(timeout=20) == 1024
