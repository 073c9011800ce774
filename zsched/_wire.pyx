# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The wire's compiled frame readers and writers; ``_wire_py.py`` is the twin it must agree
with (see it for what each name does).

SubmitTasks and StatusUpdates frames are checked once (``read_submit_tasks``,
``read_status_updates``) and their rows left in the frame, for the scheduling core to read
in place; ``ResultRows`` writes TaskResults rows, and a ``LaunchWriter`` (``add_launch_row``,
in ``_wire.pxd``) LaunchTasks rows, straight into the frames' bytes. So the per-task
messages make no Python object per task. ``launch_frames`` writes launch decisions through
a ``LaunchWriter``, as the scheduling core's fused launch does from its task tables.
"""
from cpython.object cimport PyTypeObject
from cpython.ref cimport PyObject
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_AsUnsignedLongLong

from msgpack import unpackb


cdef extern from "Python.h":
    void PyObject_GC_UnTrack(object)
    PyObject *PyList_GET_ITEM(object, Py_ssize_t)
    PyObject *PyTuple_GET_ITEM(object, Py_ssize_t)


cdef int int_bits(object value, int64_t *bits, unsigned char *big) except -1:
    """The int ``value`` as ``read_int`` gives an int it reads: an int64 in ``bits``, or
    one past 2**63 - 1 as the bits of a uint64 (``big``). An int msgpack cannot pack (below
    -2**63, past 2**64 - 1) raises OverflowError, anything else TypeError."""
    cdef int overflow = 0
    cdef long long number
    if not isinstance(value, int):
        raise TypeError(f"an int was expected, not {type(value).__name__}")
    number = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow == 0:
        bits[0] = number
        big[0] = False
    elif overflow > 0:  # past 2**63 - 1: a uint64, or it cannot be packed
        bits[0] = <int64_t>PyLong_AsUnsignedLongLong(value)
        big[0] = True
    else:
        raise OverflowError("an int below -2**63 cannot be packed")
    return 0


cdef class ResultRows:
    """A client's results waiting to be sent (``ClientData.results``; a list of rows in the
    reference): TaskResults rows ``[client task id, state, payload]``, written as msgpack as
    they come, so a task's result makes no Python object in the driver. Each row's end and
    the size of its payload are kept, to cut frames at the size limit."""

    def __dealloc__(self):
        release(&self._data)
        free(self._ends)
        free(self._payloads)

    cdef int _write(self, int64_t client_task_id, bint big, int64_t state, const char *payload,
                    Py_ssize_t n) except -1:
        """Queue a row; ``big``: ``client_task_id`` holds the bits of a uint64 past 2**63 - 1."""
        cdef Py_ssize_t capacity
        if self._count == self._capacity:
            capacity = 2 * self._capacity if self._capacity else 256
            self._ends = <Py_ssize_t *>grow_array(self._ends, capacity, sizeof(Py_ssize_t))
            self._payloads = <Py_ssize_t *>grow_array(self._payloads, capacity, sizeof(Py_ssize_t))
            self._capacity = capacity
        reserve(&self._data, 1 + 2 * UINT_ROOM + HEADER_ROOM + n)
        self._data.data[self._data.length] = 0x93
        self._data.length += 1
        if big:
            write_uint(&self._data, <uint64_t>client_task_id)
        else:
            write_int(&self._data, client_task_id)
        write_int(&self._data, state)
        write_bin(&self._data, payload, n)
        self._ends[self._count] = self._data.length
        self._payloads[self._count] = n
        self._count += 1
        return 0

    def add(self, client_task_id, state, payload):
        """Queue the row ``[client task id, state, payload]``."""
        cdef bytes data = as_bytes(payload, "a result")
        cdef int64_t ctid, state_bits
        cdef unsigned char big, state_big
        int_bits(client_task_id, &ctid, &big)
        int_bits(state, &state_bits, &state_big)
        if state_big:
            raise OverflowError(f"task state {state} is out of range")
        self._write(ctid, big, state_bits, PyBytes_AS_STRING(data), len(data))

    def __len__(self):
        return self._count

    def payload_size(self):
        """The bytes of the payloads waiting, in all."""
        cdef Py_ssize_t i, total = 0
        for i in range(self._count):
            total += self._payloads[i]
        return total

    def take_frames(self, bytes header, Py_ssize_t limit, Py_ssize_t max_rows):
        """The rows waiting, in order, as TaskResults frames (``header`` then the body
        ``[rows]``): the payloads of a frame add up to at most ``limit`` bytes (a larger
        one goes alone), at most ``max_rows`` rows each. None wait afterwards."""
        cdef list frames = []
        cdef Py_ssize_t i = 0, first, size, start = 0
        cdef Buffer head
        cdef Buffer rows
        cdef uint8_t room[HEADER_ROOM + 1]
        if max_rows < 1:
            raise ValueError("max_rows must be at least 1")
        while i < self._count:
            first = i
            size = self._payloads[i]
            i += 1
            while i < self._count and size + self._payloads[i] <= limit and i - first < max_rows:
                size += self._payloads[i]
                i += 1
            head.data = room
            head.length = 0
            head.data[0] = 0x91  # the body: [results]
            head.length = 1
            write_array_header(&head, i - first)
            rows.data = self._data.data + start
            rows.length = self._ends[i - 1] - start
            frames.append(join(PyBytes_AS_STRING(header), len(header), &head, &rows))
            start = self._ends[i - 1]
        self._data.length = 0
        self._count = 0
        return frames

    def take_rows(self):
        """The rows waiting, decoded (for a client in the driver's process), each list out
        of the cyclic collector as msgpack would not leave it (ints and bytes only: no
        cycle); none wait afterwards."""
        cdef list rows = [], row
        cdef Reader r
        cdef Py_ssize_t i, n
        cdef const uint8_t *payload
        r.p = self._data.data
        r.end = self._data.data + self._data.length
        try:
            for i in range(self._count):
                read_array_header(&r)  # 3: written by _write
                row = [read_int_object(&r), read_int_object(&r), None]
                read_bin(&r, &payload, &n)
                row[2] = PyBytes_FromStringAndSize(<const char *>payload, n)
                PyObject_GC_UnTrack(row)
                rows.append(row)
        finally:
            self._data.length = 0
            self._count = 0
        PyObject_GC_UnTrack(rows)
        return rows


cdef bytes launch_frame(bytes header, dict needed, Buffer *rows, Py_ssize_t n_rows):
    """The LaunchTasks frame ``header + [needed, rows]``, ``rows`` being ``n_rows`` rows
    written in ``rows`` (``write_launch_row``)."""
    cdef Buffer head
    cdef bytes digest, data
    head.data = NULL
    head.length = head.capacity = 0
    try:
        reserve(&head, len(header) + 1 + HEADER_ROOM)
        memcpy(head.data, PyBytes_AS_STRING(header), len(header))
        head.length = len(header)
        head.data[head.length] = 0x92  # the body: [functions, tasks]
        head.length += 1
        write_map_header(&head, len(needed))
        for key, blob in needed.items():
            digest = as_bytes(key, "a function digest")
            # a blob is bytes, or holds them in ``data`` (protocol.FunctionBlob)
            data = as_bytes(blob if type(blob) is bytes else blob.data, "a function")
            reserve(&head, 2 * HEADER_ROOM + len(digest) + len(data))
            write_bin(&head, PyBytes_AS_STRING(digest), len(digest))
            write_bin(&head, PyBytes_AS_STRING(data), len(data))
        reserve(&head, HEADER_ROOM)
        write_array_header(&head, n_rows)
        return join(NULL, 0, &head, rows)
    finally:
        release(&head)


cdef class LaunchWriter:
    """One executor's LaunchTasks frames (``header`` then the body ``[functions, rows]``),
    written row by row as the launches are decided (``add_launch_row``): what the twin's
    ``launch_frames`` makes of the same rows. A frame is cut where its rows' arguments and its functions would pass
    ``limit`` bytes (a single larger row goes alone); each carries the functions its rows
    need that the executor does not hold (``known``, its digests, updated at each cut)."""

    def __cinit__(self, bytes header, set known, Py_ssize_t limit):
        self._header = header
        self._known = known
        self._limit = limit
        self._needed = {}
        self._frames = []

    def __dealloc__(self):
        release(&self._rows)

    cdef int _cut(self) except -1:
        """The frame of the rows written since the last cut."""
        self._frames.append(launch_frame(self._header, self._needed, &self._rows, self._n_rows))
        self._known.update(self._needed)
        self._needed = {}
        self._rows.length = self._n_rows = self._size = 0
        return 0

    cdef list finish(self):
        """The frames written (none if no row was); the writer is empty afterwards."""
        cdef list frames
        if self._n_rows:
            self._cut()
        frames = self._frames
        self._frames = []
        return frames


def launch_frames(bytes header, list rows, dict functions, set known, Py_ssize_t limit):
    cdef LaunchWriter writer = LaunchWriter(header, known, limit)
    cdef object digest, last = None, blob = None
    cdef bytes data
    for task_id, attempt, digest, args in rows:
        if digest is not last:  # its function is looked up only if it may travel, as in the twin
            last = digest
            blob = functions[digest] if digest not in known else None
        data = as_bytes(args, "pickled arguments")
        add_launch_row(writer, task_id, attempt, digest, <PyObject *>blob, PyBytes_AS_STRING(data),
                       len(data))
    return writer.finish()


cdef class FrameRows:
    """The rows of a message's frame, checked by the function that read the frame and read
    in place by the scheduling core, so the rows make no Python object in the driver. A
    sequence of rows to anything else (decoded then)."""

    def __len__(self):
        return self._count

    def rows(self):
        """The rows, decoded."""
        return unpackb(memoryview(self._frame)[self._array:self._end])

    def __iter__(self):
        return iter(self.rows())

    def __getitem__(self, index):
        return self.rows()[index]

    def __eq__(self, other):
        return self.rows() == (other.rows() if isinstance(other, FrameRows) else other)

    def __repr__(self):
        return f"{type(self).__name__}({self.rows()!r})"


cdef class StatusRows(FrameRows):
    """A StatusUpdates frame's rows, ``[task id, attempt, state, payload]`` each
    (``read_status_updates``, ``apply_status_updates``)."""


cdef class SubmitRows(FrameRows):
    """A SubmitTasks frame's rows, ``[client task id, function digest, pickled arguments,
    retries]`` each (``read_submit_tasks``, ``queue_tasks``)."""


cdef FrameRows frame_rows(type cls, bytes frame, Py_ssize_t array, Py_ssize_t first,
                          Py_ssize_t end, Py_ssize_t count):
    cdef FrameRows rows = cls.__new__(cls)
    rows._frame = frame
    rows._array = array
    rows._first = first
    rows._end = end
    rows._count = count
    return rows


cdef Py_ssize_t read_fields(Reader *r, Py_ssize_t n_fields) except -1:
    """The body's array header: ValueError unless it holds ``n_fields``."""
    cdef Py_ssize_t n
    try:
        n = read_array_header(r)
    except ValueError:
        n = -1
    if n != n_fields:
        raise ValueError(f"expected {n_fields} fields")
    return 0


cdef FrameRows read_rows(type cls, bytes frame, Reader *r, const char *kinds, str field):
    """The array of rows at ``r``, the last field of ``frame``'s body, each row of
    ``len(kinds)`` items, ``i`` an int and ``b`` bytes: checked, and left in the frame."""
    cdef const uint8_t *base = <const uint8_t *>PyBytes_AS_STRING(frame)
    cdef Py_ssize_t i, k, n, array = r.p - base, first, n_items = len(kinds)
    cdef int64_t value
    cdef bint big
    cdef const uint8_t *data
    cdef Py_ssize_t size
    try:
        n = read_array_header(r)
        first = r.p - base
        for i in range(n):
            if read_array_header(r) != n_items:
                raise ValueError(f"row {i} has not {n_items} items")
            for k in range(n_items):
                if kinds[k] == b'i':
                    read_int(r, &value, &big)
                else:
                    read_bin(r, &data, &size)
    except ValueError as exc:
        raise ValueError(f"field {field} has the wrong type ({exc})") from None
    if r.p != r.end:
        raise ValueError(f"{r.end - r.p} bytes after the body")
    return frame_rows(cls, frame, array, first, r.p - base, n)


def read_submit_tasks(bytes frame, Py_ssize_t start):
    """``(functions, rows)`` of the SubmitTasks body at ``frame[start:]``, every field
    checked (``functions``: a dict, digest -> blob; ``rows``: a ``SubmitRows``); ValueError
    says what is wrong."""
    cdef const uint8_t *base = <const uint8_t *>PyBytes_AS_STRING(frame)
    cdef Reader r
    cdef Py_ssize_t i, n, size
    cdef const uint8_t *data
    cdef dict functions = {}
    if start > len(frame):
        raise ValueError("the body ends too soon")
    r.p = base + start
    r.end = base + len(frame)
    read_fields(&r, 2)
    try:
        need(&r, 1)
        if 0x80 <= r.p[0] <= 0x8f:
            n = r.p[0] & 0x0f
            r.p += 1
        elif r.p[0] == 0xde or r.p[0] == 0xdf:
            size = 2 if r.p[0] == 0xde else 4
            need(&r, 1 + size)
            n = <Py_ssize_t>get_big_endian(r.p + 1, size)
            r.p += 1 + size
        else:
            raise ValueError("a map was expected")
        for i in range(n):
            read_bin(&r, &data, &size)
            key = PyBytes_FromStringAndSize(<const char *>data, size)
            read_bin(&r, &data, &size)
            functions[key] = PyBytes_FromStringAndSize(<const char *>data, size)
    except ValueError as exc:
        raise ValueError(f"field functions has the wrong type ({exc})") from None
    return functions, read_rows(SubmitRows, frame, &r, b"ibbi", "tasks")


def read_status_updates(bytes frame, Py_ssize_t start):
    """``(incarnation, busy, rows)`` of the StatusUpdates body at ``frame[start:]``, every
    field checked (``rows``: a ``StatusRows``); ValueError says what is wrong."""
    cdef const uint8_t *base = <const uint8_t *>PyBytes_AS_STRING(frame)
    cdef Reader r
    if start > len(frame):
        raise ValueError("the body ends too soon")
    r.p = base + start
    r.end = base + len(frame)
    read_fields(&r, 3)
    try:
        incarnation = read_int_object(&r)
    except ValueError as exc:
        raise ValueError(f"field incarnation has the wrong type ({exc})") from None
    try:
        busy = read_number(&r)
    except ValueError as exc:
        raise ValueError(f"field busy has the wrong type ({exc})") from None
    return incarnation, busy, read_rows(StatusRows, frame, &r, b"iiib", "updates")


def rows_have_types(value, tuple types):
    cdef Py_ssize_t i, j, n = len(types)
    cdef object row
    cdef PyObject *item
    if type(value) is not list:
        return False
    for i in range(len(<list>value)):
        row = <object>PyList_GET_ITEM(value, i)
        if type(row) is not list or len(<list>row) != n:
            return False
        for j in range(n):
            item = PyList_GET_ITEM(row, j)
            if item.ob_type != <PyTypeObject *>PyTuple_GET_ITEM(types, j):
                return False
    return True
