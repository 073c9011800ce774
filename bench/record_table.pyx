# cython: language_level=3, boundscheck=False, wraparound=False
"""A floor for the compiled fast path (bench/records_floor.py): tasks as C records in one
table instead of one ``Task`` object each, with the least work the three calls can do and
still take Python rows in and give Python rows out as the driver's messages carry them.

Left out, against zsched's fast path: more than one client and the index of a client's
tasks (for cancelling them), the scheduling-latency histogram, functions (digests, what an
executor holds, the blob sent along), the message size limit, cancelled and suspect tasks,
retries, the counts, and each executor's tasks in launch order (for an executor lost).
Each of those costs something per task: this is a lower bound, not a design.
"""
from cpython.list cimport PyList_GET_ITEM, PyList_SET_ITEM
from cpython.long cimport PyLong_AsLongLong, PyLong_FromLongLong
from cpython.ref cimport PyObject, Py_DECREF, Py_INCREF, Py_XDECREF
from libc.stdlib cimport free, malloc, realloc

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


cdef class RecordTable:
    cdef Record *_records
    cdef int *_free                 # indices of free records (a stack)
    cdef Py_ssize_t _n_free, _capacity
    cdef int *_queue                # queued record indices (a ring)
    cdef Py_ssize_t _head, _length, _queue_capacity
    cdef long *_held                # per executor: tasks it holds
    cdef long *_window              # per executor: tasks it may hold
    cdef Py_ssize_t _n_executors
    cdef public list results        # [client task id, state, payload] rows for the client

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
        self.results = []

    def __dealloc__(self):
        free(self._records)
        free(self._free)
        free(self._queue)
        free(self._held)
        free(self._window)

    cdef void _grow(self) except *:
        cdef Py_ssize_t i, capacity = 2 * self._capacity if self._capacity else 1024
        cdef Record *records = <Record *>realloc(self._records, capacity * sizeof(Record))
        if records == NULL:
            raise MemoryError()
        self._records = records
        cdef int *free_ = <int *>realloc(self._free, capacity * sizeof(int))
        if free_ == NULL:
            raise MemoryError()
        self._free = free_
        for i in range(capacity - 1, self._capacity - 1, -1):
            records[i].generation = 0
            free_[self._n_free] = i
            self._n_free += 1
        self._capacity = capacity

    cdef void _enqueue(self, int index) except *:
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

    def submit(self, list rows, double now):
        """Queue ``[[client task id, digest, args, retries], ...]``."""
        cdef list row
        cdef int index
        cdef Record *record
        for row in rows:
            if Py_SIZE(row) != 4:
                raise ValueError("a SubmitTasks row has 4 items")
            if self._n_free == 0:
                self._grow()
            self._n_free -= 1
            index = self._free[self._n_free]
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
                index = self._queue[self._head]
                self._head = (self._head + 1) % self._queue_capacity
                self._length -= 1
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
            self._free[self._n_free] = index
            self._n_free += 1
