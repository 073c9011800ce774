"""A task's arguments as a client sends them: a plain pickle in the task's row when small;
else pickled with their large buffers out of band (``payload``), sent ahead of the task as
a PutData, which the driver keeps until the task ended.

``payload.quick_pickle`` is the path of tiny tasks; ``TaskData`` takes the others.
"""
import concurrent.futures

from .. import payload as pl
from .. import protocol as p
from ..data_frames import part_size
from ..errors import DataRefused, MessageTooLarge

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
        each a PutData of its own, so that no message passes the size limit. Raises
        ``MessageTooLarge`` when the in-band pickle alone passes it."""
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
        if sum(map(part_size, puts[-1].parts)) > chunk:
            raise MessageTooLarge("the broadcast value's pickle", size, chunk)
        return puts, size


def stored_or_refused(stored, wait, size):
    """None once the driver took every part of a broadcast value (``stored``: a future of
    each, done with "" or why it refused) within ``wait`` seconds; else the error to raise."""
    done, _ = concurrent.futures.wait(stored, wait)
    errors = [future.result() for future in done if future.result()]
    if errors:
        return DataRefused(f"the broadcast value ({size} bytes) was refused: {errors[0]}")
    if len(done) < len(stored):
        return TimeoutError(f"the driver did not take the broadcast value within {wait:g} s")
    return None
