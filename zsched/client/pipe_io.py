"""The I/O thread's side of a driver reached over pipes (``Client.over_pipes``): hello and
welcome, and pings to a silent driver, which pipes do not notice."""
import logging
import os
import select
import time

import zmq

from .. import protocol as p
from ..errors import DriverConnectionError
from ..liveness import DRIVER, HeartbeatMonitor

log = logging.getLogger(__package__)  # zsched.client, for every module of the client

# What a client over pipes sends a silent driver while it waits on it: a request with no
# future (ids of requests start at 1), which the driver's loop answers.
_PING = p.encode(p.AdminPing(0))


class PipeIO:
    """The part of ``Client`` that talks to its driver over a ``PipeLink``."""

    def _connect_link(self):
        """Say hello over ``_link`` and wait for the driver's ClientWelcome. The pipes were
        inherited by the driver from this process: nothing to authenticate."""
        link = self._link
        deadline = time.monotonic() + self.timeout
        gone = DriverConnectionError(f"cannot connect to driver {self.address}: "
                                     "it closed its end of the pipes")
        try:
            link.send(p.encode(p.ClientHello(os.getpid())))
        except BrokenPipeError:
            raise gone from None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DriverConnectionError(
                    f"cannot connect to driver {self.address}: no answer within {self.timeout:g} s")
            select.select([link.read_fd], [link.write_fd] if link.wants_write else [], [],
                          remaining)
            try:
                link.flush()
            except BrokenPipeError:
                raise gone from None
            for frame in link.receive():
                msg = p.decode(frame)
                if isinstance(msg, p.ClientWelcome):
                    self._welcomed(msg)
                    link.max_frame = p.frame_limit(self._max_message_size)
                    return
            if link.error is not None:
                raise DriverConnectionError(f"cannot connect to driver {self.address}: {link.error}")
            if link.closed_by_peer:
                raise gone

    def _serve_link(self):
        """``_serve_socket`` for a client that talks to its driver over pipes (``_link``):
        the end of the driver's pipe is its connection lost.

        Pipes have no heartbeats, and a driver that is stopped (SIGSTOP) or hung keeps its
        end open. So while tasks or requests wait, a driver silent for
        ``executor_heartbeat_interval`` is pinged (an AdminPing its loop answers), and
        one silent for longer than ``executor_heartbeat_timeout`` is lost, as its executors
        judge it (``HeartbeatMonitor``): every pending future fails."""
        link = self._link
        poller = zmq.Poller()
        poller.register(link.read_fd, zmq.POLLIN)
        poller.register(self._wakeup.fd, zmq.POLLIN)
        polling_writes = False
        timeout = self.config.executor_heartbeat_timeout
        monitor = HeartbeatMonitor(self.config.executor_heartbeat_interval, timeout,
                                   send_when_quiet=True, clock=time.monotonic)
        monitor.heard(DRIVER)
        while True:
            idle_ms = max(1, int(min(monitor.until_send(), 1.0) * 1000))
            events = self._poll(poller, idle_ms)
            try:
                goodbye = self._send_outbox(link.send)
                if link.write_fd in events:
                    link.flush()
                now = monitor.clock()
                if link.read_fd in events or not (self._futures or self._admin_futures):
                    monitor.heard(DRIVER, now)  # silence counts only while something waits
                elif monitor.is_silent(DRIVER, now):
                    self._driver_silent(timeout)
                    return
                elif monitor.due_to_send(now):
                    link.send(_PING)
            except BrokenPipeError:  # the driver is gone: after what it sent before
                if not self._receive_link():
                    self._driver_lost()
                return
            if goodbye:
                link.flush_within(1.0)  # as a closing socket lingers
                return
            if link.wants_write != polling_writes:  # poll for room in the pipe while output waits
                polling_writes = link.wants_write
                if polling_writes:
                    poller.register(link.write_fd, zmq.POLLOUT)
                else:
                    poller.unregister(link.write_fd)
            if link.read_fd in events and self._receive_link():
                return

    def _receive_link(self):
        """Handle the frames the link holds; True when the driver is gone (or broke the
        link), after the frames it sent before."""
        link = self._link
        for frame in link.receive():
            self._from_driver_frame(frame)
        if link.error is not None:
            error = DriverConnectionError(f"the driver {self.address} broke the link: {link.error}")
            log.error("%s", error)
            self._connection_failed(error)
            return True
        if link.closed_by_peer:
            self._driver_lost()
            return True
        return False
