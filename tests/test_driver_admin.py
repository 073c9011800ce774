"""The administrator's operations (``zsched/driver/admin.py``): each ``AdminOp`` message
from a client that said hello is answered by exactly one AdminReply with its request id;
arguments the driver cannot act on give an error reply (the driver goes on); a peer that
never said hello gets the unknown-client reply and no operation. Tested on a real driver
stepped in the test's thread, its client in this process (``zsched.channel``) and its
executors real DEALER sockets on loopback."""
import os
import time

import pytest
import zmq

from zsched import protocol as p
from zsched.channel import Endpoint
from zsched.config import Config
from zsched.driver import Driver, DriverOptions
from zsched.protocol import AdminOp


class Harness:
    """A driver with a client in this process and fake executors as DEALER sockets."""

    def __init__(self):
        self.driver = Driver(DriverOptions(Config(), app_id="admin-test"))
        self.context = zmq.Context()
        self.executors = {}   # executor id -> DEALER
        self.outbox, self.inbox = [], []
        self.channel = self.driver.channel
        self.channel.connect(Endpoint(self._take, self.inbox.append, lambda: None, lambda reason: None))
        self.request_ids = iter(range(1, 10**6))

    def _take(self):
        taken, self.outbox = self.outbox, []
        return taken

    def step_until(self, predicate, timeout=10.0):
        deadline = time.monotonic() + timeout
        while not (value := predicate()):
            assert time.monotonic() < deadline, "timed out stepping the driver"
            self.driver.step(0.01)
        return value

    def hello(self):
        self.outbox.append(p.ClientHello(os.getpid()))
        self.channel.wake()
        self.step_until(lambda: any(type(m) is p.ClientWelcome for m in self.inbox))
        self.inbox.clear()

    def ask(self, cls, *args):
        """Send admin message ``cls(request id, *args)``; the one AdminReply to it."""
        request_id = next(self.request_ids)
        self.outbox.append(cls(request_id, *args))
        self.channel.wake()
        self.step_until(lambda: [m for m in self.inbox if type(m) is p.AdminReply])
        for _ in range(5):  # a second reply would come with the same turn or the next
            self.driver.step(0.01)
        replies = [m for m in self.inbox if type(m) is p.AdminReply]
        self.inbox.clear()
        assert [r.request_id for r in replies] == [request_id]
        return replies[0]

    def register(self, executor_id, host="host-a", cores=2):
        dealer = self.context.socket(zmq.DEALER)
        dealer.linger = 0
        dealer.connect(self.driver.url)
        dealer.send(p.encode(p.RegisterExecutor(executor_id, host, cores,
                                                self.driver.app_id, os.getpid())))
        reply = self.receive(dealer)
        assert type(reply) is p.RegisteredExecutor
        self.executors[executor_id] = dealer
        return dealer

    def receive(self, dealer, timeout=10.0):
        """The next message to ``dealer`` other than a Probe or HeartbeatAck."""
        deadline = time.monotonic() + timeout
        while True:
            assert time.monotonic() < deadline, "timed out waiting for a message"
            self.driver.step(0.01)
            if dealer.poll(0):
                msg = p.decode(dealer.recv())
                if type(msg) not in (p.Probe, p.HeartbeatAck):
                    return msg

    def close(self):
        self.driver.close()
        for dealer in self.executors.values():
            dealer.close(0)
        self.context.term()


@pytest.fixture
def admin():
    harness = Harness()
    harness.hello()
    yield harness
    harness.close()


VALID_ARGUMENTS = {
    AdminOp.PING: (),
    AdminOp.EXECUTOR_IDS: (),
    AdminOp.TOTAL_CORES: (),
    AdminOp.STATUS: (),
    AdminOp.IS_EXECUTOR_ACTIVE: ("1",),
    AdminOp.DECOMMISSION_EXECUTORS: (["nope"],),
    AdminOp.DECOMMISSION_EXECUTORS_ON_HOST: ("no-such-host",),
    AdminOp.REQUEST_TOTAL_EXECUTORS: (2, 0, None),
    AdminOp.REQUEST_EXECUTORS: (1,),
    AdminOp.KILL_EXECUTORS: (["nope"], False, False),
    AdminOp.KILL_EXECUTORS_ON_HOST: ("no-such-host",),
}


@pytest.mark.parametrize("op", list(AdminOp), ids=lambda op: op.name)
def test_each_operation_is_answered_once(admin, op):
    reply = admin.ask(p.ADMIN_MESSAGES[op], *VALID_ARGUMENTS[op])
    assert type(reply.ok) is bool


def test_every_operation_has_valid_arguments_here():
    assert set(VALID_ARGUMENTS) == set(AdminOp)


def test_ping(admin):
    assert admin.ask(p.AdminPing) == p.AdminReply(1, True, True)


def test_executor_ids_and_total_cores(admin):
    assert admin.ask(p.AdminExecutorIds).value == []
    assert admin.ask(p.AdminTotalCores).value == 0
    admin.register("10", cores=1)
    admin.register("2", cores=3)
    assert admin.ask(p.AdminExecutorIds).value == ["2", "10"]
    assert admin.ask(p.AdminTotalCores).value == 4


def test_status(admin):
    admin.register("1", host="h1", cores=2)
    status = admin.ask(p.AdminStatus)
    assert status.ok
    assert status.value["app_id"] == "admin-test"
    [executor] = status.value["executors"]
    assert (executor["id"], executor["host"], executor["cores"], executor["state"]) == \
        ("1", "h1", 2, "active")
    assert status.value["allocation"] is None  # no cluster manager
    assert status.value["losses"] == []


def test_decommission(admin):
    dealer = admin.register("1", cores=2)
    admin.register("2", cores=3)
    assert admin.ask(p.AdminIsExecutorActive, "1").value is True
    reply = admin.ask(p.AdminDecommissionExecutors, ["1", "unknown"])
    assert reply == p.AdminReply(reply.request_id, True, ["1"])
    assert type(admin.receive(dealer)) is p.DecommissionExecutor
    assert admin.ask(p.AdminIsExecutorActive, "1").value is False
    assert admin.ask(p.AdminTotalCores).value == 3  # a decommissioning executor takes none
    assert admin.ask(p.AdminDecommissionExecutors, ["1"]).value == []  # once
    assert admin.ask(p.AdminStatus).value["executors"][0]["state"] == "decommissioning"


def test_decommission_on_host(admin):
    admin.register("1", host="h1")
    admin.register("2", host="h2")
    assert admin.ask(p.AdminDecommissionExecutorsOnHost, "h1").value is True
    assert admin.ask(p.AdminDecommissionExecutorsOnHost, "h1").value is False  # none left
    assert admin.ask(p.AdminIsExecutorActive, "2").value is True


def test_kill_executors(admin):
    dealer = admin.register("1")
    admin.register("2")
    assert admin.ask(p.AdminKillExecutors, ["1", "unknown"], False, False).value == ["1"]
    assert type(admin.receive(dealer)) is p.StopExecutor
    assert admin.ask(p.AdminExecutorIds).value == ["2"]
    losses = admin.ask(p.AdminStatus).value["losses"]
    assert [loss["id"] for loss in losses] == ["1"]
    assert "killed" in losses[0]["reason"]


def test_kill_executors_on_host(admin):
    admin.register("1", host="h1")
    admin.register("2", host="h1")
    admin.register("3", host="h2")
    assert admin.ask(p.AdminKillExecutorsOnHost, "h1").value is True
    assert admin.ask(p.AdminExecutorIds).value == ["3"]
    assert admin.ask(p.AdminKillExecutorsOnHost, "h1").value is False


@pytest.mark.parametrize("cls, args, error", [
    (p.AdminRequestExecutors, (-1,), "ValueError: cannot request a negative number"),
    (p.AdminRequestTotalExecutors, (-3, 0, None), "ValueError: cannot request a negative number"),
    (p.AdminRequestExecutors, (2,), "ValueError: this driver has no cluster manager"),
    (p.AdminRequestTotalExecutors, (2, 0, None), "ValueError: this driver has no cluster manager"),
])
def test_arguments_it_cannot_act_on_give_an_error_reply(admin, cls, args, error):
    reply = admin.ask(cls, *args)
    assert reply.ok is False
    assert reply.value.startswith(error)
    assert admin.ask(p.AdminPing).value is True  # and the driver goes on


def test_a_client_that_never_said_hello_gets_the_unknown_client_reply():
    harness = Harness()  # no hello
    try:
        harness.register("1")
        reply = harness.ask(p.AdminKillExecutors, ["1"], False, True)
        assert reply.ok is False
        assert reply.value == p.UNKNOWN_CLIENT
        harness.hello()
        assert harness.ask(p.AdminExecutorIds).value == ["1"]  # nothing was done
    finally:
        harness.close()


def test_an_unknown_router_peer_gets_the_unknown_client_reply():
    harness = Harness()
    stranger = harness.context.socket(zmq.DEALER)
    stranger.linger = 0
    try:
        stranger.connect(harness.driver.url)
        stranger.send(p.encode(p.AdminExecutorIds(77)))
        reply = harness.receive(stranger)
        assert reply == p.AdminReply(77, False, p.UNKNOWN_CLIENT)
    finally:
        stranger.close(0)
        harness.close()
