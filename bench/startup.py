"""Start-up: a cluster of two ready to run a task, against multiprocessing.Pool(2).

    python bench/startup.py             # 15 alternated rounds, then the breakdown
    python bench/startup.py --quick     # 3 rounds: a smoke run

A round starts each system in a fresh process of its own (the systems' order rotated
each round): ``import zsched`` (or ``multiprocessing``), then, timed, from the call that
makes the cluster until the result of a first no-op task is back (``zsched.LocalCluster(
n_executors=2)`` and a ``client()``; the embedded ``zsched.Client()``;
``multiprocessing.Pool(2)`` and ``apply``); it closes it and does the same again. "cold"
is the first (it also imports what the cluster needs), "warm" the second. The figures are
medians over rounds.

The breakdown says where a LocalCluster's start goes: the interpreter and the imports,
each in a fresh process, then the timeline of one start from its processes' log lines
(the driver and the executors log at INFO, with millisecond times). Output: the tables,
then one line ``JSON {...}`` with every figure.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime

from _common import about_machine, about_zsched, median, print_json, require_positive

SYSTEMS = {  # name: label
    "local": "zsched LocalCluster(2)",
    "embedded": "zsched Client() embedded",
    "pool": "multiprocessing.Pool(2)",
}
TARGET_S = 0.10


def noop(x):
    return x


# ---------------------------------------------------------------- in the child process

def start_local(n_executors, log_level):
    import zsched
    cluster = zsched.LocalCluster(n_executors=n_executors, cores_per_executor=1,
                                  log_level=log_level)
    ready = time.perf_counter()
    client = cluster.client()
    return ready, client, lambda: (client.shutdown(wait=True), cluster.close())


def start_embedded(n_executors, log_level):
    import zsched
    client = zsched.Client()
    ready = time.perf_counter()
    return ready, client, lambda: client.shutdown(wait=True)


def start_pool(n_executors, log_level):
    import multiprocessing
    pool = multiprocessing.Pool(n_executors)
    ready = time.perf_counter()
    return ready, pool, lambda: (pool.close(), pool.join())


def run_once(system, n_executors, log_level):
    """Start ``system``, run one task: (seconds to its result, seconds to ready, wall-clock
    time of the start)."""
    starter = {"local": start_local, "embedded": start_embedded, "pool": start_pool}[system]
    started_at = time.time()
    t0 = time.perf_counter()
    ready, handle, close = starter(n_executors, log_level)
    if system == "pool":
        result = handle.apply(noop, (-1,))
    else:
        result = handle.submit(noop, -1).result(60)
    first = time.perf_counter()
    close()
    if result != -1:
        raise AssertionError(f"{system}: the first task returned {result!r}")
    return first - t0, ready - t0, started_at


def child(args):
    """One round of one system, in this fresh process: its figures as JSON on stdout."""
    t0 = time.perf_counter()
    if args.child == "pool":
        import multiprocessing  # noqa: F401
    else:
        import zsched  # noqa: F401
    imported = time.perf_counter() - t0
    cold, cold_ready, cold_at = run_once(args.child, args.executors, args.log_level)
    warm, warm_ready, warm_at = run_once(args.child, args.executors, args.log_level)
    print(json.dumps({"import_s": imported, "cold_s": cold, "cold_ready_s": cold_ready,
                      "warm_s": warm, "warm_ready_s": warm_ready,
                      "cold_started_at": cold_at, "warm_started_at": warm_at}))
    return 0


# ---------------------------------------------------------------- in the parent

def run_child(system, args, log_level="WARNING", stderr=subprocess.DEVNULL):
    command = [sys.executable, os.path.abspath(__file__), "--child", system,
               "--executors", str(args.executors), "--log-level", log_level]
    out = subprocess.run(command, stdout=subprocess.PIPE, stderr=stderr, text=True,
                         check=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


def alternated(args, log):
    """``{system: [figures of each round]}``, the systems alternated, their order rotated."""
    names = list(SYSTEMS)
    runs = {name: [] for name in names}
    for i in range(args.rounds):
        order = names[i % len(names):] + names[:i % len(names)]
        for name in order:
            runs[name].append(run_child(name, args))
        log(f"  round {i + 1}/{args.rounds}: " + ", ".join(
            f"{name} {runs[name][-1]['warm_s']:.3f} s" for name in names))
    return runs


def wall(command, repeats):
    """Median seconds ``command`` takes to run, in fresh processes."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def component_costs(repeats):
    """What each process of a start pays before it does anything, in fresh processes."""
    py = sys.executable
    base = wall([py, "-c", "pass"], repeats)
    costs = {
        "interpreter_s": base,
        "interpreter_without_site_s": wall([py, "-S", "-c", "pass"], repeats),
        "import_zsched_s": wall([py, "-c", "import zsched"], repeats) - base,
        "driver_imports_s": wall([py, "-c", "import zsched.driver.cli"], repeats) - base,
        "executor_imports_s": wall([py, "-c", "import zsched.executor.cli"], repeats) - base,
        "cluster_and_client_imports_s": wall(
            [py, "-c", "import zsched.clusters.local, zsched.client"], repeats) - base,
    }
    return costs


_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO (.*)$")
_MARKS = [  # (event, pattern), in the order they happen
    ("driver forked or started executor 1", r"(forked|started) executor 1 \("),
    ("driver bound, its loop starts", r"zsched\.driver: driver .* fast path"),
    ("driver registered executor 1", r"Registered executor 1 "),
    ("driver registered executor 2", r"Registered executor 2 "),
    ("the cluster's waiting client connected", r"zsched\.driver: client .* connected"),
]


def timeline(args):
    """A LocalCluster's cold and warm starts, its processes logging at INFO: ``{"cold":
    [(event, seconds from the call)], "warm": [...]}``, the parent's marks with them
    (medians over ``--breakdown-rounds`` children)."""
    samples = {"cold": {}, "warm": {}}
    for _ in range(args.breakdown_rounds):
        with tempfile.TemporaryFile("w+") as err:
            figures = run_child("local", args, log_level="INFO", stderr=err)
            err.seek(0)
            lines = err.read().splitlines()
        logged = []
        for line in lines:
            match = _LOG_LINE.match(line)
            if match is not None:
                at = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                logged.append((at, match.group(2)))
        windows = {"cold": (figures["cold_started_at"], figures["warm_started_at"]),
                   "warm": (figures["warm_started_at"], float("inf"))}
        for start, (t0, end) in windows.items():
            seen = _marks([(at - t0, text) for at, text in logged if t0 <= at < end])
            seen["LocalCluster() returned (ready)"] = figures[f"{start}_ready_s"]
            seen["client() made, first result back"] = figures[f"{start}_s"]
            for event, at in seen.items():
                samples[start].setdefault(event, []).append(at)
    return {start: sorted(((event, statistics.median(ats)) for event, ats in events.items()),
                          key=lambda item: item[1])
            for start, events in samples.items()}


def _marks(logged):
    """``{event: seconds}`` of the first log line of each of ``_MARKS``."""
    seen = {}
    for at, text in logged:
        for event, pattern in _MARKS:
            if event not in seen and re.search(pattern, text):
                seen[event] = at
                break
    return seen


def print_results(medians, costs, events):
    print(f"\n{'system':<28}{'cold s':>9}{'warm s':>9}{'import s':>10}")
    print("-" * 56)
    for name, label in SYSTEMS.items():
        m = medians[name]
        print(f"{label:<28}{m['cold_s']:>9.3f}{m['warm_s']:>9.3f}{m['import_s']:>10.3f}")
    pool = medians["pool"]
    for name in ("local", "embedded"):
        m = medians[name]
        print(f"{SYSTEMS[name]} / multiprocessing.Pool(2): cold {m['cold_s'] / pool['cold_s']:.2f}x,"
              f" warm {m['warm_s'] / pool['warm_s']:.2f}x")
    if costs:
        print("\nwhat each process pays first (fresh processes, medians):")
        for key, value in costs.items():
            print(f"  {key[:-2].replace('_', ' '):<34}{value * 1000:8.1f} ms")
    for start, marks in (events or {}).items():
        print(f"\na LocalCluster's {start} start, from the call (medians; log times to 1 ms):")
        for event, at in marks:
            print(f"  {at * 1000:8.1f} ms  {event}")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=None, metavar="R",
                        help="alternated rounds (default 15; --quick 3)")
    parser.add_argument("--executors", type=int, default=2, metavar="N")
    parser.add_argument("--breakdown-rounds", type=int, default=None, metavar="R",
                        help="starts the timeline is the median of (default 5; --quick 1)")
    parser.add_argument("--no-breakdown", action="store_true", help="the timings alone")
    parser.add_argument("--quick", action="store_true", help="small numbers, for a smoke run")
    parser.add_argument("--child", choices=sorted(SYSTEMS), help=argparse.SUPPRESS)
    parser.add_argument("--log-level", default="WARNING", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds is None:
        args.rounds = 3 if args.quick else 15
    if args.breakdown_rounds is None:
        args.breakdown_rounds = 1 if args.quick else 5
    require_positive(parser, args, ["rounds", "executors", "breakdown_rounds"])
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        return child(args)

    def log(message):
        print(message, file=sys.stderr, flush=True)

    log(f"start-up: {args.rounds} alternated round(s) of {', '.join(SYSTEMS.values())}")
    runs = alternated(args, log)
    keys = ("import_s", "cold_s", "cold_ready_s", "warm_s", "warm_ready_s")
    medians = {name: {key: median(rounds, key) for key in keys} for name, rounds in runs.items()}
    costs = events = None
    if not args.no_breakdown:
        log("breakdown: the processes' costs, then the timeline of a start")
        costs = component_costs(3 if args.quick else 9)
        events = timeline(args)
    print_results(medians, costs, events)
    warm = medians["local"]["warm_s"]
    print(f"\ntarget: LocalCluster(2) ready and a first result in <= {TARGET_S:.2f} s "
          f"(warm median {warm:.3f} s: {'met' if warm <= TARGET_S else 'NOT met'})")
    print_json({"settings": {"rounds": args.rounds, "executors": args.executors},
                "medians": medians, "runs": runs, "costs": costs,
                "timeline": events and {start: dict(marks) for start, marks in events.items()},
                "target_s": TARGET_S,
                "target_met": warm <= TARGET_S, **about_zsched(), **about_machine()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
