"""An executor's data: the large arguments of its tasks and the broadcast values they use,
fetched from the driver (GetData) and kept until used (arguments) or destroyed
(broadcasts).

Threads: the loop asks for the data of the tasks it is given as they arrive (``want``),
so it travels while earlier tasks run, and hands over each Data that comes
(``arrived``). Task threads wait for their task's data (``load``) and for broadcast
values (``broadcast_value``), which they may also ask for themselves: a broadcast met in
a closure, say. The loop sends what they asked for at its next turn (``take_asked``).
"""
import threading
from collections import deque

from .. import payload as pl
from ..errors import TaskFailed


class DataGone(TaskFailed):
    """The driver holds no data under a key a task needs."""


class ExecutorData:
    """The data of one executor, by key."""

    def __init__(self, wake_loop, timeout):
        self._wake_loop = wake_loop  # have the loop go round (a task thread asked for data)
        self.timeout = timeout       # how long a task waits for its data
        self._ready = threading.Condition()
        self._parts = {}             # key -> parts of a task's data, or DataGone
        self._values = {}            # key -> a broadcast's value, or DataGone
        self._loading = set()        # broadcast keys a task thread is unpickling
        self._asked = set()          # keys asked of the driver, not arrived yet
        self.to_ask = deque()        # keys task threads want asked (the loop checks it each turn)
        self._broadcasts = set()     # keys known to be broadcasts

    # ------------------------------------------------------------ the loop

    def want(self, payloads):
        """The keys to ask the driver for, for tasks with these reference payloads."""
        keys = []
        with self._ready:
            for payload in payloads:
                try:
                    key, broadcasts, _ = pl.read_reference(payload)
                except ValueError:
                    continue  # the task fails when it runs, saying why
                if key is not None:
                    keys.append(key)
                self._broadcasts.update(broadcasts)
                keys.extend(broadcasts)
            return self._new_keys(keys)

    def take_asked(self):
        """The keys task threads asked for since the last call, not asked yet."""
        with self._ready:
            keys = [self.to_ask.popleft() for _ in range(len(self.to_ask))]
            return self._new_keys(keys)

    def _new_keys(self, keys):
        new = [key for key in dict.fromkeys(keys) if key not in self._asked
               and key not in self._parts and key not in self._values]
        self._asked.update(new)
        return new

    def arrived(self, key, error, parts):
        """A Data from the driver: the parts under ``key``, or why there are none."""
        with self._ready:
            self._asked.discard(key)
            if key in self._broadcasts and key in self._values:
                return  # a second copy
            self._parts[key] = DataGone(f"data {key.hex()}: {error}") if error else parts
            self._ready.notify_all()

    def discard(self, payloads):
        """Drop the data of tasks that will not run here (given back, killed before they
        started), from their payloads: it may have come with their launch."""
        with self._ready:
            for payload in payloads:
                if pl.is_reference(payload):
                    try:
                        self._parts.pop(pl.read_reference(payload)[0], None)
                    except ValueError:
                        pass

    def forget(self, keys):
        """Drop these broadcast values (destroyed)."""
        with self._ready:
            for key in keys:
                self._values.pop(key, None)
                self._parts.pop(key, None)
                self._broadcasts.discard(key)

    def held(self):
        """How many data and broadcast values are held."""
        return len(self._parts) + len(self._values)

    # ------------------------------------------------------------ task threads

    def load(self, payload):
        """The value of a task's reference payload, once its data arrived."""
        key, broadcasts, data = pl.read_reference(payload)
        parts = ()
        if key is not None:
            parts = self._wait_for(key)
            data, parts = parts[0], parts[1:]
        return pl.loads(data, parts)

    def broadcast_value(self, key):
        """The value of the broadcast under ``key``, unpickled once on this executor."""
        with self._ready:
            self._broadcasts.add(key)
            while True:
                value = self._values.get(key, self)
                if value is not self:
                    if type(value) is DataGone:
                        raise value
                    return value
                if key not in self._loading:
                    break
                self._ready.wait()
            self._loading.add(key)
        try:
            value = self._load_broadcast(key)
        finally:
            with self._ready:
                self._loading.discard(key)
                self._ready.notify_all()
        with self._ready:
            if key in self._broadcasts:  # not destroyed meanwhile
                self._values[key] = value
                self._parts.pop(key, None)
        if type(value) is DataGone:
            raise value
        return value

    def _load_broadcast(self, key):
        """The value of a broadcast's root: its parts, or its chunks joined; or DataGone."""
        try:
            parts = self._wait_for(key, keep=True)
            chunk_keys, counts = pl.read_manifest(parts[0])
            buffers = parts[2:]
            if chunk_keys:
                self._ask(chunk_keys)
                buffers = pl.joined([self._wait_for(chunk)[0] for chunk in chunk_keys], counts)
            return pl.loads(parts[1], buffers)
        except DataGone as exc:
            return exc

    def _ask(self, keys):
        """Have the loop ask the driver for these keys, if nobody has."""
        with self._ready:
            self.to_ask.extend(keys)
        self._wake_loop()

    def _wait_for(self, key, keep=False):
        """The parts under ``key``, asked of the driver if nobody has; a task's are taken."""
        with self._ready:
            parts = self._parts.get(key)
            if parts is None and key not in self._asked:
                self.to_ask.append(key)
                self._wake_loop()
            if not self._ready.wait_for(lambda: key in self._parts, self.timeout):
                raise DataGone(f"data {key.hex()} did not arrive within {self.timeout:g} s")
            parts = self._parts[key] if keep else self._parts.pop(key)
        if type(parts) is DataGone:
            raise parts
        return parts
