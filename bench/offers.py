"""The driver's scheduling fast path alone: ns per task to queue, launch and finish tasks,
with simulated executors (no sockets, no processes).

    python bench/offers.py           # 10, 100, 1,000, 10,000 executors of 8 cores, 10^6 tasks
    python bench/offers.py --quick   # small numbers: a smoke run of a few seconds
    python bench/offers.py --executors 10,100,1000,10000 --cores 8 --tasks 1000000 --rounds 3

For each size, a ``TaskScheduler`` gets that many executors and the tasks, in SubmitTasks
of ``SUBMIT_BATCH`` rows (``submit``: the frame read, Tasks made, queued, indexed for their
client), then runs them as the driver's loop would. Each wake-up makes a resource offer
(``offer_frames``, as the driver does: the slot table's deal, each task's launch, the
LaunchTasks frames with their functions and size limit, the scheduling-latency histogram)
and handles one StatusUpdates from each executor holding tasks, at most ``RECV_BATCH`` of them
(``status_updates``: the frame read, the tasks found, finished and queued as results for
their client, the slots freed, the window adapted); an executor reports its oldest
``--batch`` tasks FINISHED. At the end of the wake-up the client's results become
TaskResults frames (``results``: ``take_frames``, as the driver sends them). Only those four
calls are timed, in CPU time of the thread (steadier than wall time on a shared machine),
and divided by the number of tasks. The frames of a SubmitTasks and of a StatusUpdates are
built as a client and an executor send them, just before they are handled, and the
LaunchTasks frames are read as an executor reads them (not timed). The garbage collector
runs, as in the driver (``--no-gc``: it does not, to see what it costs each
implementation). ``slot table`` is the same sequence of offers and releases on the
``SlotTable`` alone. ``faults/1k tasks`` are the minor page faults of the whole scheduling
run (timed calls and the messages built between them) per 1,000 tasks: each is memory
touched for the first time, which both implementations pay for the Python objects a task
makes (see bench/RESULTS.md); ``in timed calls`` are those taken inside the four timed
calls (in the JSON, also by call), counted outside the clock readings.

The fast path reads SubmitTasks and StatusUpdates frames and writes LaunchTasks and
TaskResults frames itself (the compiled one in place, from and into the bytes; the reference
with msgpack), so each of the four calls includes reading or making its frames
(``protocol.decode`` of a SubmitTasks or a StatusUpdates has the fast path read it).

Each executor's measured task run time is set to that of a no-op task (``TASK_SECONDS``),
so its window is what the driver gives no-op tasks: ``cores * tasks_per_core`` (8 x 256).

Each implementation (compiled, pure-Python reference) runs in its own subprocess, since
``zsched.fastpath`` chooses at import time; sizes, rounds and implementations are
interleaved and the figures are medians over rounds; ``speed-up`` is reference time over
compiled time. Output: a table on stdout, then one line ``JSON {...}`` with every figure.
The machine may be shared and noisy: compare ratios from one run, not absolute numbers
across runs.
"""
import argparse
import collections
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from _common import about_machine, median, print_json

# A no-op task's run time as an executor measures it: anything under prefetch_seconds / 255
# gives the deepest window, tasks_per_core per core.
TASK_SECONDS = 2e-6
RESULT = b"\x80\x05N."  # a pickled None, as a no-op task returns it
FINISHED = 1            # TaskState.FINISHED as msgpack decodes it: a plain int
SUBMIT_BATCH = 1024     # tasks per SubmitTasks
RECV_BATCH = 1024       # messages the driver handles per wake-up (driver._RECV_BATCH)

IMPLEMENTATIONS = {"compiled": "0", "reference": "1"}  # -> ZSCHED_PUREPYTHON
TARGET_RATIO = 10.0       # compiled at least this many times faster than the reference
TARGET_NS_PER_TASK = 1000  # compiled, at the largest size
FIGURES = ("submit_ns", "offers_ns", "status_ns", "results_ns", "total_ns", "slot_table_ns",
           "faults_per_1k", "timed_faults_per_1k", "submit_faults_per_1k", "offers_faults_per_1k",
           "status_faults_per_1k", "results_faults_per_1k")
RESULT_ROWS = 512      # rows per TaskResults frame (zsched/driver/clients.py _RESULT_ROWS)


# ---------------------------------------------------------------- one run (in a subprocess)

def timer_cost_ns(clock):
    """What reading ``clock`` twice costs, taken off each timed call."""
    return statistics.median(-clock() + clock() for _ in range(1001))


class Faults:
    """Minor page faults taken in the timed calls, by phase (counted outside the clock
    readings, so counting them costs the timed figures nothing)."""

    def __init__(self):
        self.counts = {"submit": 0, "offers": 0, "status": 0, "results": 0}
        self._at = 0

    def start(self):
        self._at = resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    def stop(self, phase):
        self.counts[phase] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - self._at


def run_once(n_executors, cores, n_tasks, batch):
    """Schedule ``n_tasks`` on ``n_executors`` simulated executors; figures of the run."""
    from zsched.config import Config
    from zsched.protocol import SubmitTasks, decode, encode
    from zsched.driver.records import ClientData
    from zsched.driver.scheduler import TaskScheduler

    scheduler = TaskScheduler(Config(), functions={b"digest": b"cloudpickled function"})
    client = ClientData(b"client", 1)
    executors = []
    for i in range(n_executors):
        executor = scheduler.add_executor(str(i), b"e%d" % i, "host", cores, 1000 + i, 0.0)
        executor.task_seconds = TASK_SECONDS  # as after its first StatusUpdates
        scheduler.apply_window(executor)
        executors.append(executor)
    clock = time.thread_time_ns
    timer_ns = timer_cost_ns(clock)
    faults = Faults()
    submit_ns = 0
    for first in range(0, n_tasks, SUBMIT_BATCH):
        rows = [[i, b"digest", b"args", 0] for i in range(first, min(n_tasks, first + SUBMIT_BATCH))]
        frame = encode(SubmitTasks({}, rows))  # as the client sends it
        faults.start()
        start = clock()
        scheduler.submit(client, decode(frame).tasks)
        submit_ns += clock() - start - timer_ns
        faults.stop("submit")
    flood = run_flood(scheduler, client, executors, n_tasks, batch, clock, timer_ns, faults)
    assert scheduler.counts["finished"] == n_tasks and scheduler.n_pending == 0
    steps_ns = submit_ns + flood["offers_ns"] + flood["status_ns"] + flood["results_ns"]
    return {"submit_ns": submit_ns / n_tasks, "offers_ns": flood["offers_ns"] / n_tasks,
            "status_ns": flood["status_ns"] / n_tasks, "results_ns": flood["results_ns"] / n_tasks,
            **{f"{phase}_faults_per_1k": 1000 * count / n_tasks for phase, count in faults.counts.items()},
            "timed_faults_per_1k": 1000 * sum(faults.counts.values()) / n_tasks,
            "total_ns": steps_ns / n_tasks, "offers": flood["offers"],
            "launches": flood["launches"], "messages": flood["messages"],
            "full_collections": flood["full_collections"],
            "window": executors[0].slots}


def run_flood(scheduler, client, executors, n_tasks, batch, clock, timer_ns, faults):
    """Offers, the executors' StatusUpdates and the client's results, one wake-up of the
    driver's loop at a time, until the ``n_tasks`` queued are done: ns in each step, in all."""
    from zsched.protocol import TaskResults, decode, frame_header

    held = {executor: collections.deque() for executor in executors}  # launched, in order
    reporting = collections.deque()  # executors holding tasks, in the order they report
    offers_ns = status_ns = results_ns = 0
    results_header = frame_header(TaskResults)
    limit = scheduler.config.max_message_size
    n_offers = n_launches = n_messages = 0
    done = 0
    gc.collect()
    full_collections = gc.get_stats()[2]["collections"]
    while done < n_tasks:  # one wake-up of the driver's loop
        faults.start()
        start = clock()
        launches = scheduler.offer_frames()
        offers_ns += clock() - start - timer_ns
        faults.stop("offers")
        n_offers += 1
        n_launches += len(launches)
        for executor, frames in launches:  # read as the executor reads them (not timed)
            if not held[executor]:
                reporting.append(executor)
            for frame in frames:
                held[executor].extend(decode(frame).tasks)
        # one StatusUpdates per executor holding tasks, RECV_BATCH at most
        n_reports = min(len(reporting), RECV_BATCH)
        if not n_reports:
            raise RuntimeError(f"stalled: {n_tasks - done} tasks neither launched nor held")
        ns, reported = report_status(scheduler, held, reporting, n_reports, batch, clock, timer_ns, faults)
        status_ns += ns
        done += reported
        n_messages += n_reports
        faults.start()
        start = clock()
        client.results.take_frames(results_header, limit, RESULT_ROWS)  # sent to the client
        results_ns += clock() - start - timer_ns
        faults.stop("results")
    return {"offers_ns": offers_ns, "status_ns": status_ns, "results_ns": results_ns,
            "offers": n_offers, "launches": n_launches, "messages": n_messages,
            "full_collections": gc.get_stats()[2]["collections"] - full_collections}


def report_status(scheduler, held, reporting, n_reports, batch, clock, timer_ns, faults):
    """The StatusUpdates of the next ``n_reports`` executors in ``reporting``, each handled as
    soon as it is decoded and its rows garbage afterwards, as in the driver: (ns, tasks)."""
    from zsched.protocol import StatusUpdates, decode, encode

    status_updates = scheduler.status_updates
    busy = TASK_SECONDS * batch
    status_ns = done = 0
    for _ in range(n_reports):
        executor = reporting.popleft()
        queue = held[executor]
        rows = [[row[0], row[1], FINISHED, RESULT]
                for row in (queue.popleft() for _ in range(min(batch, len(queue))))]
        frame = encode(StatusUpdates(1, busy * len(rows) / batch, rows))  # the executor's
        faults.start()
        start = clock()
        message = decode(frame)
        status_updates(executor, message.updates, message.busy)
        status_ns += clock() - start - timer_ns
        faults.stop("status")
        done += len(rows)
        if queue:
            reporting.append(executor)
    return status_ns, done


def run_slot_table(n_executors, cores, n_tasks, batch, window):
    """The same offers and releases on the SlotTable alone: its ns per task."""
    from zsched.scheduling import SlotTable

    table = SlotTable()
    for i in range(n_executors):
        assert table.add(cores, window) == i
    held = [0] * n_executors  # tasks each executor holds
    reporting = collections.deque()
    pending, done, elapsed = n_tasks, 0, 0
    clock = time.thread_time_ns
    timer_ns = timer_cost_ns(clock)
    while done < n_tasks:
        start = clock()
        launches = table.offer(pending)
        elapsed += clock() - start - timer_ns
        for index, count in launches:
            if not held[index]:
                reporting.append(index)
            held[index] += count
            pending -= count
        releases = []
        for _ in range(min(len(reporting), RECV_BATCH)):
            index = reporting.popleft()
            n = min(batch, held[index])
            releases.append((index, n))
            held[index] -= n
            done += n
            if held[index]:
                reporting.append(index)
        release = table.release
        start = clock()
        for index, n in releases:
            release(index, n)
        elapsed += clock() - start - timer_ns
    return elapsed / n_tasks


def worker(args):
    from zsched import fastpath
    if args.no_gc:
        gc.disable()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    figures = run_once(args.executors[0], args.cores, args.tasks, args.batch)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    figures["faults_per_1k"] = 1000 * faults / args.tasks
    figures["slot_table_ns"] = run_slot_table(args.executors[0], args.cores, args.tasks,
                                              args.batch, figures["window"])
    figures["implementation"] = fastpath.IMPLEMENTATION
    figures["zsched"] = os.path.dirname(fastpath.__file__)
    print(json.dumps(figures))


# ---------------------------------------------------------------- driver of the runs

def spawn(impl, n_executors, args):
    env = dict(os.environ, ZSCHED_PUREPYTHON=IMPLEMENTATIONS[impl])
    command = [sys.executable, os.path.abspath(__file__), "--worker",
               "--executors", str(n_executors), "--cores", str(args.cores),
               "--tasks", str(args.tasks), "--batch", str(args.batch)] + (["--no-gc"] if args.no_gc else [])
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{impl} run with {n_executors} executors failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(args, ways=tuple(IMPLEMENTATIONS), run=None, figures=FIGURES):
    """{size: {way: {figure: median}}} and the raw runs: ``run(way, size, args)`` (by
    default ``spawn``) for each way and size in turn, the order reversed at each size."""
    run = run or spawn
    runs = {size: {way: [] for way in ways} for size in args.executors}
    order = list(ways)
    for round_ in range(args.rounds):
        for size in args.executors:
            for way in order:
                runs[size][way].append(run(way, size, args))
                print(f"  round {round_ + 1}/{args.rounds} {size:>6,} executors {way:<9} "
                      f"{runs[size][way][-1]['total_ns']:8,.0f} ns/task", file=sys.stderr)
            order.reverse()
    medians = {size: {way: {key: median(rs, key) for key in figures}
                      for way, rs in by_way.items()}
               for size, by_way in runs.items()}
    return medians, runs


def print_table(medians):
    header = (f"{'executors':>9}  {'implementation':<14} {'submit ns/task':>14} {'offers ns/task':>14} "
              f"{'status ns/task':>14} {'results ns/task':>15} {'total ns/task':>13} {'speed-up':>8}"
              f"  {'slot table ns/task':>18} {'speed-up':>8} {'faults/1k tasks':>15} {'in timed calls':>14}")
    print(header)
    print("-" * len(header))
    for size, by_impl in medians.items():
        ref = by_impl["reference"]
        for impl, m in by_impl.items():
            ratio = slot_ratio = ""
            if impl == "compiled":
                ratio = f"{ref['total_ns'] / m['total_ns']:.2f}x"
                slot_ratio = f"{ref['slot_table_ns'] / m['slot_table_ns']:.1f}x"
            print(f"{size:>9,}  {impl:<14} {m['submit_ns']:>14,.0f} {m['offers_ns']:>14,.0f} {m['status_ns']:>14,.0f} "
                  f"{m['results_ns']:>15,.0f} {m['total_ns']:>13,.0f} {ratio:>8}  {m['slot_table_ns']:>18,.1f} "
                  f"{slot_ratio:>8} {m['faults_per_1k']:>15,.1f} {m['timed_faults_per_1k']:>14,.1f}")


def verdict(medians):
    largest = max(medians)
    compiled = {size: m["compiled"]["total_ns"] for size, m in medians.items()}
    ratios = {size: m["reference"]["total_ns"] / m["compiled"]["total_ns"]
              for size, m in medians.items()}
    return {
        "compiled_vs_reference_min_ratio": min(ratios.values()),
        "ratio_target_met": min(ratios.values()) >= TARGET_RATIO,
        "compiled_ns_at_largest": compiled[largest],
        "ns_target_met": compiled[largest] <= TARGET_NS_PER_TASK,
        "compiled_largest_over_smallest": compiled[largest] / compiled[min(medians)],
    }


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executors", default=None, metavar="N,N,...",
                        help="simulated executor counts (default 10,100,1000,10000)")
    parser.add_argument("--cores", type=int, default=8, help="cores per executor (default 8)")
    parser.add_argument("--tasks", type=int, default=None, metavar="N",
                        help="queued tasks (default 1,000,000)")
    parser.add_argument("--rounds", type=int, default=None, metavar="R",
                        help="runs per size and implementation; medians (default 3)")
    parser.add_argument("--batch", type=int, default=64, metavar="N",
                        help="tasks an executor reports per StatusUpdates (default 64)")
    parser.add_argument("--no-gc", action="store_true",
                        help="the garbage collector disabled (it runs in the driver)")
    parser.add_argument("--quick", action="store_true", help="small numbers, for a smoke run")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.executors = [int(n) for n in (args.executors or
                                       ("10,100,1000" if args.quick else "10,100,1000,10000")
                                       ).split(",")]
    if args.tasks is None:
        args.tasks = 100_000 if args.quick else 1_000_000
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    print(f"offers and status updates: {args.tasks:,} no-op tasks, executors of {args.cores} "
          f"cores, StatusUpdates of {args.batch} tasks, medians of {args.rounds} round(s)"
          f"{', garbage collector off' if args.no_gc else ''}",
          file=sys.stderr)
    started = time.perf_counter()
    medians, runs = measure(args)
    print_table(medians)
    result = verdict(medians)
    # the targets are set for a million tasks at up to 10,000 executors: with fewer tasks,
    # fixed costs (start-up, the first touch of fresh memory) weigh more on either side
    full_size = args.tasks >= 1_000_000 and max(args.executors) >= 10_000
    scope = "" if full_size else \
        " (set for 10^6 tasks at up to 10,000 executors: this smaller run does not judge them)"
    print(f"\ntargets{scope}: compiled >= {TARGET_RATIO:.0f}x the reference "
          f"(min {result['compiled_vs_reference_min_ratio']:.1f}x: "
          f"{'met' if result['ratio_target_met'] else 'NOT met'}); "
          f"<= {TARGET_NS_PER_TASK:,} ns/task at {max(medians):,} executors "
          f"({result['compiled_ns_at_largest']:,.0f} ns: "
          f"{'met' if result['ns_target_met'] else 'NOT met'}); "
          f"largest/smallest size {result['compiled_largest_over_smallest']:.2f}x")
    any_run = runs[args.executors[0]]["compiled"][0]
    report = {
        "settings": {"executors": args.executors, "cores": args.cores, "tasks": args.tasks,
                     "rounds": args.rounds, "batch": args.batch, "gc": not args.no_gc,
                     "task_seconds": TASK_SECONDS,
                     "window": any_run["window"]},
        "medians": {str(size): by_impl for size, by_impl in medians.items()},
        "runs": {str(size): by_impl for size, by_impl in runs.items()},
        "targets": {**result, "judged": full_size},
        "zsched": any_run["zsched"],
        "seconds": time.perf_counter() - started,
        **about_machine(),
    }
    print_json(report)


if __name__ == "__main__":
    main()
