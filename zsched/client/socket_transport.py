"""A DEALER socket to a driver in another process: hello and welcome, ZMTP heartbeats,
the I/O thread's loop, and the connection lost."""
import os
import time

import zmq

from .. import protocol as p
from ..config import Config
from ..errors import ConfigError, DriverConnectionError
from ..security import HandshakeWatch, make_client
from ..socket_options import heartbeat_options
from ..socket_state import SocketState
from .transport import IOThreadTransport

_POLLIN = int(zmq.POLLIN)  # a plain int: an IntFlag & makes an enum


class SocketTransport(IOThreadTransport):
    """The client's DEALER socket to the driver at ``address``, with CURVE ``keys`` (None:
    no security). The socket is made in ``connect`` and used by the I/O thread alone."""

    kind = "socket"

    def __init__(self, address, timeout, outbox, futures, keys):
        super().__init__(address, timeout, outbox, futures)
        self._keys = keys
        self._context = zmq.Context()
        self.socket = None
        self._socket_state = None
        self._monitor = None

    def connect(self):
        """The driver's ClientWelcome, over a DEALER socket connected to it.

        Its ZMTP heartbeats are the driver's (``zmq_heartbeat_*``): ZeroMQ copies a socket's
        heartbeat options into a connection when it makes it, and the driver's settings
        arrive only over a connection, in ClientWelcome. So the first connection uses the
        defaults; when the driver's settings differ, the client says goodbye on it and
        connects again with the driver's values (one more handshake, only then)."""
        deadline = time.monotonic() + self.timeout
        heartbeats = heartbeat_options(Config())
        sock, welcome = self._hello(heartbeats, deadline)
        try:
            wanted = heartbeat_options(Config.from_driver(welcome.settings))
        except ConfigError:
            sock.close(linger=0)
            raise
        if wanted != heartbeats:
            try:
                sock.send(p.encode(p.ClientGoodbye()))
            finally:
                sock.close(linger=1000)  # the goodbye still leaves; close does not wait
            sock, welcome = self._hello(wanted, deadline)
        self._monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        self.socket = sock
        self._socket_state = SocketState(sock)  # its ZMQ_EVENTS, read cheaply
        return welcome

    def _hello(self, heartbeats, deadline):
        """A new connection with these heartbeat options, and the driver's ClientWelcome."""
        sock = self._context.socket(zmq.DEALER)
        sock.linger = 1000
        sock.sndhwm = 100_000
        sock.rcvhwm = 100_000
        for option, value in heartbeats.items():
            sock.set(option, value)
        if self._keys is not None:
            make_client(sock, self._keys)
        watch = HandshakeWatch(sock, has_secret=self._keys is not None)
        try:
            sock.connect(self.address)
            sock.send(p.encode(p.ClientHello(os.getpid())))
            poller = zmq.Poller()
            poller.register(sock, zmq.POLLIN)
            poller.register(watch.socket, zmq.POLLIN)
            while True:
                failure = watch.check()
                if failure:
                    raise DriverConnectionError(
                        f"cannot connect to driver {self.address}: authentication failed ({failure})")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise DriverConnectionError(
                        f"cannot connect to driver {self.address}: no answer within {self.timeout:g} s")
                if sock in dict(poller.poll(remaining * 1000)):
                    msg = p.decode(sock.recv())
                    if isinstance(msg, p.ClientWelcome):
                        return sock, msg
        except BaseException:
            sock.close(linger=0)
            raise
        finally:
            watch.close()

    def serve(self):
        """The I/O thread's loop. Besides the socket's monitor, it checks that the driver
        answers (``_check_driver``): libzmq answers ZMTP heartbeats from its own thread,
        so a driver whose loop is stuck or stopped would otherwise keep its client's
        futures pending."""
        sock = self.socket
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self.wakeup.fd, zmq.POLLIN)
        poller.register(self._monitor, zmq.POLLIN)
        while True:
            events = self._poll(poller, self._idle_ms())
            if self._send_outbox():
                return
            if self._monitor in events:  # after the results the driver sent before it went
                self._receive(drain=True)
                self._driver_lost()
                return
            heard = sock in events
            if heard:
                self._receive()
            if self._check_driver(heard):
                return

    def _send_frame(self, frame):
        self.socket.send(frame)

    def _output_waits(self):
        return False

    def _receive(self, drain=False):
        """Handle the messages waiting from the driver. Unless ``drain``, stop after the
        first frame once new submissions wait to leave: while a calling thread floods the
        client, each ``recv`` gives that thread the GIL and waits to get it back, so a long
        run of them would leave the driver without tasks."""
        sock = self.socket
        state = self._socket_state
        outbox = self._outbox
        # ZMQ_EVENTS rather than recv until zmq.Again: an exception per turn costs more
        first = True
        while state.events() & _POLLIN:
            if not (first or drain) and (outbox.rows or outbox.cancels):
                return  # one frame per turn at least: results are never starved either
            first = False
            self._deliver_frame(sock.recv(zmq.NOBLOCK))

    def close(self):
        if not self.stopped_in_time():
            return  # one thread owns the socket: one that did not stop in time keeps it
        sock = self.socket
        if sock is not None:
            sock.disable_monitor()
            self._monitor.close(linger=0)
            sock.close(linger=0 if self._futures.lost else 1000)
        self._context.term()
        super().close()
