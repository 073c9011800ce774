# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Floors for the compiled fast path: tasks as C records in one table instead of one
``Task`` object each, with the least work the driver's per-task calls can do.

- ``RecordTable`` (bench/records_floor.py) takes Python rows in and gives Python rows out,
  as the driver's messages carry them once msgpack has decoded them.
- ``FrameTable`` (bench/frames_floor.py) reads and writes the message bodies themselves:
  SubmitTasks and StatusUpdates bodies in, LaunchTasks and TaskResults bodies out, as msgpack
  bytes, with no Python object made per task. A task's record points into the SubmitTasks
  body it came in (kept while any of its tasks is out); a launch copies the digest and the
  arguments from there into the LaunchTasks body; a status update copies the result from
  the StatusUpdates body into the client's TaskResults body. It reads only the shapes these
  messages have (no functions along with the tasks, rows of the expected types) and raises
  ValueError on anything else. The frame header ([version][type]) is left out, as are
  ``protocol.decode``'s field checks.

Left out, against zsched's fast path: more than one client and the index of a client's
tasks (for cancelling them), the scheduling-latency histogram, functions (digests, what an
executor holds, the blob sent along), the message size limit, cancelled and suspect tasks,
retries, the counts, and each executor's tasks in launch order (for an executor lost).
Each of those costs something per task: these are lower bounds, not designs.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_SET_ITEM
from cpython.long cimport PyLong_AsLongLong, PyLong_FromLongLong
from cpython.ref cimport PyObject, Py_DECREF, Py_INCREF, Py_XDECREF
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy

from zsched._frames cimport (Buffer, Reader, need, read_array_header, read_bin, read_int, read_number,
                             reserve, write_array_header, write_bin, write_uint)

cdef extern from "Python.h":
    Py_ssize_t Py_SIZE(object)
    void Py_SET_SIZE(object, Py_ssize_t)
    void PyObject_GC_UnTrack(object)


cdef struct Record:
    PyObject *row             # the SubmitTasks row, then the LaunchTasks row
    PyObject *client_task_id
    double queued_at
    int generation            # the task id is generation << 32 | index
    int attempt
    int retries
    int executor              # -1 while queued or free


cdef inline void set_item(list row, Py_ssize_t i, object value) noexcept:
    cdef PyObject *old = PyList_GET_ITEM(row, i)
    Py_INCREF(value)
    PyList_SET_ITEM(row, i, value)
    Py_XDECREF(old)


cdef inline void drop_last_item(list row) noexcept:
    cdef Py_ssize_t last = Py_SIZE(row) - 1
    cdef PyObject *old = PyList_GET_ITEM(row, last)
    PyList_SET_ITEM(row, last, <object>NULL)
    Py_SET_SIZE(row, last)
    Py_XDECREF(old)


cdef class TaskTable:
    """The parts both tables share: free record indices, the queue, each executor's window."""
    cdef int *_free                 # indices of free records (a stack)
    cdef Py_ssize_t _n_free, _capacity
    cdef int *_queue                # queued record indices (a ring)
    cdef Py_ssize_t _head, _length, _queue_capacity
    cdef long *_held                # per executor: tasks it holds
    cdef long *_window              # per executor: tasks it may hold
    cdef Py_ssize_t _n_executors

    def __cinit__(self, Py_ssize_t n_executors, long window):
        cdef Py_ssize_t i
        self._queue_capacity = 1024
        self._queue = <int *>malloc(self._queue_capacity * sizeof(int))
        self._held = <long *>malloc(n_executors * sizeof(long))
        self._window = <long *>malloc(n_executors * sizeof(long))
        if self._queue == NULL or self._held == NULL or self._window == NULL:
            raise MemoryError()
        self._n_executors = n_executors
        for i in range(n_executors):
            self._held[i] = 0
            self._window[i] = window

    def __dealloc__(self):
        free(self._free)
        free(self._queue)
        free(self._held)
        free(self._window)

    cdef int _resize_records(self, Py_ssize_t capacity) except -1:
        """Make room for ``capacity`` records; those past ``_capacity`` are free."""
        raise NotImplementedError

    cdef int _take(self) except -1:
        """A free record's index."""
        cdef Py_ssize_t i, capacity
        cdef int *free_
        if self._n_free == 0:
            capacity = 2 * self._capacity if self._capacity else 1024
            self._resize_records(capacity)
            free_ = <int *>realloc(self._free, capacity * sizeof(int))
            if free_ == NULL:
                raise MemoryError()
            self._free = free_
            for i in range(capacity - 1, self._capacity - 1, -1):
                free_[self._n_free] = i
                self._n_free += 1
            self._capacity = capacity
        self._n_free -= 1
        return self._free[self._n_free]

    cdef inline void _give_back(self, int index) noexcept:
        self._free[self._n_free] = index
        self._n_free += 1

    cdef int _enqueue(self, int index) except -1:
        cdef Py_ssize_t j
        cdef int *queue
        if self._length == self._queue_capacity:
            queue = <int *>malloc(2 * self._queue_capacity * sizeof(int))
            if queue == NULL:
                raise MemoryError()
            for j in range(self._length):
                queue[j] = self._queue[(self._head + j) % self._queue_capacity]
            free(self._queue)
            self._queue = queue
            self._head = 0
            self._queue_capacity *= 2
        self._queue[(self._head + self._length) % self._queue_capacity] = index
        self._length += 1
        return 0

    cdef inline int _dequeue(self) noexcept:
        cdef int index = self._queue[self._head]
        self._head = (self._head + 1) % self._queue_capacity
        self._length -= 1
        return index


cdef class RecordTable(TaskTable):
    cdef Record *_records
    cdef public list results        # [client task id, state, payload] rows for the client

    def __cinit__(self, Py_ssize_t n_executors, long window):
        self.results = []

    def __dealloc__(self):
        free(self._records)

    cdef int _resize_records(self, Py_ssize_t capacity) except -1:
        cdef Py_ssize_t i
        cdef Record *records = <Record *>realloc(self._records, capacity * sizeof(Record))
        if records == NULL:
            raise MemoryError()
        self._records = records
        for i in range(self._capacity, capacity):
            records[i].generation = 0
        return 0

    def submit(self, list rows, double now):
        """Queue ``[[client task id, digest, args, retries], ...]``."""
        cdef list row
        cdef int index
        cdef Record *record
        for row in rows:
            if Py_SIZE(row) != 4:
                raise ValueError("a SubmitTasks row has 4 items")
            index = self._take()
            record = &self._records[index]
            record.retries = PyLong_AsLongLong(<object>PyList_GET_ITEM(row, 3))
            record.row = <PyObject *>row
            Py_INCREF(row)
            record.client_task_id = PyList_GET_ITEM(row, 0)
            Py_INCREF(<object>record.client_task_id)
            record.queued_at = now
            record.attempt = 0
            record.executor = -1
            PyObject_GC_UnTrack(row)
            self._enqueue(index)

    def offer(self):
        """``[(executor, rows), ...]``: every executor's window filled from the queue."""
        cdef list launches = [], rows, row
        cdef Py_ssize_t executor
        cdef long room
        cdef int index
        cdef Record *record
        for executor in range(self._n_executors):
            room = self._window[executor] - self._held[executor]
            if room <= 0 or self._length == 0:
                continue
            rows = []
            while room > 0 and self._length > 0:
                index = self._dequeue()
                record = &self._records[index]
                record.executor = executor
                record.attempt += 1
                row = <list>record.row
                set_item(row, 0, PyLong_FromLongLong((<long long>record.generation << 32) | index))
                set_item(row, 1, record.attempt)
                rows.append(row)
                room -= 1
                self._held[executor] += 1
            launches.append((executor, rows))
        return launches

    def status_updates(self, Py_ssize_t executor, list updates):
        """Apply ``[[task id, attempt, state, payload], ...]`` from ``executor``: each row of
        a task it holds becomes a result row."""
        cdef list row, results = self.results
        cdef long long task_id
        cdef long long index
        cdef Record *record
        cdef object state, payload
        for row in updates:
            if Py_SIZE(row) != 4:
                raise ValueError("a StatusUpdates row has 4 items")
            task_id = PyLong_AsLongLong(<object>PyList_GET_ITEM(row, 0))
            index = task_id & 0xffffffff
            if index >= self._capacity:
                continue
            record = &self._records[index]
            if (record.generation != (task_id >> 32) or record.executor != executor
                    or record.attempt != PyLong_AsLongLong(<object>PyList_GET_ITEM(row, 1))):
                continue
            self._held[executor] -= 1
            state = <object>PyList_GET_ITEM(row, 2)
            payload = <object>PyList_GET_ITEM(row, 3)
            set_item(row, 0, <object>record.client_task_id)
            set_item(row, 1, state)
            set_item(row, 2, payload)
            drop_last_item(row)
            results.append(row)
            Py_DECREF(<object>record.client_task_id)
            Py_DECREF(<object>record.row)
            record.generation += 1
            record.executor = -1
            self._give_back(index)


cdef Py_ssize_t RESULT_ROWS = 512  # rows per TaskResults body at most, as the driver sends them


cdef struct FrameRecord:
    PyObject *frame           # the SubmitTasks body holding its digest and arguments
    int64_t client_task_id
    double queued_at
    uint32_t digest_at        # offsets into frame
    uint32_t args_at
    uint32_t args_len
    int generation            # the task id is generation << 32 | index
    int attempt
    int executor              # -1 while queued or free


cdef class FrameTable(TaskTable):
    cdef FrameRecord *_records
    cdef Buffer _launch             # the LaunchTasks body being written
    cdef Buffer _results            # result rows not yet in a TaskResults body
    cdef Py_ssize_t _result_rows
    cdef list _result_frames        # TaskResults bodies waiting to be sent

    def __cinit__(self, Py_ssize_t n_executors, long window):
        self._result_frames = []

    def __dealloc__(self):
        cdef Py_ssize_t i
        for i in range(self._capacity):
            if self._records[i].frame != NULL:
                Py_DECREF(<object>self._records[i].frame)
        free(self._records)
        free(self._launch.data)
        free(self._results.data)

    cdef int _resize_records(self, Py_ssize_t capacity) except -1:
        cdef Py_ssize_t i
        cdef FrameRecord *records = <FrameRecord *>realloc(self._records, capacity * sizeof(FrameRecord))
        if records == NULL:
            raise MemoryError()
        self._records = records
        for i in range(self._capacity, capacity):
            records[i].generation = 0
            records[i].frame = NULL
        return 0

    def submit(self, bytes frame, double now):
        """Queue the tasks of a SubmitTasks body, ``[{}, [[client task id, digest, args,
        retries], ...]]``."""
        cdef const uint8_t *start = <const uint8_t *>PyBytes_AS_STRING(frame)
        cdef Reader r
        cdef Py_ssize_t n, i
        cdef int64_t client_task_id, retries
        cdef const uint8_t *digest
        cdef const uint8_t *args
        cdef Py_ssize_t digest_len, args_len
        cdef bint big
        cdef int index
        cdef FrameRecord *record
        r.p = start
        r.end = start + PyBytes_GET_SIZE(frame)
        if read_array_header(&r) != 2:
            raise ValueError("a SubmitTasks body has 2 fields")
        need(&r, 1)
        if r.p[0] != 0x80:
            raise ValueError("functions along with tasks: not in this floor")
        r.p += 1
        n = read_array_header(&r)
        for i in range(n):
            if read_array_header(&r) != 4:
                raise ValueError("a SubmitTasks row has 4 items")
            read_int(&r, &client_task_id, &big)
            read_bin(&r, &digest, &digest_len)
            read_bin(&r, &args, &args_len)
            read_int(&r, &retries, &big)
            if digest_len != 16:
                raise ValueError("a digest has 16 bytes")
            if client_task_id < 0:
                raise ValueError("a client task id is >= 0")
            index = self._take()
            record = &self._records[index]
            record.frame = <PyObject *>frame
            Py_INCREF(frame)
            record.client_task_id = client_task_id
            record.queued_at = now
            record.digest_at = <uint32_t>(digest - start)
            record.args_at = <uint32_t>(args - start)
            record.args_len = <uint32_t>args_len
            record.attempt = 0
            record.executor = -1
            self._enqueue(index)

    def offer(self):
        """``[(executor, LaunchTasks body), ...]``: every executor's window filled from the
        queue."""
        cdef list launches = []
        cdef Py_ssize_t executor
        cdef long room
        cdef int index
        cdef FrameRecord *record
        cdef Buffer *b = &self._launch
        cdef const uint8_t *frame
        for executor in range(self._n_executors):
            room = self._window[executor] - self._held[executor]
            if room > self._length:
                room = self._length
            if room <= 0:
                continue
            b.length = 0
            reserve(b, 7)
            b.data[0] = 0x92  # [functions, tasks]
            b.data[1] = 0x80
            b.length = 2
            write_array_header(b, <uint32_t>room)
            self._held[executor] += room
            while room > 0:
                index = self._dequeue()
                room -= 1
                record = &self._records[index]
                record.executor = executor
                record.attempt += 1
                frame = <const uint8_t *>PyBytes_AS_STRING(<object>record.frame)
                reserve(b, 1 + 9 + 9 + 5 + 16 + 5 + record.args_len)
                b.data[b.length] = 0x94
                b.length += 1
                write_uint(b, (<uint64_t>record.generation << 32) | <uint64_t>index)
                write_uint(b, <uint64_t>record.attempt)
                write_bin(b, <const char *>frame + record.digest_at, 16)
                write_bin(b, <const char *>frame + record.args_at, record.args_len)
            launches.append((executor, PyBytes_FromStringAndSize(<char *>b.data, b.length)))
        return launches

    cdef int _flush_results(self) except -1:
        cdef Buffer header
        cdef uint8_t head[5]
        cdef object body
        cdef char *p
        if self._result_rows == 0:
            return 0
        header.data = head
        header.length = 0
        write_array_header(&header, <uint32_t>self._result_rows)
        body = PyBytes_FromStringAndSize(NULL, header.length + self._results.length)
        p = PyBytes_AS_STRING(body)
        memcpy(p, head, header.length)
        memcpy(p + header.length, self._results.data, self._results.length)
        self._result_frames.append(body)
        self._results.length = 0
        self._result_rows = 0
        return 0

    def status_updates(self, Py_ssize_t executor, bytes frame):
        """Apply a StatusUpdates body from ``executor``, ``[incarnation, busy, [[task id,
        attempt, state, payload], ...]]``: each row of a task it holds becomes a result row."""
        cdef const uint8_t *start = <const uint8_t *>PyBytes_AS_STRING(frame)
        cdef Reader r
        cdef Py_ssize_t n, i
        cdef int64_t task_id, attempt, state, incarnation
        cdef const uint8_t *payload
        cdef Py_ssize_t payload_len
        cdef bint big
        cdef int64_t index
        cdef FrameRecord *record
        cdef Buffer *b = &self._results
        r.p = start
        r.end = start + PyBytes_GET_SIZE(frame)
        if read_array_header(&r) != 3:
            raise ValueError("a StatusUpdates body has 3 fields")
        read_int(&r, &incarnation, &big)
        read_number(&r)
        n = read_array_header(&r)
        for i in range(n):
            if read_array_header(&r) != 4:
                raise ValueError("a StatusUpdates row has 4 items")
            read_int(&r, &task_id, &big)
            read_int(&r, &attempt, &big)
            read_int(&r, &state, &big)
            read_bin(&r, &payload, &payload_len)
            index = task_id & 0xffffffff
            if index >= self._capacity:
                continue
            record = &self._records[index]
            if (record.generation != (task_id >> 32) or record.executor != executor
                    or record.attempt != attempt or state < 0):
                continue
            self._held[executor] -= 1
            reserve(b, 1 + 9 + 9 + 5 + payload_len)
            b.data[b.length] = 0x93
            b.length += 1
            write_uint(b, <uint64_t>record.client_task_id)
            write_uint(b, <uint64_t>state)
            write_bin(b, <const char *>payload, payload_len)
            self._result_rows += 1
            if self._result_rows == RESULT_ROWS:
                self._flush_results()
            Py_DECREF(<object>record.frame)
            record.frame = NULL
            record.generation += 1
            record.executor = -1
            self._give_back(index)

    def take_results(self):
        """The TaskResults bodies waiting (``[[client task id, state, payload], ...]``, at
        most ``RESULT_ROWS`` rows each); none wait afterwards."""
        self._flush_results()
        frames = self._result_frames
        self._result_frames = []
        return frames
