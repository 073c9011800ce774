"""A task's arguments as a client sends them: a plain pickle in the task's row when small;
else pickled with their large buffers out of band (``payload``), sent ahead of the task as
a PutData, which the driver keeps until the task ended.

``payload.quick_pickle`` is the path of tiny tasks; ``TaskData`` takes the others.
"""
from .. import payload as pl
from .. import protocol as p

_PART_MIN = pl.DATA_PART_MIN


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
