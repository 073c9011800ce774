"""A wake-up pipe: other threads (and signal handlers) wake a loop that polls sockets."""
import os


class WakeupPipe:
    """``fd`` is polled with the loop's sockets. ``wake`` writes a byte only when no wake-up
    is pending, so a flood of wake-ups costs one system call per turn of the loop. A hot
    caller may test ``pending`` itself and skip the call."""

    def __init__(self):
        self.fd, self._write_fd = os.pipe()
        os.set_blocking(self.fd, False)
        os.set_blocking(self._write_fd, False)
        self.pending = False

    def wake(self):
        if not self.pending:
            self.pending = True
            self._write()

    def wake_always(self):
        """For signal handlers and rare events: never skipped."""
        self._write()

    def _write(self):
        try:
            os.write(self._write_fd, b"x")
        except OSError:  # full (a wake-up is pending anyway) or closed
            pass

    def clear(self):
        """Called by the loop when it wakes, before it looks for work: empties the pipe, then
        lets the next ``wake`` write again (in that order, so no wake-up is lost)."""
        try:
            os.read(self.fd, 4096)
        except BlockingIOError:
            pass
        self.pending = False

    def close(self):
        for fd in (self.fd, self._write_fd):
            try:
                os.close(fd)
            except OSError:
                pass
