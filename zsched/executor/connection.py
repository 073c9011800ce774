"""An executor's connection to its driver: a DEALER socket, or the pipe pair (``pipe_link``)
that a driver on the same host gave it. Only the thread that runs the loop uses it."""
import logging

import zmq

from .. import protocol as p
from ..socket_state import SocketState

log = logging.getLogger("zsched.executor")
_POLLIN = int(zmq.POLLIN)  # a plain int: an IntFlag & makes an enum
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
        self._closed = False

    def watch(self, poller):
        """Register with the loop's ``poller``: the driver's input, the loss of the
        connection, and room in the pipe while output waits."""
        self._poller = poller
        poller.register(self.key, zmq.POLLIN)
        if self.link is not None:  # its end of file ends this executor
            if self.link.wants_write:
                poller.register(self.link.write_fd, zmq.POLLOUT)
        else:
            # registered: from now on a lost connection to the driver ends this executor (the
            # driver has dropped it too: a reconnection would be a stranger to it)
            self._monitor = self.socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
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
        """Send ``msg``; False if the driver is gone. A socket the driver does not read
        from drops it, with a warning."""
        link = self.link
        if link is not None:
            waiting = link.wants_write
            try:
                link.send(p.encode(msg))
            except BrokenPipeError:
                return False
            if link.wants_write and not waiting and self._poller is not None:
                self._poller.register(link.write_fd, zmq.POLLOUT)  # until the pipe takes it
            return True
        try:
            self.socket.send(p.encode(msg), zmq.NOBLOCK)
        except zmq.Again:
            log.warning("could not send %s: the driver is not reading", type(msg).__name__)
        return True

    def flush(self, events):
        """Write the link's output if the pipe has room now; False if the driver is gone."""
        link = self.link
        if link is None or link.write_fd not in events:
            return True
        try:
            done = link.flush()
        except BrokenPipeError:
            return False
        if done:
            self._poller.unregister(link.write_fd)
        return True

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
                frame = socket.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
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
            self.socket.close(linger=linger)
        if self._context is not None:  # waits up to ``linger`` for output to leave
            self._context.term()
        if self.link is not None:
            try:
                self.link.flush_within(linger / 1000)
            except BrokenPipeError:
                pass  # the driver is gone: nobody to tell
            self.link.close()
