"""A one-shot kernel timer that wakes the thread waiting on it and no other."""
import ctypes
import os
import sys

from ..pipe_link import set_timer


class KernelTimer:
    """A one-shot Linux timerfd: ``arm`` and ``disarm`` are one system call each and wake no
    thread; ``fd`` becomes readable when the time is up. ``create`` returns None where there
    is none (not Linux, or not 64-bit). ``arm`` and ``disarm`` call ``pipe_link.set_timer``:
    compiled, or through ctypes in the pure-Python twin."""

    @classmethod
    def create(cls, seconds):
        if not sys.platform.startswith("linux") or ctypes.sizeof(ctypes.c_long) != 8:
            return None
        try:
            timerfd_create = ctypes.CDLL(None, use_errno=True).timerfd_create
        except (OSError, AttributeError):
            return None
        clock_monotonic = 1
        fd = timerfd_create(clock_monotonic, os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            return None
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
