# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled slot table; ``_fastpath_py.py`` holds the twin it must agree with (see it for
what each name does). The per-executor state is in C arrays and its two rings in C circular
buffers, so ``offer`` touches no Python object per task."""
from libc.math cimport ceil
from libc.stdlib cimport free, malloc

from ._wire cimport grow_array

from ._fastpath_py import BATCH_FRACTION as _BATCH_FRACTION


cdef long BATCH_FRACTION = _BATCH_FRACTION


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


cdef class SlotTable:
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

    def take(self, Py_ssize_t index, long n):
        self._check(index)
        if n < 0:
            raise ValueError("cannot take a negative number of tasks")
        self._held[index] += n

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


cpdef long slots_per_core(double task_seconds, double prefetch_seconds, long tasks_per_core):
    cdef double queued = ceil(prefetch_seconds / (task_seconds if task_seconds > 1e-7 else 1e-7))
    if queued < 1:
        queued = 1
    if queued + 1 >= tasks_per_core:  # in doubles: no overflow
        return tasks_per_core
    return 1 + <long>queued


def window(executor, bint clamped, double prefetch_seconds, long tasks_per_core):
    if executor.decommissioning or executor.excluded:
        return 0
    task_seconds = executor.task_seconds
    if clamped or executor.suspect_losses or task_seconds is None:
        return executor.cores
    return executor.cores * slots_per_core(task_seconds, prefetch_seconds, tasks_per_core)
