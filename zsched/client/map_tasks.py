"""The tasks of one ``Client.map``: its calls grouped into tasks, submitted on demand."""
import itertools

from .map_calls import CallsRunner, chunks, count_calls
from .progress_bar import ProgressBar


class MapTasks:
    """The tasks of one ``map``: its calls grouped into tasks, submitted on demand."""

    def __init__(self, client, fn, iterables, chunksize, retries, progress_total):
        self.client = client
        self.retries = retries
        self.chunked = chunksize > 1
        if self.chunked:
            fn, self.groups = CallsRunner(fn), chunks(iterables, chunksize)
        else:
            self.groups = ((args, 1) for args in zip(*iterables))
        with client._submit_lock:
            client._check_open()
            self.digest, self.fn_size = client._function_digest(fn)
            # pickled once for every task of this map: not released before the last is out
            client._mapping[self.digest] = client._mapping.get(self.digest, 0) + 1
        self.bar = None
        if progress_total is not False:
            self.bar = ProgressBar(progress_total, desc="map", unit="call")

    def submit(self, n):
        """Futures of the next ``n`` tasks at most (fewer once the calls run out)."""
        submitted = self.client._submit_groups(self.digest, self.fn_size,
                                               itertools.islice(self.groups, n), self.retries)
        if self.bar is not None:
            count = count_calls if self.chunked else None
            for future, calls in submitted:
                self.bar.watch(future, calls, count)
        return [future for future, _ in submitted]

    def submit_one(self):
        """The next task's future, or None once the calls are all out."""
        return next(iter(self.submit(1)), None)

    def release_function(self):
        client = self.client
        with client._submit_lock:
            left = client._mapping.pop(self.digest) - 1
            if left:
                client._mapping[self.digest] = left

    def end(self):
        """The map is over before all its tasks ended: its bar closes now."""
        self.release_function()
        if self.bar is not None:
            self.bar.close()


def counted(iterables):
    """``(iterables, calls)``: the iterables, read into lists where they have no length,
    and how many calls they make."""
    if all(hasattr(it, "__len__") for it in iterables):
        return iterables, min(map(len, iterables), default=0)
    if len(iterables) == 1:
        values = list(iterables[0])
        return [values], len(values)
    rows = list(zip(*iterables))
    return list(map(list, zip(*rows))) or [[]], len(rows)
