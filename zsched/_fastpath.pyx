# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled fast path; ``_fastpath_py.py`` is the reference it must agree with.

See the reference for what SlotTable does. Here the per-executor state lives in C arrays
and the two rings are C circular buffers, so ``offer`` touches no Python object per task:
Python objects are made once per executor that receives tasks.
"""
from libc.stdlib cimport malloc, realloc, free


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
        """Deal tasks one at a time round the ring, each executor up to its window (or up
        to its cores as well); the tasks still to deal."""
        cdef Py_ssize_t index, capacity = self._capacity
        cdef long limit
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
            self._assigned[index] += 1
            self._held[index] += 1
            remaining -= 1
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
