"""An executor's connection to its driver (``zsched.executor.connection``): what its
socket cannot take while the driver does not read waits, in order, and leaves once the
driver reads again; nothing is dropped, nothing sent twice, and the executor still obeys
the driver meanwhile.

A connection alone is tested over a DEALER of the test's (as the relief thread's own).
Then the executor is a process of its own; the driver is a ROUTER in the test that registers
it by hand (``zsched.protocol``) and stops reading for a while. The executor's queue
limit (``registration.QUEUE_HWM``) is lowered in that process alone, so that a few
thousand status updates fill it instead of a hundred thousand.
"""
import pickle
import subprocess
import sys
import threading
import time

import cloudpickle
import pytest
import zmq

from zsched import protocol as p
from zsched.config import Config
from zsched.executor.connection import DriverConnection

from conftest import wait_for

pytestmark = pytest.mark.timeout(180)

INCARNATION = 424242
APP = "held"
SETTINGS = Config(executor_heartbeat_interval=1.0, executor_heartbeat_timeout=120.0).to_settings()
DIGEST = b"tiny-task-digest"
SLEEPER = b"sleeper-digest-1"
TEST_HWM = 20  # the executor's queue limit in this test, in messages

# an executor whose DEALER queues TEST_HWM messages each way: the rest is this module's
EXECUTOR = ("import sys; from zsched.executor import registration; "
            f"registration.QUEUE_HWM = {TEST_HWM}; "
            "from zsched.executor.cli import main; sys.exit(main(sys.argv[1:]))")


def tiny(i):
    return b"%d" % i + b"." * 10_000


def sleeper():
    while True:
        time.sleep(0.01)


class SlowDriver:
    """A ROUTER owned by the test, which registers one executor process and reads from it
    only when asked. Its own receive buffers are small: what it does not read backs up
    into the executor at once."""

    def __init__(self, cores):
        self.context = zmq.Context()
        self.router = self.context.socket(zmq.ROUTER)
        self.router.linger = 0
        self.router.rcvhwm = 1
        self.router.rcvbuf = 4096
        port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", EXECUTOR, "--driver-url", f"tcp://127.0.0.1:{port}",
             "--executor-id", "h1", "--hostname", "127.0.0.1", "--cores", str(cores),
             "--app-id", APP, "--insecure"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self._stderr = []
        self._reader = threading.Thread(
            target=lambda: self._stderr.extend(iter(self.proc.stderr.readline, "")), daemon=True)
        self._reader.start()
        self.rid = None

    def stderr(self):
        return "".join(self._stderr)

    def recv(self, timeout=30):
        assert self.router.poll(timeout * 1000), f"nothing from the executor\n{self.stderr()}"
        rid, frame = self.router.recv_multipart()
        return rid, p.decode(frame)

    def send(self, msg):
        self.router.send_multipart([self.rid, p.encode(msg)])

    def register(self):
        rid, msg = self.recv()  # the settings first, over a connection of their own
        assert isinstance(msg, p.ExecutorHello), msg
        self.router.send_multipart([rid, p.encode(p.ClientWelcome(INCARNATION, APP, SETTINGS))])
        self.rid, msg = self.recv()
        assert isinstance(msg, p.RegisterExecutor) and msg.executor_id == "h1", msg
        self.send(p.RegisteredExecutor(INCARNATION, SETTINGS, b"relief token"))

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        self._reader.join(10)
        self.router.close()
        self.context.term()


def launch_tiny(driver, count):
    """Launch tasks 1 to ``count``, one per message, paced so that each one's status update
    leaves alone (one row per message) while the other core runs the sleeper."""
    driver.send(p.LaunchTasks({SLEEPER: cloudpickle.dumps(sleeper)},
                              [[0, 1, SLEEPER, pickle.dumps(((), {}))]]))
    for task_id in range(1, count + 1):
        functions = {DIGEST: cloudpickle.dumps(tiny)} if task_id == 1 else {}
        driver.send(p.LaunchTasks(functions, [[task_id, 1, DIGEST, pickle.dumps(((task_id,), {}))]]))
        time.sleep(0.001)


@pytest.fixture
def slow_driver():
    drivers = []

    def make(cores=2):
        driver = SlowDriver(cores)
        drivers.append(driver)
        driver.register()
        return driver
    yield make
    for driver in drivers:
        driver.close()


def test_status_updates_wait_while_the_driver_does_not_read_and_all_arrive_once(slow_driver):
    """Thousands of tiny tasks, launched one per message while the driver reads nothing:
    their one-row status updates fill the executor's queue. The executor still obeys a
    kill meanwhile. Once the driver reads again, every task's status arrives exactly once,
    and the executor leaves when asked, saying why."""
    driver = slow_driver()
    count = 2000
    launch_tiny(driver, count)
    wait_for(lambda: "the driver is not reading" in driver.stderr(), timeout=60,
             message="the executor's queue to fill")
    driver.send(p.KillTask(0, 1, "test"))  # obeyed while its reports wait
    seen = {}
    states = {}
    while len(seen) < count + 1:
        _, msg = driver.recv()
        if isinstance(msg, p.StatusUpdates):
            for task_id, _, state, payload in msg.updates:
                seen[task_id] = seen.get(task_id, 0) + 1
                states[task_id] = state
                if task_id:
                    assert state == p.TaskState.FINISHED and pickle.loads(payload) == tiny(task_id), task_id
    assert states[0] == p.TaskState.KILLED
    driver.send(p.DecommissionExecutor("test over"))
    rest = []
    while True:
        _, msg = driver.recv()
        rest.append(msg)
        if isinstance(msg, p.RemoveExecutor):
            break
    assert driver.proc.wait(30) == 0, driver.stderr()
    for msg in rest:
        if isinstance(msg, p.StatusUpdates):
            for task_id, *_ in msg.updates:
                seen[task_id] += 1
    assert seen == dict.fromkeys(range(count + 1), 1)
    assert "the driver reads again" in driver.stderr()


def test_a_driver_gone_while_reports_wait_is_still_found(slow_driver):
    """The driver closes its socket while the executor's reports wait for it: the
    executor sees the connection lost and exits 1 saying so, as when nothing waits."""
    driver = slow_driver()
    launch_tiny(driver, 2000)
    wait_for(lambda: "the driver is not reading" in driver.stderr(), timeout=60,
             message="the executor's queue to fill")
    driver.router.close(linger=0)
    assert driver.proc.wait(60) == 1, driver.stderr()
    driver._reader.join(10)
    assert "lost the connection to the driver" in driver.stderr()


def test_a_connection_holds_in_order_what_its_socket_does_not_take():
    """A DEALER with room for one message, to a ROUTER that reads nothing: what the socket
    does not take waits in the connection, which polls for room meanwhile; once the
    ROUTER reads again, every message arrives once, in order, and the polling stops."""
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.rcvhwm, router.rcvbuf, router.linger = 1, 4096, 0
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealer = context.socket(zmq.DEALER)
    dealer.sndhwm, dealer.sndbuf, dealer.linger = 1, 4096, 0
    dealer.connect(f"tcp://127.0.0.1:{port}")
    connection = DriverConnection(socket=dealer)
    poller = zmq.Poller()
    connection.watch(poller)
    polled = lambda: dict(poller.sockets)[dealer]  # noqa: E731
    try:
        connection.send(p.Heartbeat(1, "c", {}))
        assert router.poll(30_000)
        router.recv_multipart()  # connected
        sent = 0
        while not polled() & zmq.POLLOUT:
            sent += 1
            assert sent < 100_000, "the socket never filled"
            connection.send(p.StatusUpdates(1, 0.0, [[sent, 1, p.TaskState.FINISHED, b"." * 10_000]]))
        for _ in range(100):  # all behind what waits
            sent += 1
            connection.send(p.StatusUpdates(1, 0.0, [[sent, 1, p.TaskState.FINISHED, b"." * 10_000]]))
        received = []
        deadline = time.monotonic() + 60
        while len(received) < sent:
            assert time.monotonic() < deadline, f"{len(received)} of {sent} arrived"
            assert connection.flush(dict(poller.poll(0)))
            while router.poll(10):
                received.append(p.decode(router.recv_multipart()[1]).updates[0][0])
        assert received == list(range(1, sent + 1))
        assert polled() == zmq.POLLIN
    finally:
        connection.close(0)
        router.close()
        context.term()
