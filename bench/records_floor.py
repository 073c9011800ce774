"""How fast could the compiled fast path be with tasks as C records? A floor, measured.

    python bench/records_floor.py                  # 10 and 1,000 executors of 8 cores, 10^6 tasks, 3 rounds
    python bench/records_floor.py --executors 10 --tasks 300000 --rounds 5

``record_table.pyx`` (next to this script; built on first use with Cython's pyximport)
keeps each task as a C record in one table, queued in a ring of indices and found by its
task id without a hash, and does the least the first three timed calls of ``bench/offers.py``
can do while taking the rows of SubmitTasks and StatusUpdates as msgpack decodes them and
giving out LaunchTasks and result rows as Python lists. It leaves out much of what zsched's
fast path does per task (see the module's docstring), so its time is a lower bound for a
fast path built that way, not a design.

Since the fast path reads StatusUpdates frames itself and writes LaunchTasks frames, its two
ways here include that reading and writing in ``status`` and ``offers``, and the record
table, which takes and gives rows, does not: ``bench/frames_floor.py`` is the comparison
from frames to frames.

Each round runs, each in its own process and in turn, the same scheduling run three ways:
zsched's fast path compiled and its pure-Python reference (``bench/offers.py``'s
``run_once``), and the record table, through the same loop: SubmitTasks of 1,024 rows,
then wake-ups of one resource offer and one StatusUpdates of ``--batch`` tasks from each
executor holding tasks. Timed in CPU time of the thread, per task; medians over rounds;
the ratios are the reference's time over each. Output: a table, then one line ``JSON {...}``.
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)  # the checkout: zsched/_frames.pxd, which the floors cimport
sys.path.insert(0, HERE)
import offers  # noqa: E402  (this directory's bench/offers.py)

RESULT = offers.RESULT
FINISHED = offers.FINISHED
SUBMIT_BATCH = offers.SUBMIT_BATCH
RECV_BATCH = offers.RECV_BATCH
WINDOW_PER_CORE = 256  # tasks_per_core: the window of an executor of no-op tasks
WAYS = ("reference", "compiled", "records")
FIGURES = ("submit_ns", "offers_ns", "status_ns", "total_ns", "timed_faults_per_1k")


def run_records(n_executors, cores, n_tasks, batch):
    """``offers.run_once``'s loop on the record table: its figures."""
    import pyximport
    pyximport.install(language_level=3, inplace=False,
                      setup_args={"include_dirs": [ROOT]})  # for zsched/_frames.pxd
    from record_table import RecordTable

    table = RecordTable(n_executors, cores * WINDOW_PER_CORE)
    clock = time.thread_time_ns
    timer_ns = statistics.median(-clock() + clock() for _ in range(1001))
    faults = offers.Faults()
    submit_ns = offers_ns = status_ns = 0
    for first in range(0, n_tasks, SUBMIT_BATCH):
        rows = [[i, b"digest", b"args", 0] for i in range(first, min(n_tasks, first + SUBMIT_BATCH))]
        faults.start()
        start = clock()
        table.submit(rows, 0.0)
        submit_ns += clock() - start - timer_ns
        faults.stop("submit")
    held = collections.defaultdict(collections.deque)
    reporting = collections.deque()
    done = 0
    while done < n_tasks:
        faults.start()
        start = clock()
        launches = table.offer()
        offers_ns += clock() - start - timer_ns
        faults.stop("offers")
        for executor, rows in launches:
            if not held[executor]:
                reporting.append(executor)
            held[executor].extend(rows)
        n_reports = min(len(reporting), RECV_BATCH)
        if not n_reports:
            raise RuntimeError("stalled")
        for _ in range(n_reports):
            executor = reporting.popleft()
            queue = held[executor]
            rows = [[row[0], row[1], FINISHED, RESULT]
                    for row in (queue.popleft() for _ in range(min(batch, len(queue))))]
            faults.start()
            start = clock()
            table.status_updates(executor, rows)
            status_ns += clock() - start - timer_ns
            faults.stop("status")
            done += len(rows)
            if queue:
                reporting.append(executor)
        table.results.clear()
    return {"submit_ns": submit_ns / n_tasks, "offers_ns": offers_ns / n_tasks,
            "status_ns": status_ns / n_tasks,
            "total_ns": (submit_ns + offers_ns + status_ns) / n_tasks,
            "timed_faults_per_1k": 1000 * sum(faults.counts.values()) / n_tasks}


def worker(args):
    if args.way == "records":
        figures = run_records(args.executors[0], args.cores, args.tasks, args.batch)
    else:
        figures = offers.run_once(args.executors[0], args.cores, args.tasks, args.batch)
        # the record table's rows are handed over as they are: the results phase is left out
        figures["total_ns"] = figures["submit_ns"] + figures["offers_ns"] + figures["status_ns"]
        from zsched import fastpath
        if fastpath.IMPLEMENTATION.startswith("compiled") != (args.way == "compiled"):
            raise SystemExit(f"asked for {args.way}, got {fastpath.IMPLEMENTATION}")
    print(json.dumps({key: figures[key] for key in FIGURES}))


def spawn(way, n_executors, args, script=__file__):
    """``script --worker way ...`` in a process of its own: its figures."""
    env = dict(os.environ, ZSCHED_PUREPYTHON="1" if way == "reference" else "0")
    command = [sys.executable, os.path.abspath(script), "--worker", way,
               "--executors", str(n_executors), "--cores", str(args.cores),
               "--tasks", str(args.tasks), "--batch", str(args.batch)]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{way} with {n_executors} executors failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def parse_args(argv, description, ways):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--executors", default="10,1000", metavar="N,N,...")
    parser.add_argument("--cores", type=int, default=8)
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64,
                        help="tasks an executor reports per StatusUpdates (default 64)")
    parser.add_argument("--worker", choices=ways, dest="way", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.executors = [int(n) for n in args.executors.split(",")]
    return args


def report(args, medians, runs, phases, benchmark, title):
    """The table of ``medians`` (ns per task in each of ``phases``), then the JSON line."""
    print(f"{args.tasks:,} no-op tasks, executors of {args.cores} cores, StatusUpdates of "
          f"{args.batch} tasks, medians of {args.rounds} round(s){title}")
    header = (f"{'executors':>9}  {'way':<10} " + " ".join(f"{phase:>7}" for phase in phases)
              + f" {'total ns/task':>13} {'reference / this':>16} {'faults/1k':>9}")
    print(header)
    print("-" * len(header))
    for size, by_way in medians.items():
        reference = by_way["reference"]["total_ns"]
        for way, m in by_way.items():
            print(f"{size:>9,}  {way:<10} " + " ".join(f"{m[phase + '_ns']:>7,.0f}" for phase in phases)
                  + f" {m['total_ns']:>13,.0f} {reference / m['total_ns']:>15.2f}x"
                  f" {m['timed_faults_per_1k']:>9.1f}")
    print("JSON " + json.dumps({"benchmark": benchmark, "params": {
        "executors": args.executors, "cores": args.cores, "tasks": args.tasks,
        "rounds": args.rounds, "batch": args.batch}, "medians": medians, "runs": runs}))


def main(argv=None):
    args = parse_args(argv, __doc__.splitlines()[0], WAYS)
    if args.way:
        return worker(args)
    medians, runs = offers.measure(args, WAYS, spawn, FIGURES)
    report(args, medians, runs, ("submit", "offers", "status"), "zsched-records-floor", "")


if __name__ == "__main__":
    main()
