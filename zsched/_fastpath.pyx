# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled fast path; ``_fastpath_py.py`` is the reference it must agree with.

See the reference for what SlotTable does. Here the per-executor state lives in C
arrays and the ring is a C circular buffer, so ``offer`` touches no Python object per
task: Python objects are made once per executor that receives tasks.
"""
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memset


cdef class SlotTable:
    cdef long *_free
    cdef long *_total
    cdef char *_active
    cdef char *_in_ring
    cdef long *_assigned
    cdef Py_ssize_t _size        # executor indices in use or unused
    cdef Py_ssize_t _capacity
    cdef Py_ssize_t *_ring       # circular buffer of executor indices
    cdef Py_ssize_t _ring_head
    cdef Py_ssize_t _ring_len
    cdef Py_ssize_t *_touched    # indices that received tasks in one offer
    cdef list _unused

    def __cinit__(self):
        self._capacity = 0
        self._size = 0
        self._ring_head = 0
        self._ring_len = 0
        self._unused = []
        self._grow(16)

    def __dealloc__(self):
        free(self._free); free(self._total); free(self._active); free(self._in_ring)
        free(self._assigned); free(self._ring); free(self._touched)

    cdef void _grow(self, Py_ssize_t capacity) except *:
        cdef Py_ssize_t i, old = self._capacity
        cdef Py_ssize_t *ring
        cdef void *p
        p = realloc(self._free, capacity * sizeof(long))
        if p == NULL: raise MemoryError()
        self._free = <long *>p
        p = realloc(self._total, capacity * sizeof(long))
        if p == NULL: raise MemoryError()
        self._total = <long *>p
        p = realloc(self._assigned, capacity * sizeof(long))
        if p == NULL: raise MemoryError()
        self._assigned = <long *>p
        p = realloc(self._active, capacity * sizeof(char))
        if p == NULL: raise MemoryError()
        self._active = <char *>p
        p = realloc(self._in_ring, capacity * sizeof(char))
        if p == NULL: raise MemoryError()
        self._in_ring = <char *>p
        p = realloc(self._touched, capacity * sizeof(Py_ssize_t))
        if p == NULL: raise MemoryError()
        self._touched = <Py_ssize_t *>p
        # the ring holds each index at most once, so capacity entries suffice; unwrap it
        ring = <Py_ssize_t *>malloc(capacity * sizeof(Py_ssize_t))
        if ring == NULL: raise MemoryError()
        for i in range(self._ring_len):
            ring[i] = self._ring[(self._ring_head + i) % old]
        free(self._ring)
        self._ring = ring
        self._ring_head = 0
        for i in range(old, capacity):
            self._free[i] = 0
            self._total[i] = 0
            self._assigned[i] = 0
            self._active[i] = 0
            self._in_ring[i] = 0
        self._capacity = capacity

    cdef inline void _push(self, Py_ssize_t index):
        self._ring[(self._ring_head + self._ring_len) % self._capacity] = index
        self._ring_len += 1
        self._in_ring[index] = 1

    cdef inline Py_ssize_t _pop(self):
        cdef Py_ssize_t index = self._ring[self._ring_head]
        self._ring_head = (self._ring_head + 1) % self._capacity
        self._ring_len -= 1
        return index

    cdef void _check(self, Py_ssize_t index) except *:
        if index < 0 or index >= self._size or not self._active[index]:
            raise KeyError(index)

    def add(self, long slots):
        cdef Py_ssize_t index
        if slots < 1:
            raise ValueError("an executor needs at least one slot")
        if self._unused:
            index = self._unused.pop()
        else:
            if self._size == self._capacity:
                self._grow(self._capacity * 2)
            index = self._size
            self._size += 1
        self._free[index] = slots
        self._total[index] = slots
        self._active[index] = 1
        if not self._in_ring[index]:
            self._push(index)
        return index

    def remove(self, Py_ssize_t index):
        self._check(index)
        self._active[index] = 0
        self._free[index] = 0
        self._total[index] = 0
        self._unused.append(index)

    def release(self, Py_ssize_t index, long n):
        self._check(index)
        cdef long free_slots = self._free[index] + n
        if n < 0 or free_slots > self._total[index]:
            raise ValueError("release of %d slots: executor %d would have %d of %d free"
                             % (n, index, free_slots, self._total[index]))
        self._free[index] = free_slots
        if free_slots > 0 and not self._in_ring[index]:
            self._push(index)

    def resize(self, Py_ssize_t index, long slots):
        self._check(index)
        if slots < 1:
            raise ValueError("an executor needs at least one slot")
        self._free[index] += slots - self._total[index]
        self._total[index] = slots
        if self._free[index] > 0 and not self._in_ring[index]:
            self._push(index)

    def free(self, Py_ssize_t index):
        self._check(index)
        return self._free[index]

    def total(self, Py_ssize_t index):
        self._check(index)
        return self._total[index]

    def total_free(self):
        cdef Py_ssize_t i
        cdef long total = 0
        for i in range(self._size):
            if self._free[i] > 0:
                total += self._free[i]
        return total

    def offer(self, long n_tasks):
        cdef Py_ssize_t index, n_touched = 0, i
        cdef long remaining = n_tasks
        while remaining > 0 and self._ring_len > 0:
            index = self._pop()
            if not self._active[index] or self._free[index] <= 0:
                self._in_ring[index] = 0
                continue
            if self._assigned[index] == 0:
                self._touched[n_touched] = index
                n_touched += 1
            self._assigned[index] += 1
            self._free[index] -= 1
            remaining -= 1
            if self._free[index] > 0:
                self._ring[(self._ring_head + self._ring_len) % self._capacity] = index
                self._ring_len += 1
            else:
                self._in_ring[index] = 0
        result = []
        for i in range(n_touched):
            index = self._touched[i]
            result.append((index, self._assigned[index]))
            self._assigned[index] = 0
        return result
