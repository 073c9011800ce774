"""Throughput, latency, efficiency and start-up of zsched, optionally against its peers.

    python bench/throughput.py             # zsched LocalCluster and embedded Client()
    python bench/throughput.py --compare   # ... and ProcessPoolExecutor, multiprocessing.Pool,
                                           # Dask distributed and Ray (when installed)
    python bench/throughput.py --quick     # small numbers: a smoke run

Every system runs the same no-op tasks, round by round (systems interleaved, their order
rotated each round); the figures are medians over rounds. Output: a short table on stdout,
then one line ``JSON {...}`` with every figure. Log output of the systems (zsched
executors, Dask workers) goes to a temporary file while they run, so it does not break up
the table; its warnings and errors are echoed at the end (``--show-logs`` leaves it on
stderr instead). The machine may be shared and noisy: compare ratios from one run, not
absolute numbers across runs.
"""
import argparse
import gc
import os
import sys
import time
import traceback

from _common import (about_machine, about_zsched, check_results, kill_pids, live_children, median,
                     new_log_file, output_to_log, percentile, print_json, report_log, require_positive)
from _throughput_peers import PEER_SYSTEMS, NotInstalled
from _throughput_report import (ALL_FIGURES, print_efficiency, print_map_against_pool, print_ratios,
                                print_table)
from _throughput_zsched import ZSCHED_SYSTEMS, measure_detection


# ---------------------------------------------------------------- task functions
# Module level, so that every system (ProcessPoolExecutor included) can pickle them; in
# the script itself, so that zsched, Dask and Ray send them by value, as a user's.

def noop(x):
    return x


def sleep_1ms(x):
    time.sleep(0.001)
    return x


def sleep_10ms(x):
    time.sleep(0.01)
    return x


# the calls of the efficiency phases: (function, its seconds, the figures' suffix)
TIMED_CALLS = ((sleep_1ms, 0.001, "1ms"), (sleep_10ms, 0.01, "10ms"))


def phase_timeout(n_tasks):
    """Generous limit for one phase: a stall is reported, never waited for forever."""
    return 60.0 + n_tasks / 200.0


# ---------------------------------------------------------------- measuring

def run_round(cls, args, n_eff, log, stray):
    """One round of one system: start, measure, close; returns its figures. Processes of
    this one still running after its shutdown are killed and listed in ``stray``."""
    figures = {}
    system = cls(args.executors)
    try:
        n_tasks, timeout = start(system, args, figures)
        xs = list(range(n_tasks))
        submit_phase(system, xs, timeout, figures, log)
        map_phases(system, args, xs, timeout, figures, log)
        latency_phase(system, args.latency_samples, figures, log)
        efficiency_phases(system, n_eff, figures, log)
        return figures
    finally:
        t0 = time.perf_counter()
        try:
            system.close()
        finally:
            figures["shutdown_s"] = time.perf_counter() - t0
            leftover = live_children(grace=10.0)
            if leftover:
                stray.extend(f"{pid} {cmd[:120]}" for pid, cmd in leftover)
                kill_pids(pid for pid, _ in leftover)


def start(system, args, figures):
    """Start ``system`` and run its first task, then a warm-up whose rate sizes the phases:
    (tasks per phase, the limit of a phase)."""
    gc.collect()
    t0 = time.perf_counter()
    system.start()
    first = system.one(noop, -1, phase_timeout(0))
    figures["startup_s"] = time.perf_counter() - t0
    if first != -1:
        raise AssertionError(f"first task returned {first!r}, expected -1")
    # warm-up, untimed: functions shipped, workers busy once; its rate sizes the phases
    warm = list(range(min(500, max(10, args.tasks // 20))))
    t0 = time.perf_counter()
    check_results(system.wait_all([system.submit(noop, x) for x in warm], phase_timeout(len(warm))),
                  warm, "warm-up")
    warm_rate = len(warm) / (time.perf_counter() - t0)
    n_tasks = args.tasks
    if args.phase_budget > 0 and n_tasks > warm_rate * args.phase_budget:
        # a slow system runs fewer tasks, so that a phase takes about --phase-budget s
        n_tasks = max(len(warm), min(n_tasks, int(warm_rate * args.phase_budget) // 100 * 100))
    figures["tasks"] = n_tasks
    # a stall is an error after 10 x the time the warm-up rate predicts (+ 30 s)
    return n_tasks, min(phase_timeout(n_tasks), 30.0 + 10.0 * n_tasks / warm_rate)


def submit_phase(system, xs, timeout, figures, log):
    """N x submit, then wait for all."""
    gc.collect()
    log(f"    submit x{len(xs)}")
    t0 = time.perf_counter()
    handles = [system.submit(noop, x) for x in xs]
    results = system.wait_all(handles, timeout)
    figures["submit_tasks_per_s"] = len(xs) / (time.perf_counter() - t0)
    check_results(list(results), xs, "submit")


def map_phases(system, args, xs, timeout, figures, log):
    """map of the phase's calls, then, for a system that chunks a map, the large map."""
    # a system that chunks a map maps all N calls even when its submits were slow:
    # map/s is then compared at the same N
    map_xs = list(range(args.tasks)) if getattr(system, "large_map", False) else xs
    gc.collect()
    log(f"    map x{len(map_xs)}")
    t0 = time.perf_counter()
    results = system.map(noop, map_xs, timeout)
    figures["map_tasks_per_s"] = len(map_xs) / (time.perf_counter() - t0)
    check_results(list(results), map_xs, "map")
    del results, map_xs

    if getattr(system, "large_map", False) and args.large_map:
        big = range(args.large_map)
        gc.collect()
        log(f"    map x{args.large_map}")
        t0 = time.perf_counter()
        results = system.map(noop, big, phase_timeout(args.large_map))
        figures["map_large_per_s"] = args.large_map / (time.perf_counter() - t0)
        check_results(list(results), list(big), "large map")


def latency_phase(system, n_samples, figures, log):
    """Single tasks, one at a time: p50 and p99 of their round trips."""
    gc.collect()
    log(f"    latency x{n_samples}")
    samples = []
    perf = time.perf_counter
    timeout = phase_timeout(0)
    for i in range(n_samples):
        t0 = perf()
        value = system.one(noop, i, timeout)
        samples.append(perf() - t0)
        if value != i:
            raise AssertionError(f"latency task {i} returned {value!r}")
    samples.sort()
    figures["latency_p50_us"] = percentile(samples, 50) * 1e6
    figures["latency_p99_us"] = percentile(samples, 99) * 1e6


def efficiency_phases(system, n_eff, figures, log):
    """``n_eff`` calls of 10 ms, and as many seconds of calls of 1 ms, each through
    ``submit`` (one task per call), then through the system's own ``map``: ideal time
    (calls x seconds / workers) over measured time."""
    for fn, seconds, suffix in TIMED_CALLS:
        ys = list(range(round(n_eff * 0.01 / seconds)))
        ideal = len(ys) * seconds / system.workers
        for way in ("submit", "map"):
            gc.collect()
            log(f"    {way} {len(ys)} x {suffix}")
            timeout = phase_timeout(len(ys))
            t0 = time.perf_counter()
            if way == "submit":
                results = system.wait_all([system.submit(fn, y) for y in ys], timeout)
            else:
                results = system.map(fn, ys, timeout)
            elapsed = time.perf_counter() - t0
            check_results(list(results), ys, f"{suffix} calls through {way}")
            figures[f"{'map_' if way == 'map' else ''}efficiency_{suffix}"] = ideal / elapsed


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Throughput, latency, efficiency and start-up of zsched (and peers, --compare) "
                    "on no-op tasks.")
    parser.add_argument("--tasks", type=int, default=None, metavar="N",
                        help="no-op tasks per throughput phase (default 100000: long enough that "
                             "one stall of a shared machine does not decide a phase; 2000 with "
                             "--quick)")
    parser.add_argument("--large-map", type=int, default=None, metavar="M",
                        help="calls of the large map phase, run by the systems that chunk a map "
                             "(zsched, Pool.map) (default 1000000; 20000 with --quick; 0: none)")
    parser.add_argument("--detection", action="store_true",
                        help="measure only how long the driver takes to report a SIGKILLed and a "
                             "SIGSTOPped executor")
    parser.add_argument("--latency-samples", type=int, default=None, metavar="N",
                        help="single-task round trips timed (default 500; 50 with --quick)")
    parser.add_argument("--rounds", type=int, default=None, metavar="R",
                        help="rounds; figures are medians over rounds (default 3; 5 with "
                             "--compare, as the peers' figures zsched is held to; 1 with --quick)")
    parser.add_argument("--executors", type=int, default=2, metavar="N",
                        help="executors (workers) of one core each, for every system (default 2)")
    parser.add_argument("--compare", action="store_true",
                        help="also run ProcessPoolExecutor, multiprocessing.Pool, Dask distributed "
                             "and Ray (when installed), interleaved round by round")
    parser.add_argument("--quick", action="store_true", help="small numbers, for a smoke run")
    parser.add_argument("--phase-budget", type=float, default=None, metavar="S",
                        help="a system too slow to run --tasks in about S seconds (judged from its "
                             "warm-up) runs fewer tasks per phase, reported (default 10; 2 with "
                             "--quick; 0: never)")
    parser.add_argument("--show-logs", action="store_true",
                        help="leave the systems' log output on stderr instead of a temporary file")
    args = parser.parse_args(argv)
    quick = args.quick
    if args.tasks is None:
        args.tasks = 2000 if quick else 100_000
    if args.large_map is None:
        args.large_map = 20_000 if quick else 1_000_000
    if args.latency_samples is None:
        args.latency_samples = 50 if quick else 500
    if args.rounds is None:
        args.rounds = 1 if quick else 5 if args.compare else 3
    if args.phase_budget is None:
        args.phase_budget = 2.0 if quick else 10.0
    require_positive(parser, args, ("tasks", "latency_samples", "rounds", "executors"))
    return args


class Runs:
    """The systems of this run and, by name, their labels, their status ("ok", "not
    installed" or the error that ended them), their tracebacks, the figures of each round
    and the processes they left running."""

    def __init__(self, classes):
        self.order = [c.name for c in classes]
        self.labels = {c.name: c.label for c in classes}
        self.status = {c.name: "ok" for c in classes}
        self.errors = {}
        self.per_round = {c.name: [] for c in classes}
        self.leftovers = {}


def main(argv=None):
    args = parse_args(argv)
    if args.detection:
        return measure_detection(args.rounds)
    started = time.perf_counter()
    n_eff = (20 if args.quick else 100) * args.executors
    classes = list(ZSCHED_SYSTEMS) + (list(PEER_SYSTEMS) if args.compare else [])
    runs = Runs(classes)
    log_path = None if args.show_logs else new_log_file("zsched-bench-")
    with output_to_log(log_path, not args.show_logs) as progress:
        def log(message):
            print(message, file=progress, flush=True)

        run_rounds(args, classes, runs, n_eff, log)
    return report(args, runs, n_eff, log_path, started)


def run_rounds(args, classes, runs, n_eff, log):
    """Every round of every system that imports, their order rotated each round; a system
    that fails is not run again."""
    runnable = []
    for cls in classes:
        try:
            cls(args.executors)  # constructing imports the system; nothing starts yet
            runnable.append(cls)
        except NotInstalled:
            runs.status[cls.name] = "not installed"
    for r in range(args.rounds):
        shift = r % len(runnable)
        for cls in runnable[shift:] + runnable[:shift]:
            if runs.status[cls.name] == "ok":  # else it failed in an earlier round
                run_one(cls, args, runs, r, n_eff, log)
    stray = live_children(grace=5.0)
    if stray:
        runs.leftovers.setdefault("end", []).extend(f"{pid} {cmd[:120]}" for pid, cmd in stray)
        kill_pids(pid for pid, _ in stray)


def run_one(cls, args, runs, r, n_eff, log):
    """Round ``r`` of one system, its figures or its error kept in ``runs``."""
    log(f"round {r + 1}/{args.rounds}: {cls.label}")
    t0 = time.perf_counter()
    stray = []
    try:
        figures = run_round(cls, args, n_eff, log, stray)
    except Exception as exc:
        runs.status[cls.name] = f"error in round {r + 1}: {type(exc).__name__}: {exc}"
        runs.errors[cls.name] = traceback.format_exc()
        log(f"  {cls.label} FAILED: {type(exc).__name__}: {exc}")
    else:
        runs.per_round[cls.name].append(figures)
        log(f"  done in {time.perf_counter() - t0:.1f} s")
    finally:
        if stray:
            runs.leftovers.setdefault(cls.name, []).extend(stray)
            log(f"  {len(stray)} process(es) still running after shutdown: killed")


def report(args, runs, n_eff, log_path, started):
    """Print the tables, the errors and the JSON line; the exit status."""
    order, labels, status, per_round = runs.order, runs.labels, runs.status, runs.per_round
    medians = {name: {key: median(rounds, key) for key, _, _ in ALL_FIGURES}
               for name, rounds in per_round.items()}
    print_table(order, labels, status, medians, per_round, args)
    print_efficiency(order, labels, status, medians, n_eff)
    ratios = print_ratios(order, labels, status, medians) if args.compare else {}
    map_ratios = print_map_against_pool(labels, status, medians) if args.compare else {}
    n_notable, log_path = print_problems(runs, log_path)
    print_json({
        "benchmark": "zsched-throughput",
        **about_zsched(),
        **about_machine(),
        "params": {"tasks": args.tasks, "large_map": args.large_map,
                   "latency_samples": args.latency_samples,
                   "rounds": args.rounds, "executors": args.executors,
                   "efficiency_tasks": n_eff, "efficiency_tasks_1ms": 10 * n_eff,
                   "phase_budget_s": args.phase_budget,
                   "compare": args.compare, "quick": args.quick},
        "systems": {
            name: {"label": labels[name], "status": status[name],
                   "workers": (os.cpu_count() or 1) if name == "zsched_embedded" else args.executors,
                   "median": {k: v for k, v in medians[name].items() if v is not None},
                   "rounds": per_round[name],
                   **({"traceback": runs.errors[name]} if name in runs.errors else {})}
            for name in order
        },
        "ratios_peer_over_zsched": ratios,
        "map_over_pool_map": map_ratios,
        "leftover_processes": runs.leftovers,
        "log_warnings": n_notable,
        "log_file": log_path,
        "elapsed_s": time.perf_counter() - started,
    })
    zsched_ok = all(status[n] == "ok" and not runs.leftovers.get(n) for n in ("zsched", "zsched_embedded"))
    return 0 if zsched_ok else 1


def print_problems(runs, log_path):
    """Print the errors, the processes left running and the log file's warnings: (how many
    warnings and errors the log holds, its path or None once deleted)."""
    print()
    for name in runs.errors:
        print(f"{runs.labels[name]}: {runs.status[name]}")
    for name, items in runs.leftovers.items():
        print(f"processes still running after {runs.labels.get(name, 'the end')} (killed): {len(items)}")
        for item in items[:10]:
            print(f"  {item}")
    if log_path is None:
        return 0, None
    log_path, n_notable = report_log(log_path, keep=bool(runs.errors or runs.leftovers))
    return n_notable, log_path


if __name__ == "__main__":
    sys.exit(main())
