"""A pair of pipes to the driver of a ``LocalCluster`` (``Client.over_pipes``): hello and
welcome, the I/O thread's loop, and pings to a silent driver, which pipes do not notice."""
import logging
import os
import select
import time

import zmq

from .. import protocol as p
from ..errors import DriverConnectionError
from ..liveness import DRIVER, HeartbeatMonitor
from .transport import IOThreadTransport

log = logging.getLogger(__package__)  # zsched.client, for every module of the client

# What a client over pipes sends a silent driver while it waits on it: a request with no
# future (ids of requests start at 1), which the driver's loop answers.
_PING = p.encode(p.AdminPing(0))


class PipeTransport(IOThreadTransport):
    """The client's ``PipeLink`` to its driver, whose other end the driver holds. The
    pipes reach the driver alone: nothing to authenticate. The I/O thread alone uses them
    once connected."""

    kind = "pipes"

    def __init__(self, address, timeout, outbox, futures, link):
        super().__init__(address, timeout, outbox, futures)
        self.link = link
        self._heartbeats = None  # (interval, timeout): the driver's, from its welcome

    def connect(self):
        """Say hello over the link and wait for the driver's ClientWelcome."""
        link = self.link
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
                    return msg
            if link.error is not None:
                raise DriverConnectionError(f"cannot connect to driver {self.address}: {link.error}")
            if link.closed_by_peer:
                raise gone

    def welcomed(self, config):
        """The driver's settings (a ``Config``): its frame limit and heartbeats."""
        self.link.max_frame = p.frame_limit(config.max_message_size)
        self._heartbeats = (config.executor_heartbeat_interval, config.executor_heartbeat_timeout)

    def serve(self):
        """The I/O thread's loop: the end of the driver's pipe is its connection lost.

        Pipes have no heartbeats, and a driver that is stopped (SIGSTOP) or hung keeps its
        end open. So while tasks or requests wait, a driver silent for
        ``executor_heartbeat_interval`` is pinged (an AdminPing its loop answers), and one
        silent for longer than ``executor_heartbeat_timeout`` is lost, as its executors
        judge it (``HeartbeatMonitor``): every pending future fails."""
        link = self.link
        poller = zmq.Poller()
        poller.register(link.read_fd, zmq.POLLIN)
        poller.register(self.wakeup.fd, zmq.POLLIN)
        polling_writes = False
        interval, timeout = self._heartbeats
        monitor = HeartbeatMonitor(interval, timeout, send_when_quiet=True, clock=time.monotonic)
        monitor.heard(DRIVER)
        while True:
            idle_ms = max(1, int(min(monitor.until_send(), 1.0) * 1000))
            events = self._poll(poller, idle_ms)
            try:
                goodbye = self._send_outbox(link.send)
                if link.write_fd in events:
                    link.flush()
                if self._check_driver(monitor, link.read_fd in events):
                    return
            except BrokenPipeError:  # the driver is gone: after what it sent before
                if not self._receive():
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
            if link.read_fd in events and self._receive():
                return

    def _check_driver(self, monitor, heard):
        """Ping a quiet driver, or find it silent: True when it is lost."""
        now = monitor.clock()
        if heard or not self._futures.waiting():
            monitor.heard(DRIVER, now)  # silence counts only while something waits
        elif monitor.is_silent(DRIVER, now):
            error = DriverConnectionError(
                f"driver {self.address} answered nothing for {monitor.timeout:g} s "
                "(executor_heartbeat_timeout) while tasks waited: it is stopped or hung; its "
                "pending tasks fail")
            self._lose(error, log_it=True)
            return True
        elif monitor.due_to_send(now):
            self.link.send(_PING)
        return False

    def _receive(self):
        """Handle the frames the link holds; True when the driver is gone (or broke the
        link), after the frames it sent before."""
        link = self.link
        for frame in link.receive():
            self._deliver_frame(frame)
        if link.error is not None:
            self._lose(DriverConnectionError(
                f"the driver {self.address} broke the link: {link.error}"), log_it=True)
            return True
        if link.closed_by_peer:
            self._driver_lost()
            return True
        return False

    def close(self):
        if not self.stopped_in_time():
            return  # one thread owns the pipes: one that did not stop in time keeps them
        self.link.close()
        super().close()
