# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled ``PipeLink``: the same link as its twin ``_pipe_link_py`` (see ``pipe_link`` for
the contract), with its reads and writes made by C calls, the read buffer in C memory, and a
frame written with its length header in one ``writev`` when nothing waits before it."""
import os
from collections import deque

from cpython.buffer cimport PyBUF_ANY_CONTIGUOUS, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
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

from ._pipe_link_py import (BUFFER_SIZE, HEADER_SIZE, LARGE_FRAME, MAX_PARTS, PIPE_BUF,
                            WRITABLE_TYPES, close_fds, flush_within)

cdef Py_ssize_t C_BUFFER_SIZE = BUFFER_SIZE
cdef Py_ssize_t C_LARGE_FRAME = LARGE_FRAME
cdef Py_ssize_t C_PIPE_BUF = PIPE_BUF


DEF HEADER = 8  # bytes of a frame's length header, little-endian
DEF PARTS = 64  # at most this many parts in a frame of send_parts


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


assert HEADER_SIZE == HEADER and MAX_PARTS == PARTS


cdef object io_error(int error):
    if error == EPIPE:
        return BrokenPipeError(error, os.strerror(error))
    return OSError(error, os.strerror(error))


cdef class _Part:
    """A part of a frame of ``send_parts`` in the outbox: its buffer, held until written."""
    cdef Py_buffer view

    def __dealloc__(self):
        PyBuffer_Release(&self.view)


cdef class PipeLink:
    cdef readonly int read_fd
    cdef readonly int write_fd
    cdef public Py_ssize_t max_frame
    cdef public bint closed_by_peer
    cdef public object error
    cdef public bint closed
    cdef public Py_ssize_t queued_frames
    # [bytes or a _Part, bytes of it written, whether a frame ends there]
    cdef object _outbox
    cdef unsigned char *_buffer     # bytes read and not yet returned: from _start to _end
    cdef Py_ssize_t _start
    cdef Py_ssize_t _end
    cdef object _large              # a frame longer than LARGE_FRAME being read, or None
    cdef char *_large_data
    cdef Py_ssize_t _large_size
    cdef Py_ssize_t _large_filled

    def __cinit__(self, int read_fd, int write_fd, Py_ssize_t max_frame):
        self._buffer = <unsigned char *>malloc(C_BUFFER_SIZE)
        if self._buffer == NULL:
            raise MemoryError()

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
        return C_BUFFER_SIZE

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

    def send_parts(self, parts):
        cdef Py_buffer views[PARTS]
        cdef iovec vectors[PARTS + 1]
        cdef unsigned char header[HEADER]
        cdef Py_ssize_t count = len(parts), acquired = 0, size = 0, written = 0, queued, i
        cdef int error = 0
        if count > PARTS:
            raise ValueError(f"a frame of {count} parts (at most {PARTS})")
        try:
            for i in range(count):
                PyObject_GetBuffer(parts[i], &views[i], PyBUF_ANY_CONTIGUOUS)
                acquired += 1
                vectors[i + 1].iov_base = views[i].buf
                vectors[i + 1].iov_len = views[i].len
                size += views[i].len
            put_length(header, <uint64_t>size)
            queued = len(self._outbox)
            if queued:  # frames wait: this one goes after them
                self._queue_parts(header, parts, views, count, 0)
                if queued <= 1:  # else the pipe was full a moment ago
                    self.flush()
                return
            vectors[0].iov_base = header
            vectors[0].iov_len = HEADER
            while True:
                written = writev(self.write_fd, vectors, count + 1)
                if written >= 0 or errno != EINTR:
                    break
            if written == HEADER + size:
                return
            if written < 0:
                error = errno
                written = 0
            self._queue_parts(header, parts, views, count, written)
            if error and error != EAGAIN:
                raise io_error(error)
        finally:
            for i in range(acquired):
                PyBuffer_Release(&views[i])

    cdef void _queue_parts(self, unsigned char *header, parts, Py_buffer *views,
                           Py_ssize_t count, Py_ssize_t written) except *:
        """Queue what follows the first ``written`` bytes of ``header`` and ``parts`` (whose
        buffers are ``views``); each entry holds its part's buffer."""
        cdef list entries = []
        cdef _Part part
        cdef Py_ssize_t i
        if written < HEADER:
            entries.append([PyBytes_FromStringAndSize(<char *>header, HEADER), written, False])
            written = 0
        else:
            written -= HEADER
        for i in range(count):
            if views[i].len <= written:  # written whole, or empty
                written -= views[i].len
                continue
            part = _Part.__new__(_Part)
            PyObject_GetBuffer(parts[i], &part.view, PyBUF_ANY_CONTIGUOUS)
            entries.append([part, written, False])
            written = 0
        entries[len(entries) - 1][2] = True
        self._outbox.extend(entries)
        self.queued_frames += 1

    def flush(self):
        cdef object outbox = self._outbox
        cdef list entry
        cdef object data
        cdef char *pointer
        cdef Py_ssize_t done, left, written
        while outbox:
            entry = outbox[0]
            data = entry[0]
            done = entry[1]
            if type(data) is bytes:
                pointer = PyBytes_AS_STRING(data)
                left = PyBytes_GET_SIZE(data) - done
            else:  # a part of send_parts
                pointer = <char *>(<_Part>data).view.buf
                left = (<_Part>data).view.len - done
            written = write(self.write_fd, pointer + done, left)
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
            if self._large is not None:
                if not self._read_large(frames):
                    break
                continue
            if self._end == C_BUFFER_SIZE:
                self._make_room()
            n = self._read(<char *>self._buffer + self._end, C_BUFFER_SIZE - self._end)
            if n == 0:
                break
            self._end += n
            full = self._end == C_BUFFER_SIZE
            self._take_frames(frames)
            if not full:  # the pipe is empty: no need to ask again
                break
        return frames

    cdef Py_ssize_t _read(self, char *into, Py_ssize_t count) except -1:
        """Read up to ``count`` bytes to ``into``: how many were read, 0 when none wait and at
        the end of the file (which sets ``closed_by_peer``)."""
        cdef Py_ssize_t n
        while True:
            n = read(self.read_fd, into, count)
            if n > 0:
                return n
            if n == 0:
                self.closed_by_peer = True
                return 0
            if errno == EAGAIN:
                return 0
            if errno != EINTR:
                raise io_error(errno)

    cdef bint _read_large(self, list frames) except -1:
        """Read more of the large frame under way; True once it is whole (then in ``frames``)."""
        cdef Py_ssize_t left = self._large_size - self._large_filled
        cdef Py_ssize_t n = self._read(self._large_data + self._large_filled, left)
        self._large_filled += n
        if n < left:  # the pipe is empty
            return False
        frames.append(self._large)
        self._large = None
        return True

    cdef int _take_frames(self, list frames) except -1:
        cdef Py_ssize_t start = self._start, end = self._end, size
        while end - start >= HEADER:
            size = self._frame_size(start)
            if size < 0:
                break
            if size > C_LARGE_FRAME:
                if end - start - HEADER >= 2:  # its message type has come
                    self._begin_large(size, start + HEADER, end)
                    start = end
                break
            if end - start - HEADER < size:
                break
            frames.append(PyBytes_FromStringAndSize(<char *>self._buffer + start + HEADER, size))
            start += HEADER + size
        if start == end:
            start = self._end = 0
        self._start = start
        return 0

    cdef int _begin_large(self, Py_ssize_t size, Py_ssize_t begin, Py_ssize_t end) except -1:
        """Begin a frame of ``size`` bytes, longer than ``LARGE_FRAME``, in an object of its
        own, with the bytes of it in the buffer (from ``begin`` to ``end``)."""
        # made uninitialised, and filled before anyone else sees it
        if self._buffer[begin + 1] in WRITABLE_TYPES:
            self._large = PyByteArray_FromStringAndSize(NULL, size)
            self._large_data = PyByteArray_AS_STRING(self._large)
        else:
            self._large = PyBytes_FromStringAndSize(NULL, size)
            self._large_data = PyBytes_AS_STRING(self._large)
        self._large_size = size
        self._large_filled = end - begin
        memcpy(self._large_data, self._buffer + begin, end - begin)
        return 0

    cdef void _make_room(self) noexcept:
        """The buffer is full up to its end, with the start of a frame that fits in it: move
        that to the buffer's start."""
        memmove(self._buffer, self._buffer + self._start, self._end - self._start)
        self._end -= self._start
        self._start = 0

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
        self._large = None
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
