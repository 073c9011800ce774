"""The functions a client has sent that the driver holds for it, and when to release them.

A client sends each function once; the driver keeps it, and each executor keeps it once
it has run a task of it. A client that makes a new function per task (a lambda or a
``functools.partial`` around each task's data) would otherwise have the driver and every
executor keep all of them, with the data they captured, for as long as it stays
connected. So once the held functions pass a count or a size, the client releases the
least recently used ones (a ForgetFunctions message): the driver drops those no other
client sent, and tells the executors to drop them too. Tasks already sent keep theirs
(the driver's and the executor's copies of a task hold its function), and the client
sends a released function again with the next task that needs it.

Only the thread that talks to the driver uses a ``HeldFunctions``.
"""
import time
from collections import OrderedDict

MAX_COUNT = 4096          # held functions, per client
MAX_BYTES = 64 << 20      # their pickles, per client
RAISED_SECONDS = 1.0      # see HeldFunctions._raised_until


class HeldFunctions:
    """digest -> size of the pickled functions the driver holds for this client, least
    recently sent first."""

    def __init__(self, max_count=None, max_bytes=None):
        self._sizes = OrderedDict()
        self.bytes = 0
        self.max_count = MAX_COUNT if max_count is None else max_count
        self.max_bytes = MAX_BYTES if max_bytes is None else max_bytes
        # raised above the maxima for a second when functions that may not be released yet
        # (``pinned``) keep them exceeded, so that each turn does not look them all over
        self._count_limit, self._bytes_limit = self.max_count, self.max_bytes
        self._raised_until = None

    def __contains__(self, digest):
        return digest in self._sizes

    def __len__(self):
        return len(self._sizes)

    def add(self, digest, size):
        """The driver holds ``digest`` now (sent with its pickle of ``size`` bytes)."""
        if digest not in self._sizes:
            self._sizes[digest] = size
            self.bytes += size

    def used(self, digest):
        """A task of ``digest`` (held) was sent."""
        self._sizes.move_to_end(digest)

    def over_limit(self):
        if self._raised_until is not None and time.monotonic() >= self._raised_until:
            self._count_limit, self._bytes_limit = self.max_count, self.max_bytes
            self._raised_until = None
        return len(self._sizes) > self._count_limit or self.bytes > self._bytes_limit

    def release(self, pinned):
        """Forget the least recently used functions, none in ``pinned`` and not the most
        recently used (a loop of submits of one large function sends it once), until at
        most half the maxima are held; the digests forgotten, for a ForgetFunctions."""
        sizes = self._sizes
        released = []
        for digest in list(sizes)[:-1]:
            if len(sizes) <= self.max_count // 2 and self.bytes <= self.max_bytes // 2:
                break
            if digest in pinned:
                continue
            self.bytes -= sizes.pop(digest)
            released.append(digest)
        latest = sizes[next(reversed(sizes))] if sizes else 0
        if len(sizes) - 1 > self.max_count or self.bytes - latest > self.max_bytes:
            # pinned functions alone exceed a maximum (the latest is let go at the next use
            # of another: not a reason to wait)
            self._count_limit = max(self.max_count, 2 * len(sizes))
            self._bytes_limit = max(self.max_bytes, 2 * self.bytes)
            self._raised_until = time.monotonic() + RAISED_SECONDS
        return released
