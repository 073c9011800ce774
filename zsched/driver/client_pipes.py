"""The Unix socket through which the program that started this driver hands it its clients.

``LocalCluster`` starts ``bin/driver --client-pipes FD`` with one end of a Unix socket. For
each ``client()`` it sends a byte with the driver's end of a new pipe pair; the driver
talks to that client over the pair as to any other peer (see ``peers.LinkPeer``)."""
import logging
import os
import socket

from .peers import Role

log = logging.getLogger("zsched.driver")


class ClientPipes:
    """The Unix socket of ``--client-pipes``: each message on it brings a client's pipes."""

    def __init__(self, fd):
        os.set_inheritable(fd, False)  # no process this driver starts holds it
        self.socket = socket.socket(fileno=fd)
        self._loop = self._peers = self._closed = None

    def watch(self, loop, peers, closed):
        """Have ``loop`` read the socket when something arrives; pairs become ``peers``' links,
        and ``closed()`` is called once the socket has closed."""
        self._loop, self._peers, self._closed = loop, peers, closed
        self.socket.setblocking(False)
        loop.watch(self.socket.fileno(), self.open)

    def open(self):
        """Adopt the pipe pairs that came, one per message (a byte with two descriptors);
        stop watching the socket at its end."""
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self.socket, 1, 2)
            except BlockingIOError:
                return
            except OSError as exc:
                data, fds = b"", []
                log.warning("stopped watching the client-pipes socket: %s", exc)
            if len(fds) == 2:
                self._peers.adopt_link("a client of the program that started this driver", *fds, Role.CLIENT)
                continue
            for fd in fds:
                os.close(fd)
            if data:
                log.warning("ignored a message on the client-pipes socket without a pipe pair")
                continue
            self._loop.unwatch(self.socket.fileno())  # its end: no more clients come this way
            self.close()
            self._closed()
            return

    def close(self):
        if self.socket is not None:
            self.socket.close()
            self.socket = None
