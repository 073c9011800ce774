"""The dashboard's door keeper: a connection gets a thread only once its request has come.

One thread reads the requests of every open connection without blocking, each within
``HEADER_DEADLINE`` seconds and ``HEADER_LIMIT`` bytes, and keeps at most
``MAX_WAITING`` connections open (the oldest goes first). A request whose headers are in
goes to one of ``WORKERS`` threads. So idle or slow connections cost a socket each, never a
thread, and the page and ``/metrics`` still answer while hundreds of them are open.
"""
import collections
import logging
import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger("zsched.dashboard")

HEADER_DEADLINE = 10.0   # seconds for a connection to send its request line and headers
HEADER_LIMIT = 16 << 10  # bytes of them at most
MAX_WAITING = 1024       # connections open before their request is in
WORKERS = 8              # threads answering complete requests
_END_OF_HEADERS = b"\r\n\r\n"


class RequestGate:
    """Reads requests on connections given by ``admit``; hands ``handle(sock, head,
    address)`` each complete one, in a worker thread. ``close`` stops it and closes what
    is open."""

    def __init__(self, handle, clock=time.monotonic):
        self._handle = handle
        self._clock = clock
        self._selector = selectors.DefaultSelector()
        self._waiting = collections.OrderedDict()  # socket -> [deadline, bytes read, address]
        self._arrivals = collections.deque()
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._selector.register(self._wake_read, selectors.EVENT_READ)
        self._workers = ThreadPoolExecutor(WORKERS, thread_name_prefix="zsched-dashboard")
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="zsched-dashboard-gate",
                                        daemon=True)
        self._thread.start()

    def admit(self, sock, address):
        """A new connection (from the accepting thread)."""
        self._arrivals.append((sock, address))
        try:
            self._wake_write.send(b"x")
        except OSError:
            _close(sock)  # closed meanwhile

    def close(self):
        self._closed = True
        try:
            self._wake_write.send(b"x")
        except OSError:
            pass
        self._thread.join()
        self._workers.shutdown(wait=True)

    def _run(self):
        try:
            while not self._closed:
                self._serve_once()
        finally:
            for sock in list(self._waiting) + [sock for sock, _ in self._arrivals]:
                _close(sock)
            self._selector.close()
            self._wake_read.close()
            self._wake_write.close()

    def _serve_once(self):
        timeout = None
        if self._waiting:
            first_deadline = next(iter(self._waiting.values()))[0]
            timeout = max(0.0, first_deadline - self._clock())
        for key, _ in self._selector.select(timeout):
            if key.fileobj is self._wake_read:
                try:
                    self._wake_read.recv(4096)
                except BlockingIOError:
                    pass
            else:
                self._read(key.fileobj)
        self._take_arrivals()
        self._drop_late()

    def _take_arrivals(self):
        while self._arrivals:
            sock, address = self._arrivals.popleft()
            if len(self._waiting) >= MAX_WAITING:
                oldest = next(iter(self._waiting))
                self._drop(oldest)
            sock.setblocking(False)
            self._waiting[sock] = [self._clock() + HEADER_DEADLINE, b"", address]
            self._selector.register(sock, selectors.EVENT_READ)

    def _read(self, sock):
        entry = self._waiting[sock]
        try:
            data = sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the viewer went away
            self._drop(sock)
            return
        entry[1] += data
        if _END_OF_HEADERS in entry[1] or len(entry[1]) > HEADER_LIMIT:
            self._selector.unregister(sock)
            del self._waiting[sock]
            sock.setblocking(True)
            self._workers.submit(self._handle, sock, entry[1], entry[2])

    def _drop_late(self):
        now = self._clock()
        late = [sock for sock, entry in self._waiting.items() if entry[0] <= now]
        for sock in late:
            self._drop(sock)

    def _drop(self, sock):
        self._selector.unregister(sock)
        del self._waiting[sock]
        _close(sock)


def _close(sock):
    try:
        sock.close()
    except OSError:
        pass
