"""One real driver with many executors: throughput, registration and queue memory.

    python bench/scale.py                  # 1,000 executors against 2, 10^6 no-op tasks
    python bench/scale.py --quick          # a smoke run: 50 executors, 20,000 tasks
    python bench/scale.py --profile DIR    # also py-spy the driver during each phase

The driver is real (``python -m zsched.driver``, its own process, no cluster manager) and
so is the client (``zsched.Client`` in this process). The executors are simulated
(``_scale_sim.py``): light executors over real sockets, many per process (``--processes``
processes), built of the executor's own connection and the protocol's messages, that run
each task in the thread that polls their sockets.

Per configuration (``--executors`` and ``--baseline`` executors, each round with a fresh
driver, order rotated between rounds): registration time (every simulated executor holds
RegisteredExecutor, then the driver lists them all), the driver's CPU while the executors
are idle, one ``client.status()``, then ``submit`` (N x submit, then wait for all) and
``map`` (list(map(noop, range(N), chunksize=1)): one task per call) rates with the CPU
per task of the driver (split into its loop, the main thread, and the rest: ZeroMQ's I/O
thread), of the executor processes and of this process (the client), the client's full
collections of the cyclic GC (a flood's futures make each one long), and the tasks per
LaunchTasks the executors received; ``map`` as a user calls it (the client may make
tasks of several calls); and how long the driver takes to drop every executor when all
their connections close at once (as kill -9 would). Then, with a driver and no
executor: its RSS with N tasks queued minus its RSS before, per task (read with psutil).
``--profile DIR`` records the driver with py-spy during the submit and map phases.

The secret file lives in a temporary directory and the bus uses CURVE unless
``--insecure``. Every process started here ends with this script, also on Ctrl-C: the
children run in sessions of their own (Ctrl-C reaches this process only, which stops
them in order) and fate-share through their standard input (the driver with
``--exit-on-stdin-close``), so even a killed script leaves nothing running.

Output: a table, then one line ``JSON {...}`` with every figure. The machine may be
shared and noisy: compare ratios from one run, not absolute figures across runs.
"""
import argparse
import os
import signal
import sys
import time
import traceback

from _common import (about_machine, about_zsched, add_profile_options, check_profile_options, fmt,
                     median, new_log_file, output_to_log, print_json, report_log, require_positive)
from _scale_cluster import stop_all_children
from _scale_phases import run_config, run_memory


def noop(x):
    return x


# ---------------------------------------------------------------- output

ROWS = [
    # key, label, format; ratio: whether "big / baseline" is shown
    ("processes", "executor processes", "{}", False),
    ("register_s", "registration, s (all executors)", "{:.2f}", False),
    ("register_driver_cpu_ms", "  driver CPU per registration, ms", "{:.2f}", False),
    ("driver_rss_per_executor_kib", "  driver RSS per executor, KiB", "{:.1f}", False),
    ("idle_driver_cpu_pct", "driver CPU while idle, %", "{:.1f}", False),
    ("idle_driver_loop_cpu_pct", "  of which its loop (main thread), %", "{:.1f}", False),
    ("idle_messages_in_per_s", "  messages in a second, in", "{:,.0f}", False),
    ("idle_messages_out_per_s", "  messages in a second, out", "{:,.0f}", False),
    ("status_ms", "client.status() round trip, ms", "{:.1f}", False),
    ("submit_tasks_per_s", "submit: tasks/s", "{:,.0f}", True),
    ("submit_driver_cpu_us", "  driver CPU per task, us", "{:.1f}", True),
    ("submit_driver_loop_cpu_us", "    of which its loop (main thread), us", "{:.1f}", True),
    ("submit_executors_cpu_us", "  executor processes CPU per task, us", "{:.1f}", True),
    ("submit_client_cpu_us", "  client CPU per task, us", "{:.1f}", True),
    ("submit_total_cpu_us", "  all three, CPU per task, us", "{:.1f}", True),
    ("submit_client_full_collections", "  client's full GC collections", "{:.0f}", False),
    ("submit_client_full_collections_s", "    their time, s", "{:.3f}", False),
    ("submit_tasks_per_launch", "  tasks per LaunchTasks", "{:.1f}", True),
    ("map_tasks_per_s", "map: tasks/s", "{:,.0f}", True),
    ("map_driver_cpu_us", "  driver CPU per task, us", "{:.1f}", True),
    ("map_driver_loop_cpu_us", "    of which its loop (main thread), us", "{:.1f}", True),
    ("map_executors_cpu_us", "  executor processes CPU per task, us", "{:.1f}", True),
    ("map_client_cpu_us", "  client CPU per task, us", "{:.1f}", True),
    ("map_total_cpu_us", "  all three, CPU per task, us", "{:.1f}", True),
    ("map_client_full_collections", "  client's full GC collections", "{:.0f}", False),
    ("map_client_full_collections_s", "    their time, s", "{:.3f}", False),
    ("map_tasks_per_launch", "  tasks per LaunchTasks", "{:.1f}", True),
    ("window_max", "  largest executor window, tasks", "{}", False),
    ("map_default_calls_per_s", "map, default chunking: calls/s", "{:,.0f}", True),
    ("map_default_tasks", "  tasks", "{:,}", False),
    ("loss_s", "all connections closed: dropped in, s", "{:.2f}", False),
]


def print_table(args, configs, medians, memory):
    security = "insecure (no CURVE)" if args.insecure else "CURVE (secret file)"
    print(f"zsched scale: simulated executors of {args.cores} core(s), {args.tasks:,} no-op tasks "
          f"per phase, {security}; median of {args.rounds} round(s); {os.cpu_count()} CPUs")
    big, small = configs[0], configs[-1]
    width = max(len(label) for _, label, _, _ in ROWS) + 2
    names = [f"{n:,} executors" for n in configs]
    header = "".ljust(width) + "".join(name.rjust(16) for name in names)
    if len(configs) > 1:
        header += "ratio".rjust(8)
    print(header)
    print("-" * len(header))
    for key, label, spec, show_ratio in ROWS:
        values = [medians[n].get(key) for n in configs]
        if all(v is None for v in values):
            continue
        line = label.ljust(width) + "".join(fmt(v, spec).rjust(16) for v in values)
        if show_ratio and len(configs) > 1 and values[0] and values[-1]:
            line += f"{values[0] / values[-1]:.2f}".rjust(8)
        print(line)
    ratios = {}
    for key in ("submit_tasks_per_s", "map_tasks_per_s"):
        a, b = medians[big].get(key), medians[small].get(key)
        ratios[key] = a / b if a and b and len(configs) > 1 else None
    if len(configs) > 1:
        print(f"throughput {big:,} / {small:,} executors: submit {fmt(ratios['submit_tasks_per_s'], '{:.2f}')}, "
              f"map {fmt(ratios['map_tasks_per_s'], '{:.2f}')} (target >= 0.70)")
    if memory:
        print(f"driver memory per queued task: {fmt(memory.get('bytes_per_queued_task'), '{:,.0f}')} B "
              f"(RSS {fmt(memory.get('driver_rss_before_mib'), '{:.0f}')} -> "
              f"{fmt(memory.get('driver_rss_queued_mib'), '{:.0f}')} MiB with {args.tasks:,} tasks "
              f"queued, no executors; target <= 1,024 B)")
    print("registration: 'go' until every executor holds RegisteredExecutor.  submit: N x submit(), "
          "wait for all.")
    print("  map: list(map(noop, range(N), chunksize=1)); default chunking: the same without "
          "chunksize.")
    print("  CPU per task: CPU time of the process(es) during the phase / N; the client is this "
          "process.")
    print("  full GC collections: the client's, of the cyclic GC's oldest generation, during the phase.")
    print("  driver CPU while idle: executors registered, no tasks (heartbeats only).  The driver's "
          "CPU not")
    print("  in its loop is ZeroMQ's I/O thread (framing, CURVE, ZMTP heartbeats).")
    print("  all connections closed: every executor's socket closed at once (as kill -9), until the "
          "driver lists none.")
    return ratios


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="A real zsched driver and client with many simulated executors: throughput "
                    "against a 2-executor baseline, registration time, driver memory per queued task.")
    parser.add_argument("--executors", type=int, default=None, metavar="N",
                        help="simulated executors (default 1000; 50 with --quick)")
    parser.add_argument("--baseline", type=int, default=2, metavar="N",
                        help="executors of the comparison configuration (default 2; 0: none)")
    parser.add_argument("--cores", type=int, default=1, metavar="C", help="cores per executor (default 1)")
    parser.add_argument("--tasks", type=int, default=None, metavar="N",
                        help="no-op tasks per phase and queued for the memory figure "
                             "(default 1000000; 20000 with --quick)")
    parser.add_argument("--processes", type=int, default=4, metavar="P",
                        help="processes the simulated executors are spread over (default 4)")
    parser.add_argument("--rounds", type=int, default=None, metavar="R",
                        help="rounds, configurations interleaved; figures are medians (default 3; "
                             "1 with --quick)")
    parser.add_argument("--phases", default="submit,map",
                        help="comma-separated throughput phases: submit, map (default both)")
    parser.add_argument("--no-memory", action="store_true", help="skip the queued-task memory figure")
    parser.add_argument("--idle-seconds", type=float, default=None, metavar="S",
                        help="how long the idle driver's CPU is measured (default 6; 1 with "
                             "--quick): two heartbeat intervals of a large cluster or more")
    parser.add_argument("--insecure", action="store_true", help="no secret, no CURVE")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="driver setting, as bin/driver --conf (repeatable)")
    add_profile_options(parser, "the driver during each throughput phase")
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--show-logs", action="store_true",
                        help="leave the driver's and executors' log output on stderr")
    args = parser.parse_args(argv)
    if args.executors is None:
        args.executors = 50 if args.quick else 1000
    if args.tasks is None:
        args.tasks = 20000 if args.quick else 1_000_000
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    args.phases = [x.strip() for x in args.phases.split(",") if x.strip()]
    if not set(args.phases) <= {"submit", "map"}:
        parser.error("--phases takes submit and map")
    require_positive(parser, args, ("executors", "cores", "tasks", "processes", "rounds"))
    if args.baseline < 0:
        parser.error("--baseline must be >= 0")
    check_profile_options(parser, args)
    return args


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None):
    args = parse_args(argv)
    started = time.perf_counter()
    signal.signal(signal.SIGTERM, _raise_interrupt)  # stop the children as on Ctrl-C
    configs = [args.executors] + ([args.baseline] if args.baseline and args.baseline != args.executors else [])
    results = Results(configs)
    log_path = None if args.show_logs else new_log_file("zsched-scale-")
    interrupted = False
    # the driver, the executors and this process's log records all go to the log file
    with output_to_log(log_path, not args.show_logs) as progress:
        def log(message):
            print(message, file=progress, flush=True)

        try:
            run_all(args, configs, results, log)
        except KeyboardInterrupt:
            interrupted = True
            log("interrupted: stopping every process started here")
        finally:
            results.killed.extend(f"left running: {name}" for name in stop_all_children())
    if interrupted:
        kept = f"; log output kept in {log_path}" if log_path else ""
        print(f"interrupted{kept}", file=sys.stderr)
        return 130
    return report(args, configs, results, log_path, started)


class Results:
    """The figures of every round of each configuration, the memory figures, the errors
    by configuration and the processes that had to be killed."""

    def __init__(self, configs):
        self.per_round = {n: [] for n in configs}
        self.memory = {}
        self.errors = {}
        self.killed = []


def run_all(args, configs, results, log):
    """Every round of every configuration, then the memory figure; a configuration that
    fails is not run again."""
    errors = results.errors
    for r in range(args.rounds):
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        for n in order:
            if n in errors:
                continue
            log(f"round {r + 1}/{args.rounds}: {n:,} executors")
            try:
                results.per_round[n].append(run_config(args, noop, n, r, log, results.killed))
            except KeyboardInterrupt:
                raise
            except Exception as exc:
                errors[n] = f"round {r + 1}: {type(exc).__name__}: {exc}"
                log(f"  FAILED: {errors[n]}\n{traceback.format_exc()}")
    if not args.no_memory:
        log(f"memory: {args.tasks:,} tasks queued, no executors")
        try:
            results.memory = run_memory(args, noop, log, results.killed)
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            errors["memory"] = f"{type(exc).__name__}: {exc}"
            log(f"  FAILED: {errors['memory']}\n{traceback.format_exc()}")


def report(args, configs, results, log_path, started):
    """Print the table, the errors and the JSON line; the exit status."""
    per_round, memory, errors, killed = results.per_round, results.memory, results.errors, results.killed
    medians = {n: {k: median(per_round[n], k) for k in {k for r in per_round[n] for k in r}}
               for n in configs}
    ratios = print_table(args, configs, medians, memory)
    for name, text in errors.items():
        print(f"error ({name}): {text}")
    if killed:
        print(f"processes that had to be killed: {', '.join(killed)}")
    if log_path is not None:
        log_path, _ = report_log(log_path, keep=bool(errors),
                                 expected=("Removed executor", "the closed connections"))
    print_json({
        "benchmark": "zsched-scale",
        **about_zsched(),
        **about_machine(),
        "params": {"executors": args.executors, "baseline": args.baseline, "cores": args.cores,
                   "tasks": args.tasks, "processes": args.processes, "rounds": args.rounds,
                   "phases": args.phases, "insecure": args.insecure, "conf": args.conf,
                   "quick": args.quick},
        "configs": {str(n): {"median": medians[n], "rounds": per_round[n]} for n in configs},
        "ratio_big_over_baseline": ratios,
        "memory": memory,
        "errors": errors,
        "killed": killed,
        "log_file": log_path,
        "elapsed_s": time.perf_counter() - started,
    })
    return 0 if not errors and not killed else 1


if __name__ == "__main__":
    sys.exit(main())
