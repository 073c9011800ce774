"""An executor's connection to its driver: a DEALER socket, or the pipe pair (``pipe_link``)
that a driver on the same host gave it. Only the thread that runs the loop uses it.

Nothing sent is dropped: what the socket does not take (its queue is full: the driver is
not reading) waits here, in order, and leaves as soon as the socket has room, as what the
pipe does not take waits in the link. The loop polls for that room while output waits.
"""
import collections
import logging
import time

import zmq

from .. import protocol as p
from ..poller import Poller
from ..socket_options import recv_parts, send_frames
from ..socket_state import SocketState

log = logging.getLogger("zsched.executor")
_POLLIN = int(zmq.POLLIN)  # a plain int: an IntFlag & makes an enum
_POLLOUT = int(zmq.POLLOUT)
_NOBLOCK = int(zmq.NOBLOCK)
LOST = "lost the connection to the driver"


class DriverConnection:
    """Frames to and from the driver over ``socket`` (registered) or ``link``. ``key`` is
    what the loop's poller reports when the driver's input is ready."""

    def __init__(self, socket=None, link=None, context=None):
        self.socket = socket
        self.link = link
        self._context = context              # the socket's own, ended by close
        self.key = link.read_fd if link is not None else socket
        self._socket_state = SocketState(socket) if socket is not None else None  # ZMQ_EVENTS
        self._monitor = None                 # events of the socket's connection
        self._poller = None
        self._held = collections.deque()     # frames the socket did not take yet, in order
        self._closed = False

    def watch(self, poller):
        """Register with the loop's ``poller``: the driver's input, the loss of the
        connection, and room in the pipe while output waits."""
        self._poller = poller
        if self.link is not None:  # its end of file ends this executor
            poller.register(self.key, zmq.POLLIN)
            if self.link.wants_write:
                poller.register(self.link.write_fd, zmq.POLLOUT)
        else:
            poller.register(self.key, zmq.POLLIN | (zmq.POLLOUT if self._held else 0))
            # registered: from now on a lost connection to the driver ends this executor (the
            # driver has dropped it too: a reconnection would be a stranger to it)
            self._monitor = self.socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            if isinstance(poller, Poller):  # only the loop reads it, once poll says so
                poller.register(self._monitor, zmq.POLLIN, only_when_ready=True)
            else:
                poller.register(self._monitor, zmq.POLLIN)

    def unwatch(self, poller):
        """Leave ``poller`` (see ``watch``)."""
        for what in (self.key, self._monitor, self.link.write_fd if self.link else None):
            if what is not None:
                try:
                    poller.unregister(what)
                except KeyError:
                    pass
        self._poller = None

    def send(self, msg):
        """Send ``msg``; False if the driver is gone. What the socket or the pipe does not
        take now waits, in order, for ``flush``."""
        link = self.link
        parts = type(msg) is p.ResultData  # a data message: its parts are not copied
        if link is not None:
            waiting = link.wants_write
            try:
                link.send_parts(p.encode_parts(msg)) if parts else link.send(p.encode(msg))
            except BrokenPipeError:
                return False
            if link.wants_write and not waiting and self._poller is not None:
                self._poller.register(link.write_fd, zmq.POLLOUT)  # until the pipe takes it
            return True
        frame = tuple(p.encode_parts(msg)) if parts else p.encode(msg)
        held = self._held
        if held:  # behind what waits; poll says when there is room, if anyone polls
            held.append(frame)
            if self._poller is None:
                self._send_held()
            return True
        try:
            _send(self.socket, frame)
        except zmq.Again:
            held.append(frame)
            log.warning("the driver is not reading: messages wait here until it does")
            if self._poller is not None:
                self._poller.register(self.socket, zmq.POLLIN | zmq.POLLOUT)
        return True

    def _send_held(self):
        """Hand the socket what waits, as far as it takes it; True once nothing waits."""
        held, socket = self._held, self.socket
        while held:
            try:
                _send(socket, held[0])
            except zmq.Again:
                return False
            held.popleft()
        log.info("the driver reads again: what waited has been sent")
        if self._poller is not None:
            self._poller.register(socket, zmq.POLLIN)
        return True

    def flush(self, events):
        """Send what waits if the socket or the pipe has room now; False if the driver is
        gone."""
        link = self.link
        if link is None:
            if self._held and events.get(self.socket, 0) & _POLLOUT:
                self._send_held()
            return True
        if link.write_fd not in events:
            return True
        try:
            done = link.flush()
        except BrokenPipeError:
            return False
        if done:
            self._poller.unregister(link.write_fd)
        return True

    def readable(self, events):
        """Whether ``events`` (of the loop's poll) say the driver's input is ready."""
        if self.link is not None:
            return self.key in events
        return bool(events.get(self.key, 0) & _POLLIN)

    def read(self, handle, stopped):
        """Pass each frame the driver sent to ``handle`` until none waits or ``stopped()``."""
        if self.link is not None:
            for frame in self.link.receive():
                if stopped():
                    break
                handle(frame)
            return
        socket = self.socket
        while not stopped():
            try:
                frame = socket.recv(_NOBLOCK)
            except zmq.Again:
                break
            if self._socket_state.more():  # a data message: its head, then its parts
                frame = (frame, *recv_parts(socket))
            handle(frame)
            # whether more waits: a recv that raises zmq.Again costs several times more
            if not self._socket_state.events() & _POLLIN:
                break

    def lost(self, events):
        """Why the connection is gone (after the frames the driver sent before), or None."""
        link = self.link
        if link is not None:
            if link.error is not None:
                return f"the driver broke the link: {link.error}"
            return LOST if link.closed_by_peer else None
        return LOST if self._monitor is not None and self._monitor in events else None

    def close(self, linger):
        """Close, waiting up to ``linger`` milliseconds for output to leave; once."""
        if self._closed:
            return
        self._closed = True
        if self._monitor is not None:
            self.socket.disable_monitor()
            self._monitor.close(linger=0)
        if self.socket is not None:
            self._send_held_within(linger / 1000)
            self.socket.close(linger=linger)
        if self._context is not None:  # waits up to ``linger`` for output to leave
            self._context.term()
        if self.link is not None:
            try:
                self.link.flush_within(linger / 1000)
            except BrokenPipeError:
                pass  # the driver is gone: nobody to tell
            self.link.close()

    def _send_held_within(self, seconds):
        """Hand the socket what waits, waiting for room up to ``seconds`` in all."""
        deadline = time.monotonic() + seconds
        while self._held and not self._send_held():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if seconds > 0:  # else the driver is gone: nobody to tell
                    log.warning("%d messages for the driver dropped: it did not read them "
                                "within %g s", len(self._held), seconds)
                return
            self.socket.poll(remaining * 1000, zmq.POLLOUT)


def _send(socket, frame):
    """Send a frame, or a data message's frames (a tuple), without waiting."""
    if type(frame) is tuple:
        send_frames(socket, frame, zmq.NOBLOCK)
    else:
        socket.send(frame, zmq.NOBLOCK)
