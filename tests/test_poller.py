"""``zsched.poller.Poller``: what ``zmq.Poller`` reports, with real sockets on loopback,
including a message whose signal another operation on the socket took."""
import os
import threading

import pytest
import zmq

from zsched.poller import POLLERR, POLLIN, POLLOUT, Poller

pytestmark = pytest.mark.timeout(60)

HOUR_MS = 3_600_000  # a wait that a bug would make, never a test's time


@pytest.fixture
def pair():
    """A ROUTER and a DEALER connected to it over TCP, and the DEALER's routing id at the
    ROUTER once it said hello."""
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealer = context.socket(zmq.DEALER)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    dealer.send(b"hello")
    rid, _ = router.recv_multipart()
    yield router, dealer, rid
    for sock in (router, dealer):
        sock.close(linger=0)
    context.term()


def wait_until_queued(sock):
    """Wait until a message waits at ``sock``, reading its ZMQ_EVENTS as pyzmq does: that
    takes the signal its descriptor had, as a send on the socket may."""
    assert zmq.select([sock], [], [], 30)[0] == [sock]
    assert sock.getsockopt(zmq.EVENTS) & zmq.POLLIN


def test_a_waiting_message_is_reported_though_its_signal_was_taken(pair):
    router, dealer, rid = pair
    poller = Poller()
    poller.register(dealer, zmq.POLLIN)
    router.send_multipart([rid, b"one"])
    wait_until_queued(dealer)
    assert not zmq.select([dealer.getsockopt(zmq.FD)], [], [], 0)[0]  # nothing signalled now
    assert poller.poll(HOUR_MS) == [(dealer, POLLIN)]
    assert dealer.recv() == b"one"
    assert poller.poll(0) == []


def test_a_message_arriving_while_it_waits_ends_the_wait(pair):
    router, dealer, rid = pair
    poller = Poller()
    poller.register(dealer, zmq.POLLIN)
    sender = threading.Timer(0.2, lambda: router.send_multipart([rid, b"later"]))
    sender.start()
    try:
        assert poller.poll(HOUR_MS) == [(dealer, POLLIN)]
    finally:
        sender.join()
    assert dealer.recv() == b"later"


def test_sockets_and_descriptors_come_in_the_order_they_were_registered(pair):
    router, dealer, rid = pair
    read_fd, write_fd = os.pipe()
    try:
        poller = Poller()
        poller.register(read_fd, zmq.POLLIN)
        poller.register(dealer, zmq.POLLIN)
        poller.register(write_fd, zmq.POLLOUT)
        router.send_multipart([rid, b"x"])
        wait_until_queued(dealer)
        os.write(write_fd, b"y")
        assert poller.poll(HOUR_MS) == [(read_fd, POLLIN), (dealer, POLLIN), (write_fd, POLLOUT)]
        expected = zmq.Poller()
        for what, flags in ((read_fd, zmq.POLLIN), (dealer, zmq.POLLIN), (write_fd, zmq.POLLOUT)):
            expected.register(what, flags)
        assert poller.poll(0) == [(what, int(flags)) for what, flags in expected.poll(0)]
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_a_hung_up_descriptor_is_an_error_as_with_zmq_poll():
    read_fd, write_fd = os.pipe()
    os.close(write_fd)
    try:
        poller = Poller()
        poller.register(read_fd, zmq.POLLIN)
        ready = dict(poller.poll(HOUR_MS))
        assert ready[read_fd] & POLLERR
        legacy = zmq.Poller()
        legacy.register(read_fd, zmq.POLLIN)
        assert ready[read_fd] == int(dict(legacy.poll(0))[read_fd])
    finally:
        os.close(read_fd)


def test_modify_and_unregister(pair):
    router, dealer, rid = pair
    poller = Poller()
    poller.register(dealer, zmq.POLLIN)
    assert poller.poll(0) == []
    poller.modify(dealer, zmq.POLLIN | zmq.POLLOUT)
    assert poller.poll(0) == [(dealer, POLLOUT)]  # room to send
    poller.unregister(dealer)
    assert poller.poll(0) == []
    with pytest.raises(KeyError):
        poller.unregister(dealer)
    poller.register(dealer, 0)  # no flags: not watched
    assert poller.poll(0) == []


def test_a_socket_used_only_when_ready_is_reported_until_it_is_read(pair):
    router, dealer, rid = pair
    poller = Poller()
    poller.register(dealer, zmq.POLLIN, only_when_ready=True)
    assert poller.poll(0) == []  # read once: nothing waits, its descriptor tells from now
    router.send_multipart([rid, b"one"])
    router.send_multipart([rid, b"two"])
    assert poller.poll(HOUR_MS) == [(dealer, POLLIN)]
    assert dealer.recv() == b"one"  # the handler read one of two
    assert poller.poll(HOUR_MS) == [(dealer, POLLIN)]
    assert dealer.recv() == b"two"
    assert poller.poll(0) == []
