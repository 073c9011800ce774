"""Broadcast variables, after Spark's ``SparkContext.broadcast``: a value sent once to each
executor that uses it, whatever the number of its tasks that do.

``Client.broadcast(value)`` pickles the value once, has the driver keep it (counted against
``driver_data_limit``), and returns a ``Broadcast``. Tasks receive the handle as an
argument or in a closure; it pickles as its key alone. In a task, ``handle.value`` is the
value: the executor fetches it from the driver at the first use, unpickles it once, and
keeps it for its other tasks, until ``destroy()``. An executor that joins later, or
replaces a lost one, fetches it the same way.
"""
import threading
import weakref

from .payload import note_broadcast

_local = weakref.WeakValueDictionary()  # key -> this process's Broadcast made by a client
_lock = threading.Lock()
_fetch = None  # an executor's ``ExecutorData.broadcast_value``, where tasks run


def serve_values(fetch):
    """Have ``fetch(key)`` give the values of broadcasts unpickled in this process (an
    executor's)."""
    global _fetch
    _fetch = fetch


class Broadcast:
    """A broadcast value (see the module). ``value`` is the value; ``destroy()`` frees it
    on the driver and the executors, after which neither the handle nor a task that gets
    it can use it."""

    __slots__ = ("key", "_value", "_destroy", "__weakref__")

    def __init__(self, key, value=None, destroy=None):
        self.key = key
        self._value = value
        self._destroy = destroy  # the client's: None in a task, or once destroyed

    @property
    def value(self):
        if self._destroy is not None:
            return self._value
        local = _local.get(self.key)
        if local is not None and local is not self:
            return local.value
        if local is self:
            raise ValueError(f"broadcast {self.key.hex()} was destroyed")
        if _fetch is None:
            raise ValueError(f"broadcast {self.key.hex()}: its value is known only to its "
                             "client and in tasks")
        return _fetch(self.key)

    def destroy(self):
        """Free the value on the driver and the executors; using it afterwards is an error."""
        destroy, self._destroy, self._value = self._destroy, None, None
        if destroy is not None:
            destroy(self.key)

    def __reduce__(self):
        local = _local.get(self.key)
        if local is not None and local._destroy is None:
            raise ValueError(f"broadcast {self.key.hex()} was destroyed: a task cannot use it")
        note_broadcast(self.key)
        return _broadcast_ref, (self.key,)

    def __repr__(self):
        return f"Broadcast({self.key.hex()})"


def made_here(broadcast):
    """Remember a client's new broadcast: a copy unpickled in this process is it."""
    with _lock:
        _local[broadcast.key] = broadcast
    return broadcast


def _broadcast_ref(key):
    local = _local.get(key)
    return local if local is not None else Broadcast(key)
