"""Pure-Python twin of ``_pipe_link.pyx``: the link of ``pipe_link`` (see it for the
contract) in Python, its reads and writes the C library's ``read``, ``write`` and
``writev`` through ``ctypes.PyDLL``, and the two system calls the compiled module also makes
for others (``write_keeping_gil``, ``set_timer``) through ctypes. The constants and the
helpers both links share are defined here alone: the compiled module imports them."""
import ctypes
import os
import pickle
import select
import struct
import time
from collections import deque

_HEADER = struct.Struct("<Q")   # the length of the frame that follows (no frame is too long for it)
HEADER_SIZE = _HEADER.size
BUFFER_SIZE = 1 << 16           # the read buffer's size
LARGE_FRAME = BUFFER_SIZE - HEADER_SIZE  # a longer frame is read into an object of its own
PIPE_BUF = 4096                 # a write of at most this many bytes to a pipe is whole or none
MAX_PARTS = 64                  # parts of one frame in ``send_parts``
# message types that carry data parts (``protocol.DATA_TYPES``): they arrive writable, so
# arrays unpickled from them are writable
WRITABLE_TYPES = frozenset({8, 29, 33, 34})
_EAGAIN, _EPIPE, _EINTR = 11, 32, 4


class _IoVec(ctypes.Structure):
    """struct iovec."""
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]


class _PyBuffer(ctypes.Structure):
    """Py_buffer."""
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p),
                ("strides", ctypes.c_void_p), ("suboffsets", ctypes.c_void_p),
                ("internal", ctypes.c_void_p)]


def _libc_io():
    """``read``, ``write`` and ``writev`` of the C library, called keeping the GIL."""
    libc = ctypes.PyDLL(None, use_errno=True)
    read, write, writev = libc.read, libc.write, libc.writev
    read.argtypes = write.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)
    writev.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
    read.restype = write.restype = writev.restype = ctypes.c_ssize_t
    return read, write, writev


def _buffer_calls():
    """``PyObject_GetBuffer`` and ``PyBuffer_Release``."""
    get, release = ctypes.pythonapi.PyObject_GetBuffer, ctypes.pythonapi.PyBuffer_Release
    get.argtypes = (ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int)
    get.restype = ctypes.c_int
    release.argtypes, release.restype = (ctypes.POINTER(_PyBuffer),), None
    return get, release


_read, _write, _writev = _libc_io()
_get_buffer, _release_buffer = _buffer_calls()


def _address(data):
    """Where the bytes of ``data`` (a ``bytes``) are in memory."""
    return ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value


def _view_address(view):
    """Where the bytes of ``view`` (a memoryview or a bytearray) are in memory; they stay there
    while ``view`` lives (and a bytearray keeps its size)."""
    buffer = _PyBuffer()
    _get_buffer(view, buffer, 0)  # PyBUF_SIMPLE
    try:
        return buffer.buf
    finally:
        _release_buffer(buffer)


def raw_view(part):
    """``part`` (any contiguous buffer: bytes, bytearray, memoryview, PickleBuffer, an array)
    as a memoryview of its bytes, without a copy; BufferError if it is not contiguous."""
    return pickle.PickleBuffer(part).raw()


class PipeLink:
    """One end of a link: frames in through ``read_fd``, out through ``write_fd``."""

    def __init__(self, read_fd, write_fd, max_frame):
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        self.read_fd = read_fd
        self.write_fd = write_fd
        self.max_frame = max_frame
        self.closed_by_peer = False
        self.error = None           # why the peer's input cannot be read (a frame too large)
        self.closed = False
        # bytes read and not yet returned: from _start to _end of _buffer
        self._buffer = ctypes.create_string_buffer(BUFFER_SIZE)
        self._start = self._end = 0
        # a frame longer than LARGE_FRAME being read: its object, where it is, bytes read
        self._large = None
        self._large_address = self._large_filled = 0
        # [bytes or a part's memoryview, bytes of it written, whether a frame ends there]
        self._outbox = deque()
        self.queued_frames = 0      # frames not yet written whole

    @property
    def wants_write(self):
        return bool(self._outbox)

    @property
    def buffer_size(self):
        """The read buffer's size in bytes."""
        return len(self._buffer)

    # ------------------------------------------------------------ writing

    def send(self, frame):
        """Queue ``frame`` and write what the pipe takes now. Raises ``BrokenPipeError`` when
        the peer has closed its end."""
        header = _HEADER.pack(len(frame))
        outbox = self._outbox
        if len(frame) + HEADER_SIZE <= PIPE_BUF:
            outbox.append([header + frame, 0, True])  # written whole, or not at all
        else:
            outbox.append([header, 0, False])
            outbox.append([frame, 0, True])
        self.queued_frames += 1
        if len(outbox) <= 2:  # else the pipe was full a moment ago: poll says when it is not
            self.flush()

    def send_parts(self, parts):
        """Queue one frame made of ``parts``, a list of buffers (bytes, bytearray, PickleBuffer,
        contiguous memoryviews of any format, taken as their bytes) one after the other, and
        write what the pipe takes now in one ``writev``. No part is copied: the link holds
        them until they are written, and the caller leaves them unchanged meanwhile. Raises
        ``BrokenPipeError`` when the peer has closed its end, ``ValueError`` for more than
        ``MAX_PARTS`` parts and ``BufferError`` for a part that is not contiguous."""
        if len(parts) > MAX_PARTS:
            raise ValueError(f"a frame of {len(parts)} parts (at most {MAX_PARTS})")
        views = [raw_view(part) for part in parts]
        size = sum(map(len, views))
        header = _HEADER.pack(size)
        queued = len(self._outbox)
        if queued:  # frames wait: this one goes after them
            self._queue_parts(header, views, 0)
            if queued <= 1:  # else the pipe was full a moment ago
                self.flush()
            return
        vectors = (_IoVec * (len(views) + 1))(
            (_address(header), HEADER_SIZE), *[(_view_address(view), len(view)) for view in views])
        while True:
            written = _writev(self.write_fd, vectors, len(views) + 1)
            error = ctypes.get_errno() if written < 0 else 0
            if error != _EINTR:
                break
        if written == HEADER_SIZE + size:
            return
        self._queue_parts(header, views, max(written, 0))
        if error and error != _EAGAIN:
            raise _io_error(error)

    def _queue_parts(self, header, views, written):
        """Queue what follows the first ``written`` bytes of ``header`` and ``views``."""
        entries = []
        if written < HEADER_SIZE:
            entries.append([header, written, False])
            written = 0
        else:
            written -= HEADER_SIZE
        for view in views:
            if len(view) <= written:  # written whole, or empty
                written -= len(view)
            else:
                entries.append([view, written, False])
                written = 0
        entries[-1][2] = True
        self._outbox.extend(entries)
        self.queued_frames += 1

    def flush(self):
        """Write what the outbox holds, as far as the pipe takes it; True once it is empty.
        Raises ``BrokenPipeError`` when the peer has closed its end."""
        outbox = self._outbox
        while outbox:
            entry = outbox[0]
            data, done = entry[0], entry[1]
            left = len(data) - done
            if type(data) is bytes:
                pointer = _address(data) + done if done else data
            else:  # a part of send_parts
                pointer = _view_address(data) + done
            written = _write(self.write_fd, pointer, left)
            if written < 0:
                error = ctypes.get_errno()
                if error == _EAGAIN:
                    return False
                if error == _EINTR:
                    continue
                raise _io_error(error)
            if written < left:
                entry[1] = done + written
                return False
            outbox.popleft()
            self.queued_frames -= entry[2]
        return True

    def flush_within(self, seconds):
        """``flush``, waiting for room in the pipe up to ``seconds`` in all (as a closing
        socket lingers); True once the outbox is empty."""
        return flush_within(self, seconds)

    # ------------------------------------------------------------ reading

    def receive(self):
        """The whole frames that wait, in order; sets ``closed_by_peer`` at the end of the
        file, and ``error`` at a frame over ``max_frame`` (none after it). A frame is
        ``bytes``, but one longer than ``LARGE_FRAME`` whose message type is in
        ``WRITABLE_TYPES`` is a ``bytearray``.

        Bytes are read into one buffer kept from call to call (a fresh buffer per read of
        this size would be mapped and unmapped by malloc at every message). A frame too long
        for it is read into an object of its own, made once its length is known, over as
        many calls as it takes."""
        frames = []
        while self.error is None:
            if self._large is not None:
                if not self._read_large(frames):
                    break
                continue
            if self._end == BUFFER_SIZE:
                self._make_room()
            n = self._read(ctypes.byref(self._buffer, self._end), BUFFER_SIZE - self._end)
            if n == 0:
                break
            self._end += n
            full = self._end == BUFFER_SIZE
            self._take_frames(frames)
            if not full:  # the pipe is empty: no need to ask again
                break
        return frames

    def _read(self, pointer, count):
        """Read up to ``count`` bytes to ``pointer``: how many were read, 0 when none wait and
        at the end of the file (which sets ``closed_by_peer``)."""
        while True:
            n = _read(self.read_fd, pointer, count)
            if n > 0:
                return n
            if n == 0:
                self.closed_by_peer = True
                return 0
            error = ctypes.get_errno()
            if error == _EAGAIN:
                return 0
            if error != _EINTR:
                raise OSError(error, os.strerror(error))

    def _read_large(self, frames):
        """Read more of the large frame under way; True once it is whole (then in ``frames``)."""
        left = len(self._large) - self._large_filled
        n = self._read(self._large_address + self._large_filled, left)
        self._large_filled += n
        if n < left:  # the pipe is empty
            return False
        frames.append(self._large)
        self._large = None
        return True

    def _take_frames(self, frames):
        """Append the whole frames in the buffer to ``frames``; begin a large frame there."""
        buffer, start, end = self._buffer, self._start, self._end
        while end - start >= HEADER_SIZE:
            size = self._frame_size(buffer, start)
            if size is None:
                break
            begin = start + HEADER_SIZE
            if size > LARGE_FRAME:
                if end - begin >= 2:  # its message type has come
                    self._begin_large(size, begin, end)
                    start = end
                break
            if end - begin < size:
                break
            frames.append(buffer[begin:begin + size])  # bytes: a c_char array's slice
            start = begin + size
        if start == end:
            start = self._end = 0
        self._start = start

    def _begin_large(self, size, begin, end):
        """Begin a frame of ``size`` bytes, longer than ``LARGE_FRAME``, in an object of its
        own, with the bytes of it in the buffer (from ``begin`` to ``end``)."""
        # a fresh bytes object that nobody else has seen yet is filled in place, as in C
        large = bytearray(size) if self._buffer[begin + 1][0] in WRITABLE_TYPES else bytes(size)
        self._large_address = _view_address(large)
        ctypes.memmove(self._large_address, ctypes.byref(self._buffer, begin), end - begin)
        self._large, self._large_filled = large, end - begin

    def _make_room(self):
        """The buffer is full up to its end, with the start of a frame that fits in it: move
        that to the buffer's start."""
        unread = self._end - self._start
        ctypes.memmove(self._buffer, ctypes.byref(self._buffer, self._start), unread)
        self._start, self._end = 0, unread

    def _frame_size(self, buffer, start):
        """The size of the frame whose header is at ``start``; None if over ``max_frame``."""
        (size,) = _HEADER.unpack_from(buffer, start)
        if size > self.max_frame:
            self.error = f"a frame of {size} bytes (at most {self.max_frame})"
            return None
        return size

    def close(self):
        if self.closed:
            return
        self.closed = True
        self._outbox.clear()
        self._large = None
        close_fds(self.read_fd, self.write_fd)


# ---------------------------------------------------------------- shared by both links

def _io_error(error):
    """The exception for ``errno`` ``error`` of a write."""
    if error == _EPIPE:
        return BrokenPipeError(error, os.strerror(error))
    return OSError(error, os.strerror(error))


def flush_within(link, seconds):
    """``link.flush_within(seconds)``."""
    deadline = time.monotonic() + seconds
    while not link.flush():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        select.select([], [link.write_fd], [], remaining)
    return True


def close_fds(*fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


# ---------------------------------------------------------------- system calls for others

def write_keeping_gil(fd, data):
    """``write(2)`` of ``data`` to ``fd``, keeping the GIL (for a non-blocking descriptor:
    it cannot wait); the bytes written, or -1."""
    return _write(fd, data, len(data))


class _TimerSpec(ctypes.Structure):
    """struct itimerspec on 64-bit Linux."""
    _fields_ = [("interval_sec", ctypes.c_long), ("interval_nsec", ctypes.c_long),
                ("value_sec", ctypes.c_long), ("value_nsec", ctypes.c_long)]


_timer_specs = {}  # (seconds, nanoseconds) -> its _TimerSpec: a timer is set to a few values


def set_timer(fd, seconds, nanoseconds):
    """Set the one-shot timerfd ``fd`` to expire in ``seconds`` and ``nanoseconds`` (both 0:
    disarm it); 0, or -1 on failure."""
    spec = _timer_specs.get((seconds, nanoseconds))
    if spec is None:
        spec = _timer_specs[seconds, nanoseconds] = _TimerSpec(0, 0, seconds, nanoseconds)
    return _timerfd_settime(fd, 0, ctypes.byref(spec), None)


def _libc_timerfd_settime():
    """The C library's ``timerfd_settime`` (None where it has none: not Linux)."""
    try:
        settime = ctypes.CDLL(None, use_errno=True).timerfd_settime
    except (OSError, AttributeError):
        return None
    settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    return settime


_timerfd_settime = _libc_timerfd_settime()
