"""The data the driver keeps for its clients: the large arguments of their tasks and their
broadcast values (``PutData``), by key, sent to each executor that asks (``GetData``).

The parts are kept as they arrived, views of the frames read, and sent on as they are:
the driver never copies, decodes or unpickles them. They are counted against
``driver_data_limit``; past it a PutData is refused, and its client hears why
(``DataStored``). A client's data goes when it says so (``ForgetData``: its task ended, or
it destroyed a broadcast) or when the client goes. Executors drop a broadcast value when
the driver tells them (``ForgetData``).
"""
import logging

from .. import protocol as p
from ..data_frames import REF_BYTE, part_size, read_reference
from .speculation import Copies

log = logging.getLogger(__package__)


class _Entry:
    __slots__ = ("owner", "parts", "size", "broadcast")

    def __init__(self, owner, parts, size, broadcast):
        self.owner, self.parts, self.size, self.broadcast = owner, parts, size, broadcast


class DataStore:
    """The clients' data, by key. ``send(rid, msg)`` sends to a peer; ``clients`` and
    ``executors`` map the routing ids of connected clients and registered executors (only
    they may put and get data) to their records; ``in_process(rid)`` tells a client in the
    driver's process (it has no results window)."""

    def __init__(self, limit, send, clients, executors, in_process):
        self.limit = limit
        self._in_process = in_process  # whether a client is in the driver's process
        self.size = 0
        self.sent = 0  # bytes sent to executors, in all
        self.task_entries = 0  # entries of tasks' arguments (not broadcasts)
        self._send = send
        self._clients = clients
        self._executors = executors
        self._entries = {}   # key -> _Entry
        self._owned = {}     # client routing id -> its keys

    def on_put(self, rid, msg):
        """A client's PutData: keep it, or refuse it past the limit."""
        if rid not in self._clients:
            return  # a stranger's: no session, nothing kept
        size = sum(map(part_size, msg.parts))
        broadcast = msg.task_id < 0
        error = ""
        if msg.key in self._entries:
            error = "a key already in use"
        elif self.size + size > self.limit:
            error = (f"the driver holds {self.size} bytes of data; {size} more would pass "
                     f"driver_data_limit ({self.limit} bytes)")
        if error:
            log.warning("data from client %s refused: %s", rid.hex(), error)
            self._send(rid, p.DataStored(msg.key, msg.task_id, error))
            return
        self._entries[msg.key] = _Entry(rid, msg.parts, size, broadcast)
        self._owned.setdefault(rid, set()).add(msg.key)
        self.size += size
        self.task_entries += not broadcast
        if broadcast:
            self._send(rid, p.DataStored(msg.key, msg.task_id, ""))

    def on_forget(self, rid, msg):
        """A client no longer needs this data of its own."""
        owned = self._owned.get(rid, ())
        self._drop([key for key in msg.keys if key in owned])

    def on_get(self, rid, msg):
        """An executor asks for data: a Data for each key."""
        if rid not in self._executors:
            return
        entries = self._entries
        for key in msg.keys:
            entry = entries.get(key)
            if entry is None:
                reply = p.Data(key, "the driver holds no such data (its client forgot it, "
                                    "destroyed it or left)", [])
            else:
                reply = p.Data(key, "", entry.parts)
                self.sent += entry.size
            if not self._send(rid, reply, quiet=True):
                return

    def on_result(self, rid, msg):
        """An executor's ResultData: passed on to the task's client, unless the attempt is
        no longer the task's (then its status row is stale too)."""
        executor = self._executors.get(rid)
        task = executor.running.get(msg.task_id) if executor is not None else None
        if task is None or task.attempt != msg.attempt or task.cancelled:
            return
        client = task.client
        if type(client) is Copies:  # a speculative copy's result: for its task's client
            client = client.client
        if self._send(client.routing_id, p.TaskData(task.client_task_id, msg.key, msg.parts),
                      quiet=True) and not self._in_process(client.routing_id):
            client.in_flight_size += msg.size  # in its results window, until it says it took it

    def push_for_launch(self, executor, rows):
        """Send ``executor`` the data of the tasks it is about to be launched (LaunchTasks
        rows): it arrives with them, not a round trip later. The reference is read, never
        the pickle."""
        entries = self._entries
        for row in rows:
            payload = row[3]
            if payload[:1] != REF_BYTE:
                continue
            try:
                key = read_reference(payload)[0]
            except ValueError:
                continue  # the task fails on the executor, saying why
            entry = entries.get(key)
            if entry is not None:
                self.sent += entry.size
                self._send(executor.routing_id, p.Data(key, "", entry.parts), quiet=True)

    def drop_client(self, rid):
        """The client ``rid`` left: its data goes."""
        self._drop(list(self._owned.get(rid, ())))

    def _drop(self, keys):
        destroyed = []
        for key in keys:
            entry = self._entries.pop(key, None)
            if entry is None:
                continue
            self.size -= entry.size
            self.task_entries -= not entry.broadcast
            owned = self._owned.get(entry.owner)
            owned.discard(key)
            if not owned:
                del self._owned[entry.owner]
            if entry.broadcast:
                destroyed.append(key)
        if destroyed:
            for executor in list(self._executors):
                self._send(executor, p.ForgetData(destroyed), quiet=True)

    def status(self):
        """What the driver holds: entries, broadcasts, bytes, and bytes sent."""
        entries = self._entries.values()
        return {"entries": len(self._entries),
                "broadcasts": sum(1 for entry in entries if entry.broadcast),
                "bytes": self.size, "limit": self.limit, "bytes_sent": self.sent}
