"""How fast could the driver's per-task work be if the fast path read and wrote the frames
itself? A floor, measured against the fast path as it is, from frames to frames.

    python bench/frames_floor.py                  # 10 and 1,000 executors of 8 cores, 10^6 tasks, 3 rounds
    python bench/frames_floor.py --executors 10 --tasks 300000 --rounds 5

Each way goes from message bodies in to message bodies out, as the driver does for every
task:

- ``reference`` and ``compiled``: zsched's ``TaskScheduler`` (pure-Python reference or
  compiled fast path). The fast path reads each SubmitTasks and StatusUpdates body
  (``read_submit_tasks``, ``read_status_updates``, as ``protocol.decode`` has it do) and
  writes the LaunchTasks frames and the TaskResults frames of 512 rows itself (the compiled
  one in place, from and into the bytes; the reference with msgpack);
- ``frames``: ``FrameTable`` in ``record_table.pyx`` (next to this script, built on first
  use with Cython's pyximport), tasks as C records that point into the SubmitTasks body they
  came in, LaunchTasks and TaskResults bodies written as bytes, no Python object per task. It does
  the least the driver must (see the module's docstring): a lower bound, not a design.

The loop is ``offers.py``'s: SubmitTasks of 1,024 tasks, then wake-ups of one resource
offer and one StatusUpdates of ``--batch`` tasks from each executor holding tasks (at most
1,024), then the results sent. Building the bodies an executor and a client would send,
and reading the LaunchTasks bodies as an executor would, are not timed; the four phases
are, in CPU time of the thread, per task. Each way runs in its own process; ways and sizes
are alternated over rounds, and the figures are medians. Output: a table, then one line
``JSON {...}``.
"""
import collections
import json
import os
import pickle
import resource
import statistics
import sys
import time

import msgpack

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)  # the checkout: zsched/_frames.pxd, which the floors cimport
sys.path.insert(0, HERE)
import offers  # noqa: E402  (this directory's bench/offers.py)
import records_floor  # noqa: E402

RESULT = offers.RESULT
FINISHED = offers.FINISHED
SUBMIT_BATCH = offers.SUBMIT_BATCH
RECV_BATCH = offers.RECV_BATCH
RESULT_ROWS = 512          # rows per TaskResults body (driver._RESULT_ROWS)
WINDOW_PER_CORE = 256      # tasks_per_core: the window of an executor of no-op tasks
DIGEST = bytes(range(16))  # one function's digest
WAYS = ("reference", "compiled", "frames")
PHASES = ("submit", "offers", "status", "results")
FIGURES = tuple(f"{phase}_ns" for phase in PHASES) + ("total_ns", "timed_faults_per_1k")


def submit_bodies(n_tasks):
    """SubmitTasks bodies as a client sends them: a task's arguments pickled, (i,) and {}."""
    for first in range(0, n_tasks, SUBMIT_BATCH):
        yield msgpack.packb([{}, [[i, DIGEST, pickle.dumps(((i,), {}), 5), 0]
                                  for i in range(first, min(n_tasks, first + SUBMIT_BATCH))]])


def launched(body, skip):
    """``[(task id, attempt), ...]`` of a LaunchTasks body after ``skip`` bytes of frame
    header, as the executor reads it."""
    return [(row[0], row[1]) for row in msgpack.unpackb(memoryview(body)[skip:])[1]]


def status_body(tasks, busy):
    return msgpack.packb([1, busy, [[task_id, attempt, FINISHED, RESULT] for task_id, attempt in tasks]])


class Scheduler:
    """zsched's ``TaskScheduler`` (whichever implementation ``zsched.fastpath`` chose) with
    msgpack on both sides, one call per timed phase. Its LaunchTasks come as whole frames."""

    header_length = 2

    def __init__(self, n_executors, cores):
        from zsched.config import Config
        from zsched.fastpath import read_status_updates, read_submit_tasks
        from zsched.protocol import TaskResults, frame_header
        from zsched.scheduler import ClientData, TaskScheduler
        self.read_status_updates = read_status_updates
        self.read_submit_tasks = read_submit_tasks
        self.results_header = frame_header(TaskResults)
        self.scheduler = TaskScheduler(Config(), functions={DIGEST: b"cloudpickled function"})
        self.client = ClientData(b"client", 1)
        self.executors = []
        for i in range(n_executors):
            executor = self.scheduler.add_executor(str(i), b"e%d" % i, "host", cores, 1000 + i, 0.0)
            executor.task_seconds = offers.TASK_SECONDS  # as after its first StatusUpdates
            self.scheduler._apply_window(executor)
            self.executors.append(executor)

    def submit(self, body):
        _, rows = self.read_submit_tasks(body, 0)  # what protocol.decode has it do
        self.scheduler.submit(self.client, rows)

    def offer(self):
        return [(executor, frame) for executor, frames in self.scheduler.resource_offers()
                for frame in frames]

    def status_updates(self, executor, body):
        _, busy, rows = self.read_status_updates(body, 0)  # what protocol.decode has it do
        self.scheduler.status_updates(executor, rows, busy)

    @staticmethod
    def rows_in(frame):
        """The rows of a TaskResults frame, as the client reads them."""
        return len(msgpack.unpackb(memoryview(frame)[2:])[0])

    def take_results(self):
        return self.client.results.take_frames(self.results_header, self.scheduler.config.max_message_size,
                                               RESULT_ROWS)


class Frames:
    """``record_table.FrameTable`` behind the same four calls."""

    header_length = 0

    def __init__(self, n_executors, cores):
        import pyximport
        pyximport.install(language_level=3, inplace=False,
                      setup_args={"include_dirs": [ROOT]})  # for zsched/_frames.pxd
        from record_table import FrameTable
        self.table = FrameTable(n_executors, cores * WINDOW_PER_CORE)
        self.executors = list(range(n_executors))

    def submit(self, body):
        self.table.submit(body, 0.0)

    def offer(self):
        return self.table.offer()

    def status_updates(self, executor, body):
        self.table.status_updates(executor, body)

    def take_results(self):
        return self.table.take_results()

    @staticmethod
    def rows_in(body):
        """The rows of a TaskResults body, as the client reads them."""
        return len(msgpack.unpackb(body))


def run_once(way, n_executors, cores, n_tasks, batch):
    """The scheduling run of ``n_tasks`` no-op tasks one way: its figures."""
    target = Frames(n_executors, cores) if way == "frames" else Scheduler(n_executors, cores)
    clock = time.thread_time_ns
    timer_ns = statistics.median(-clock() + clock() for _ in range(1001))
    spent = dict.fromkeys(PHASES, 0)
    faults = 0

    def timed(phase, call, *args):
        nonlocal faults
        at = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = clock()
        value = call(*args)
        spent[phase] += clock() - start - timer_ns
        faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - at
        return value

    for body in submit_bodies(n_tasks):
        timed("submit", target.submit, body)
    held = {executor: collections.deque() for executor in target.executors}
    reporting = collections.deque()
    busy = offers.TASK_SECONDS * batch
    done = results = 0
    while done < n_tasks:  # one wake-up of the driver's loop
        for executor, body in timed("offers", target.offer):
            if not held[executor]:
                reporting.append(executor)
            held[executor].extend(launched(body, target.header_length))
        n_reports = min(len(reporting), RECV_BATCH)
        if not n_reports:
            raise RuntimeError(f"stalled: {n_tasks - done} tasks neither launched nor held")
        for _ in range(n_reports):
            executor = reporting.popleft()
            queue = held[executor]
            tasks = [queue.popleft() for _ in range(min(batch, len(queue)))]
            timed("status", target.status_updates, executor, status_body(tasks, busy))
            done += len(tasks)
            if queue:
                reporting.append(executor)
        for body in timed("results", target.take_results):
            results += target.rows_in(body)
    if results != n_tasks:
        raise RuntimeError(f"{results} results for {n_tasks} tasks")
    figures = {f"{phase}_ns": spent[phase] / n_tasks for phase in PHASES}
    figures["total_ns"] = sum(spent.values()) / n_tasks
    figures["timed_faults_per_1k"] = 1000 * faults / n_tasks
    return figures


def worker(args):
    figures = run_once(args.way, args.executors[0], args.cores, args.tasks, args.batch)
    if args.way != "frames":
        from zsched import fastpath
        if fastpath.IMPLEMENTATION.startswith("compiled") != (args.way == "compiled"):
            raise SystemExit(f"asked for {args.way}, got {fastpath.IMPLEMENTATION}")
    print(json.dumps(figures))


def spawn(way, n_executors, args):
    return records_floor.spawn(way, n_executors, args, script=__file__)


def main(argv=None):
    args = records_floor.parse_args(argv, __doc__.splitlines()[0], WAYS)
    if args.way:
        return worker(args)
    medians, runs = offers.measure(args, WAYS, spawn, FIGURES)
    records_floor.report(args, medians, runs, PHASES, "zsched-frames-floor",
                         "; bodies in to bodies out")


if __name__ == "__main__":
    main()
