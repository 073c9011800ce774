"""The executor's loop (``ExecutorBackend``) against a ROUTER owned by the test, which
answers registration by hand (``zsched.protocol``) and plays the driver. The clock is
fake, so thresholds are checked exactly, without waiting.

Contract (DESIGN.md, "Invariants"): an executor leaves when its driver is silent past
``executor_heartbeat_timeout``, but not when the driver's messages are waiting for it (it
was the one stalled, by a task holding the GIL). The driver's side of liveness is in
test_driver_liveness.py, the heartbeat monitor alone in test_liveness.py.
"""
import logging
import pickle
import threading
import time

import cloudpickle
import pytest
import zmq

from zsched import protocol as p
from zsched.config import Config
from zsched.executor import ExecutorBackend

from conftest import FakeClock


pytestmark = pytest.mark.timeout(120)

T0 = 1000.0
APP = "liveness"


INCARNATION = 123456789
RELIEF_TOKEN = b"relief token of x1"
SETTINGS = Config(executor_heartbeat_interval=5.0, executor_heartbeat_timeout=30.0).to_settings()


NOOP_DIGEST = b"noop-digest-0001"


def noop():
    return None


class StallingBackend(ExecutorBackend):
    """An executor whose loop can be stalled at its next heartbeat (as by a task holding the
    GIL): it stops there until released, then carries on as usual."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.stall_next = threading.Event()
        self.stalled = threading.Event()
        self.release = threading.Event()

    def send_heartbeat(self, connection=None):
        if self.stall_next.is_set():
            self.stall_next.clear()
            self.stalled.set()
            assert self.release.wait(30)
        super().send_heartbeat(connection)


class FakeDriver:
    """A ROUTER owned by the test, that registers one ExecutorBackend (run in a thread)."""

    def __init__(self, backend_class=ExecutorBackend):
        self.clock = FakeClock()
        self.context = zmq.Context()
        self.router = self.context.socket(zmq.ROUTER)
        self.router.linger = 0
        port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.backend = backend_class(f"tcp://127.0.0.1:{port}", "x1", "host-a", 1, APP,
                                     registration_timeout=30, clock=self.clock)
        self.exit_code = None
        self.task_id = 0
        self.rid = self.relief_rid = None
        self.from_relief = []  # what either connection sent that no test asked for
        self.came_from = None
        self.thread = threading.Thread(target=self._run, name="executor-under-test", daemon=True)

    def start(self):
        self.thread.start()
        # first it asks for the settings over a connection of its own
        msg = self.recv()
        assert isinstance(msg, p.ExecutorHello), msg
        self.send(p.ClientWelcome(INCARNATION, APP, SETTINGS))
        msg = self.recv()
        assert isinstance(msg, p.RegisterExecutor) and msg.executor_id == "x1", msg
        self.send(p.RegisteredExecutor(INCARNATION, SETTINGS, RELIEF_TOKEN))
        # its loop has started once it sends its first heartbeat (at T0)
        assert isinstance(self.recv(), p.Heartbeat)

    def _run(self):
        self.exit_code = self.backend.run()

    def send(self, msg, rid=None):
        self.router.send_multipart([rid or self.rid, p.encode(msg)])

    def recv(self, timeout=10000, relief=False):
        """The next message of the executor's loop (with ``relief``: of either of its
        connections, recorded in ``self.came_from``). The relief thread's connection says
        AttachRelief first: its routing id is kept as ``relief_rid``."""
        while True:
            assert self.router.poll(timeout), "nothing from the executor"
            rid, frame = self.router.recv_multipart()
            msg = p.decode(frame)
            if isinstance(msg, p.AttachRelief):
                assert (msg.incarnation, msg.executor_id, msg.token) == (INCARNATION, "x1", RELIEF_TOKEN), msg
                self.relief_rid = rid
                continue
            if rid == self.relief_rid and not relief:
                self.from_relief.append(msg)
                continue
            if relief:
                self.came_from = "relief" if rid == self.relief_rid else "loop"
            if rid != self.relief_rid:
                self.rid = rid
            return msg

    def wait_for_relief(self):
        """Until the relief thread's connection said AttachRelief (it connects on its own)."""
        deadline = time.monotonic() + 10
        while self.relief_rid is None:
            assert time.monotonic() < deadline, "no AttachRelief from the executor"
            if self.router.poll(100):
                rid, frame = self.router.recv_multipart()
                msg = p.decode(frame)
                if isinstance(msg, p.AttachRelief):
                    assert (msg.incarnation, msg.executor_id, msg.token) == (INCARNATION, "x1", RELIEF_TOKEN), msg
                    self.relief_rid = rid
                else:
                    self.from_relief.append(msg)

    def speak(self):
        """Answer a heartbeat, then launch a no-op task and wait for its result: the
        executor has taken in both messages (at the current time of its clock)."""
        self.task_id += 1
        functions = {} if self.task_id > 1 else {NOOP_DIGEST: cloudpickle.dumps(noop)}
        self.send(p.HeartbeatAck(INCARNATION))
        self.send(p.LaunchTasks(functions, [[self.task_id, 1, NOOP_DIGEST, pickle.dumps(((), {}))]]))
        while True:
            msg = self.recv()
            if isinstance(msg, p.StatusUpdates) and any(u[0] == self.task_id for u in msg.updates):
                (update,) = msg.updates
                assert update[2] == p.TaskState.FINISHED, update
                return

    def let_run_at(self, now, reads=6):
        """Set the clock to ``now`` and let the executor's loop go round several times at
        it (it reads its clock at least once per turn; each wake-up makes it turn)."""
        self.clock.set(now)
        start = self.clock.calls
        while self.clock.calls < start + reads and self.thread.is_alive():
            self.backend.wake()
            time.sleep(0.01)

    def close(self):
        if isinstance(self.backend, StallingBackend):
            self.backend.release.set()
        if self.thread.is_alive():
            self.backend.request_stop("test over")
            self.thread.join(10)
        self.router.close()
        self.context.term()


@pytest.fixture
def fake_driver():
    made = []

    def make(backend_class=ExecutorBackend):
        f = FakeDriver(backend_class)
        made.append(f)
        f.start()
        return f
    yield make
    for f in made:
        f.close()


def test_executor_leaves_when_its_driver_is_silent_past_the_timeout(fake_driver, caplog):
    caplog.set_level(logging.INFO, logger="zsched.executor")
    f = fake_driver()
    f.let_run_at(T0 + 15)
    f.let_run_at(T0 + 30)                   # silent exactly the timeout: it stays
    assert f.thread.is_alive(), f.backend.stopping
    assert f.backend.stopping is None

    f.let_run_at(T0 + 30.25)
    f.thread.join(10)
    assert not f.thread.is_alive()
    assert f.exit_code == 1
    assert "driver silent" in f.backend.stopping
    assert any("driver silent" in r.getMessage() for r in caplog.records), caplog.text


def test_executor_answered_in_time_stays(fake_driver):
    f = fake_driver()
    for now in (T0 + 20, T0 + 40, T0 + 60, T0 + 80):
        f.let_run_at(now)
        # it sends a heartbeat at ``now`` (one is due every 5 s); the driver answers it
        while not isinstance(f.recv(), p.Heartbeat):
            pass
        f.speak()
    f.let_run_at(T0 + 100)                 # last heard at T0 + 80: 20 s of silence only
    assert f.thread.is_alive(), f.backend.stopping


@pytest.mark.parametrize("message_waiting", [True, False], ids=["message waiting", "nothing waiting"])
def test_executor_stalled_past_the_timeout_stays_if_the_driver_spoke_meanwhile(fake_driver,
                                                                              message_waiting):
    """The GIL-stall case: this executor's loop was stalled (a task held the GIL) for longer
    than the timeout; meanwhile the driver sent something, which is waiting when the loop
    resumes. The driver was not silent: it was the executor that did not listen."""
    f = fake_driver(StallingBackend)
    backend = f.backend
    backend.stall_next.set()
    f.let_run_at(T0 + 5, reads=1)          # next heartbeat due: the loop stalls there
    assert backend.stalled.wait(10)

    f.clock.set(T0 + 31)                   # 31 s without a word from the driver's side...
    if message_waiting:                    # ... except this one, which arrived during the stall
        f.send(p.HeartbeatAck(INCARNATION))
        # delivered to the executor's socket (its own thread is stalled and not using it)
        assert backend.socket.poll(5000, zmq.POLLIN)
    backend.release.set()

    if not message_waiting:
        f.thread.join(10)
        assert f.exit_code == 1 and "driver silent" in backend.stopping
        return
    f.let_run_at(T0 + 31, reads=10)
    assert f.thread.is_alive(), backend.stopping
    assert backend.stopping is None
    # the message counted as hearing from the driver at T0 + 31: silence is measured from there
    f.let_run_at(T0 + 61)
    assert f.thread.is_alive(), backend.stopping
    f.let_run_at(T0 + 61.25)
    f.thread.join(10)
    assert f.exit_code == 1 and "driver silent" in backend.stopping


SPIN_DIGEST = b"spin-digest-0001"


def spin():
    """Run Python until killed (an interrupt reaches it)."""
    while True:
        pass


def test_the_relief_thread_covers_a_long_inline_task_over_a_connection_of_its_own(fake_driver):
    """A lone task runs in the loop's thread; past its grace the relief thread covers for
    the loop over its own connection: it says so at once with a heartbeat, sends the
    heartbeats due, and obeys what the driver sends there (a launch waits for the one core,
    a kill stops the task). The loop's connection carries nothing meanwhile."""
    f = fake_driver()
    f.speak()  # the first task: its status update says the loop took it in
    f.wait_for_relief()
    assert f.relief_rid != f.rid
    f.send(p.LaunchTasks({SPIN_DIGEST: cloudpickle.dumps(spin)},
                         [[9, 1, SPIN_DIGEST, pickle.dumps(((), {}))]]))
    for due in (None, T0 + 6):  # the cover begins; then a heartbeat is due
        if due is not None:
            f.clock.set(due)
        heartbeat = f.recv(relief=True)
        assert isinstance(heartbeat, p.Heartbeat) and f.came_from == "relief", heartbeat
        assert heartbeat.metrics["busy_threads"] == 1
    f.send(p.HeartbeatAck(INCARNATION), rid=f.relief_rid)
    f.send(p.LaunchTasks({}, [[10, 1, NOOP_DIGEST, pickle.dumps(((), {}))]]), rid=f.relief_rid)
    f.send(p.KillTask(9, 1, "killed by the test"), rid=f.relief_rid)
    rows = []
    while len(rows) < 2:
        msg = f.recv(relief=True)
        if isinstance(msg, p.StatusUpdates):
            assert f.came_from == "loop", msg
            rows += [row[:3] for row in msg.updates]
    assert rows == [[9, 1, p.TaskState.KILLED], [10, 1, p.TaskState.FINISHED]]
    f.speak()  # the loop goes on
    assert f.backend.stopping is None


def test_a_function_sent_again_during_a_cover_outlives_a_forget_sent_before_it(fake_driver):
    """A ForgetFunctions waits on the loop's connection (sent just as a lone task began);
    during the cover the driver sends the function again, with a launch, to the relief.
    The loop, back, obeys the older ForgetFunctions without dropping the function the
    driver now counts on: a later launch without it still runs."""
    f = fake_driver()
    f.speak()  # the executor holds noop
    f.wait_for_relief()
    f.send(p.LaunchTasks({SPIN_DIGEST: cloudpickle.dumps(spin)},
                         [[9, 1, SPIN_DIGEST, pickle.dumps(((), {}))]]))
    heartbeat = f.recv(relief=True)  # the task runs: the loop reads nothing until its end
    assert isinstance(heartbeat, p.Heartbeat) and f.came_from == "relief", heartbeat
    f.send(p.ForgetFunctions([NOOP_DIGEST]))  # as if sent before the driver heard that
    noop_args = pickle.dumps(((), {}))
    f.send(p.LaunchTasks({NOOP_DIGEST: cloudpickle.dumps(noop)}, [[10, 1, NOOP_DIGEST, noop_args]]),
           rid=f.relief_rid)
    f.send(p.KillTask(9, 1, "killed by the test"), rid=f.relief_rid)
    rows = []
    while len(rows) < 2:
        msg = f.recv(relief=True)
        if isinstance(msg, p.StatusUpdates):
            rows += [row[:3] for row in msg.updates]
    assert rows == [[9, 1, p.TaskState.KILLED], [10, 1, p.TaskState.FINISHED]]
    f.send(p.LaunchTasks({}, [[11, 1, NOOP_DIGEST, noop_args]]))  # the driver counts on noop
    while True:
        msg = f.recv(relief=True)
        if isinstance(msg, p.StatusUpdates):
            assert [row[:3] for row in msg.updates] == [[11, 1, p.TaskState.FINISHED]], msg
            break
