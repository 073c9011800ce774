"""A pair of pipes to the driver of a ``LocalCluster`` (``Client.over_pipes``): hello and
welcome, and the I/O thread's loop."""
import os
import select
import time

import zmq

from .. import protocol as p
from ..errors import DriverConnectionError
from ..poller import Poller
from .transport import IOThreadTransport


class PipeTransport(IOThreadTransport):
    """The client's ``PipeLink`` to its driver, whose other end the driver holds. The
    pipes reach the driver alone: nothing to authenticate. The I/O thread alone uses them
    once connected."""

    kind = "pipes"

    def __init__(self, address, timeout, outbox, futures, link):
        super().__init__(address, timeout, outbox, futures)
        self.link = link
        self._send_frame = link.send  # queues what the pipe does not take: never waits

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
        """The driver's settings (a ``Config``): its frame limit too."""
        super().welcomed(config)
        self.link.max_frame = p.frame_limit(config.max_message_size)

    def serve(self):
        """The I/O thread's loop: the end of the driver's pipe is its connection lost.

        Pipes have no heartbeats, and a driver that is stopped (SIGSTOP) or hung keeps its
        end open: the client pings it (``_check_driver``). The link never blocks: what the
        pipe does not take waits in it, and the loop polls for room meanwhile, so a silent
        driver is found while output waits too."""
        link = self.link
        poller = Poller()
        poller.register(link.read_fd, zmq.POLLIN)
        poller.register(self.wakeup.fd, zmq.POLLIN)
        polling_writes = False
        while True:
            events = self._poll(poller, self._idle_ms())
            heard = link.read_fd in events
            try:
                goodbye = self._send_outbox()
                if link.write_fd in events:
                    link.flush()
                if goodbye:
                    link.flush_within(1.0)  # as a closing socket lingers
                    return
                if heard and self._receive():
                    return
                if self._check_driver(heard):
                    return
            except BrokenPipeError:  # the driver is gone: after what it sent before
                if not self._receive():
                    self._driver_lost()
                return
            if link.wants_write != polling_writes:  # poll for room in the pipe while output waits
                polling_writes = link.wants_write
                if polling_writes:
                    poller.register(link.write_fd, zmq.POLLOUT)
                else:
                    poller.unregister(link.write_fd)

    def _send_parts(self, frames):
        self.link.send_parts(frames)

    def _output_waits(self):
        return self.link.wants_write

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
