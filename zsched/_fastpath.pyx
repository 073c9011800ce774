# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled fast path; ``_fastpath_py.py`` is the reference it must agree with (see it
for what each name does).

``SlotTable`` keeps the per-executor state in C arrays and its two rings in C circular
buffers, so ``offer`` touches no Python object per task: Python objects are made once per
executor that receives tasks. ``Task`` is a C struct with typed fields. The per-task
messages are read and written in place, with the msgpack forms of ``_frames.pxd``: a
SubmitTasks or StatusUpdates frame is checked once (``read_submit_tasks``,
``read_status_updates``) and its rows read where they lie by ``queue_tasks`` and
``apply_status_updates``; ``launch_tasks`` writes each task's LaunchTasks row straight into
the frame's bytes, and ``ResultRows`` each result row; a task's arguments stay in the
SubmitTasks frame they came in. So a task makes one Python object in the driver, its
``Task``, and the loops run no interpreter in between. ``RunningTasks`` (an executor's tasks by task id) and ``ClientTasks`` (a client's
tasks by client task id) keep their tasks in C arrays, so a task joins and leaves them
without a dict entry made and dropped per task. ``rows_have_types`` compares each item's
type with the expected one, pointer to pointer.
"""
cimport cython
from cpython.long cimport PyLong_AsLongAndOverflow, PyLong_AsLongLongAndOverflow, PyLong_FromLongLong
from cpython.object cimport PyTypeObject
from cpython.ref cimport PyObject, Py_INCREF, Py_DECREF


cdef extern from "Python.h":
    void PyObject_GC_UnTrack(object)
    PyObject *PyList_GET_ITEM(object, Py_ssize_t)
    PyObject *PyTuple_GET_ITEM(object, Py_ssize_t)
    void PyList_SET_ITEM(object, Py_ssize_t, PyObject *)
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
from libc.limits cimport INT_MAX, INT_MIN
from libc.math cimport ceil
from libc.stdint cimport UINT32_MAX, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, calloc, realloc, free
from libc.string cimport memcmp, memcpy
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.exc cimport PyErr_Occurred
from cpython.long cimport PyLong_AsUnsignedLongLong, PyLong_FromLong, PyLong_FromUnsignedLongLong

from ._frames cimport (HEADER_ROOM, UINT_ROOM, Buffer, Reader, get_big_endian, join, need,
                       read_array_header, read_bin, read_int, read_int_object, read_number, release,
                       reserve, write_array_header, write_bin, write_int, write_map_header, write_uint)

from collections import deque

from msgpack import unpackb

from ._fastpath_py import BATCH_FRACTION as _BATCH_FRACTION
from ._fastpath_py import NO_FUNCTION, NO_TASK_STATE
from .task_state import TaskState

cdef long FINISHED = TaskState.FINISHED
cdef long FAILED = TaskState.FAILED
cdef long RETURNED = TaskState.RETURNED
cdef long KILLED = TaskState.KILLED
cdef long ERROR = TaskState.ERROR
cdef long BATCH_FRACTION = _BATCH_FRACTION


cdef inline void set_item(list row, Py_ssize_t i, object value) noexcept:
    """``row[i] = value``, for ``i`` below ``len(row)``, inline."""
    cdef PyObject *old = PyList_GET_ITEM(row, i)
    Py_INCREF(value)
    PyList_SET_ITEM(row, i, <PyObject *>value)
    Py_DECREF(<object>old)


cdef PyCFunction c_method(type cls, str name, int flags) noexcept:
    """The C function of the method ``name`` of the built-in type ``cls``, if it takes
    its arguments as ``flags`` says; else NULL."""
    cdef object method = cls.__dict__.get(name)
    if type(method) is not <type>&PyMethodDescr_Type:
        return NULL
    cdef PyMethodDef *definition = (<PyMethodDescrObject *>method).d_method
    return definition.ml_meth if definition.ml_flags == flags else NULL


# The queue of tasks waiting for a slot is a deque. Its append and popleft are called
# through their C functions (one C call) rather than as bound methods (an interpreter call
# each, about a sixth of a task's scheduling instructions); any other queue, or a deque
# whose methods take their arguments otherwise, through its methods.
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


cdef struct Ring:
    Py_ssize_t *items    # each executor index at most once, so capacity entries suffice
    Py_ssize_t head
    Py_ssize_t length


cdef inline void ring_push(Ring *ring, Py_ssize_t index, Py_ssize_t capacity) noexcept:
    cdef Py_ssize_t tail = ring.head + ring.length  # below 2 * capacity: no division needed
    if tail >= capacity:
        tail -= capacity
    ring.items[tail] = index
    ring.length += 1


cdef inline Py_ssize_t ring_pop(Ring *ring, Py_ssize_t capacity) noexcept:
    cdef Py_ssize_t index = ring.items[ring.head]
    ring.head += 1
    if ring.head == capacity:
        ring.head = 0
    ring.length -= 1
    return index


cdef int ring_grow(Ring *ring, Py_ssize_t old, Py_ssize_t capacity):
    """Move the ring to a buffer of ``capacity`` entries, unwrapped; -1 when out of memory."""
    cdef Py_ssize_t i
    cdef Py_ssize_t *items = <Py_ssize_t *>malloc(capacity * sizeof(Py_ssize_t))
    if items == NULL:
        return -1
    for i in range(ring.length):
        items[i] = ring.items[(ring.head + i) % old]
    free(ring.items)
    ring.items = items
    ring.head = 0
    return 0


cdef void *grow_array(void *array, Py_ssize_t count, size_t size) except NULL:
    cdef void *p = realloc(array, count * size)
    if p == NULL:
        raise MemoryError()
    return p


cdef class SlotTable:
    cdef long *_cores
    cdef long *_total       # window: tasks the executor may hold
    cdef long *_held        # tasks the executor holds
    cdef long *_assigned    # tasks given in the current offer
    cdef char *_active
    cdef char *_in_idle
    cdef char *_in_ring
    cdef Py_ssize_t *_touched  # after _offer: the executors given tasks, in order
    cdef long *_offered        # after _offer: the tasks each of them was given
    cdef Ring _idle
    cdef Ring _ring
    cdef Py_ssize_t _size   # executor indices in use or unused
    cdef Py_ssize_t _capacity
    cdef list _unused

    def __cinit__(self):
        self._unused = []
        self._grow(16)

    def __dealloc__(self):
        free(self._cores); free(self._total); free(self._held); free(self._assigned)
        free(self._active); free(self._in_idle); free(self._in_ring); free(self._touched)
        free(self._offered)
        free(self._idle.items); free(self._ring.items)

    cdef void _grow(self, Py_ssize_t capacity) except *:
        cdef Py_ssize_t i, old = self._capacity
        self._cores = <long *>grow_array(self._cores, capacity, sizeof(long))
        self._total = <long *>grow_array(self._total, capacity, sizeof(long))
        self._held = <long *>grow_array(self._held, capacity, sizeof(long))
        self._assigned = <long *>grow_array(self._assigned, capacity, sizeof(long))
        self._active = <char *>grow_array(self._active, capacity, sizeof(char))
        self._in_idle = <char *>grow_array(self._in_idle, capacity, sizeof(char))
        self._in_ring = <char *>grow_array(self._in_ring, capacity, sizeof(char))
        self._touched = <Py_ssize_t *>grow_array(self._touched, capacity, sizeof(Py_ssize_t))
        self._offered = <long *>grow_array(self._offered, capacity, sizeof(long))
        if ring_grow(&self._idle, old, capacity) < 0 or ring_grow(&self._ring, old, capacity) < 0:
            raise MemoryError()
        for i in range(old, capacity):
            self._cores[i] = self._total[i] = self._held[i] = self._assigned[i] = 0
            self._active[i] = self._in_idle[i] = self._in_ring[i] = 0
        self._capacity = capacity

    cdef inline void _enqueue(self, Py_ssize_t index) noexcept:
        cdef long held = self._held[index]
        if held < self._cores[index] and held < self._total[index] and not self._in_idle[index]:
            self._in_idle[index] = 1
            ring_push(&self._idle, index, self._capacity)
        if held < self._total[index] and not self._in_ring[index]:
            self._in_ring[index] = 1
            ring_push(&self._ring, index, self._capacity)

    cdef void _check(self, Py_ssize_t index) except *:
        if index < 0 or index >= self._size or not self._active[index]:
            raise KeyError(index)

    def add(self, long cores, long slots):
        cdef Py_ssize_t index
        if cores < 1 or slots < 1:
            raise ValueError("an executor needs at least one core and one slot")
        if self._unused:
            index = self._unused.pop()
        else:
            if self._size == self._capacity:
                self._grow(self._capacity * 2)
            index = self._size
            self._size += 1
        self._cores[index] = cores
        self._total[index] = slots
        self._held[index] = 0
        self._active[index] = 1
        self._enqueue(index)
        return index

    def remove(self, Py_ssize_t index):
        self._check(index)
        self._active[index] = 0
        self._cores[index] = self._total[index] = self._held[index] = 0
        self._unused.append(index)

    def release(self, Py_ssize_t index, long n):
        self._check(index)
        if n < 0 or n > self._held[index]:
            raise ValueError("release of %d tasks: executor %d holds %d"
                             % (n, index, self._held[index]))
        self._held[index] -= n
        self._enqueue(index)

    def resize(self, Py_ssize_t index, long slots):
        self._check(index)
        if slots < 0:
            raise ValueError("a window cannot be negative")
        self._total[index] = slots
        self._enqueue(index)

    def free(self, Py_ssize_t index):
        self._check(index)
        return self._total[index] - self._held[index]

    def total(self, Py_ssize_t index):
        self._check(index)
        return self._total[index]

    def total_free(self):
        cdef Py_ssize_t i
        cdef long count = 0
        for i in range(self._size):
            if self._total[i] > self._held[i]:
                count += self._total[i] - self._held[i]
        return count

    cdef long _deal(self, Ring *ring, char *in_ring, bint up_to_cores, long remaining,
                    long n_offer, Py_ssize_t *n_touched):
        """Deal tasks round the ring, each executor up to its window (or up to its cores as
        well, unless it takes a batch); the tasks still to deal. See the reference."""
        cdef Py_ssize_t index, capacity = self._capacity
        cdef long limit, keep_below, take, wanted, batch, batches
        cdef long start = remaining, n_ring = ring.length
        cdef bint batched
        cdef long share = 1
        if not up_to_cores and n_ring > 0:
            share = (remaining + n_ring - 1) // n_ring
        while remaining > 0 and ring.length > 0:
            index = ring_pop(ring, capacity)
            batch = self._total[index] // BATCH_FRACTION
            batched = batch > self._cores[index] and n_offer >= batch
            limit = self._total[index]
            keep_below = limit
            if up_to_cores:
                keep_below = self._cores[index] if self._cores[index] < limit else limit
                limit = batch if batched else keep_below
            if not self._active[index] or self._held[index] >= limit:
                in_ring[index] = 0
                continue
            if self._assigned[index] == 0:
                self._touched[n_touched[0]] = index
                n_touched[0] += 1
            wanted = share
            if batched:
                batches = (start + batch - 1) // batch
                if batches > n_ring:
                    batches = n_ring
                wanted = (start + batches - 1) // batches
            take = limit - self._held[index]
            if take > wanted:
                take = wanted
            if take > remaining:
                take = remaining
            self._assigned[index] += take
            self._held[index] += take
            remaining -= take
            if self._held[index] < keep_below:
                ring_push(ring, index, capacity)
            else:
                in_ring[index] = 0
        return remaining

    cdef Py_ssize_t _offer(self, long n_tasks) except -1:
        """Deal as ``offer`` does: the executors given tasks are ``_touched[:n]``, the
        number each was given ``_offered[:n]``; returns n."""
        cdef Py_ssize_t index, i, n_touched = 0
        cdef long remaining
        remaining = self._deal(&self._idle, self._in_idle, True, n_tasks, n_tasks, &n_touched)  # idle cores
        self._deal(&self._ring, self._in_ring, False, remaining, n_tasks, &n_touched)  # then queue room
        for i in range(n_touched):
            index = self._touched[i]
            self._offered[i] = self._assigned[index]
            self._assigned[index] = 0
        return n_touched

    def offer(self, long n_tasks):
        cdef Py_ssize_t i, n = self._offer(n_tasks)
        return [(self._touched[i], self._offered[i]) for i in range(n)]


@cython.no_gc
cdef class Task:
    # Outside the garbage collector: a million queued tasks would otherwise be traversed
    # again and again by its collections (about 0.5 us per task). A task is in a cycle
    # only while its client's ``tasks`` or its executor's ``running`` holds it, and the
    # scheduler takes it out of both when it ends, is cancelled, or its client or executor
    # goes (``drop_client``, ``remove_executor``).
    #
    # 128 bytes, for a million tasks queued at once: the task id and the client's id of the
    # task are kept as C integers (no int object per task), the number of retries too, the
    # failures and the loss of a suspect share one field,
    # and the arguments are not a bytes object of their own but where they lie in the
    # SubmitTasks frame they came in (held while any of its tasks is).
    cdef public object client
    cdef public object function   # its function's digest: one object for a run of tasks of one function
    cdef bytes _frame             # where its arguments lie: _frame[_args_at:_args_at + _args_len]
    cdef public object executor
    cdef public object function_blob
    cdef object _suspect          # None, or (failures, loss) once a loss is charged to it
    cdef public double queued_at
    cdef long long _id            # the task id: its key in RunningTasks
    cdef int64_t _ctid            # the client's id of it: an int64, or the bits of a uint64 (_ctid_big)
    cdef PyObject *_run_prev      # its neighbours in its executor's RunningTasks, in launch order
    cdef PyObject *_run_next
    cdef int _client_pos          # its index in its client's ClientTasks array, or -1
    cdef public int attempt
    cdef int _retries             # runs left after it raises (more than INT_MAX: INT_MAX)
    cdef uint32_t _args_at
    cdef uint32_t _args_len
    cdef unsigned char _ctid_big  # _ctid is a client task id past 2**63 - 1, as a uint64
    cdef unsigned char _cancelled

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
    cdef PyObject **_slots     # a task, NULL (empty) or LEFT
    cdef Py_ssize_t _mask      # slots - 1; slots is a power of two
    cdef Py_ssize_t _count     # slots holding a task
    cdef Py_ssize_t _left      # slots left by a task
    cdef PyObject *_first
    cdef PyObject *_last

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
    cdef PyObject **_tasks     # NULL where a task left
    cdef long long *_keys      # increasing
    cdef Py_ssize_t _head      # _tasks[:_head] are all NULL
    cdef Py_ssize_t _end
    cdef Py_ssize_t _capacity
    cdef Py_ssize_t _count
    cdef bint _any             # a task was added: _last_key holds
    cdef long long _last_key
    cdef dict _by_id           # None while the ids increase

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
    cdef Buffer _data
    cdef Py_ssize_t *_ends       # where each row ends in _data
    cdef Py_ssize_t *_payloads   # each row's payload size
    cdef Py_ssize_t _count, _capacity

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


def launch_tasks(tasks, long count, executor, Py_ssize_t limit,
                 LatencyHistogram latency, double now, bytes header):
    cdef long launched = 0
    frames = launch(tasks, count, executor, limit, latency, now, header, &launched)
    return frames, launched


def offer_and_launch(SlotTable slots, dict executors_by_slot, pending, long n_pending,
                     Py_ssize_t limit, LatencyHistogram latency, double now, bytes header):
    cdef Py_ssize_t i, index, n = slots._offer(n_pending)
    cdef long count, launched = 0, total = 0
    cdef list launches = []
    cdef list frames
    for i in range(n):
        index = slots._touched[i]
        count = slots._offered[i]
        executor = executors_by_slot[index]
        frames = launch(pending, count, executor, limit, latency, now, header, &launched)
        total += launched
        if launched < count:
            slots.release(index, count - launched)
        if frames:
            launches.append((executor, frames))
    return launches, total


cdef inline bytes as_bytes(object value, str what):
    if type(value) is not bytes:
        raise TypeError(f"{what} must be bytes, not {type(value).__name__}")
    return <bytes>value


cdef bytes launch_frame(bytes header, dict needed, Buffer *rows, Py_ssize_t n_rows):
    """The LaunchTasks frame ``header + [needed, rows]``, ``rows`` being ``n_rows`` rows
    written in ``rows``."""
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


cdef list launch(tasks, long count, executor, Py_ssize_t limit, LatencyHistogram latency,
                 double now, bytes header, long *n_launched):
    """``launch_tasks``, with the number launched in ``n_launched``. The rows are written
    straight into the frame's bytes: a launch makes no Python object per task."""
    cdef RunningTasks running = executor.running
    cdef dict avoid = executor.suspect_losses
    cdef set known = executor.functions
    cdef list frames = []
    cdef dict needed = {}
    cdef Py_ssize_t size = 0, row_size, n_rows = 0, available = len(tasks)
    cdef long launched = 0
    cdef Task task
    cdef object digest, last_digest = None
    cdef bytes digest_bytes
    cdef const char *args
    cdef Py_ssize_t args_len
    cdef bint new
    cdef Buffer rows
    rows.data = NULL
    rows.length = rows.capacity = 0
    running._reserve(count if count < available else available)
    try:
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
            digest = task.function
            args = PyBytes_AS_STRING(task._frame) + task._args_at
            args_len = task._args_len
            if digest is last_digest:  # seen in this call: held by the executor or in needed
                new = False
            else:
                new = digest not in known and digest not in needed
                last_digest = digest
            digest_bytes = as_bytes(digest, "a function digest")
            row_size = args_len
            if new:
                row_size += len(task.function_blob)
            if n_rows and size + row_size > limit:  # ``new`` stays: needed did not hold digest
                frames.append(launch_frame(header, needed, &rows, n_rows))
                known.update(needed)
                needed = {}
                rows.length = n_rows = size = 0
            if new:
                needed[digest] = task.function_blob
            # the row [task id, attempt, function digest, pickled arguments]
            reserve(&rows, 1 + 2 * UINT_ROOM + 2 * HEADER_ROOM + len(digest_bytes) + args_len)
            rows.data[rows.length] = 0x94
            rows.length += 1
            write_uint(&rows, <uint64_t>task._id)
            write_uint(&rows, <uint64_t>task.attempt)
            write_bin(&rows, PyBytes_AS_STRING(digest_bytes), len(digest_bytes))
            write_bin(&rows, args, args_len)
            n_rows += 1
            size += row_size
            launched += 1
        if n_rows:
            frames.append(launch_frame(header, needed, &rows, n_rows))
            known.update(needed)
    finally:
        release(&rows)
    n_launched[0] = launched
    return frames


cdef class FrameRows:
    """The rows of a message's frame, checked by the function that read the frame and read
    in place by the fast path, so the rows make no Python object in the driver. A sequence
    of rows to anything else (decoded then)."""
    cdef bytes _frame
    cdef Py_ssize_t _array     # where the array of rows starts in _frame
    cdef Py_ssize_t _first     # where its first row starts
    cdef Py_ssize_t _end       # where it ends
    cdef Py_ssize_t _count

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


def apply_status_updates(executor, StatusRows updates, pending, double now, dict counts):
    cdef RunningTasks running = executor.running
    cdef dict losses = executor.suspect_losses
    cdef Py_ssize_t stale = 0, freed = 0, finished = 0, failed = 0, done = 0, errors = 0
    cdef Py_ssize_t retried = 0, slot, first, n, j, payload_size
    cdef list returned = []
    cdef Task task
    cdef long state
    cdef object left, client, last_client = None
    cdef ClientTasks client_tasks = None
    cdef ResultRows client_results = None
    cdef bytes frame = updates._frame  # held while its rows are read
    cdef Reader r
    cdef StatusRow rows[ROWS_AHEAD]
    cdef StatusRow *row
    cdef const uint8_t *payload
    cdef const char *found
    r.p = <const uint8_t *>PyBytes_AS_STRING(frame) + updates._first
    r.end = <const uint8_t *>PyBytes_AS_STRING(frame) + updates._end
    # In groups of ROWS_AHEAD rows: with a million tasks in flight, their entries in the
    # table of running tasks and the tasks themselves are out of the caches. Asking for all
    # of a group's memory before using any has the waits overlap, where looking up one
    # task after another would wait for each in turn.
    for first in range(0, updates._count, ROWS_AHEAD):
        n = min(ROWS_AHEAD, updates._count - first)
        for j in range(n):  # each row checked by read_status_updates
            read_status_row(&r, &rows[j])
            prefetch(&running._slots[home_slot(rows[j].task_id, running._mask)])
        for j in range(n):  # its task is in its home slot, mostly
            found = <const char *>running._slots[home_slot(rows[j].task_id, running._mask)]
            if found != NULL and found != <const char *>LEFT:
                prefetch(found)
                prefetch(found + 64)
                prefetch(found + sizeof(Task) - 1)
        for j in range(n):
            row = &rows[j]
            slot = running._slot_of(row.task_id)  # no task id is 0
            if slot < 0:
                stale += 1
                continue
            task = <Task>running._slots[slot]
            if row.big_attempt or task.attempt != row.attempt:
                stale += 1
                continue
            running._remove_slot(slot)
            freed += 1
            task.executor = None
            if is_suspect(task):
                left = losses[task.loss] - 1
                if left:
                    losses[task.loss] = left
                else:
                    del losses[task.loss]
            state = row.state  # 0: no task state
            if state == FINISHED:
                done += 1
                if task._cancelled:
                    continue
                finished += 1
            elif state == RETURNED:  # given back unstarted: not the task's failure
                if not task._cancelled:
                    returned.append(task)
                continue
            else:
                errors += 1
                if task._cancelled:
                    continue
                if state == FAILED and task._retries > 0:
                    task._retries -= 1
                    task.queued_at = now
                    pending.appendleft(task)
                    retried += 1
                    continue
                failed += 1
            payload = row.payload
            payload_size = row.payload_size
            if state != FINISHED and state != FAILED and state != KILLED and state != ERROR:
                state = ERROR  # no task state
                payload = <const uint8_t *>PyBytes_AS_STRING(<bytes>NO_TASK_STATE)
                payload_size = len(<bytes>NO_TASK_STATE)
            client = task.client
            if client is not last_client:  # a batch's tasks mostly share one client
                last_client = client
                client_tasks = client.tasks
                client_results = client.results
            client_tasks._remove(task)
            client_results._write(task._ctid, task._ctid_big, state, <const char *>payload,
                                  payload_size)
    if done:  # each an attribute or a dict item read, added to and stored: not for nothing
        executor.tasks_done += done
    if errors:
        executor.tasks_failed += errors
    if finished:
        counts["finished"] += finished
    if failed:
        counts["failed"] += failed
    if retried:
        counts["retried"] += retried
    return stale, freed, done + errors, retried, returned


cpdef long slots_per_core(double task_seconds, double prefetch_seconds, long tasks_per_core):
    cdef double queued = ceil(prefetch_seconds / (task_seconds if task_seconds > 1e-7 else 1e-7))
    if queued < 1:
        queued = 1
    if queued + 1 >= tasks_per_core:  # in doubles: no overflow
        return tasks_per_core
    return 1 + <long>queued


def window(executor, bint clamped, double prefetch_seconds, long tasks_per_core):
    if executor.decommissioning:
        return 0
    task_seconds = executor.task_seconds
    if clamped or executor.suspect_losses or task_seconds is None:
        return executor.cores
    return executor.cores * slots_per_core(task_seconds, prefetch_seconds, tasks_per_core)


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


LATENCY_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0)


cdef class LatencyHistogram:
    cdef double *_bounds
    cdef long long *_counts   # _n + 1 of them: the last one is above every bound
    cdef Py_ssize_t _n
    cdef readonly tuple bounds
    cdef public double sum
    cdef public long long count

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
