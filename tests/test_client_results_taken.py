"""A client tells its driver which results it took (``ResultsTaken``), so a driver that
holds back what a client has not taken keeps sending while the client reads
(zsched/client/transport.py). The driver here is the test: a ROUTER socket on loopback,
or the other end of a client's pipes, that speaks the protocol, sends results only within
the window, and counts what the client says it took."""
import concurrent.futures
import pickle
import threading
import time

import select

import msgpack
import pytest
import zmq

import zsched
from zsched import protocol as p
from zsched.client import Client
from zsched.client.transport import TakenResults
from zsched.config import Config
from zsched.pipe_link import PipeLink, pipe_pair
from zsched.task_state import TaskState

from conftest import wait_for

QUARTER_ROWS = p.RESULTS_WINDOW_ROWS // 4


@pytest.mark.unit
def test_a_results_taken_is_due_at_a_quarter_of_either_window():
    taken = TakenResults(100, 1000)
    taken.took(24, 100)
    assert not taken.due
    taken.took(1, 100)  # a quarter of the rows
    assert taken.due
    assert taken.message() == p.ResultsTaken(25, 200)
    assert not taken.due and (taken.rows, taken.size) == (0, 0)
    taken.took(1, 249)
    assert not taken.due
    taken.took(1, 1)  # a quarter of the bytes
    assert taken.due
    assert taken.message() == p.ResultsTaken(2, 250)


class RouterEnd:
    """The fake driver's ROUTER socket, for a client of its own (``client()``)."""

    def __init__(self):
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.linger = 0
        self._port = self._socket.bind_to_random_port("tcp://127.0.0.1")
        self._rid = None

    def client(self):
        return zsched.Client(f"tcp://127.0.0.1:{self._port}", insecure=True)

    def wait(self, seconds):
        return self._socket.poll(seconds * 1000)

    def receive(self):
        frames = []
        while self._socket.poll(0):
            self._rid, frame = self._socket.recv_multipart()
            frames.append(frame)
        return frames

    def send(self, frame):
        self._socket.send_multipart([self._rid, frame])

    def close(self):
        self._socket.close()
        self._context.term()


class PipeEnd:
    """The fake driver's end of a pair of pipes, whose other end its client has."""

    def __init__(self):
        ours, self._theirs = pipe_pair()
        self._link = PipeLink(*ours, 1 << 30)

    def client(self):
        return Client.over_pipes(PipeLink(*self._theirs, 1 << 30), "the fake driver")

    def wait(self, seconds):
        link = self._link
        readable, writable, _ = select.select(
            [link.read_fd], [link.write_fd] if link.wants_write else [], [], seconds)
        if writable:
            link.flush()
        return bool(readable)

    def receive(self):
        return self._link.receive()

    def send(self, frame):
        self._link.send(frame)

    def close(self):
        self._link.close()


class FakeDriver:
    """A driver for one client over a ROUTER socket, served by a thread of the test.

    It welcomes the client with ``config``'s settings, answers its requests, and answers
    each task it is sent with ``payload`` (a result), ``rows_per_frame`` results to a
    TaskResults frame. Like a driver it sends at most ``RESULTS_WINDOW_ROWS`` rows and
    ``config.client_results_window`` bytes the client has not said it took; the rest
    waits. Nothing is sent while ``paused``; task ids in ``held`` wait until taken out of
    it. ``received`` counts the tasks the client sent."""

    def __init__(self, end, config, rows_per_frame, payload):
        self.end = end
        self.config = config
        self.rows_per_frame = rows_per_frame
        self.payload = pickle.dumps(payload)
        self.held = set()
        self.paused = False
        self.forgotten = False  # it answers requests as a driver that dropped the client
        self.received = 0
        self.acks = []  # (rows, size) of each ResultsTaken heard
        self.sent_rows = self.sent_size = 0
        self._waiting = []  # task ids to answer, in order
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="fake-driver")
        self._thread.start()

    @property
    def taken(self):
        """Rows and bytes the client said it took."""
        return sum(rows for rows, _ in self.acks), sum(size for _, size in self.acks)

    def stalled(self):
        """Whether results wait for the client to take those sent (its window is full)."""
        taken_rows, taken_size = self.taken
        return bool(self._waiting) and not self._room(taken_rows, taken_size)

    def close(self):
        self._stop.set()
        self._thread.join(30)
        self.end.close()

    def _room(self, taken_rows, taken_size):
        return (self.sent_rows - taken_rows < p.RESULTS_WINDOW_ROWS
                and self.sent_size - taken_size < self.config.client_results_window)

    def _serve(self):
        while not self._stop.is_set():
            if self.end.wait(0.02):
                for frame in self.end.receive():
                    self._handle(frame)
            self._send_results()

    def _handle(self, frame):
        msg = p.decode(frame)
        if isinstance(msg, p.ClientHello):
            self._send(p.ClientWelcome(1, "fake", self.config.to_settings()))
        elif isinstance(msg, p.SubmitTasks):
            _functions, rows = msgpack.unpackb(frame[2:], raw=False)
            self._waiting.extend(row[0] for row in rows)
            self.received += len(rows)
        elif isinstance(msg, p.ResultsTaken):
            self.acks.append((msg.rows, msg.size))
        elif isinstance(msg, p.AdminTotalCores):
            self._send(p.AdminReply(msg.request_id, True, 2))
        elif isinstance(msg, p.AdminMessage) and self.forgotten:
            self._send(p.AdminReply(msg.request_id, False, p.UNKNOWN_CLIENT))
        elif isinstance(msg, p.AdminMessage):  # pings among them
            self._send(p.AdminReply(msg.request_id, True, None))

    def _send_results(self):
        taken_rows, taken_size = self.taken
        while not self.paused and self._room(taken_rows, taken_size):
            ready = [task_id for task_id in self._waiting if task_id not in self.held]
            if not ready:
                return
            batch = ready[:self.rows_per_frame]
            answered = set(batch)
            self._waiting = [task_id for task_id in self._waiting if task_id not in answered]
            frame = p.encode(p.TaskResults([[task_id, int(TaskState.FINISHED), self.payload]
                                            for task_id in batch]))
            self.end.send(frame)
            self.sent_rows += len(batch)
            self.sent_size += len(frame)

    def _send(self, msg):
        self.end.send(p.encode(msg))


@pytest.fixture(params=["socket", "pipes"])
def fake_driver(request):
    """Start a ``FakeDriver`` whose client reaches it over a socket or over pipes."""
    drivers = []

    def start(rows_per_frame, payload, **settings):
        end = RouterEnd() if request.param == "socket" else PipeEnd()
        driver = FakeDriver(end, Config(**settings), rows_per_frame, payload)
        drivers.append(driver)
        return driver

    yield start
    for driver in drivers:
        driver.close()


def taken_up_to_the_last_quarter(driver):
    """Whether the client said it took all that was sent, but for less than a quarter of
    the window in rows and in bytes: what it took since its last ResultsTaken."""
    taken_rows, taken_size = driver.taken
    return (0 <= driver.sent_rows - taken_rows < QUARTER_ROWS
            and 0 <= driver.sent_size - taken_size < driver.config.client_results_window // 4)


def check_each_ack(driver):
    """Each ResultsTaken came once a quarter of the window was taken, in rows or bytes."""
    quarter_size = driver.config.client_results_window // 4
    assert driver.acks
    for rows, size in driver.acks:
        assert rows >= QUARTER_ROWS or size >= quarter_size, (rows, size)


@pytest.mark.parametrize("tasks, rows_per_frame, payload, window", [
    (3_000, 8, b"x" * 1000, 1 << 16),        # a quarter of the window in bytes first
    (60_000, 500, 1, 64 << 20),             # a quarter in rows first
], ids=["bytes", "rows"])
def test_a_client_says_which_results_it_took_and_the_window_never_runs_dry(
        fake_driver, tasks, rows_per_frame, payload, window):
    driver = fake_driver(rows_per_frame, payload, client_results_window=window)
    client = driver.end.client()
    try:
        futures = [client.submit(abs, i) for i in range(tasks)]
        # more than a window: all of them complete only if the client says what it took,
        # which it does in its own turns, submitting nothing meanwhile
        done, pending = concurrent.futures.wait(futures, timeout=120)
        assert not pending, f"{len(pending)} results never came: the driver waits on the client"
        assert {pickle.dumps(f.result()) for f in futures} == {driver.payload}
        wait_for(lambda: taken_up_to_the_last_quarter(driver), timeout=30,
                 message="the client to say it took all but the last quarter window")
        check_each_ack(driver)
        assert driver.sent_rows == tasks
    finally:
        client.shutdown(cancel_futures=True)


def block_until(event):
    def callback(_future):
        event.wait(120)
    return callback


def submitted_while_paused(client, driver, tasks):
    """Futures of ``tasks`` tasks, every one of them at the driver before it answers any."""
    driver.paused = True
    futures = [client.submit(abs, i) for i in range(tasks)]
    wait_for(lambda: driver.received == tasks, timeout=60, message="the tasks at the driver")
    return futures


def test_a_client_whose_done_callback_blocks_says_what_it_took_afterwards(fake_driver):
    # a callback runs in the client's I/O thread: while it blocks, the client takes nothing
    # and the driver's window fills; afterwards the client goes on and says what it took
    driver = fake_driver(8, b"x" * 1000, client_results_window=1 << 16,
                         executor_heartbeat_interval=0.2, executor_heartbeat_timeout=1.0)
    client = driver.end.client()
    release = threading.Event()
    # blocked for longer than the heartbeat timeout, which the driver's silence (it waits
    # on the client) must not be taken for once the callback returns
    timer = threading.Timer(2 * driver.config.executor_heartbeat_timeout, release.set)
    try:
        futures = submitted_while_paused(client, driver, 3_000)
        futures[0].add_done_callback(block_until(release))
        driver.paused = False
        wait_for(driver.stalled, timeout=60, message="the driver's window full")
        acks_while_blocked = len(driver.acks)
        timer.start()
        done, pending = concurrent.futures.wait(futures, timeout=120)
        assert not pending, f"{len(pending)} results never came after the callback returned"
        assert len(driver.acks) > acks_while_blocked
        wait_for(lambda: taken_up_to_the_last_quarter(driver), timeout=30,
                 message="the client to say it took all but the last quarter window")
        check_each_ack(driver)
        assert client.connection_error is None
    finally:
        timer.cancel()
        release.set()
        client.shutdown(cancel_futures=True)


def test_a_callback_longer_than_the_heartbeat_timeout_is_not_the_drivers_silence(fake_driver):
    """The driver sent its last result before a done-callback blocked, and another task
    still waits: once the callback returns, the client pings the driver again rather than
    take the time the callback took for the driver's silence."""
    driver = fake_driver(1, 1, executor_heartbeat_interval=0.2, executor_heartbeat_timeout=1.0)
    client = driver.end.client()
    timeout = driver.config.executor_heartbeat_timeout
    release = threading.Event()
    timer = threading.Timer(3 * timeout, release.set)  # the callback outlasts the timeout
    try:
        first, second = submitted_while_paused(client, driver, 2)
        first.add_done_callback(block_until(release))
        driver.held.add(second.task_id)  # its result waits
        timer.start()
        driver.paused = False
        wait_for(release.is_set, timeout=60, message="the callback released")
        # a check that nothing happens, for twice the timeout: the client keeps its driver,
        # which answers its pings (it would have failed the second task after the callback)
        time.sleep(2 * timeout)
        assert client.connection_error is None
        driver.held.clear()
        assert second.result(60) == 1
    finally:
        timer.cancel()
        release.set()
        client.shutdown(cancel_futures=True)


def test_a_client_its_driver_no_longer_knows_fails_its_futures_at_the_next_ping(fake_driver):
    driver = fake_driver(1, 1, executor_heartbeat_interval=0.2, executor_heartbeat_timeout=60)
    client = driver.end.client()
    try:
        wait_for(lambda: driver.received == 0 and not driver.acks, 5)  # welcomed
        driver.forgotten = True
        driver.paused = True  # no result: the client waits, and pings
        future = client.submit(abs, -1)
        with pytest.raises(zsched.DriverConnectionError, match="no longer knows this client"):
            future.result(30)
    finally:
        client.shutdown(wait=False)
