"""A DEALER socket to a driver in another process: hello and welcome, ZMTP heartbeats,
the I/O thread's loop, and the connection lost."""
import logging
import os
import time
from collections import deque

import zmq

from .. import protocol as p
from ..config import Config
from ..errors import ConfigError, DriverConnectionError
from ..poller import Poller
from ..security import HandshakeWatch, make_client
from ..socket_options import heartbeat_options, recv_parts, send_frames
from ..socket_state import SocketState
from .transport import IOThreadTransport

log = logging.getLogger(__package__)  # zsched.client, for every module of the client

_POLLIN = int(zmq.POLLIN)  # plain ints: an IntFlag & makes an enum
_POLLOUT = int(zmq.POLLOUT)
_NOBLOCK = int(zmq.NOBLOCK)
_GOODBYE_LINGER = 1.0  # seconds a goodbye may wait for room in the send queue, as a socket lingers


class SocketTransport(IOThreadTransport):
    """The client's DEALER socket to the driver at ``address``, with CURVE ``keys`` (None:
    no security). The socket is made in ``connect`` and used by the I/O thread alone."""

    kind = "socket"
    send_hwm = 100_000  # frames the socket queues for the driver before a send would wait

    def __init__(self, address, timeout, outbox, futures, keys):
        super().__init__(address, timeout, outbox, futures)
        self._keys = keys
        self._context = zmq.Context()
        self.socket = None
        self._socket_state = None
        self._monitor = None
        self._unsent = deque()  # frames the send queue had no room for, in order

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
        sock.sndhwm = self.send_hwm
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
        """The I/O thread's loop. It never waits in a send: a frame the send queue has no
        room for waits, in order, until poll says there is room. Meanwhile the loop reads,
        watches the socket's monitor and checks that the driver answers
        (``_check_driver``): a driver that stopped reading is lost after
        ``executor_heartbeat_timeout``, though libzmq still answers its heartbeats."""
        sock = self.socket
        poller = Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self.wakeup.fd, zmq.POLLIN)
        poller.register(self._monitor, zmq.POLLIN, only_when_ready=True)
        polling_out = False
        closing = None  # once a goodbye is queued: when it stops waiting for room
        while True:
            events = self._poll(poller, self._idle_ms())
            ready = events.get(sock, 0)
            if ready & _POLLOUT:
                self._flush()
            if self._send_outbox():
                closing = time.monotonic() + _GOODBYE_LINGER
            if closing is not None and (not self._unsent or time.monotonic() > closing):
                if self._unsent:
                    log.debug("the goodbye to driver %s found no room within %g s",
                              self.address, _GOODBYE_LINGER)
                return
            if self._monitor in events:  # after the results the driver sent before it went
                self._receive(drain=True)
                self._driver_lost()
                return
            if ready & _POLLIN:
                self._receive()
            if self._check_driver(ready & _POLLIN):
                return
            if bool(self._unsent) != polling_out:  # poll for room while frames wait
                polling_out = not polling_out
                poller.modify(sock, zmq.POLLIN | zmq.POLLOUT if polling_out else zmq.POLLIN)

    def _send_frame(self, frame):
        """Send ``frame``, or keep it, after those kept before, when the queue is full."""
        unsent = self._unsent
        if not unsent:
            try:
                self.socket.send(frame, _NOBLOCK)
                return
            except zmq.Again:
                pass
        unsent.append(frame)

    def _send_parts(self, frames):
        """Send a data message's frames (large ones not copied), or keep them, after those
        kept before, when the queue is full."""
        unsent = self._unsent
        if not unsent:
            try:
                send_frames(self.socket, frames, _NOBLOCK)
                return
            except zmq.Again:
                pass
        unsent.append(tuple(frames))

    def _flush(self):
        """Send the frames kept, in order, as far as the send queue has room."""
        unsent = self._unsent
        send = self.socket.send
        while unsent:
            try:
                if type(unsent[0]) is tuple:  # a data message's frames
                    send_frames(self.socket, unsent[0], _NOBLOCK)
                else:
                    send(unsent[0], _NOBLOCK)
            except zmq.Again:
                return
            unsent.popleft()

    def _output_waits(self):
        return bool(self._unsent)

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
            frame = sock.recv(_NOBLOCK)
            if state.more():  # a data message: its head, then its parts
                frame = (frame, *recv_parts(sock))
            self._deliver_frame(frame)

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
