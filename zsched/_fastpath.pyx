# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled fast path; ``_fastpath_py.py`` is the reference it must agree with (see it
for what each name does).

``SlotTable`` keeps the per-executor state in C arrays and its two rings in C circular
buffers, so ``offer`` touches no Python object per task: Python objects are made once per
executor that receives tasks. ``Task`` is a C struct with typed fields; ``launch_tasks``
and ``apply_status_updates`` loop over it in C, with only the container operations that
the messages need (a dict entry per running task, the rows themselves), no attribute
lookups and no interpreter in between.
"""
cimport cython
from cpython.long cimport PyLong_AsLongAndOverflow


cdef extern from "Python.h":
    void PyObject_GC_UnTrack(object)
from libc.stdlib cimport malloc, realloc, free

from .protocol import TaskState

cdef long FINISHED = TaskState.FINISHED
cdef long FAILED = TaskState.FAILED
cdef long RETURNED = TaskState.RETURNED


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
    cdef Py_ssize_t *_touched
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
                    Py_ssize_t *n_touched):
        """Deal tasks round the ring, each executor up to its window (or up to its cores
        as well); the tasks still to deal."""
        cdef Py_ssize_t index, capacity = self._capacity
        cdef long limit, take
        # an idle core takes one task a turn, so every idle core gets one before any queue;
        # window room is taken up to an equal share of what waits, so a launch carries many
        # tasks, yet a window sized for shorter tasks than these does not take them all
        cdef long share = 1
        if not up_to_cores and ring.length > 0:
            share = (remaining + ring.length - 1) // ring.length
        while remaining > 0 and ring.length > 0:
            index = ring_pop(ring, capacity)
            limit = self._total[index]
            if up_to_cores and self._cores[index] < limit:
                limit = self._cores[index]
            if not self._active[index] or self._held[index] >= limit:
                in_ring[index] = 0
                continue
            if self._assigned[index] == 0:
                self._touched[n_touched[0]] = index
                n_touched[0] += 1
            take = limit - self._held[index]
            if take > share:
                take = share
            if take > remaining:
                take = remaining
            self._assigned[index] += take
            self._held[index] += take
            remaining -= take
            if self._held[index] < limit:
                ring_push(ring, index, capacity)
            else:
                in_ring[index] = 0
        return remaining

    def offer(self, long n_tasks):
        cdef Py_ssize_t index, i, n_touched = 0
        cdef long remaining
        remaining = self._deal(&self._idle, self._in_idle, True, n_tasks, &n_touched)  # idle cores
        self._deal(&self._ring, self._in_ring, False, remaining, &n_touched)  # then queue room
        result = []
        for i in range(n_touched):
            index = self._touched[i]
            result.append((index, self._assigned[index]))
            self._assigned[index] = 0
        return result


@cython.no_gc
cdef class Task:
    # Outside the garbage collector: a million queued tasks would otherwise be traversed
    # again and again by its collections (about 0.5 us per task). A task is in a cycle
    # only while its client's ``tasks`` or its executor's ``running`` holds it, and the
    # scheduler takes it out of both when it ends, is cancelled, or its client or executor
    # goes (``drop_client``, ``remove_executor``).
    cdef public object task_id
    cdef public object client
    cdef public object client_task_id
    cdef public object retries
    cdef public list row
    cdef public long attempt
    cdef public object executor
    cdef public tuple failures
    cdef public object loss
    cdef public bint cancelled
    cdef public double queued_at

    def __init__(self, task_id, client, client_task_id, retries, list row, double queued_at=0.0):
        self.task_id = task_id
        self.client = client
        self.client_task_id = client_task_id
        self.retries = retries
        self.row = row
        self.failures = ()
        self.queued_at = queued_at

    @property
    def function(self):
        return self.row[2]

    @property
    def args(self):
        return self.row[3]


def queue_tasks(client, list rows, next_id, double now, pending):
    cdef dict client_tasks = client.tasks
    cdef list row
    cdef Task task
    cdef tuple no_failures = ()
    cdef object last_function = None
    append = pending.append
    for row in rows:
        client_task_id, function, args, retries = row
        if function == last_function:  # one digest object for a run of tasks of one function
            function = last_function
        else:
            last_function = function
        row[0] = next_id
        row[1] = 0
        row[2] = function
        row[3] = args
        PyObject_GC_UnTrack(row)  # ints and bytes only, now and after each launch: no cycle
        task = Task.__new__(Task)
        task.task_id = next_id
        task.client = client
        task.client_task_id = client_task_id
        task.retries = retries
        task.row = row
        task.failures = no_failures
        task.queued_at = now
        client_tasks[client_task_id] = task
        append(task)
        next_id += 1
    return next_id


def launch_tasks(tasks, long count, executor, dict functions, Py_ssize_t limit,
                 LatencyHistogram latency, double now):
    cdef dict running = executor.running
    cdef dict avoid = executor.suspect_losses
    cdef set known = executor.functions
    cdef list batches = []
    cdef list rows = []
    cdef dict needed = {}
    cdef Py_ssize_t size = 0, row_size, available = len(tasks)
    cdef long launched = 0
    cdef Task task
    cdef list row
    cdef object digest, last_digest = None
    cdef bint new
    popleft = tasks.popleft
    while launched < count and available > 0:
        task = popleft()
        available -= 1
        if task.cancelled:
            continue
        if task.failures:  # a suspect: no suspect of the same loss may join it here
            avoid[task.loss] = avoid.get(task.loss, 0) + 1
        task.attempt += 1
        task.executor = executor
        running[task.task_id] = task
        latency.observe_one(now - task.queued_at)
        row = task.row
        row[1] = task.attempt
        digest = row[2]
        if digest is last_digest:  # seen in this call: held by the executor or in needed
            new = False
        else:
            new = digest not in known and digest not in needed
            last_digest = digest
        row_size = len(row[3])
        if new:
            row_size += len(functions[digest])
        if rows and size + row_size > limit:  # ``new`` stays: needed did not hold digest
            batches.append((needed, rows))
            known.update(needed)
            rows = []
            needed = {}
            size = 0
        if new:
            needed[digest] = functions[digest]
        rows.append(row)
        size += row_size
        launched += 1
    if rows:
        batches.append((needed, rows))
        known.update(needed)
    return batches, launched


cdef long as_long(object value) noexcept:
    """``value`` (an int) as a C long, or 0 when it does not fit: no attempt or state is 0."""
    cdef int overflow = 0
    cdef long result = PyLong_AsLongAndOverflow(value, &overflow)
    return 0 if overflow else result


def apply_status_updates(executor, list updates, pending, double now, dict counts):
    cdef dict running = executor.running
    cdef dict losses = executor.suspect_losses
    cdef Py_ssize_t stale = 0, freed = 0, finished = 0, failed = 0, done = 0, errors = 0
    cdef Py_ssize_t retried = 0
    cdef list returned = []
    cdef Task task
    cdef long state
    cdef object found, left, client, last_client = None
    cdef dict client_tasks = None
    cdef list client_results = None
    for task_id, attempt, state_value, payload in updates:
        found = running.get(task_id)
        if found is None:
            stale += 1
            continue
        task = <Task>found
        if task.attempt != as_long(attempt):
            stale += 1
            continue
        del running[task_id]
        freed += 1
        task.executor = None
        if task.failures:
            left = losses[task.loss] - 1
            if left:
                losses[task.loss] = left
            else:
                del losses[task.loss]
        state = as_long(state_value)
        if state == FINISHED:
            done += 1
            if task.cancelled:
                continue
            finished += 1
        elif state == RETURNED:  # given back unstarted: not the task's failure
            if not task.cancelled:
                returned.append(task)
            continue
        else:
            errors += 1
            if task.cancelled:
                continue
            if state == FAILED and task.retries > 0:
                task.retries -= 1
                task.queued_at = now
                pending.appendleft(task)
                retried += 1
                continue
            failed += 1
        client = task.client
        if client is not last_client:  # a batch's tasks mostly share one client
            last_client = client
            client_tasks = client.tasks
            client_results = client.results
        client_tasks.pop(task.client_task_id, None)
        client_results.append([task.client_task_id, state_value, payload])
    executor.tasks_done += done
    executor.tasks_failed += errors
    counts["finished"] += finished
    counts["failed"] += failed
    counts["retried"] += retried
    return stale, freed, done + errors, retried, returned


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
