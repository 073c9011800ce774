"""Where a flood's CPU goes in a LocalCluster: CPU time per no-op task of the client, the
driver and the executors, each split into its main thread and the others; optionally
recorded with py-spy.

    python bench/cpu_profile.py                      # 3 floods of 300,000 no-op tasks, 2 executors
    python bench/cpu_profile.py --quick              # a smoke run
    python bench/cpu_profile.py --profile DIR        # also record every process with py-spy
    python bench/cpu_profile.py --conf tasks_per_core=64

A LocalCluster of ``--executors`` executors x 1 core runs floods of no-op tasks: one
``submit`` per task, every future kept, then ``result()`` of each. The CPU time (user and
system) each process spent during a flood, divided by its tasks, says what that process
costs even on a machine shared with other work. The client is this process; the main
thread of the driver is its loop, of an executor its loop too (its task threads and
ZeroMQ's I/O thread are the others). With ``--profile DIR``, py-spy records the client, the
driver and each executor during every flood, into ``DIR/<process>-r<round>.<suffix>``.
Figures are medians over floods. Output: a table, then one line ``JSON {...}``.
"""
import argparse
import gc
import os
import subprocess
import sys
import time

from _common import (PySpy, about_machine, about_zsched, add_profile_options, check_profile_options,
                     check_results, median, print_json, profile_path, require_positive)


def noop(x):
    return x


def cpu_seconds(process):
    """(all threads, main thread) CPU seconds of a psutil process; zeros once it is gone."""
    import psutil
    try:
        threads = process.threads()
    except psutil.Error:
        return 0.0, 0.0
    main = sum(t.user_time + t.system_time for t in threads if t.id == process.pid)
    return sum(t.user_time + t.system_time for t in threads), main


def cluster_processes(cluster):
    """{name: psutil process} of the client (this process), the driver and the executors."""
    import psutil
    me = psutil.Process()
    drivers = [p for p in me.children() if "zsched.driver" in " ".join(p.cmdline())]
    if len(drivers) != 1:
        raise RuntimeError(f"expected one driver process among this process's children, found {len(drivers)}")
    deadline = time.monotonic() + 30
    while True:
        executors = [p for p in drivers[0].children() if "zsched.executor" in " ".join(p.cmdline())]
        if len(executors) >= cluster.n_executors or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return {"client": me, "driver": drivers[0],
            **{f"executor {i}": p for i, p in enumerate(sorted(executors, key=lambda p: p.pid))}}


def flood(client, n):
    xs = list(range(n))
    futures = [client.submit(noop, x) for x in xs]
    check_results([f.result(timeout=60 + n / 1000) for f in futures], xs, "flood")


def run(args, log):
    """The floods; {figure: [one value per flood]}."""
    import zsched
    conf = dict(pair.split("=", 1) for pair in args.conf)
    rounds = []
    with zsched.LocalCluster(n_executors=args.executors, cores_per_executor=1, conf=conf) as cluster:
        client = cluster.client()
        processes = cluster_processes(cluster)
        flood(client, min(args.tasks, 2000))  # warm-up: functions shipped, windows sized
        for r in range(args.rounds):
            gc.collect()
            profilers = []
            if args.profile:
                profilers = [PySpy(p.pid, profile_path(args, f"{name.replace(' ', '')}-r{r + 1}"),
                                   args.profile_format, subprocess.DEVNULL)
                             for name, p in processes.items()]
            before = {name: cpu_seconds(p) for name, p in processes.items()}
            t0 = time.perf_counter()
            flood(client, args.tasks)
            elapsed = time.perf_counter() - t0
            after = {name: cpu_seconds(p) for name, p in processes.items()}
            for profiler in profilers:
                profiler.stop()
            figures = {"tasks_per_s": args.tasks / elapsed}
            for name in processes:
                kind = "executors" if name.startswith("executor") else name
                total, main = (b - a for a, b in zip(before[name], after[name]))
                figures[f"{kind}_us"] = figures.get(f"{kind}_us", 0.0) + total / args.tasks * 1e6
                figures[f"{kind}_main_us"] = figures.get(f"{kind}_main_us", 0.0) + main / args.tasks * 1e6
            figures["all_us"] = sum(figures[f"{k}_us"] for k in ("client", "driver", "executors"))
            rounds.append(figures)
            log(f"flood {r + 1}/{args.rounds}: {args.tasks:,} tasks, {figures['tasks_per_s']:,.0f}/s")
        client.shutdown()
    return rounds


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=None, metavar="N",
                        help="no-op tasks per flood (default 300000; 20000 with --quick)")
    parser.add_argument("--rounds", type=int, default=None, metavar="R",
                        help="floods; figures are medians (default 3; 1 with --quick)")
    parser.add_argument("--executors", type=int, default=2, metavar="N",
                        help="executors of one core each (default 2)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="cluster setting, as bin/driver --conf (repeatable)")
    add_profile_options(parser, "every process during each flood")
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    args = parser.parse_args(argv)
    if args.tasks is None:
        args.tasks = 20_000 if args.quick else 300_000
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    require_positive(parser, args, ("tasks", "rounds", "executors"))
    if any("=" not in pair for pair in args.conf):
        parser.error("--conf takes KEY=VALUE")
    check_profile_options(parser, args)
    return args


def main(argv=None):
    args = parse_args(argv)
    from zsched.errors import ConfigError
    try:
        rounds = run(args, lambda message: print(message, file=sys.stderr, flush=True))
    except ConfigError as exc:
        raise SystemExit(f"cpu_profile.py: {exc}") from None
    medians = {key: median(rounds, key) for key in rounds[0]}
    conf = f", {', '.join(args.conf)}" if args.conf else ""
    print(f"zsched CPU per task: LocalCluster of {args.executors} executor(s) x 1 core{conf}, "
          f"floods of {args.tasks:,} no-op tasks, median of {args.rounds}; {os.cpu_count()} CPUs")
    header = f"{'process':<22}{'CPU us/task':>12}{'main thread':>13}{'other threads':>15}"
    print(header)
    print("-" * len(header))
    for kind, label in (("client", "client (this process)"), ("driver", "driver"),
                        ("executors", "executors, together")):
        total, main = medians[f"{kind}_us"], medians[f"{kind}_main_us"]
        print(f"{label:<22}{total:>12.2f}{main:>13.2f}{total - main:>15.2f}")
    print(f"{'all':<22}{medians['all_us']:>12.2f}")
    print(f"flood rate: {medians['tasks_per_s']:,.0f} tasks/s")
    print_json({"benchmark": "zsched-cpu-profile", **about_zsched(), **about_machine(),
                "params": {"tasks": args.tasks, "rounds": args.rounds, "executors": args.executors,
                           "conf": args.conf, "profile": args.profile},
                "median": medians, "rounds": rounds})


if __name__ == "__main__":
    main()
