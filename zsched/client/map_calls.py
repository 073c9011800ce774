"""How ``Client.map`` groups calls into tasks and hands their results back in order.

A chunk is one task of several calls. Its arguments travel as columns (one list per
iterable), and ``CallsRunner`` runs it on an executor with the builtin ``map``. Each call's
exception is kept at its own place, so the caller sees the same results and exceptions
whatever the chunk size. Executors import this module to run chunks: it stays small.
"""
import itertools
import time
from collections.abc import Iterator

from ..errors import exception_payload, load_exception

# map without a chunksize aims at this many tasks per core (balance, a live progress bar),
# each of at most MAX_AUTO_CHUNK calls (bounded memory and latency per task)
TASKS_PER_CORE = 8
MAX_AUTO_CHUNK = 4096
# Near its end such a map's tasks shrink to the calls left / (TAIL_TASKS_PER_CORE x cores):
# each core holds a running task and a queued one. None is below 1 / MIN_CHUNK_SHARE of a
# core's share of the calls, so the tail of a map of tiny calls stays a few tasks.
TAIL_TASKS_PER_CORE = 2
MIN_CHUNK_SHARE = 64


class CallsRunner:
    """Runs one function over a chunk of calls given as columns of arguments.

    Returns ``(values, failures)``: ``values[i]`` is call i's result (None where it
    raised), and ``failures`` maps each such i to its pickled exception, or is None. With
    ``retry`` (the map's tasks have retries) the first exception is raised instead: the
    chunk fails, and runs again whole."""

    __slots__ = ("fn", "retry")

    def __init__(self, fn, retry=False):
        self.fn = fn
        self.retry = retry

    def __call__(self, *columns):
        if self.retry:
            return list(map(self.fn, *columns)), None
        calls = map(self.fn, *columns)  # resumes after a call that raised
        values = []
        failures = None
        while True:
            try:
                values.extend(calls)  # keeps what came before an exception
                return values, failures
            except Exception as exc:
                if failures is None:
                    failures = {}
                failures[len(values)] = exception_payload(exc)
                values.append(None)

    def __reduce__(self):
        return CallsRunner, (self.fn, self.retry)


class MapResults(itertools.chain):
    """What ``Client.map`` returns: an iterator over the calls' results, in call order.

    Its items come from C (one chain of per-task iterators), so handing out a result costs
    no Python frame. ``close()`` stops it, as for a generator, and cancels what is left."""

    __slots__ = ("_tasks", "_futures", "_arguments")

    @classmethod
    def of(cls, futures, chunked, end_time, submit_next=None, on_end=None):
        tasks = results_in_order(futures, chunked, end_time, submit_next, on_end)
        results = cls.from_iterable(tasks)
        results._tasks, results._futures = tasks, futures
        results._arguments = (futures, chunked, end_time, submit_next, on_end)
        return results

    def __aiter__(self):
        """``async for``: the same results in the same order, each awaited in the running
        event loop, not waited for. Once only, and not after a plain ``for`` began."""
        import inspect
        if self._arguments is None or inspect.getgeneratorstate(self._tasks) != "GEN_CREATED":
            raise RuntimeError("the results of this map are already being consumed")
        arguments, self._arguments = self._arguments, None
        self._tasks.close()  # never started: the async generator takes its place
        return results_in_order_async(*arguments)

    def close(self):
        self._tasks.close()
        for future in self._futures:  # also those of a map never iterated
            future.cancel()


def auto_chunk_size(calls, cores):
    """Calls per task for ``calls`` calls on ``cores`` cores when the caller gave no
    chunksize: every task's with a buffersize, else the largest's (``guided_sizes``)."""
    per_task = calls // (TASKS_PER_CORE * max(1, cores))
    return max(1, min(MAX_AUTO_CHUNK, per_task))


def guided_sizes(calls, cores):
    """Calls per task, task after task, for ``calls`` calls on ``cores`` cores when the
    caller gave no chunksize (guided self-scheduling, as OpenMP's ``schedule(guided)``).

    Tasks hold ``auto_chunk_size`` calls while more than 2 x cores such tasks are left,
    then the calls left / (2 x cores), down to the smallest size: 1 / 64 of a core's share
    of the calls, one call at least. Every core then ends within about one task of that
    size of the others. After the calls it goes on with the smallest size."""
    cores = max(1, cores)
    largest = auto_chunk_size(calls, cores)
    smallest = max(1, min(largest, calls // (MIN_CHUNK_SHARE * cores)))
    remaining = calls
    while True:
        size = min(largest, max(smallest, -(-remaining // (TAIL_TASKS_PER_CORE * cores))))
        if 0 < remaining < size:
            size = remaining
        yield size
        remaining -= size


def check_chunk_arguments(chunksize, buffersize):
    """``ValueError`` or ``TypeError`` for a bad ``chunksize`` or ``buffersize``, as Python's."""
    if chunksize is not None and chunksize < 1:
        raise ValueError("chunksize must be >= 1")
    if buffersize is not None:
        if not isinstance(buffersize, int) or isinstance(buffersize, bool):
            raise TypeError("buffersize must be an integer or None")
        if buffersize < 1:
            raise ValueError("buffersize must be None or > 0")


def chunks(iterables, sizes):
    """``(columns, calls)`` for each group of calls, of ``sizes`` calls (an iterator of
    each group's, which must not end before the calls, else every group's): one column
    per iterable, a slice of it where it is a range, a list or a tuple (a range's slice
    pickles small), else a list of its items."""
    if not isinstance(sizes, Iterator):
        sizes = itertools.repeat(sizes)
    if len(iterables) == 1 and type(iterables[0]) in (range, list, tuple):
        whole = iterables[0]
        start, end = 0, len(whole)
        for size in sizes:
            if start >= end:
                return
            column = whole[start:start + size]
            start += size
            yield (column,), len(column)
        return
    if len(iterables) == 1:
        source = iter(iterables[0])
        for size in sizes:
            column = list(itertools.islice(source, size))
            if not column:
                return
            yield (column,), len(column)
        return
    rows = zip(*iterables)
    for size in sizes:
        group = list(itertools.islice(rows, size))
        if not group:
            return
        yield tuple(map(list, zip(*group))), len(group)


def handed_out(values):
    """An iterator over ``values`` that drops each one as it hands it out."""
    values.reverse()
    return map(values.pop, itertools.repeat(-1, len(values)))


def _values_and_error(outcome, chunked):
    """A task's results to hand out, and the exception to raise after them (or None)."""
    if not chunked:
        return [outcome], None
    values, failures = outcome
    if not failures:
        return values, None
    first = min(failures)
    del values[first:]
    return values, load_exception(failures[first])


def results_in_order(futures, chunked, end_time, submit_next=None, on_end=None):
    """Iterators over the results of ``futures`` (a deque, in call order): a chunk's
    results up to its first exception, or a lone call's result. A call's exception is
    raised once the results before it have been handed out; a timeout when the next
    result is not there by ``end_time``. ``submit_next()``, if given, submits one more
    task as each one ends and returns its future (None once the calls are all out).
    Futures not waited for are cancelled at the end, also when the caller stops early."""
    try:
        while futures:
            future = futures[0]
            remaining = None if end_time is None else end_time - time.monotonic()
            outcome = future.result(remaining)
            future = None  # no reference kept to a result once it is handed out
            _take_next(futures, submit_next)
            values, error = _values_and_error(outcome, chunked)
            outcome = None
            yield handed_out(values)
            if error is not None:
                raise error
    finally:
        _end(futures, on_end)


async def results_in_order_async(futures, chunked, end_time, submit_next=None, on_end=None):
    """``results_in_order`` for ``async for``: each task's future is awaited."""
    import asyncio  # here: executors import this module, and never await
    try:
        while futures:
            future = futures[0]
            if end_time is None:
                outcome = await future
            else:
                outcome = await asyncio.wait_for(future, end_time - time.monotonic())
            future = None
            _take_next(futures, submit_next)
            values, error = _values_and_error(outcome, chunked)
            outcome = None
            for value in values:
                yield value
            if error is not None:
                raise error
    finally:
        _end(futures, on_end)


def _take_next(futures, submit_next):
    """Take the first of ``futures`` out (it ended), and submit the next task, if any."""
    futures.popleft()
    if submit_next is not None:
        following = submit_next()
        if following is not None:
            futures.append(following)


def _end(futures, on_end):
    """A map's results are no longer read: cancel the tasks left, and say so."""
    for future in futures:
        future.cancel()
    if on_end is not None:
        on_end()


def count_calls(future, calls):
    """(done, failed) calls of an ended chunk, for progress bars."""
    if future.cancelled() or future.exception() is not None:
        return 0, calls
    failures = future.result()[1]
    failed = len(failures) if failures else 0
    return calls - failed, failed


def tasks_ahead(buffersize, chunksize):
    """Tasks a map with ``buffersize`` keeps submitted ahead of the caller: at most
    ``buffersize`` calls, and one task at least."""
    return max(1, buffersize // chunksize)
