"""Pure-Python twin of ``_wire.pyx``: the frame readers and writers of the per-task messages.

- ``read_submit_tasks`` and ``read_status_updates`` read and check the frames of the
  per-task messages the driver receives (``protocol.decode`` calls them), into a
  ``SubmitRows`` or a ``StatusRows``; the compiled module leaves the rows in the frame.
- ``launch_frames`` writes one launch's LaunchTasks frames, cut at a size limit, each with
  the functions its tasks need; ``ResultRows`` queues a client's results and writes its
  TaskResults frames. Each frame is byte for byte what ``protocol.encode`` makes.
- ``rows_have_types`` is the check ``protocol`` makes of every task row a message carries
  (SubmitTasks, LaunchTasks, StatusUpdates, TaskResults), in every process.
- ``batch_tasks`` splits task rows at a size limit with the functions each batch needs:
  for LaunchTasks here, for SubmitTasks in the client. It has no compiled twin: ``wire``
  exports it under both implementations, and ``protocol`` from there.
"""
import ctypes
from itertools import chain
from operator import itemgetter

import msgpack


class ResultRows:
    """A client's results waiting to be sent (``ClientData.results``): TaskResults rows
    ``[client task id, state, payload]``, in ``rows`` (a list kept out of the cyclic
    collector: a wake-up may leave a hundred thousand there). The compiled module writes
    them as msgpack as they come instead; both make the same frames."""

    __slots__ = ("rows",)

    def __init__(self):
        self.rows = _untracked_list()

    def add(self, client_task_id, state, payload):
        """Queue the row ``[client task id, state, payload]``."""
        self.rows.append([client_task_id, state, payload])

    def __len__(self):
        return len(self.rows)

    def payload_size(self):
        """The bytes of the payloads waiting, in all."""
        return sum(len(row[2]) for row in self.rows)

    def take_frames(self, header, limit, max_rows):
        """The rows waiting, in order, as TaskResults frames (``header`` then the body
        ``[rows]``): the payloads of a frame add up to at most ``limit`` bytes (a larger
        one goes alone), at most ``max_rows`` rows each. None wait afterwards."""
        if max_rows < 1:
            raise ValueError("max_rows must be at least 1")
        rows = self.take_rows()
        frames = []
        batch, size = [], 0
        for row in rows:
            row_size = len(row[2])
            if batch and (size + row_size > limit or len(batch) == max_rows):
                frames.append(header + _pack([batch]))
                batch, size = [], 0
            batch.append(row)
            size += row_size
        if batch:
            frames.append(header + _pack([batch]))
        return frames

    def take_rows(self):
        """The rows waiting (for a client in the driver's process); none wait afterwards."""
        rows = self.rows
        self.rows = _untracked_list()
        return rows


_GC_UNTRACK = ctypes.pythonapi.PyObject_GC_UnTrack  # called holding the GIL
_GC_UNTRACK.argtypes, _GC_UNTRACK.restype = (ctypes.py_object,), None


def _untracked_list():
    """An empty list out of the cyclic collector: the rows hold ints and bytes, no cycle."""
    rows = []
    _GC_UNTRACK(rows)
    return rows


def launch_frames(header, rows, functions, known, limit):
    """The LaunchTasks frames of ``rows``, ``[task id, attempt, function digest, pickled
    arguments]`` each, to one executor: ``header`` (the frame's version and type bytes), then
    the msgpack body ``[functions, rows]``. The rows' payloads and the functions of a frame
    add up to at most ``limit`` bytes (a single larger row goes alone), and each frame
    carries the functions (``{digest: blob}`` out of ``functions``) its tasks need and the
    executor does not hold yet (``known``, its digests, is updated)."""
    needed = {digest: functions[digest] for digest in dict.fromkeys(map(itemgetter(2), rows))
              if digest not in known}
    if rows and sum(map(len, map(itemgetter(3), rows))) + sum(map(len, needed.values())) <= limit:
        known.update(needed)  # the usual case: one frame, sized in C
        return [header + _pack([needed, rows])]
    return [header + _pack([needed, batch])
            for needed, batch in batch_tasks(rows, 2, 3, functions, known, limit)]


def batch_tasks(rows, digest_index, payload_index, functions, known, limit):
    """Split task rows like ``protocol.batch_rows``; each batch comes with the functions
    (``{digest: blob}`` out of ``functions``) that its tasks need and the receiver does not
    hold yet. ``known``, the receiver's digests, is updated as batches are yielded."""
    batch, needed, size = [], {}, 0
    for row in rows:
        digest = row[digest_index]
        new = digest not in known and digest not in needed
        row_size = len(row[payload_index]) + (len(functions[digest]) if new else 0)
        if batch and size + row_size > limit:
            yield needed, batch
            known.update(needed)
            batch, needed, size = [], {}, 0
            new = digest not in known
            row_size = len(row[payload_index]) + (len(functions[digest]) if new else 0)
        if new:
            needed[digest] = functions[digest]
        batch.append(row)
        size += row_size
    if batch:
        yield needed, batch
        known.update(needed)


class SubmitRows(list):
    """The rows of a SubmitTasks frame, ``[client task id, function digest, pickled
    arguments, retries]`` each, as ``read_submit_tasks`` decoded and checked them (the
    compiled path reads them in place instead)."""

    __slots__ = ()


def read_submit_tasks(frame, start):
    """``(functions, rows)`` of the SubmitTasks body at ``frame[start:]``, every field
    checked (``functions``: a dict, digest -> blob; ``rows``: a ``SubmitRows``); ValueError
    says what is wrong."""
    functions, tasks = _read_body(frame, start, 2)
    if type(functions) is not dict or not all(
            type(key) is bytes and type(value) is bytes for key, value in functions.items()):
        raise ValueError("field functions has the wrong type")
    if not rows_have_types(tasks, (int, bytes, bytes, int)):
        raise ValueError("field tasks has the wrong type")
    return functions, SubmitRows(tasks)


def _read_body(frame, start, n_fields):
    """The fields of the msgpack body at ``frame[start:]``: ValueError unless they are an
    array of ``n_fields``."""
    try:
        body = msgpack.unpackb(memoryview(frame)[start:], raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on junk
        raise ValueError(f"undecodable body ({exc})") from None
    if type(body) is not list or len(body) != n_fields:
        raise ValueError(f"expected {n_fields} fields")
    return body


def _blob_bytes(blob):
    """What msgpack packs for a function blob that is not bytes: the bytes it holds in
    ``data`` (``protocol.FunctionBlob``)."""
    return blob.data


# The packer of ``protocol.encode``: a frame made here is the one it would make.
_pack = msgpack.Packer(use_bin_type=True, default=_blob_bytes).pack


class StatusRows(list):
    """The rows of a StatusUpdates frame, ``[task id, attempt, state, payload]`` each, as
    ``read_status_updates`` decoded and checked them (the compiled path reads them in place
    instead)."""

    __slots__ = ()


def _is_int(value):
    return type(value) is int


def read_status_updates(frame, start):
    """``(incarnation, busy, rows)`` of the StatusUpdates body at ``frame[start:]``, every
    field checked (``rows``: a ``StatusRows``); ValueError says what is wrong."""
    incarnation, busy, updates = _read_body(frame, start, 3)
    if not _is_int(incarnation):
        raise ValueError("field incarnation has the wrong type")
    if type(busy) is not float and not _is_int(busy):
        raise ValueError("field busy has the wrong type")
    if not rows_have_types(updates, (int, int, int, bytes)):
        raise ValueError("field updates has the wrong type")
    return incarnation, busy, StatusRows(updates)


def rows_have_types(value, types):
    """Whether ``value`` is a list of lists, each of ``len(types)`` items of exactly these
    types, in order (``type(item) is t``: a bool is not an int, a subclass not its base)."""
    if type(value) is not list:
        return False
    expected = list(types)
    if len(value) == 1:  # a lone task: a third of the passes below
        row = value[0]
        return type(row) is list and list(map(type, row)) == expected
    # three passes that each loop in C: rows are lists, of length n, of these types
    return (set(map(type, value)) <= {list}
            and set(map(len, value)) <= {len(expected)}
            and list(map(type, chain.from_iterable(value))) == expected * len(value))
