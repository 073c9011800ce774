"""The in-process channel (``zsched/channel.py``) between a driver and the clients in its
process: a client connects an ``Endpoint`` and gets a key that no ROUTER peer can have; it
queues messages and wakes the driver's loop, which takes them in order and delivers its own
in order; when the driver stops, each endpoint hears ``stopped()`` and the channel is no
longer open. The unit tests use the channel alone; the others a real driver stepped in the
test's thread."""
import os
import select
import threading
import time

import pytest

from zsched import protocol as p
from zsched.channel import Channel, Endpoint
from zsched.config import Config
from zsched.driver import Driver, DriverOptions


class LocalClient:
    """A client's end: what it sends waits in ``outbox``; what it gets lands in ``inbox``."""

    def __init__(self, channel):
        self.channel = channel
        self.outbox, self.inbox = [], []
        self.stopped = 0
        self.endpoint = Endpoint(self._take, self.inbox.append, self._stop, lambda reason: None)
        self.key = channel.connect(self.endpoint)

    def send(self, *messages):
        self.outbox.extend(messages)
        self.channel.wake()

    def _take(self):
        taken, self.outbox = self.outbox, []
        return taken

    def _stop(self):
        self.stopped += 1


def readable(fd):
    return bool(select.select([fd], [], [], 0)[0])


# ------------------------------------------------------------ the channel alone

@pytest.mark.unit
def test_each_endpoint_gets_a_key_no_router_peer_can_have():
    channel = Channel("inproc://x")
    try:
        keys = [LocalClient(channel).key for _ in range(3)]
        assert len(set(keys)) == 3
        for key in keys:
            assert key.startswith(b"\0") and len(key) != 5
    finally:
        channel.close()


@pytest.mark.unit
def test_arrivals_are_the_endpoints_connected_since_the_last_call_in_order():
    channel = Channel()
    try:
        a, b = LocalClient(channel), LocalClient(channel)
        assert channel.arrivals() == [a.endpoint, b.endpoint]
        assert channel.arrivals() == []
        c = LocalClient(channel)
        assert channel.arrivals() == [c.endpoint]
    finally:
        channel.close()


@pytest.mark.unit
def test_connect_and_wake_wake_the_drivers_loop():
    channel = Channel()
    try:
        assert not readable(channel.wakeup.fd)
        LocalClient(channel)
        assert readable(channel.wakeup.fd)
        channel.wakeup.clear()
        assert not readable(channel.wakeup.fd)
        channel.wake()
        assert readable(channel.wakeup.fd)
    finally:
        channel.close()


@pytest.mark.unit
def test_open_only_while_a_live_thread_serves_it():
    channel = Channel()
    assert not channel.is_open()
    assert not channel.in_driver_thread()
    channel.serve_in_this_thread()
    assert channel.is_open()
    assert channel.in_driver_thread()
    seen = []
    other = threading.Thread(target=lambda: seen.append(channel.in_driver_thread()))
    other.start()
    other.join()
    assert seen == [False]
    channel.close()
    assert not channel.is_open()


@pytest.mark.unit
def test_a_thread_that_ended_serves_no_more():
    channel = Channel()
    server = threading.Thread(target=channel.serve_in_this_thread)
    server.start()
    server.join()
    assert not channel.is_open()
    channel.close()


@pytest.mark.unit
def test_close_returns_the_endpoints_never_taken():
    channel = Channel()
    a = LocalClient(channel)
    channel.arrivals()
    b, c = LocalClient(channel), LocalClient(channel)
    assert channel.close() == [b.endpoint, c.endpoint]
    assert a.stopped == 0  # the caller tells them: the driver does


# ------------------------------------------------------------ with a driver

@pytest.fixture
def driver():
    driver = Driver(DriverOptions(Config(), app_id="channel-test"))
    driver.channel.serve_in_this_thread()
    yield driver
    if driver.channel.is_open():  # not closed by the test (a second close would fail)
        driver.close()


def step_until(driver, predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out stepping the driver"
        driver.step(0.01)


def test_a_hello_crosses_and_the_welcome_comes_back(driver):
    client = LocalClient(driver.channel)
    client.send(p.ClientHello(os.getpid()))
    step_until(driver, lambda: client.inbox)
    [welcome] = client.inbox
    assert type(welcome) is p.ClientWelcome
    assert welcome.app_id == "channel-test"


def test_messages_cross_both_ways_in_order(driver):
    client = LocalClient(driver.channel)
    client.send(p.ClientHello(os.getpid()), *[p.AdminPing(i) for i in range(1, 51)])
    step_until(driver, lambda: len(client.inbox) == 51)
    assert type(client.inbox[0]) is p.ClientWelcome
    assert [reply.request_id for reply in client.inbox[1:]] == list(range(1, 51))
    client.send(*[p.AdminPing(i) for i in range(51, 61)])
    client.send(*[p.AdminPing(i) for i in range(61, 71)])
    step_until(driver, lambda: len(client.inbox) == 71)
    assert [reply.request_id for reply in client.inbox[1:]] == list(range(1, 71))


def test_clients_of_one_channel_are_kept_apart(driver):
    a, b = LocalClient(driver.channel), LocalClient(driver.channel)
    a.send(p.ClientHello(1), p.AdminPing(7))
    b.send(p.ClientHello(2), p.AdminPing(8), p.AdminPing(9))
    step_until(driver, lambda: len(a.inbox) == 2 and len(b.inbox) == 3)
    assert a.inbox[1].request_id == 7
    assert [r.request_id for r in b.inbox[1:]] == [8, 9]


def test_a_message_sent_from_another_thread_crosses(driver):
    client = LocalClient(driver.channel)
    client.send(p.ClientHello(os.getpid()))
    step_until(driver, lambda: client.inbox)
    sender = threading.Thread(target=client.send, args=(p.AdminPing(5),))
    sender.start()
    sender.join()
    step_until(driver, lambda: len(client.inbox) == 2)
    assert client.inbox[1].request_id == 5


def test_close_is_seen_on_both_sides(driver):
    served = LocalClient(driver.channel)
    served.send(p.ClientHello(os.getpid()))
    step_until(driver, lambda: served.inbox)
    never_taken = LocalClient(driver.channel)  # connected, the driver never stepped since
    assert driver.channel.is_open()
    driver.close()
    assert not driver.channel.is_open()
    assert served.stopped == 1
    assert never_taken.stopped == 1
