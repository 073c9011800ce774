"""The driver's peers (``zsched/driver/peers.py``): one ``Peer`` interface for a peer of the
ROUTER socket, one over a pair of pipes and one in the driver's own process. Each carries its
role and owns its send queue; ``send`` never blocks and says when a peer is gone or not
reading; ``Peers`` holds them by routing id, with one way to send to any of them and one way
in for what they send. Real transports: a ROUTER and DEALERs on loopback, real pipe pairs."""
import time

import pytest
import zmq

from zsched import protocol as p
from zsched.channel import Channel, Endpoint
from zsched.config import Config
from zsched.errors import ProtocolError
from zsched.driver.loop import Loop
from zsched.driver.peers import GONE, InProcessPeer, Peers, Role, open_router, role_of_user
from zsched.pipe_link import PipeLink, pipe_pair

MAX_FRAME = p.frame_limit(Config().max_message_size)


class Harness:
    """``Peers`` over a real ROUTER, a loop and a channel, recording what it reports."""

    def __init__(self, max_frame=MAX_FRAME):
        self.context = zmq.Context()
        self.router, state, _, self.monitor, port = open_router(
            self.context, Config(), None, None, "127.0.0.1", 0)
        self.url = f"tcp://127.0.0.1:{port}"
        self.counters = {"bytes_in": 0, "bytes_out": 0, "messages_in": 0, "messages_out": 0}
        self.loop = Loop(time.monotonic)
        self.channel = Channel()
        self.taken, self.warned, self.lost, self.broken = [], [], [], []
        self.peers = Peers(self.router, state, self.counters, self.loop, self.channel, max_frame,
                           take=self.take, warn=lambda rid, what: self.warned.append((rid, what)),
                           lost=lambda rid, problem, msg: self.lost.append((rid, problem)),
                           broke=lambda rid, error: self.broken.append((rid, error)))
        self.dealers, self.others = [], []  # the other ends of the links

    def take(self, rid, frame):
        """What the driver does with a frame: decoded and checked, else a warning."""
        try:
            self.taken.append((rid, p.decode(frame)))
        except ProtocolError as exc:
            self.warned.append((rid, str(exc)))

    def dealer(self, routing_id):
        """A DEALER connected to the ROUTER, known to it (it sent a ClientHello)."""
        dealer = self.context.socket(zmq.DEALER)
        dealer.linger = 0
        dealer.routing_id = routing_id
        dealer.connect(self.url)
        self.dealers.append(dealer)
        dealer.send(p.encode(p.ClientHello(1)))
        self.until(lambda: (self.peers.receive_router(10), self.taken)[1])
        assert self.taken.pop() == (routing_id, p.ClientHello(1))
        return dealer

    def link(self):
        """A pipe-link peer adopted by ``Peers``, and the other end of its pipes; the peer's
        routing id is learnt from its first frame."""
        ours, theirs = pipe_pair()
        self.peers.adopt_link("a test peer", *ours, Role.EXECUTOR, "7")  # closed by Peers
        other = PipeLink(*theirs, MAX_FRAME)
        self.others.append(other)
        other.send(p.encode(p.ClientHello(2)))
        self.until(lambda: (self.loop.run_once(0.01), self.taken)[1])
        rid, msg = self.taken.pop()
        assert msg == p.ClientHello(2)
        return rid, other

    @staticmethod
    def until(predicate, timeout=10.0):
        deadline = time.monotonic() + timeout
        while not (value := predicate()):
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.001)
        return value

    def close(self):
        self.peers.close_links()
        self.channel.close()
        for dealer in self.dealers:
            dealer.close(0)
        self.router.disable_monitor()
        self.monitor.close(0)
        self.router.close(0)
        self.context.term()
        for other in self.others:
            other.close()


@pytest.fixture
def harness():
    harness = Harness()
    yield harness
    harness.close()


def receive(dealer, timeout=10.0):
    assert dealer.poll(int(timeout * 1000)), "nothing arrived"
    return p.decode(dealer.recv())


# ------------------------------------------------------------ roles

def test_a_router_peer_is_kept_from_its_first_message_its_role_undecided_on_an_insecure_bus(harness):
    harness.dealer(b"client-1")
    peer = harness.peers.get(b"client-1")
    assert peer.role is Role.UNDECIDED and peer.executor_id is None


def test_each_kind_of_peer_carries_its_own_role(harness):
    rid, _ = harness.link()
    assert (harness.peers.get(rid).role, harness.peers.get(rid).executor_id) == (Role.EXECUTOR, "7")
    local = InProcessPeer(b"\0local", harness.counters, Endpoint(list, lambda msg: None, lambda: None, lambda reason: None))
    assert local.role is Role.CLIENT


@pytest.mark.parametrize("user_id, role", [
    (b"", (Role.UNDECIDED, None)), (b"administrator", (Role.UNDECIDED, None)),
    (b"client", (Role.CLIENT, None)), (b"executor:12", (Role.EXECUTOR, "12")),
    (b"someone", None)])
def test_a_zap_user_id_gives_a_role(user_id, role):
    assert role_of_user(user_id) == role


# ------------------------------------------------------------ ROUTER peers

def test_a_router_peer_gets_what_is_sent_in_order(harness):
    dealer = harness.dealer(b"client-1")
    for i in range(1, 21):
        assert harness.peers.send(b"client-1", p.AdminReply(i, True, i)) is True
    assert [receive(dealer).request_id for _ in range(20)] == list(range(1, 21))
    assert harness.lost == []
    assert harness.counters["messages_out"] == 20


def test_a_router_peer_that_is_gone_is_reported(harness):
    assert harness.peers.send(b"nobody", p.Probe()) is False
    assert harness.lost == [(b"nobody", GONE)]
    assert harness.peers.send(b"nobody", p.Probe(), quiet=True) is False
    assert len(harness.lost) == 1  # quiet: not reported again


def test_a_router_peers_queue_is_the_sockets(harness):
    harness.dealer(b"client-1")
    assert harness.peers.get(b"client-1").queued() == 0


def test_a_probe_finds_the_router_peers_that_left(harness):
    stays = harness.dealer(b"stays")
    leaves = harness.dealer(b"leaves")
    harness.dealers.remove(leaves)
    leaves.close(0)
    harness.until(lambda: (harness.peers.probe(), harness.lost)[1])
    assert harness.lost == [(b"leaves", "connection lost")]
    assert stays.poll(5000)  # a probe reached the one that stays
    assert harness.peers.get(b"leaves") is None  # its role went with its connection
    assert harness.peers.get(b"stays") is not None


def test_a_forgotten_router_peer_keeps_its_role_while_connected(harness):
    harness.dealer(b"client-1")
    peer = harness.peers.get(b"client-1")
    peer.role = Role.CLIENT
    harness.peers.forget(b"client-1")
    assert harness.peers.get(b"client-1") is peer and peer.role is Role.CLIENT


def test_a_message_of_several_frames_is_reported_malformed(harness):
    dealer = harness.dealer(b"client-1")
    dealer.send_multipart([b"one", b"two"])
    harness.until(lambda: (harness.peers.receive_router(10), harness.warned)[1])
    assert harness.warned[0][0] == b"client-1"
    assert harness.taken == []


# ------------------------------------------------------------ pipe-link peers

def test_a_link_peer_carries_frames_both_ways_in_order(harness):
    rid, other = harness.link()
    assert rid.startswith(b"\0") and len(rid) != 5
    for i in range(1, 11):
        assert harness.peers.send(rid, p.AdminReply(i, True, None)) is True
    got = []
    harness.until(lambda: got.extend(other.receive()) or len(got) == 10)
    assert [p.decode(frame).request_id for frame in got] == list(range(1, 11))
    for i in range(1, 6):
        other.send(p.encode(p.AdminPing(i)))
    harness.until(lambda: (harness.loop.run_once(0.01), len(harness.taken) == 5)[1])
    assert [(r, m.request_id) for r, m in harness.taken] == [(rid, i) for i in range(1, 6)]


def test_each_link_peer_has_its_own_send_queue(harness):
    slow, _ = harness.link()   # its other end never reads
    idle, _ = harness.link()
    frame = p.Encoded(p.TaskResults, p.encode(p.AdminReply(0, True, b"x" * (1 << 16))))
    for _ in range(4096):  # 256 MiB at most: more than a pipe holds
        harness.peers.send(slow, frame)
        if harness.peers.get(slow).queued():
            break
    assert harness.peers.get(slow).queued() > 0
    assert harness.peers.get(idle).queued() == 0
    assert harness.lost == []


def test_a_link_peer_whose_other_end_closed_is_lost(harness):
    rid, other = harness.link()
    other.close()
    harness.until(lambda: (harness.loop.run_once(0.01), harness.lost)[1])
    assert harness.lost == [(rid, GONE)]
    assert harness.peers.get(rid) is None


def test_a_link_peer_that_sends_an_oversized_frame_is_cut_off():
    harness = Harness(max_frame=1024)
    try:
        rid, other = harness.link()
        other.send(p.encode(p.AdminReply(1, True, b"x" * 4096)))
        harness.until(lambda: (harness.loop.run_once(0.01), harness.broken)[1])
        assert [r for r, _ in harness.broken] == [rid]
        assert [r for r, _ in harness.warned] == [rid]
        assert harness.peers.get(rid) is None
        assert harness.taken == []
    finally:
        harness.close()


def test_forget_closes_a_link(harness):
    rid, other = harness.link()
    harness.peers.forget(rid)
    assert harness.peers.get(rid) is None
    harness.until(lambda: (other.receive(), other.closed_by_peer)[1])


# ------------------------------------------------------------ peers in this process

def test_an_in_process_peer_hands_messages_over_and_hears_the_stop(harness):
    delivered, stopped = [], []
    counters = {"messages_out": 0}
    peer = InProcessPeer(b"\0local1", counters,
                         Endpoint(list, delivered.append, lambda: stopped.append(1), lambda reason: None))
    assert peer.send(p.AdminReply(1, True, 1)) is None
    assert peer.send(p.AdminReply(2, True, 2)) is None
    assert [m.request_id for m in delivered] == [1, 2]
    assert peer.queued() == 0  # nothing held on this side
    assert counters["messages_out"] == 2
    peer.close()
    assert stopped == [1]


def test_an_in_process_peers_errors_stay_on_its_side():
    def fails(*_):
        raise RuntimeError("client broken")

    peer = InProcessPeer(b"\0local1", {"messages_out": 0}, Endpoint(list, fails, fails, fails))
    assert "client broken" in peer.send(p.Probe())  # the driver then drops it, saying why
    peer.close()
    peer.close("dropped")


def test_clients_in_this_process_arrive_through_the_channel(harness):
    outbox = [p.ClientHello(3), p.AdminPing(1)]
    delivered = []

    def take():
        taken = outbox[:]
        outbox.clear()
        return taken

    key = harness.channel.connect(Endpoint(take, delivered.append, lambda: None, lambda reason: None))
    harness.peers.receive_in_process()
    assert harness.peers.in_process(key)
    assert harness.taken == [(key, p.ClientHello(3)), (key, p.AdminPing(1))]
    assert harness.peers.send(key, p.AdminReply(1, True, True)) is True
    assert delivered == [p.AdminReply(1, True, True)]
    outbox.append(p.AdminPing("not an int"))
    harness.peers.receive_in_process()
    assert harness.warned and harness.warned[0][0] == key
    assert len(harness.taken) == 2


def test_a_client_in_this_process_is_read_as_frames_until_its_goodbye(harness):
    outbox = [p.AdminPing(1), object(), p.ClientGoodbye(), p.AdminPing(2)]
    key = harness.channel.connect(Endpoint(lambda: [outbox.pop(0) for _ in outbox[:]],
                                           lambda msg: None, lambda: None, lambda reason: None))
    harness.peers.receive_in_process()
    # the object that is no message is skipped; nothing after the goodbye is read
    assert harness.taken == [(key, p.AdminPing(1)), (key, p.ClientGoodbye())]
    assert harness.counters["messages_in"] == 2
    assert harness.counters["bytes_in"] == len(p.encode(p.AdminPing(1))) + len(
        p.encode(p.ClientGoodbye()))
    assert not harness.peers.in_process(key) and harness.peers.get(key) is None


def test_stopping_tells_every_client_in_this_process(harness):
    stopped = []
    for name in ("taken", "never-taken"):
        endpoint = Endpoint(list, lambda msg: None, lambda name=name: stopped.append(name), lambda reason: None)
        harness.channel.connect(endpoint)
        if name == "taken":
            harness.peers.receive_in_process()
    harness.peers.stop_in_process()
    assert sorted(stopped) == ["never-taken", "taken"]
