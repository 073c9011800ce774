"""The figures an executor's heartbeats carry about its own process: resident memory and
CPU use, as psutil's ``Process.memory_info().rss`` and ``Process.cpu_percent()`` give
them. They are read from the system at once: psutil takes longer to import than an
executor takes to start, and is imported only where ``/proc`` is missing."""
import os
import time

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


class ProcessMetrics:
    """This process's resident set and CPU use. ``clock`` is the wall clock CPU use is
    divided by."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._last = None        # (clock, CPU seconds) at the last cpu_percent
        self._process = None     # psutil's, where there is no /proc

    def rss(self):
        """Bytes of this process's memory resident in RAM."""
        try:
            with open("/proc/self/statm", "rb") as f:
                return int(f.read().split()[1]) * _PAGE_SIZE
        except OSError:
            if self._process is None:
                import psutil
                self._process = psutil.Process()
            return self._process.memory_info().rss

    def cpu_percent(self):
        """CPU time this process used since the last call, in percent of the wall-clock
        time (100 per busy core); 0.0 the first time."""
        times = os.times()
        now, cpu = self._clock(), times.user + times.system
        last, self._last = self._last, (now, cpu)
        if last is None or now <= last[0]:
            return 0.0
        return round((cpu - last[1]) / (now - last[0]) * 100, 1)
