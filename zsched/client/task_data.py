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

    def broadcast(self, value, chunk):
        """``(puts, size)``: the PutData of a broadcast value, its root last. The root's
        parts are the manifest (``payload.manifest``), the in-band pickle, then the
        buffers; a value of more than ``chunk`` bytes has its buffers cut into chunks,
        each a PutData of its own, so that no message passes the size limit."""
        data, buffers, broadcasts = pl.dumps(value)
        if broadcasts:
            raise ValueError("a broadcast value cannot hold another broadcast")
        size = len(data) + sum(buffer.nbytes for buffer in buffers)
        puts = []
        if size > chunk:
            counts = []
            for buffer in buffers:
                pieces = pl.cut(buffer, chunk)
                counts.append(len(pieces))
                puts.extend(p.PutData(self.new_key(), -1, [piece]) for piece in pieces)
            manifest = pl.manifest([put.key for put in puts], counts)
            buffers = []
        else:
            manifest = pl.manifest([], [])
        puts.append(p.PutData(self.new_key(), -1, [manifest, data, *buffers]))
        return puts, size
