"""A one-shot kernel timer that wakes the thread waiting on it and no other."""
import ctypes
import os
import sys

from .. import fastpath


class _TimerSpec(ctypes.Structure):
    """struct itimerspec on 64-bit Linux."""
    _fields_ = [("interval_sec", ctypes.c_long), ("interval_nsec", ctypes.c_long),
                ("value_sec", ctypes.c_long), ("value_nsec", ctypes.c_long)]


def _ctypes_set_timer(timerfd_settime):
    """``set_timer(fd, seconds, nanoseconds)`` through ctypes: a one-shot ``timerfd_settime``."""
    timerfd_settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    specs = {}  # (seconds, nanoseconds) -> its _TimerSpec: a timer is set to a few values

    def set_timer(fd, seconds, nanoseconds):
        spec = specs.get((seconds, nanoseconds))
        if spec is None:
            spec = specs[seconds, nanoseconds] = _TimerSpec(0, 0, seconds, nanoseconds)
        return timerfd_settime(fd, 0, ctypes.byref(spec), None)
    return set_timer


class KernelTimer:
    """A one-shot Linux timerfd: ``arm`` and ``disarm`` are one system call each and wake no
    thread; ``fd`` becomes readable when the time is up. ``create`` returns None where there
    is none (not Linux, or not 64-bit). The calls are compiled (``_pipe_link.set_timer``),
    or go through ctypes with the pure-Python fast path."""

    @classmethod
    def create(cls, seconds):
        if not sys.platform.startswith("linux") or ctypes.sizeof(ctypes.c_long) != 8:
            return None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            timerfd_create, timerfd_settime = libc.timerfd_create, libc.timerfd_settime
        except (OSError, AttributeError):
            return None
        clock_monotonic = 1
        fd = timerfd_create(clock_monotonic, os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            return None
        if fastpath.COMPILED:
            from .._pipe_link import set_timer
        else:
            set_timer = _ctypes_set_timer(timerfd_settime)
        return cls(fd, set_timer, seconds)

    def __init__(self, fd, set_timer, seconds):
        self.fd = fd
        self._set = set_timer  # (fd, seconds, nanoseconds)
        self._seconds = int(seconds)
        self._nanoseconds = max(1, int((seconds - self._seconds) * 1e9))

    def arm(self):
        self._set(self.fd, self._seconds, self._nanoseconds)

    def disarm(self):
        self._set(self.fd, 0, 0)

    def fire_now(self):
        self._set(self.fd, 0, 1)

    def clear(self):
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            pass

    def close(self):
        os.close(self.fd)
