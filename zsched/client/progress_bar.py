"""Progress bars for long work, with tqdm: ``zsched.progress(futures)`` and
``client.map(..., progress=True)``. The bar moves as tasks end (in any order), shows how
many finished and failed, and ends with those counts."""
import concurrent.futures
import threading


class ProgressBar:
    """A tqdm bar counting futures as they end; ``watch`` each future, ``close`` at the end
    (it closes itself when all ``total`` have ended; a ``total`` of None is unknown)."""

    def __init__(self, total, desc="tasks", file=None, leave=True, unit="task"):
        self.total = total
        self.done = 0
        self.failed = 0
        self._lock = threading.Lock()
        # imported when a bar is first shown (slow to import); a widget in a notebook
        from tqdm.auto import tqdm
        self._bar = tqdm(total=total, desc=desc, unit=unit, file=file, leave=leave,
                         dynamic_ncols=True)

    def watch(self, future, calls=1, count=None):
        """Count ``future`` when it ends, as ``calls`` calls; ``count(future, calls)`` says
        how many of them were done and failed (default: all done, or all failed if the
        future raised or was cancelled)."""
        future.add_done_callback(lambda f: self._ended(f, calls, count))

    def _ended(self, future, calls, count):  # runs in whichever thread ended the future
        if count is not None:
            done, failed = count(future, calls)
        elif future.cancelled() or future.exception() is not None:
            done, failed = 0, calls
        else:
            done, failed = calls, 0
        with self._lock:
            if self._bar is None:
                return
            self.done += done
            self.failed += failed
            self._bar.set_postfix(done=self.done, failed=self.failed, refresh=False)
            self._bar.update(calls)
            if self.total is not None and self.done + self.failed >= self.total:
                self._close()

    def close(self):
        with self._lock:
            self._close()

    def _close(self):
        if self._bar is not None:
            self._bar.set_postfix(done=self.done, failed=self.failed, refresh=False)
            self._bar.close()
            self._bar = None


def progress(futures, *, desc="tasks", file=None, leave=True):
    """Show a live progress bar until every future has ended; returns the futures, in the
    order given, so that ``[f.result() for f in zsched.progress(futures)]`` works. The bar
    ends with the counts of done and failed (raised or cancelled) tasks."""
    futures = list(futures)
    bar = ProgressBar(len(futures), desc=desc, file=file, leave=leave)
    try:
        for future in futures:
            bar.watch(future)
        concurrent.futures.wait(futures)
    finally:
        bar.close()
    return futures
