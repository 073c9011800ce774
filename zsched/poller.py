"""A poller over ZeroMQ sockets and descriptors, with ``zmq.Poller``'s interface, that
costs fewer system calls per turn.

``zmq.Poller`` calls ``zmq_poll``, which polls every descriptor twice (once without
waiting, then with the timeout) and reads every socket's ZMQ_EVENTS after each poll: two
system calls per socket each time, and more Python per call. This poller reads each
socket's ZMQ_EVENTS once before it waits, and then only those whose descriptor fired.

A socket's descriptor (ZMQ_FD) signals only commands that arrive while nothing is pending,
and any operation on the socket may take such a command: its ZMQ_EVENTS, read before
every wait, is what says whether a message waits. After that read, whatever arrives
signals the descriptor, so the wait ends for it.
"""
import select
import time

import zmq

from .socket_state import SocketState

POLLIN = int(zmq.POLLIN)  # plain ints: an IntFlag & makes an enum
POLLOUT = int(zmq.POLLOUT)
POLLERR = int(zmq.POLLERR)
_FD_EVENTS = {POLLIN: select.POLLIN, POLLOUT: select.POLLOUT,
              POLLIN | POLLOUT: select.POLLIN | select.POLLOUT}


class Poller:
    """``register``, ``modify``, ``unregister`` and ``poll`` as ``zmq.Poller``'s: ``poll``
    returns the (socket or descriptor, events) that are ready, in the order they were
    registered. A descriptor closed or hung up is ready with ``POLLERR``, as with
    ``zmq_poll``. Used by one thread, as the sockets it polls."""

    def __init__(self):
        self._poll = select.poll()
        self._order = {}     # socket or descriptor -> its registration's number
        self._sockets = {}   # zmq socket -> [SocketState, events wanted]
        self._by_fd = {}     # polled descriptor -> what it stands for (a socket, or itself)
        self._fd_of = {}     # socket or descriptor -> its polled descriptor
        self._count = 0

    def register(self, what, flags=POLLIN | POLLOUT, *, only_when_ready=False):
        """Watch ``what`` (a zmq socket, or a descriptor or an object with ``fileno()``)
        for ``flags``; again, to change them. No flags: stop watching it.

        ``only_when_ready``: the socket is used only after a poll said it was ready (a
        monitor's, or one read by its handler alone). Its ZMQ_EVENTS is then read only
        after such a poll, or when its descriptor fired, not before every wait."""
        if not flags:
            if what in self._order:
                self.unregister(what)
            return
        flags = int(flags) & (POLLIN | POLLOUT)
        if what not in self._order:
            self._count += 1
            self._order[what] = self._count
        if isinstance(what, zmq.Socket):
            entry = self._sockets.get(what)
            if entry is None:
                # [its state, the events wanted, read ZMQ_EVENTS before waiting, always]
                self._sockets[what] = [SocketState(what), flags, True, not only_when_ready]
                fd = what.getsockopt(zmq.FD)
                self._fd_of[what] = fd
                self._by_fd[fd] = what
                self._poll.register(fd, select.POLLIN)  # the socket's commands
            else:
                entry[1] = flags
            return
        fd = what if isinstance(what, int) else what.fileno()
        self._fd_of[what] = fd
        self._by_fd[fd] = what
        self._poll.register(fd, _FD_EVENTS.get(flags, 0))

    modify = register

    def unregister(self, what):
        """Stop watching ``what``; KeyError if it is not watched."""
        del self._order[what]
        self._sockets.pop(what, None)
        fd = self._fd_of.pop(what)
        if self._by_fd.get(fd) is what:
            del self._by_fd[fd]
            self._poll.unregister(fd)

    def poll(self, timeout=None, release=None):
        """What is ready, waiting up to ``timeout`` milliseconds for it (None or negative:
        until something is). ``release``, a lock the caller holds, is let go while it
        waits: another thread may then use the sockets, and must read their ZMQ_EVENTS
        after it did (see ``zsched.client.transport``)."""
        if timeout is None or timeout < 0:
            timeout = None
            deadline = None
        elif timeout > 0:
            deadline = time.monotonic() + timeout / 1000
        while True:
            ready = self._ready(timeout, release)
            if ready or timeout == 0:
                return ready
            if deadline is not None:  # a command that brought no event: wait on
                timeout = (deadline - time.monotonic()) * 1000
                if timeout <= 0:
                    return ready

    def _ready(self, timeout, release):
        found = {}
        sockets = self._sockets
        for sock, entry in sockets.items():
            if entry[2]:
                events = entry[0].events() & entry[1]
                if events:
                    found[sock] = events
                else:
                    entry[2] = entry[3]  # until it is ready again, its descriptor tells
        if found or timeout == 0 or release is None:
            fired = self._poll.poll(0 if found else timeout)
        else:
            release.release()
            try:
                fired = self._poll.poll(timeout)
            finally:
                release.acquire()
        by_fd = self._by_fd
        for fd, revents in fired:
            what = by_fd.get(fd)
            if what is None or what in found:
                continue
            entry = sockets.get(what)
            if entry is not None:
                events = entry[0].events() & entry[1]
                if events:
                    entry[2] = True  # used once reported: read before the next wait
            else:
                events = ((POLLIN if revents & select.POLLIN else 0)
                          | (POLLOUT if revents & select.POLLOUT else 0)
                          | (POLLERR if revents & ~(select.POLLIN | select.POLLOUT | select.POLLPRI)
                             else 0))
            if events:
                found[what] = events
        if len(found) < 2:
            return list(found.items())
        order = self._order
        return sorted(found.items(), key=lambda item: order[item[0]])
