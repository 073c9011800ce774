"""The compiled ``SocketState`` and its pure-Python twin read a socket's options alike."""
import pytest

from zsched import _socket_state, _socket_state_py, socket_state

IMPLEMENTATIONS = [_socket_state_py, _socket_state]


def test_both_export_the_same_names():
    for name in socket_state.__all__:
        assert hasattr(_socket_state, name) and hasattr(_socket_state_py, name)


def test_the_compiled_path_reads_socket_options_in_c():
    # pyzmq's extension is linked with libzmq, in which zmq_getsockopt is found; were it
    # not, SocketState would ask pyzmq (the next test passes either way)
    assert _socket_state.SOCKET_OPTIONS_IN_C


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_socket_state_reads_events_and_more_as_pyzmq_does(impl, tmp_path):
    import time

    import zmq
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.linger = 0
    address = f"ipc://{tmp_path}/s"
    router.bind(address)
    dealer = context.socket(zmq.DEALER)
    dealer.linger = 0
    dealer.connect(address)
    state = impl.SocketState(router)
    try:
        assert state.events() == router.get(zmq.EVENTS) and not state.events() & zmq.POLLIN
        dealer.send_multipart([b"a", b"b"])
        deadline = time.monotonic() + 10
        while not state.events() & zmq.POLLIN:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert state.events() == router.get(zmq.EVENTS)
        parts = [router.recv()]
        while state.more():
            parts.append(router.recv())
        assert parts[1:] == [b"a", b"b"] and state.more() is False
        assert not state.events() & zmq.POLLIN
    finally:
        dealer.close()
        router.close()
    with pytest.raises(zmq.ZMQError):  # closed: pyzmq says so, nothing reads freed memory
        state.events()
    with pytest.raises(zmq.ZMQError):
        state.more()
    context.term()
