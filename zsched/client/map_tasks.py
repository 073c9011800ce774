"""The tasks of one ``Client.map``: its calls grouped into tasks, submitted on demand."""
import itertools
import time
from collections import deque
from collections.abc import Iterator

from ..errors import MessageTooLarge
from ..payload import quick_pickle
from ..runtime import gc_untrack
from .map_calls import (TASKS_PER_CORE, CallsRunner, MapResults, auto_chunk_size,
                        check_chunk_arguments, chunks, count_calls, guided_sizes, tasks_ahead)
from .progress_bar import ProgressBar

_MAP_BATCH = 4096  # map hands tasks to the sending thread in groups of this many
_NO_KWARGS = {}


def run_map(outbox, futures, check_open, total_cores, retries, fn, iterables, timeout,
            chunksize, buffersize, progress, placement=None):
    """``Client.map``: the iterator of its results (``MapResults``). The tasks go to
    ``outbox`` and their futures to ``futures``; ``total_cores()`` is the executors' cores,
    for automatic chunks."""
    check_chunk_arguments(chunksize, buffersize)
    end_time = None if timeout is None else timeout + time.monotonic()
    calls = None  # unknown with a buffersize: the iterables may not end
    if buffersize is None and (chunksize is None or progress):
        iterables, calls = counted(iterables)
    sizes = chunksize  # calls per task: every task's, or an iterator of each task's
    if chunksize is None:
        wanted = calls if buffersize is None else buffersize
        sizes = chunksize = 1
        if wanted >= 2 * TASKS_PER_CORE:
            cores = total_cores()
            sizes = chunksize = auto_chunk_size(wanted, cores)  # the largest
            if buffersize is None and chunksize > 1:  # tasks that shrink as the map nears its end
                sizes = guided_sizes(calls, cores)
    tasks = MapTasks(outbox, futures, check_open, fn, iterables, sizes, retries,
                     calls if progress else False, placement)
    if buffersize is None:
        try:
            submitted = deque()
            while True:
                batch = tasks.submit(max(1, _MAP_BATCH // chunksize))
                if not batch:
                    break
                submitted.extend(batch)
        finally:
            tasks.release_function()
        return MapResults.of(submitted, tasks.chunked, end_time)
    try:
        submitted = deque(tasks.submit(tasks_ahead(buffersize, chunksize)))
    except BaseException:
        tasks.end()
        raise
    return MapResults.of(submitted, tasks.chunked, end_time, tasks.submit_one, tasks.end)


class MapTasks:
    """The tasks of one ``map``: its calls grouped into tasks of ``sizes`` calls (see
    ``chunks``), submitted on demand.

    It queues rows in the client's ``outbox`` and registers their futures in its
    ``futures`` table; ``check_open()`` raises once the client takes no more tasks.
    The map's function is pickled once, and held at the driver until the map ends
    (``release_function``)."""

    def __init__(self, outbox, futures, check_open, fn, iterables, sizes, retries,
                 progress_total, placement=None):
        self.outbox = outbox
        self.futures = futures
        self.check_open = check_open
        self.retries = retries
        self.placement = placement  # [hosts, speculative] of each task, or None
        self.chunked = isinstance(sizes, Iterator) or sizes > 1
        if self.chunked:
            fn, self.groups = CallsRunner(fn, retries > 0), chunks(iterables, sizes)
        else:
            self.groups = ((args, 1) for args in zip(*iterables))
        with outbox.lock:
            check_open()
            self.digest, self.fn_size = outbox.start_map(fn)
        self.bar = None
        if progress_total is not False:
            self.bar = ProgressBar(progress_total, desc="map", unit="call")

    def submit(self, n):
        """Futures of the next ``n`` tasks at most (fewer once the calls run out)."""
        submitted = self._queue(itertools.islice(self.groups, n))
        if self.bar is not None:
            count = count_calls if self.chunked else None
            for future, calls in submitted:
                self.bar.watch(future, calls, count)
        return [future for future, _ in submitted]

    def _queue(self, groups):
        """``[(future, calls), ...]`` for tasks of these ``(args, calls)`` groups, queued."""
        submitted = []
        rows = []
        outbox, futures = self.outbox, self.futures
        limit = outbox.max_message_size
        with outbox.lock:
            self.check_open()
            for args, calls in groups:
                future = futures.new_task()
                submitted.append((future, calls))
                payload = quick_pickle((args, _NO_KWARGS))
                put = None
                if payload is None:  # large, or cloudpickle's: see task_data
                    payload, size, put = outbox.task_data.payload(future.task_id, (args, _NO_KWARGS))
                else:
                    size = len(payload)
                size += self.fn_size
                if size > limit:
                    future.set_exception(MessageTooLarge(f"task {future.task_id}", size, limit))
                    continue
                futures.tasks[future.task_id] = future
                if put is not None:
                    outbox.rows.extend(rows)  # the rows before it keep their place
                    rows = []
                    outbox.queue_data(future, put)
                # a list: the row of SubmitTasks as the driver decodes it; ints and bytes,
                # in no cycle: out of the GC
                row = [future.task_id, self.digest, payload, self.retries]
                if self.placement is not None:
                    row.append(self.placement)
                gc_untrack(row)
                rows.append(row)
            if rows:
                outbox.queue_rows(rows)
        return submitted

    def submit_one(self):
        """The next task's future, or None once the calls are all out."""
        return next(iter(self.submit(1)), None)

    def release_function(self):
        self.outbox.end_map(self.digest)

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
