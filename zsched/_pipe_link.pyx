# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled ``PipeLink``: the same link as its twin ``_pipe_link_py`` (see ``pipe_link`` for
the contract), with its reads and writes made by C calls, the read buffer in C memory, and a
frame written with its length header in one ``writev`` when nothing waits before it."""
import os
from collections import deque

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.errno cimport EAGAIN, EINTR, EPIPE, errno
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memmove
from libc.stdint cimport uint64_t

cdef extern from "<unistd.h>" nogil:
    ssize_t read(int fd, void *buf, size_t count)
    ssize_t write(int fd, const void *buf, size_t count)

cdef extern from "<sys/uio.h>" nogil:
    struct iovec:
        void *iov_base
        size_t iov_len
    ssize_t writev(int fd, const iovec *iov, int iovcnt)

from ._pipe_link_py import BUFFER_SIZE, HEADER_SIZE, PIPE_BUF, close_fds, flush_within

cdef Py_ssize_t C_BUFFER_SIZE = BUFFER_SIZE
cdef Py_ssize_t C_PIPE_BUF = PIPE_BUF


DEF HEADER = 8  # bytes of a frame's length header, little-endian


cdef inline void put_length(unsigned char *header, uint64_t size) noexcept:
    cdef int i
    for i in range(HEADER):
        header[i] = (size >> (8 * i)) & 0xff


cdef inline uint64_t get_length(const unsigned char *header) noexcept:
    cdef uint64_t size = 0
    cdef int i
    for i in range(HEADER):
        size |= (<uint64_t>header[i]) << (8 * i)
    return size


assert HEADER_SIZE == HEADER


cdef object io_error(int error):
    if error == EPIPE:
        return BrokenPipeError(error, os.strerror(error))
    return OSError(error, os.strerror(error))


cdef class PipeLink:
    cdef readonly int read_fd
    cdef readonly int write_fd
    cdef public Py_ssize_t max_frame
    cdef public bint closed_by_peer
    cdef public object error
    cdef public bint closed
    cdef public Py_ssize_t queued_frames
    cdef object _outbox             # [bytes, bytes of it written, whether a frame ends there]
    cdef unsigned char *_buffer     # bytes read and not yet returned: from _start to _end
    cdef Py_ssize_t _capacity
    cdef Py_ssize_t _start
    cdef Py_ssize_t _end

    def __cinit__(self, int read_fd, int write_fd, Py_ssize_t max_frame):
        self._buffer = <unsigned char *>malloc(C_BUFFER_SIZE)
        if self._buffer == NULL:
            raise MemoryError()
        self._capacity = C_BUFFER_SIZE

    def __init__(self, int read_fd, int write_fd, Py_ssize_t max_frame):
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        self.read_fd = read_fd
        self.write_fd = write_fd
        self.max_frame = max_frame
        self.error = None
        self._outbox = deque()

    def __dealloc__(self):
        free(self._buffer)

    @property
    def wants_write(self):
        return len(self._outbox) > 0

    @property
    def buffer_size(self):
        return self._capacity

    # ------------------------------------------------------------ writing

    def send(self, bytes frame):
        cdef unsigned char header[HEADER]
        cdef Py_ssize_t size = PyBytes_GET_SIZE(frame), written
        cdef iovec parts[2]
        cdef int error
        put_length(header, <uint64_t>size)
        if self._outbox:  # frames wait: this one goes after them
            self._queue(header, frame, 0)
            if len(self._outbox) <= 2:  # else the pipe was full a moment ago
                self.flush()
            return
        parts[0].iov_base = header
        parts[0].iov_len = HEADER
        parts[1].iov_base = PyBytes_AS_STRING(frame)
        parts[1].iov_len = size
        while True:
            written = writev(self.write_fd, parts, 2)
            if written >= 0 or errno != EINTR:
                break
        if written == HEADER + size:
            return
        if written < 0:
            if errno != EAGAIN:
                error = errno
                self._queue(header, frame, 0)
                raise io_error(error)
            written = 0
        self._queue(header, frame, written)

    cdef void _queue(self, unsigned char *header, bytes frame, Py_ssize_t written) except *:
        """Queue the part of ``header`` + ``frame`` after its first ``written`` bytes."""
        cdef bytes head = PyBytes_FromStringAndSize(<char *>header, HEADER)
        if written >= HEADER:
            self._outbox.append([frame, written - HEADER, True])
        elif PyBytes_GET_SIZE(frame) + HEADER <= C_PIPE_BUF and written == 0:
            self._outbox.append([head + frame, 0, True])  # written whole, or not at all
        else:
            self._outbox.append([head, written, False])
            self._outbox.append([frame, 0, True])
        self.queued_frames += 1

    def flush(self):
        cdef object outbox = self._outbox
        cdef list entry
        cdef bytes data
        cdef Py_ssize_t done, left, written
        while outbox:
            entry = outbox[0]
            data = entry[0]
            done = entry[1]
            left = PyBytes_GET_SIZE(data) - done
            written = write(self.write_fd, PyBytes_AS_STRING(data) + done, left)
            if written < 0:
                if errno == EAGAIN:
                    return False
                if errno == EINTR:
                    continue
                raise io_error(errno)
            if written < left:
                entry[1] = done + written
                return False
            outbox.popleft()
            if entry[2]:
                self.queued_frames -= 1
        return True

    def flush_within(self, seconds):
        return flush_within(self, seconds)

    # ------------------------------------------------------------ reading

    def receive(self):
        cdef list frames = []
        cdef Py_ssize_t n
        cdef bint full
        while self.error is None:
            if self._end == self._capacity and not self._make_room():
                break
            n = read(self.read_fd, self._buffer + self._end, self._capacity - self._end)
            if n < 0:
                if errno == EAGAIN:
                    break
                if errno == EINTR:
                    continue
                raise io_error(errno)
            if n == 0:
                self.closed_by_peer = True
                break
            self._end += n
            full = self._end == self._capacity
            self._take_frames(frames)
            if not full:  # the pipe is empty: no need to ask again
                break
        return frames

    cdef int _take_frames(self, list frames) except -1:
        cdef Py_ssize_t start = self._start, end = self._end, size
        cdef unsigned char *smaller
        while end - start >= HEADER:
            size = self._frame_size(start)
            if size < 0 or end - start - HEADER < size:
                break
            frames.append(PyBytes_FromStringAndSize(<char *>self._buffer + start + HEADER, size))
            start += HEADER + size
        if start == end:
            start = self._end = 0
            if self._capacity > C_BUFFER_SIZE:  # a large frame has gone: give its room back
                smaller = <unsigned char *>malloc(C_BUFFER_SIZE)
                if smaller != NULL:
                    free(self._buffer)
                    self._buffer = smaller
                    self._capacity = C_BUFFER_SIZE
        self._start = start
        return 0

    cdef bint _make_room(self) except -1:
        cdef Py_ssize_t start = self._start, unread = self._end - self._start
        cdef Py_ssize_t needed = unread + 1, size
        cdef unsigned char *larger
        if unread >= HEADER:  # room for the whole frame that begins there
            size = self._frame_size(start)
            if size < 0:
                return False
            needed = max(needed, HEADER + size)
        if needed > self._capacity:
            larger = <unsigned char *>malloc(needed)
            if larger == NULL:
                raise MemoryError()
            memcpy(larger, self._buffer + start, unread)
            free(self._buffer)
            self._buffer = larger
            self._capacity = needed
        else:
            memmove(self._buffer, self._buffer + start, unread)
        self._start = 0
        self._end = unread
        return True

    cdef Py_ssize_t _frame_size(self, Py_ssize_t start) except? -2:
        """The size of the frame whose header is at ``start``; -1 if over ``max_frame``."""
        cdef uint64_t size = get_length(self._buffer + start)
        if size > <uint64_t>self.max_frame:
            self.error = f"a frame of {size} bytes (at most {self.max_frame})"
            return -1
        return <Py_ssize_t>size

    def close(self):
        if self.closed:
            return
        self.closed = True
        self._outbox.clear()
        close_fds(self.read_fd, self.write_fd)


def write_keeping_gil(int fd, bytes data):
    """``write(2)`` of ``data`` to ``fd``, a C call that keeps the GIL (for a non-blocking
    descriptor: it cannot wait); the bytes written, or -1."""
    return write(fd, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))


cdef extern from "<sys/timerfd.h>" nogil:
    struct timespec:
        long tv_sec
        long tv_nsec
    struct itimerspec:
        timespec it_interval
        timespec it_value
    int timerfd_settime(int fd, int flags, const itimerspec *new_value, itimerspec *old_value)


def set_timer(int fd, long seconds, long nanoseconds):
    """Set the one-shot timerfd ``fd`` to expire in ``seconds`` and ``nanoseconds`` (both 0:
    disarm it), a C call that keeps the GIL; 0, or -1 on failure."""
    cdef itimerspec spec
    spec.it_interval.tv_sec = spec.it_interval.tv_nsec = 0
    spec.it_value.tv_sec = seconds
    spec.it_value.tv_nsec = nanoseconds
    return timerfd_settime(fd, 0, &spec, NULL)
