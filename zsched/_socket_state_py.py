"""Pure-Python twin of ``_socket_state.pyx``: two options of a ZeroMQ socket that the
transport loops read after every message."""

ZMQ_EVENTS, ZMQ_RCVMORE = 15, 13  # libzmq's option numbers (zmq.EVENTS, zmq.RCVMORE)


class SocketState:
    """``events()`` and ``more()`` of a pyzmq socket: its ZMQ_EVENTS (a bit mask) and
    whether the message being received has more parts (ZMQ_RCVMORE). The compiled module
    reads them with libzmq's own ``zmq_getsockopt``, cheaper than pyzmq's ``Socket.get``.
    Only the thread that uses the socket calls them, and only while it is open."""

    def __init__(self, socket):
        self._get = socket.get

    def events(self):
        return self._get(ZMQ_EVENTS)

    def more(self):
        return bool(self._get(ZMQ_RCVMORE))
