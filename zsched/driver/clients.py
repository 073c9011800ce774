"""The driver's clients: their sessions by routing id, and the function table.

A function's life here: a client sends it (``functions``, as a FunctionBlob); once no
connected client holds it, it leaves ``functions`` (a new task of it brings it again) but
the tasks of it still queued or running hold it (``Task.function_blob``), and the executors
keep their copy for them; once no task holds it, the executors are told to drop it. Without
this an executor would keep every function it was ever sent, with the data it captured,
for as long as it lives."""
import logging
import weakref

from .. import protocol as p
from ..scheduler import ClientData

log = logging.getLogger("zsched.driver")


class ClientSessions:
    """Connected clients (``by_rid``: routing id -> ClientData) and the functions they sent
    (``functions``: digest -> FunctionBlob, shared with the scheduler)."""

    def __init__(self):
        self.by_rid = {}
        self.functions = {}
        self._unowned = {}   # digest -> weakref to the FunctionBlob no client holds
        self._unused = []    # (digest, weakref) of those no task holds any more

    def get(self, rid):
        return self.by_rid.get(rid)

    def connect(self, rid, pid):
        """The session of client ``rid``, made at its first hello."""
        client = self.by_rid.get(rid)
        if client is None:
            client = self.by_rid[rid] = ClientData(rid, pid)
            log.info("client %s (pid %d) connected", rid.hex(), pid)
        return client

    def disconnect(self, rid):
        """Forget client ``rid``: its ClientData, or None. Its tasks are the scheduler's to
        drop, then its functions to ``release``."""
        return self.by_rid.pop(rid, None)

    def add_functions(self, client, functions):
        """Hold the functions ``client`` sent (digest -> cloudpickled blob) for it; the count
        of those refused, sent under a digest that is not theirs."""
        known = self.functions
        refused = 0
        for digest, blob in functions.items():
            if digest not in known:  # one held is kept: no client replaces another's
                if p.function_digest(blob) != digest:
                    refused += 1
                    continue
                known[digest] = p.FunctionBlob(blob)
                self._unowned.pop(digest, None)
            client.functions.add(digest)
        return refused

    def forget_functions(self, client, digests):
        """``client`` no longer needs these functions (it sends one again with the next task
        that does)."""
        released = [digest for digest in digests if digest in client.functions]
        client.functions.difference_update(released)
        self.release(released)

    def release(self, digests):
        """No connected client holds these functions (unless another client sent it too)."""
        clients = self.by_rid.values()
        for digest in list(digests):
            if any(digest in client.functions for client in clients):
                continue
            blob = self.functions.pop(digest, None)
            if blob is not None:
                self._unowned[digest] = weakref.ref(
                    blob, lambda ref, digest=digest: self._unused.append((digest, ref)))
            blob = None  # with no task holding it, the callback runs here

    def has_unused(self):
        return bool(self._unused)

    def take_unused(self):
        """The digests of the functions that neither a client nor a task holds any more (not
        those a client has sent again meanwhile), each once."""
        unused, self._unused = self._unused, []
        gone = set()
        for digest, ref in unused:
            if self._unowned.get(digest) is ref:
                del self._unowned[digest]
                gone.add(digest)
        return gone
