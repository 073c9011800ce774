# cython: language_level=3
# The slot table's C layout, for the scheduling core's fused offer and launch.

cdef struct Ring:
    Py_ssize_t *items    # each executor index at most once, so capacity entries suffice
    Py_ssize_t head
    Py_ssize_t length


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
    cdef void _grow(self, Py_ssize_t capacity) except *
    cdef inline void _enqueue(self, Py_ssize_t index) noexcept
    cdef void _check(self, Py_ssize_t index) except *
    cdef long _deal(self, Ring *ring, char *in_ring, bint up_to_cores, long remaining,
                    long n_offer, Py_ssize_t *n_touched)
    cdef Py_ssize_t _offer(self, long n_tasks) except -1
