"""The I/O thread and the DEALER socket to a driver in another process: hello and welcome,
ZMTP heartbeats, sending the queue, receiving, and the connection lost."""
import logging
import os
import time

import zmq

from .. import protocol as p
from ..config import Config
from ..errors import DriverConnectionError
from ..security import HandshakeWatch, make_client
from ..socket_options import heartbeat_options
from ..socket_state import SocketState

log = logging.getLogger(__package__)  # zsched.client, for every module of the client

_POLLIN = int(zmq.POLLIN)  # a plain int: an IntFlag & makes an enum


class SocketIO:
    """The part of ``Client`` that owns the I/O thread and, for a driver reached over TCP
    or IPC, its DEALER socket."""

    def _open_socket(self, keys):
        self._socket = self._connect(keys)
        self._socket_state = SocketState(self._socket)  # its ZMQ_EVENTS, read cheaply

    def _connect(self, keys):
        """The DEALER socket connected to the driver, after its ClientWelcome.

        Its ZMTP heartbeats are the driver's (``zmq_heartbeat_*``): ZeroMQ copies a socket's
        heartbeat options into a connection when it makes it, and the driver's settings
        arrive only over a connection, in ClientWelcome. So the first connection uses the
        defaults; when the driver's settings differ, the client says goodbye on it and
        connects again with the driver's values (one more handshake, only then)."""
        deadline = time.monotonic() + self.timeout
        heartbeats = heartbeat_options(Config())
        sock, welcome = self._hello(keys, heartbeats, deadline)
        wanted = heartbeat_options(Config.from_mapping(welcome.settings))
        if wanted != heartbeats:
            try:
                sock.send(p.encode(p.ClientGoodbye()))
            finally:
                sock.close(linger=1000)  # the goodbye still leaves; close does not wait
            sock, welcome = self._hello(keys, wanted, deadline)
        self._welcomed(welcome)
        self._monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        return sock

    def _hello(self, keys, heartbeats, deadline):
        """A new connection with these heartbeat options, and the driver's ClientWelcome."""
        sock = self._context.socket(zmq.DEALER)
        sock.linger = 1000
        sock.sndhwm = 100_000
        sock.rcvhwm = 100_000
        for option, value in heartbeats.items():
            sock.set(option, value)
        if keys is not None:
            make_client(sock, keys)
        watch = HandshakeWatch(sock, has_secret=keys is not None)
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

    def _io_loop(self):
        try:
            if self._link is not None:
                self._serve_link()
            else:
                self._serve_socket()
            log.debug("client I/O thread ended: %s", self._lost or "shutdown")
        except Exception as exc:
            log.exception("client I/O thread ended by an error")
            self._connection_failed(DriverConnectionError(f"the client's connection failed: {exc!r}"))
        finally:
            self._io_stopped = True
            self._io_done.set()

    def _poll(self, poller, idle_ms=1000):
        """Wait for something to do (``idle_ms`` at most when nothing is queued): what poll
        returned.

        Calling threads write the wake-up pipe only while ``pending`` is False, that is while
        this thread sleeps in poll with nothing queued: during a flood they make no system
        call (which would also hand this thread the GIL for a turn that takes one row), and
        each turn takes all the rows queued meanwhile."""
        wakeup = self._wakeup
        if self._outbox or self._cancels:
            events = dict(poller.poll(0))
        else:
            wakeup.pending = False
            idle = not (self._outbox or self._cancels)  # after pending: none is missed
            events = dict(poller.poll(idle_ms if idle else 0))
            wakeup.pending = True
        if wakeup.fd in events:
            wakeup.drain()
        return events

    def _serve_socket(self):
        sock = self._socket
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self._wakeup.fd, zmq.POLLIN)
        poller.register(self._monitor, zmq.POLLIN)
        while True:
            events = self._poll(poller)
            if self._send_outbox(sock.send):
                return
            if self._monitor in events:  # after the results the driver sent before it went
                self._receive(drain=True)
                self._driver_lost()
                return
            if sock in events:
                self._receive()

    def _receive(self, drain=False):
        """Handle the messages waiting from the driver. Unless ``drain``, stop after the
        first frame once new submissions wait to leave: while a calling thread floods the client, each
        ``recv`` gives that thread the GIL and waits to get it back, so a long run of them
        would leave the driver without tasks."""
        sock = self._socket
        state = self._socket_state
        # ZMQ_EVENTS rather than recv until zmq.Again: an exception per turn costs more
        first = True
        while state.events() & _POLLIN:
            if not (first or drain) and (self._outbox or self._cancels):
                return  # one frame per turn at least: results are never starved either
            first = False
            self._from_driver_frame(sock.recv(zmq.NOBLOCK))
