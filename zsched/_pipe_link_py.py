"""Pure-Python twin of ``_pipe_link.pyx``: the link of ``pipe_link`` (see it for the
contract) in Python, its reads and writes the C library's ``read`` and ``write`` through
``ctypes.PyDLL``, and the two system calls the compiled module also makes for others
(``write_keeping_gil``, ``set_timer``) through ctypes. The constants and the helpers both
links share are defined here alone: the compiled module imports them."""
import ctypes
import os
import select
import struct
import time
from collections import deque

_HEADER = struct.Struct("<Q")   # the length of the frame that follows (no frame is too long for it)
HEADER_SIZE = _HEADER.size
BUFFER_SIZE = 1 << 16           # the read buffer's size, unless a frame needs more
PIPE_BUF = 4096                 # a write of at most this many bytes to a pipe is whole or none
_EAGAIN, _EPIPE, _EINTR = 11, 32, 4


def _libc_io():
    """``read`` and ``write`` of the C library, called keeping the GIL."""
    libc = ctypes.PyDLL(None, use_errno=True)
    read, write = libc.read, libc.write
    read.argtypes = write.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)
    read.restype = write.restype = ctypes.c_ssize_t
    return read, write


_read, _write = _libc_io()


def _address(data):
    """Where the bytes of ``data`` (a ``bytes``) are in memory."""
    return ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value


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
        self._outbox = deque()      # [bytes, bytes of it written, whether a frame ends there]
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

    def flush(self):
        """Write what the outbox holds, as far as the pipe takes it; True once it is empty.
        Raises ``BrokenPipeError`` when the peer has closed its end."""
        outbox = self._outbox
        while outbox:
            entry = outbox[0]
            data, done = entry[0], entry[1]
            left = len(data) - done
            written = _write(self.write_fd, _address(data) + done if done else data, left)
            if written < 0:
                error = ctypes.get_errno()
                if error == _EAGAIN:
                    return False
                if error == _EINTR:
                    continue
                raise BrokenPipeError(error, os.strerror(error)) if error == _EPIPE \
                    else OSError(error, os.strerror(error))
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
        """The whole frames that wait (``bytes``), in order; sets ``closed_by_peer`` at the
        end of the file, and ``error`` at a frame over ``max_frame`` (none after it).

        Bytes are read into one buffer kept from call to call (a fresh buffer per read of
        this size would be mapped and unmapped by malloc at every message)."""
        frames = []
        while self.error is None:
            if self._end == len(self._buffer) and not self._make_room():
                break
            buffer = self._buffer
            n = _read(self.read_fd, ctypes.byref(buffer, self._end), len(buffer) - self._end)
            if n < 0:
                error = ctypes.get_errno()
                if error == _EAGAIN:
                    break
                if error == _EINTR:
                    continue
                raise OSError(error, os.strerror(error))
            if n == 0:
                self.closed_by_peer = True
                break
            self._end += n
            full = self._end == len(buffer)
            self._take_frames(frames)
            if not full:  # the pipe is empty: no need to ask again
                break
        return frames

    def _take_frames(self, frames):
        """Append the whole frames in the buffer to ``frames``."""
        buffer, start, end = self._buffer, self._start, self._end
        while end - start >= HEADER_SIZE:
            size = self._frame_size(buffer, start)
            if size is None or end - start - HEADER_SIZE < size:
                break
            begin = start + HEADER_SIZE
            frames.append(buffer[begin:begin + size])  # bytes: a c_char array's slice
            start = begin + size
        if start == end:
            start = self._end = 0
            if len(buffer) > BUFFER_SIZE:  # a large frame has gone: give its room back
                self._buffer = ctypes.create_string_buffer(BUFFER_SIZE)
        self._start = start

    def _make_room(self):
        """The buffer is full up to its end, with part of a frame: move it to the start, in a
        larger buffer if the frame needs more room; False if it is too large."""
        buffer, start, end = self._buffer, self._start, self._end
        unread = end - start
        needed = unread + 1
        if unread >= HEADER_SIZE:  # room for the whole frame that begins there
            size = self._frame_size(buffer, start)
            if size is None:
                return False
            needed = max(needed, HEADER_SIZE + size)
        if needed > len(buffer):
            self._buffer = ctypes.create_string_buffer(needed)
        ctypes.memmove(self._buffer, ctypes.byref(buffer, start), unread)
        self._start, self._end = 0, unread
        return True

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
        close_fds(self.read_fd, self.write_fd)


# ---------------------------------------------------------------- shared by both links

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
