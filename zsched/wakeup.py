"""A wake-up pipe: other threads (and signal handlers) wake a loop that polls sockets."""
import os

from .pipe_link import write_keeping_gil


class WakeupPipe:
    """``fd`` is polled with the loop's sockets. ``wake`` writes a byte only when no wake-up
    is pending, so a flood of wake-ups costs one system call per turn of the loop. A hot
    caller may test ``pending`` itself and skip the call.

    ``keep_gil=True`` writes without releasing the GIL (the write end is non-blocking, so
    the call cannot block). ``os.write`` releases it, and on a busy machine the woken loop
    thread often takes the GIL before the waking thread gets it back: a thread that submits
    in a loop then hands the GIL over at every wake-up, and each turn of the loop finds one
    item to send instead of everything queued while the waker kept running.
    """

    def __init__(self, keep_gil=False):
        self.fd, self._write_fd = os.pipe()
        os.set_blocking(self.fd, False)
        os.set_blocking(self._write_fd, False)
        self.pending = False
        self._write_keeping_gil = write_keeping_gil if keep_gil else None

    def wake(self):
        if not self.pending:
            self.pending = True
            self._write()

    def wake_always(self):
        """For signal handlers and rare events: never skipped."""
        self._write()

    def _write(self):
        if self._write_fd < 0:  # closed: the number may belong to a file opened since
            return
        if self._write_keeping_gil is not None:
            self._write_keeping_gil(self._write_fd, b"x")  # -1 when full or closed: as below
            return
        try:
            os.write(self._write_fd, b"x")
        except OSError:  # full (a wake-up is pending anyway) or closed
            pass

    def clear(self):
        """Called by the loop when it wakes, before it looks for work: empties the pipe, then
        lets the next ``wake`` write again (in that order, so no wake-up is lost)."""
        self.drain()
        self.pending = False

    def drain(self):
        """Empty the pipe, for a loop that manages ``pending`` itself."""
        try:
            os.read(self.fd, 4096)
        except BlockingIOError:
            pass

    def close(self):
        # nothing is written any more, not even by wake_always: once closed, the
        # descriptor's number may belong to a file opened since
        self.pending = True
        fds = (self.fd, self._write_fd)
        self._write_fd = -1
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
