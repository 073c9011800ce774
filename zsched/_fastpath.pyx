# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The fast path, the compiled scheduling core (with ``_slot_table``): the driver's offers
and launches. ``_fastpath_py.py`` is the twin it must agree with (see it for each name).

``Task`` is a C struct with typed fields. ``queue_tasks`` and ``apply_status_updates`` read
the rows of SubmitTasks and StatusUpdates frames where they lie (checked by the wire's
readers), and each result goes to the client's ``ResultRows``. ``launch_tasks`` hands back
launch decisions, as the twin does; ``offer_and_launch``, the driver's usual offer, is
fused: each decision goes from the task's C fields to the wire's ``LaunchWriter``. So on
the driver's path a task makes one Python object, its ``Task``.
``RunningTasks`` and ``ClientTasks`` keep their tasks in C arrays, so a task joins and leaves
them without a dict entry made and dropped per task.
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.long cimport (PyLong_AsLongLongAndOverflow, PyLong_FromLongLong,
                           PyLong_FromUnsignedLongLong)
from cpython.object cimport PyTypeObject
from cpython.ref cimport Py_DECREF, Py_INCREF, PyObject
from libc.limits cimport INT_MAX, INT_MIN
from libc.stdint cimport UINT32_MAX, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcmp, memset

from ._slot_table cimport SlotTable
from ._wire cimport (LaunchWriter, Reader, ResultRows, StatusRows, SubmitRows, add_launch_row,
                     grow_array, int_bits, read_array_header, read_bin, read_int)


cdef extern from "Python.h":
    ctypedef PyObject *(*PyCFunction)(PyObject *, PyObject *)
    ctypedef struct PyMethodDef:
        PyCFunction ml_meth
        int ml_flags
    ctypedef struct PyMethodDescrObject:
        PyMethodDef *d_method
    int METH_O, METH_NOARGS
    PyTypeObject PyMethodDescr_Type


cdef extern from *:
    void prefetch "__builtin_prefetch" (const void *address) noexcept nogil

from collections import deque

from ._fastpath_py import NO_FUNCTION, NO_TASK_STATE
from .task_state import TaskState


cdef long FINISHED = TaskState.FINISHED
cdef long FAILED = TaskState.FAILED
cdef long RETURNED = TaskState.RETURNED
cdef long KILLED = TaskState.KILLED
cdef long ERROR = TaskState.ERROR


cdef PyCFunction c_method(type cls, str name, int flags) noexcept:
    """The C function of the method ``name`` of the built-in type ``cls``, if it takes
    its arguments as ``flags`` says; else NULL."""
    cdef object method = cls.__dict__.get(name)
    if type(method) is not <type>&PyMethodDescr_Type:
        return NULL
    cdef PyMethodDef *definition = (<PyMethodDescrObject *>method).d_method
    return definition.ml_meth if definition.ml_flags == flags else NULL


# The queue's append and popleft through deque's C functions: a bound method call would
# cost an interpreter call per task. Any other queue through its methods.
ctypedef object (*MethodCall)(object, PyObject *)  # a PyCFunction, called from Cython: NULL raises
cdef PyCFunction deque_append = c_method(deque, "append", METH_O)
cdef PyCFunction deque_popleft = c_method(deque, "popleft", METH_NOARGS)
DEQUE_METHODS_IN_C = deque_append != NULL and deque_popleft != NULL  # for the tests


cdef inline void queue_append(object queue, object item) except *:
    """``queue.append(item)``."""
    if deque_append != NULL and type(queue) is deque:
        (<MethodCall>deque_append)(queue, <PyObject *>item)
    else:
        queue.append(item)


cdef inline object queue_popleft(object queue):
    """``queue.popleft()``."""
    if deque_popleft != NULL and type(queue) is deque:
        return (<MethodCall>deque_popleft)(queue, NULL)
    return queue.popleft()


# Out of the cyclic GC, which would traverse every queued task; the scheduler takes a task
# out of its client's and executor's tables, its only cycles, when it ends or they go.
@cython.no_gc
cdef class Task:
    """A submitted task as the driver holds it (see the twin)."""

    def __init__(self, task_id, client, client_task_id, retries, function, bytes args,
                 double queued_at=0.0, function_blob=None):
        self._id = as_long_long(task_id)
        self.function_blob = function_blob
        self.client = client
        self.client_task_id = client_task_id
        self.retries = retries
        self.function = function
        if len(args) > UINT32_MAX:
            raise ValueError("arguments of 4 GiB or more")
        self._frame = args
        self._args_len = <uint32_t>len(args)
        self.queued_at = queued_at
        self._client_pos = -1

    @property
    def task_id(self):
        return PyLong_FromLongLong(self._id)

    @property
    def client_task_id(self):
        return PyLong_FromUnsignedLongLong(<uint64_t>self._ctid) if self._ctid_big \
            else PyLong_FromLongLong(self._ctid)

    @client_task_id.setter
    def client_task_id(self, value):
        int_bits(value, &self._ctid, &self._ctid_big)

    @property
    def cancelled(self):
        return <bint>self._cancelled

    @cancelled.setter
    def cancelled(self, value):
        self._cancelled = bool(value)

    @property
    def retries(self):
        return self._retries

    @retries.setter
    def retries(self, value):
        self._retries = clamp_int(value)

    @property
    def failures(self):
        """``((attempt, executor id, reason), ...)``: the losses charged to it."""
        return () if self._suspect is None else (<tuple>self._suspect)[0]

    @failures.setter
    def failures(self, value):
        self._set_suspect(value, self.loss)

    @property
    def loss(self):
        """The id of the latest loss charged to it, or None."""
        return None if self._suspect is None else (<tuple>self._suspect)[1]

    @loss.setter
    def loss(self, value):
        self._set_suspect(self.failures, value)

    def _set_suspect(self, failures, loss):
        self._suspect = None if (not failures and loss is None) else (tuple(failures), loss)

    @property
    def args(self):
        """Its pickled arguments."""
        return PyBytes_FromStringAndSize(PyBytes_AS_STRING(self._frame) + self._args_at, self._args_len)


cdef inline bint is_suspect(Task task) noexcept:
    """Whether losses were charged to ``task`` (``task.failures`` is not empty)."""
    return task._suspect is not None and len(<tuple>((<tuple>task._suspect)[0])) > 0


cdef int clamp_int(object value) except? -1:
    """An int as a C int, clamped to [INT_MIN, INT_MAX]."""
    cdef int overflow = 0
    cdef long long result = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow > 0 or result > INT_MAX:
        return INT_MAX
    if overflow < 0 or result < INT_MIN:
        return INT_MIN
    return <int>result


cdef long long as_long_long(object value) noexcept:
    """``value`` (an int) as a C long long, or 0 when it does not fit (no task id is 0)."""
    cdef int overflow = 0
    cdef long long result = PyLong_AsLongLongAndOverflow(value, &overflow)
    return 0 if overflow else result


cdef inline Py_ssize_t home_slot(long long key, Py_ssize_t mask) noexcept:
    """The first slot to probe for task id ``key``: runs of 16 consecutive ids take
    consecutive slots (an executor is given runs of consecutive ids, and reports them in
    about that order), and the runs are spread over the table by Fibonacci hashing, since
    the runs an executor holds are often a fixed distance apart."""
    cdef unsigned long long run = (<unsigned long long>key) >> 4
    return <Py_ssize_t>((((run * 0x9E3779B97F4A7C15ULL) >> 32) << 4) | (key & 15)) & mask


cdef char left_mark = 0
cdef PyObject *LEFT = <PyObject *>&left_mark  # a slot left by a task; never read through


cdef class RunningTasks:
    """The tasks launched on one executor and not yet reported: task id -> Task, in launch
    order (``executor.running``; a dict in the reference). A hash table of the tasks (open
    addressing, linear probing, keyed by their task ids; a slot left by a task is marked
    until the slot after it is empty, or the table is rebuilt) finds a task; the tasks are
    linked in launch order through two fields of their own. A slot is a pointer to the
    task alone (its id is in the task), so the table takes 8 bytes a slot, and half its
    slots are empty. An executor is given runs of consecutive task ids and reports them in
    about that order, and runs of 16 consecutive ids have consecutive home slots
    (``home_slot``), so its lookups and removals walk the table in order and most tasks sit
    in their home slot. The table holds a reference to each task."""

    def __cinit__(self):
        self._slots = <PyObject **>calloc(16, sizeof(PyObject *))
        if self._slots == NULL:
            raise MemoryError()
        self._mask = 15

    def __dealloc__(self):
        if self._slots != NULL:
            self._clear()
        free(self._slots)

    cdef void _rebuild(self, Py_ssize_t n) except *:
        """Move the tasks to a table of ``n`` slots, with no left slot."""
        cdef PyObject **old = self._slots
        cdef Py_ssize_t i, j, old_n = self._mask + 1
        cdef PyObject **slots = <PyObject **>calloc(n, sizeof(PyObject *))
        if slots == NULL:
            raise MemoryError()
        self._slots = slots
        self._mask = n - 1
        self._left = 0
        for i in range(old_n):
            if old[i] != NULL and old[i] != LEFT:
                j = home_slot((<Task>old[i])._id, self._mask)
                while slots[j] != NULL:
                    j = (j + 1) & self._mask
                slots[j] = old[i]
        free(old)

    cdef inline Py_ssize_t _slot_of(self, long long key) noexcept:
        """The slot holding task id ``key``, or -1."""
        cdef PyObject **slots = self._slots
        cdef Py_ssize_t i = home_slot(key, self._mask)
        while slots[i] != NULL:
            if slots[i] != LEFT and (<Task>slots[i])._id == key:
                return i
            i = (i + 1) & self._mask
        return -1

    cdef int _reserve(self, Py_ssize_t more) except -1:
        """Make room for ``more`` tasks at once: one rebuild, where adding them one by one
        would double the table again and again (a launch of hundreds to a new executor)."""
        cdef Py_ssize_t n = self._mask + 1
        if 2 * (self._count + more) <= n:  # room: slots left by tasks are _add's to clear
            return 0
        while 2 * (self._count + more) > n:
            n *= 2
        self._rebuild(n)
        return 0

    cdef int _add(self, Task task) except -1:
        """Append ``task`` (not held yet: launch_tasks launches a task held nowhere)."""
        cdef Py_ssize_t i, n = self._mask + 1
        if 2 * (self._count + self._left + 1) > n:  # short probes: half the slots empty
            self._rebuild(2 * n if 4 * (self._count + 1) > n else n)
        i = home_slot(task._id, self._mask)
        while self._slots[i] != NULL and self._slots[i] != LEFT:
            i = (i + 1) & self._mask
        if self._slots[i] == LEFT:
            self._left -= 1
        Py_INCREF(task)
        self._slots[i] = <PyObject *>task
        task._run_prev = self._last
        task._run_next = NULL
        if self._last != NULL:
            (<Task>self._last)._run_next = <PyObject *>task
        else:
            self._first = <PyObject *>task
        self._last = <PyObject *>task
        self._count += 1
        return 0

    cdef void _remove_slot(self, Py_ssize_t i) noexcept:
        """Take out the task in slot ``i`` and drop the table's reference to it."""
        cdef Task task = <Task>self._slots[i]
        if task._run_prev != NULL:
            (<Task>task._run_prev)._run_next = task._run_next
        else:
            self._first = task._run_next
        if task._run_next != NULL:
            (<Task>task._run_next)._run_prev = task._run_prev
        else:
            self._last = task._run_prev
        task._run_prev = task._run_next = NULL
        self._slots[i] = LEFT
        self._left += 1
        self._count -= 1
        if self._slots[(i + 1) & self._mask] == NULL:
            self._empty_left_slots(i)
        Py_DECREF(task)  # the caller's ``task`` still holds one

    cdef inline void _empty_left_slots(self, Py_ssize_t i) noexcept:
        """Slot ``i``, left by a task, is followed by an empty slot: no probe for a task
        passes through it, so it becomes empty, and so do the left slots just before it.
        Tasks leave a run of consecutive ids in about launch order, so the last one to
        leave empties the run's slots: the table seldom fills with left slots and needs
        no rebuild for them."""
        cdef PyObject **slots = self._slots
        while slots[i] == LEFT:
            slots[i] = NULL
            self._left -= 1
            i = (i - 1) & self._mask

    cdef void _clear(self) noexcept:
        cdef PyObject *p = self._first
        cdef Task task
        cdef Py_ssize_t i
        while p != NULL:
            task = <Task>p
            p = task._run_next
            task._run_prev = task._run_next = NULL
            Py_DECREF(task)
        for i in range(self._mask + 1):
            self._slots[i] = NULL
        self._first = self._last = NULL
        self._count = self._left = 0

    cdef Py_ssize_t _find(self, object task_id):
        if type(task_id) is not int:
            return -1
        cdef long long key = as_long_long(task_id)
        return -1 if key == 0 else self._slot_of(key)

    def __len__(self):
        return self._count

    def __contains__(self, task_id):
        return self._find(task_id) >= 0

    def __getitem__(self, task_id):
        cdef Py_ssize_t i = self._find(task_id)
        if i < 0:
            raise KeyError(task_id)
        return <object>self._slots[i]

    def get(self, task_id, default=None):
        cdef Py_ssize_t i = self._find(task_id)
        return default if i < 0 else <object>self._slots[i]

    def values(self):
        """The tasks, in launch order (a list)."""
        cdef list tasks = []
        cdef PyObject *p = self._first
        while p != NULL:
            tasks.append(<object>p)
            p = (<Task>p)._run_next
        return tasks

    def keys(self):
        return [task.task_id for task in self.values()]

    def items(self):
        return [(task.task_id, task) for task in self.values()]

    def __iter__(self):
        return iter(self.keys())

    def clear(self):
        self._clear()


cdef class ClientTasks:
    """A client's tasks in flight: client task id -> Task, in submission order
    (``client.tasks``; a dict in the reference).

    While the client numbers its tasks in increasing order, as zsched's client does, they
    sit in an array in that order, their ids in another beside it: a task joins and leaves
    with a store, and a cancel finds its id by bisection. The array is compacted when it is
    full and half empty. Once an id is not above the one before (or not a 64-bit int), the
    tasks move to a dict, for good: the same behaviour, at a dict's cost. It holds a
    reference to each task."""

    def __dealloc__(self):
        self._clear()
        free(self._tasks)
        free(self._keys)

    cdef int _add(self, Task task) except -1:
        """Hold ``task`` under its client task id: 0, or 1 (and nothing held) where a task
        of that id is held already. Increasing ids need no look-up."""
        cdef long long key = task._ctid
        if self._by_id is None and (task._ctid_big or (self._any and key <= self._last_key)
                                    or self._end >= INT_MAX):  # positions are C ints
            self._to_dict()
        if self._by_id is not None:
            client_task_id = task.client_task_id
            if client_task_id in self._by_id:
                return 1
            self._by_id[client_task_id] = task
            return 0
        if self._end == self._capacity:
            self._make_room()
        Py_INCREF(task)
        self._tasks[self._end] = <PyObject *>task
        self._keys[self._end] = key
        task._client_pos = <int>self._end
        self._end += 1
        self._count += 1
        self._any = True
        self._last_key = key
        return 0

    cdef void _make_room(self) except *:
        cdef Py_ssize_t i, n = 0
        cdef Py_ssize_t capacity = self._capacity
        if self._head == 0 and self._count == self._end:  # no gap: nothing moves
            n = self._end
        else:
            for i in range(self._head, self._end):  # compact: the tasks to the front, in order
                if self._tasks[i] != NULL:
                    self._tasks[n] = self._tasks[i]
                    self._keys[n] = self._keys[i]
                    (<Task>self._tasks[n])._client_pos = <int>n
                    n += 1
        self._head = 0
        self._end = n
        if 2 * n >= capacity:
            capacity = 2 * capacity if capacity else 64
            self._tasks = <PyObject **>grow_array(self._tasks, capacity, sizeof(PyObject *))
            self._keys = <long long *>grow_array(self._keys, capacity, sizeof(long long))
            self._capacity = capacity

    cdef void _to_dict(self) except *:
        cdef dict by_id = {}
        cdef Py_ssize_t i
        cdef Task task
        for i in range(self._head, self._end):
            if self._tasks[i] != NULL:
                task = <Task>self._tasks[i]
                by_id[task.client_task_id] = task
        self._clear()
        self._by_id = by_id

    cdef inline void _discard(self, Task task) noexcept:
        """Take ``task`` out (array mode; the caller holds a reference to it)."""
        cdef Py_ssize_t pos = task._client_pos
        if pos < 0:
            return
        task._client_pos = -1
        self._tasks[pos] = NULL
        self._count -= 1
        if self._count == 0:
            self._head = self._end = 0
        else:
            while self._tasks[self._head] == NULL:
                self._head += 1
        Py_DECREF(task)

    cdef int _remove(self, Task task) except -1:
        """``task`` ended: as ``pop(task.client_task_id, None)``."""
        if self._by_id is not None:
            self._by_id.pop(task.client_task_id, None)
        else:
            self._discard(task)
        return 0

    cdef Py_ssize_t _find(self, object client_task_id):
        """The array index of a task of the client with this id, or -1."""
        cdef int overflow = 0
        cdef long long key
        cdef Py_ssize_t low = self._head, high = self._end, middle
        if type(client_task_id) is not int:
            return -1
        key = PyLong_AsLongLongAndOverflow(client_task_id, &overflow)
        if overflow:
            return -1
        while low < high:
            middle = (low + high) // 2
            if self._keys[middle] < key:
                low = middle + 1
            else:
                high = middle
        if low < self._end and self._keys[low] == key and self._tasks[low] != NULL:
            return low
        return -1

    cdef void _clear(self) noexcept:
        cdef Py_ssize_t i
        cdef Task task
        for i in range(self._head, self._end):
            if self._tasks[i] != NULL:
                task = <Task>self._tasks[i]
                self._tasks[i] = NULL
                task._client_pos = -1
                Py_DECREF(task)
        self._head = self._end = self._count = 0

    def __len__(self):
        return len(self._by_id) if self._by_id is not None else self._count

    def __contains__(self, client_task_id):
        if self._by_id is not None:
            return client_task_id in self._by_id
        return self._find(client_task_id) >= 0

    def get(self, client_task_id, default=None):
        if self._by_id is not None:
            return self._by_id.get(client_task_id, default)
        cdef Py_ssize_t i = self._find(client_task_id)
        return default if i < 0 else <object>self._tasks[i]

    def __getitem__(self, client_task_id):
        task = self.get(client_task_id)
        if task is None:
            raise KeyError(client_task_id)
        return task

    def pop(self, client_task_id, *default):
        cdef Task task
        if self._by_id is not None:
            return self._by_id.pop(client_task_id, *default)
        cdef Py_ssize_t i = self._find(client_task_id)
        if i < 0:
            if default:
                return default[0]
            raise KeyError(client_task_id)
        task = <Task>self._tasks[i]
        self._discard(task)
        return task

    def values(self):
        """The tasks, in submission order (a list)."""
        if self._by_id is not None:
            return list(self._by_id.values())
        return [<object>self._tasks[i] for i in range(self._head, self._end)
                if self._tasks[i] != NULL]

    def keys(self):
        if self._by_id is not None:
            return list(self._by_id)
        return [task.client_task_id for task in self.values()]

    def items(self):
        return [(task.client_task_id, task) for task in self.values()] if self._by_id is None \
            else list(self._by_id.items())

    def __iter__(self):
        return iter(self.keys())

    def clear(self):
        if self._by_id is not None:
            self._by_id.clear()
        else:
            self._clear()


def queue_tasks(client, SubmitRows rows, next_id, double now, pending, dict functions):
    cdef ClientTasks client_tasks = client.tasks
    cdef ResultRows results = client.results
    cdef bytes frame = rows._frame  # held by the tasks that come from it
    cdef const uint8_t *base = <const uint8_t *>PyBytes_AS_STRING(frame)
    cdef bint shared = len(frame) <= UINT32_MAX  # else each task's arguments are copied out
    cdef Reader r
    cdef Py_ssize_t i, digest_len, args_len, missing = 0
    cdef const uint8_t *digest
    cdef const uint8_t *args
    cdef int64_t retries, client_task_id
    cdef bint big, big_ctid
    cdef Task task
    cdef bytes function = None  # the digest of the row before, if its function is held
    cdef object blob = None
    cdef long long task_id = next_id
    r.p = base + rows._first
    r.end = base + rows._end
    for i in range(rows._count):  # each row checked by read_submit_tasks
        read_array_header(&r)
        read_int(&r, &client_task_id, &big_ctid)
        read_bin(&r, &digest, &digest_len)
        read_bin(&r, &args, &args_len)
        read_int(&r, &retries, &big)
        if (function is None or digest_len != len(function)
                or memcmp(digest, PyBytes_AS_STRING(function), digest_len) != 0):
            # a run of tasks of one function shares one digest object
            function = PyBytes_FromStringAndSize(<const char *>digest, digest_len)
            blob = functions.get(function)
            if blob is None:
                function = None
        if function is None:
            results._write(client_task_id, big_ctid, ERROR, PyBytes_AS_STRING(<bytes>NO_FUNCTION),
                           len(<bytes>NO_FUNCTION))
            missing += 1
            continue
        task = Task.__new__(Task)
        task._client_pos = -1
        task._ctid = client_task_id
        task._ctid_big = big_ctid
        if client_tasks._add(task):  # an id in flight already: refused
            continue
        task._id = task_id
        if big or retries > INT_MAX:  # runs left after it raises, clamped to a C int
            task._retries = INT_MAX
        else:
            task._retries = INT_MIN if retries < INT_MIN else <int>retries
        task.client = client
        task.function = function
        if shared:
            task._frame = frame
            task._args_at = <uint32_t>(args - base)
        else:
            task._frame = PyBytes_FromStringAndSize(<const char *>args, args_len)
        task._args_len = <uint32_t>args_len
        task.function_blob = blob
        task.queued_at = now
        queue_append(pending, task)
        task_id += 1
    return task_id, missing


def launch_tasks(tasks, long count, executor, LatencyHistogram latency, double now):
    cdef long launched = 0
    cdef list rows = []
    cdef dict functions = {}
    launch(tasks, count, executor, latency, now, None, rows, functions, &launched)
    return rows, functions, launched


def offer_and_launch(SlotTable slots, dict executors_by_slot, pending, long n_pending,
                     Py_ssize_t limit, LatencyHistogram latency, double now, bytes header):
    # Fused: each row goes from the task to the wire's LaunchWriter as soon as it is decided.
    cdef Py_ssize_t i, index, n = slots._offer(n_pending)
    cdef long count, launched = 0, total = 0
    cdef list launches = []
    cdef list frames
    cdef LaunchWriter writer
    for i in range(n):
        index = slots._touched[i]
        count = slots._offered[i]
        executor = executors_by_slot[index]
        writer = LaunchWriter(header, executor.functions, limit)
        launch(pending, count, executor, latency, now, writer, None, None, &launched)
        frames = writer.finish()
        total += launched
        if launched < count:
            slots.release(index, count - launched)
        if frames:
            launches.append((executor, frames))
    return launches, total


cdef int launch(tasks, long count, executor, LatencyHistogram latency, double now,
                LaunchWriter writer, list rows, dict functions, long *n_launched) except -1:
    """``launch_tasks``, each launch written by ``writer`` as soon as it is decided, or else
    appended to ``rows`` (its function in ``functions``); the number in ``n_launched``."""
    cdef RunningTasks running = executor.running
    cdef dict avoid = executor.suspect_losses
    cdef Py_ssize_t available = len(tasks)
    cdef long launched = 0
    cdef Task task
    running._reserve(count if count < available else available)
    while launched < count and available > 0:
        task = queue_popleft(tasks)
        available -= 1
        if task._cancelled:
            continue
        if is_suspect(task):  # no suspect of the same loss may join it here
            avoid[task.loss] = avoid.get(task.loss, 0) + 1
        task.attempt += 1
        task.executor = executor
        running._add(task)
        latency.observe_one(now - task.queued_at)
        if writer is not None:
            add_launch_row(writer, <uint64_t>task._id, <uint64_t>task.attempt, task.function,
                           <PyObject *>task.function_blob,
                           PyBytes_AS_STRING(task._frame) + task._args_at, task._args_len)
        else:
            rows.append([task._id, task.attempt, task.function, task.args])
            functions.setdefault(task.function, task.function_blob)
        launched += 1
    n_launched[0] = launched
    return 0


cdef struct StatusRow:
    int64_t task_id           # 0 where it is out of range: no task has that id
    int64_t attempt
    int64_t state             # 0 where it is out of range: no task state
    bint big_attempt
    const uint8_t *payload
    Py_ssize_t payload_size


cdef enum:
    ROWS_AHEAD = 32  # StatusUpdates rows read, and their memory fetched, before any is applied


cdef inline int read_status_row(Reader *r, StatusRow *row) except -1:
    cdef bint big_id, big_state
    read_array_header(r)
    read_int(r, &row.task_id, &big_id)
    read_int(r, &row.attempt, &row.big_attempt)
    read_int(r, &row.state, &big_state)
    read_bin(r, &row.payload, &row.payload_size)
    if big_id:
        row.task_id = 0
    if big_state:
        row.state = 0
    return 0


cdef struct Tally:
    # What a StatusUpdates did, as the twin's _Tally counts it
    Py_ssize_t stale, freed, done, errors, finished, failed, retried


cdef inline int read_rows_ahead(Reader *r, StatusRow *rows, Py_ssize_t n,
                                RunningTasks running) except -1:
    """The next ``n`` rows, read into ``rows``, and the memory of their slots and of their
    tasks asked for before any is used: with many tasks in flight it is out of the caches,
    and the waits then overlap."""
    cdef Py_ssize_t j
    cdef const char *found
    for j in range(n):  # each row checked by read_status_updates
        read_status_row(r, &rows[j])
        prefetch(&running._slots[home_slot(rows[j].task_id, running._mask)])
    for j in range(n):  # its task is in its home slot, mostly
        found = <const char *>running._slots[home_slot(rows[j].task_id, running._mask)]
        if found != NULL and found != <const char *>LEFT:
            prefetch(found)
            prefetch(found + 64)
            prefetch(found + sizeof(Task) - 1)
    return 0


cdef inline Task take_task(RunningTasks running, StatusRow *row, dict losses, Tally *tally):
    """The task of ``row``, taken from its executor (its loss, if a suspect, released), or
    None where the executor does not hold it at that attempt: a stale row."""
    cdef Py_ssize_t slot = running._slot_of(row.task_id)  # no task id is 0
    cdef Task task
    cdef object left
    if slot < 0:
        tally.stale += 1
        return None
    task = <Task>running._slots[slot]
    if row.big_attempt or task.attempt != row.attempt:
        tally.stale += 1
        return None
    running._remove_slot(slot)
    tally.freed += 1
    task.executor = None
    if is_suspect(task):
        left = losses[task.loss] - 1
        if left:
            losses[task.loss] = left
        else:
            del losses[task.loss]
    return task


cdef inline int settle(Task task, long state, pending, double now, list returned,
                       Tally *tally) except -1:
    """Count ``task``, which left its executor in ``state`` (0: no task state); queue it again
    if it raised with retries left, or in ``returned`` if given back unstarted. 1 if its
    result goes to its client, else 0."""
    if state == FINISHED:
        tally.done += 1
        if task._cancelled:
            return 0
        tally.finished += 1
        return 1
    if state == RETURNED:  # given back unstarted: not the task's failure
        if not task._cancelled:
            returned.append(task)
        return 0
    tally.errors += 1
    if task._cancelled:
        return 0
    if state == FAILED and task._retries > 0:
        task._retries -= 1
        task.queued_at = now
        pending.appendleft(task)
        tally.retried += 1
        return 0
    tally.failed += 1
    return 1


cdef inline int queue_result(Task task, long state, StatusRow *row, ClientTasks client_tasks,
                             ResultRows client_results) except -1:
    """``task``'s result, out of its client's tasks and into its client's results (a state
    that is no task state ends it ERROR, ``NO_TASK_STATE``)."""
    cdef const uint8_t *payload = row.payload
    cdef Py_ssize_t payload_size = row.payload_size
    if state != FINISHED and state != FAILED and state != KILLED and state != ERROR:
        state = ERROR
        payload = <const uint8_t *>PyBytes_AS_STRING(<bytes>NO_TASK_STATE)
        payload_size = len(<bytes>NO_TASK_STATE)
    client_tasks._remove(task)
    client_results._write(task._ctid, task._ctid_big, state, <const char *>payload, payload_size)
    return 0


def apply_status_updates(executor, StatusRows updates, pending, double now, dict counts):
    cdef RunningTasks running = executor.running
    cdef dict losses = executor.suspect_losses
    cdef Tally tally
    cdef list returned = []
    cdef Py_ssize_t first, n, j
    cdef Task task
    cdef long state
    cdef object client, last_client = None
    cdef ClientTasks client_tasks = None
    cdef ResultRows client_results = None
    cdef bytes frame = updates._frame  # held while its rows are read
    cdef Reader r
    cdef StatusRow rows[ROWS_AHEAD]
    memset(&tally, 0, sizeof(Tally))
    r.p = <const uint8_t *>PyBytes_AS_STRING(frame) + updates._first
    r.end = <const uint8_t *>PyBytes_AS_STRING(frame) + updates._end
    for first in range(0, updates._count, ROWS_AHEAD):
        n = min(ROWS_AHEAD, updates._count - first)
        read_rows_ahead(&r, rows, n, running)
        for j in range(n):
            task = take_task(running, &rows[j], losses, &tally)
            if task is None:
                continue
            state = rows[j].state
            if not settle(task, state, pending, now, returned, &tally):
                continue
            client = task.client
            if client is not last_client:  # a batch's tasks mostly share one client
                last_client = client
                client_tasks = client.tasks
                client_results = client.results
            queue_result(task, state, &rows[j], client_tasks, client_results)
    if tally.done:  # each an attribute or a dict item read, added to and stored: not for nothing
        executor.tasks_done += tally.done
    if tally.errors:
        executor.tasks_failed += tally.errors
    if tally.finished:
        counts["finished"] += tally.finished
    if tally.failed:
        counts["failed"] += tally.failed
    if tally.retried:
        counts["retried"] += tally.retried
    return tally.stale, tally.freed, tally.done + tally.errors, tally.retried, returned


LATENCY_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0)


cdef class LatencyHistogram:
    """Seconds tasks waited, in fixed buckets (see the twin)."""

    def __cinit__(self, bounds=LATENCY_BUCKETS):
        cdef Py_ssize_t i
        self.bounds = tuple(float(b) for b in bounds)
        self._n = len(self.bounds)
        self._bounds = <double *>malloc((self._n + 1) * sizeof(double))
        self._counts = <long long *>malloc((self._n + 1) * sizeof(long long))
        if self._bounds == NULL or self._counts == NULL:
            raise MemoryError()
        for i in range(self._n):
            self._bounds[i] = self.bounds[i]
        for i in range(self._n + 1):
            self._counts[i] = 0

    def __dealloc__(self):
        free(self._bounds)
        free(self._counts)

    @property
    def counts(self):
        return [self._counts[i] for i in range(self._n + 1)]

    cdef inline void observe_one(self, double seconds) noexcept:
        cdef Py_ssize_t low = 0, high = self._n, middle
        while low < high:  # bisect_left: the first bound not below seconds
            middle = (low + high) // 2
            if self._bounds[middle] < seconds:
                low = middle + 1
            else:
                high = middle
        self._counts[low] += 1
        self.sum += seconds
        self.count += 1

    def observe(self, double seconds):
        self.observe_one(seconds)

    def snapshot(self):
        buckets, running = [], 0
        for bound, n in zip(self.bounds + ("+Inf",), self.counts):
            running += n
            buckets.append([bound, running])
        return {"buckets": buckets, "sum": self.sum, "count": self.count}
