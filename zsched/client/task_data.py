"""A task's arguments as a client sends them: a plain pickle in the task's row when small;
else pickled with their large buffers out of band (``payload``), sent ahead of the task as
a PutData, which the driver keeps until the task ended.

``quick_pickle`` is the path of tiny tasks: one ``pickle.dumps``, which gives up as soon as
it meets a large buffer (no copy of it is made). ``TaskData`` takes the others.
"""
import pickle

from .. import payload as pl
from .. import protocol as p

_dumps = pickle.dumps
_PROTOCOL = pickle.HIGHEST_PROTOCOL
_PART_MIN = pl.DATA_PART_MIN


class _GoesApart(Exception):
    """A buffer large enough to travel apart."""


def _small_buffers_in_band(buffer):
    if buffer.raw().nbytes >= _PART_MIN:
        raise _GoesApart
    return True  # in band


def quick_pickle(value):
    """The pickle of ``value`` for a task's row, or None when ``TaskData`` must take it (it
    holds a large buffer, is large, or needs cloudpickle)."""
    try:
        data = _dumps(value, _PROTOCOL, buffer_callback=_small_buffers_in_band)
    except Exception:
        return None
    return data if len(data) < _PART_MIN else None


class TaskData:
    """The data of a client's tasks and broadcasts: their keys, and their PutData."""

    def __init__(self):
        self.new_key = pl.DataKeys()

    def payload(self, task_id, value):
        """``(row payload, size, put)`` for task ``task_id`` with arguments ``value``: the
        bytes of its row, the bytes it carries in all, and the PutData to send before it
        (None when all is in the row). Raises what pickling raises."""
        data, buffers, broadcasts = pl.dumps(value)
        size = len(data) + sum(buffer.nbytes for buffer in buffers)
        if not buffers and size < _PART_MIN:
            return (pl.reference(None, broadcasts, data) if broadcasts else data), size, None
        key = self.new_key()
        put = p.PutData(key, task_id, [data, *buffers])
        return pl.reference(key, broadcasts, None), size, put

    def broadcast(self, value):
        """``(put, size)``: the PutData of a broadcast value."""
        data, buffers, broadcasts = pl.dumps(value)
        if broadcasts:
            raise ValueError("a broadcast value cannot hold another broadcast")
        size = len(data) + sum(buffer.nbytes for buffer in buffers)
        return p.PutData(self.new_key(), -1, [data, *buffers]), size
