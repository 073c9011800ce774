# cython: language_level=3
# The scheduling core's C layout: tasks and the tables that hold them.
from cpython.ref cimport PyObject
from libc.stdint cimport int64_t, uint32_t


cdef class Task:
    # Small, since a million may wait at once: ids and retries as C integers, failures and
    # loss in one field, the arguments left where they lie in their SubmitTasks frame.
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


cdef class RunningTasks:
    cdef PyObject **_slots     # a task, NULL (empty) or LEFT
    cdef Py_ssize_t _mask      # slots - 1; slots is a power of two
    cdef Py_ssize_t _count     # slots holding a task
    cdef Py_ssize_t _left      # slots left by a task
    cdef PyObject *_first
    cdef PyObject *_last
    cdef void _rebuild(self, Py_ssize_t n) except *
    cdef inline Py_ssize_t _slot_of(self, long long key) noexcept
    cdef int _reserve(self, Py_ssize_t more) except -1
    cdef int _add(self, Task task) except -1
    cdef void _remove_slot(self, Py_ssize_t i) noexcept
    cdef inline void _empty_left_slots(self, Py_ssize_t i) noexcept
    cdef void _clear(self) noexcept
    cdef Py_ssize_t _find(self, object task_id)


cdef class ClientTasks:
    cdef PyObject **_tasks     # NULL where a task left
    cdef long long *_keys      # increasing
    cdef Py_ssize_t _head      # _tasks[:_head] are all NULL
    cdef Py_ssize_t _end
    cdef Py_ssize_t _capacity
    cdef Py_ssize_t _count
    cdef bint _any             # a task was added: _last_key holds
    cdef long long _last_key
    cdef dict _by_id           # None while the ids increase
    cdef int _add(self, Task task) except -1
    cdef void _make_room(self) except *
    cdef void _to_dict(self) except *
    cdef inline void _discard(self, Task task) noexcept
    cdef int _remove(self, Task task) except -1
    cdef Py_ssize_t _find(self, object client_task_id)
    cdef void _clear(self) noexcept


cdef class LatencyHistogram:
    cdef double *_bounds
    cdef long long *_counts   # _n + 1 of them: the last one is above every bound
    cdef Py_ssize_t _n
    cdef readonly tuple bounds
    cdef public double sum
    cdef public long long count
    cdef inline void observe_one(self, double seconds) noexcept
