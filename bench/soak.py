"""A soak run: 10^7 tasks through a LocalCluster, for 30 minutes or more, in waves that keep
the client's futures bounded; the memory of every process sampled, nothing lost, nothing
run twice.

    python bench/soak.py                                  # 10^7 tasks, 30 minutes at least
    python bench/soak.py --tasks 1000000 --min-minutes 3  # a shorter run
    python bench/soak.py --quick                          # a smoke run of a few seconds
    python bench/soak_plot.py soak.csv docs/soak.png      # the plot (needs matplotlib)

Waves of ``--wave`` tasks, two in flight at once, alternately by ``submit`` and by ``map``
(one task per call), run until ``--tasks`` have run and ``--min-minutes`` have passed. A
task returns a function of its input with its process's pid and run number, so the client
checks every result and counts runs whose result never came back (a task run twice). Every
``--sample-interval`` seconds the RSS of the client (this process), the driver and each
executor, their CPU time so far, and the tasks done so far, go to ``--csv``. The summary
gives the tasks, the minutes, each process kind's RSS after the warm-up (the first two
waves) and at the end, the throughput per minute in whole windows of ``--rate-window``
seconds (min, median, max) and the CPU per task of each kind (steadier than the throughput
on a shared machine). Output: the summary, then one line ``JSON {...}``. Exit status 1 if a task was lost,
wrong, failed or ran twice, or a process was left running.
"""
import argparse
import os
import statistics
import sys
import time

from _common import (Stall, about_machine, about_zsched, kill_pids, print_json, require_positive)
from _soak_run import rates, soak

MIB = 1024 * 1024


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=None, metavar="N",
                        help="tasks to run at least (default 10000000; 200000 with --quick)")
    parser.add_argument("--min-minutes", type=float, default=None, metavar="M",
                        help="minutes to run at least (default 30; 0 with --quick)")
    parser.add_argument("--wave", type=int, default=None, metavar="N",
                        help="tasks per wave, two waves in flight (default 20000; 10000 with --quick)")
    parser.add_argument("--via", choices=["both", "submit", "map"], default="both",
                        help="how waves are submitted (default both, alternately)")
    parser.add_argument("--executors", type=int, default=2, metavar="N", help="executors (default 2)")
    parser.add_argument("--cores", type=int, default=1, metavar="N", help="cores per executor (default 1)")
    parser.add_argument("--transport", choices=["pipes", "socket"], default="pipes",
                        help="the client's way to the driver: cluster.client() (pipes) or its "
                             "TCP socket with a client credential (default pipes)")
    parser.add_argument("--sample-interval", type=float, default=None, metavar="S",
                        help="seconds between samples (default 5; 0.25 with --quick)")
    parser.add_argument("--rate-window", type=float, default=None, metavar="S",
                        help="seconds per throughput window (default 60; 1 with --quick)")
    parser.add_argument("--csv", default="soak.csv", metavar="PATH", help="the samples (default soak.csv)")
    parser.add_argument("--plot", default=None, metavar="PNG",
                        help="also draw the samples into PNG (needs matplotlib)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="cluster setting, as bin/driver --conf (repeatable)")
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    args = parser.parse_args(argv)
    defaults = {"tasks": (10_000_000, 200_000), "min_minutes": (30.0, 0.0), "wave": (20_000, 10_000),
                "sample_interval": (5.0, 0.25), "rate_window": (60.0, 1.0)}
    for name, (full, quick) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    require_positive(parser, args, ("tasks", "wave", "executors", "cores"))
    if args.sample_interval <= 0 or args.rate_window < args.sample_interval or args.min_minutes < 0:
        parser.error("--sample-interval must be > 0, --rate-window at least that, --min-minutes >= 0")
    if any("=" not in pair for pair in args.conf):
        parser.error("--conf takes KEY=VALUE")
    return args


def progress_printer(every):
    """A sampler callback printing a line to stderr at most every ``every`` seconds."""
    last = [None]

    def show(row):
        if last[0] is not None and row["seconds"] - last[0][0] < every:
            return
        rate = ((row["tasks"] - last[0][1]) / (row["seconds"] - last[0][0]) * 60
                if last[0] and row["seconds"] > last[0][0] else 0.0)
        print(f"{row['seconds'] / 60:6.1f} min  {row['tasks']:>12,} tasks  {rate:>12,.0f}/min  RSS MiB: "
              f"driver {mib(row['driver_rss'])}, executors {mib(row['executor_rss_max'])} (max), "
              f"client {mib(row['client_rss'])}", file=sys.stderr, flush=True)
        last[0] = (row["seconds"], row["tasks"])
    return show


def mib(value):
    return "-" if value is None else f"{value / MIB:.1f}"


def summary(args, report):
    """The figures the summary prints, as a dict for the JSON line too."""
    warm, end = report["warm"], report["end"]
    per_minute = rates(report["rows"], args.rate_window, since=warm["seconds"])
    figures = {"tasks": report["done"], "minutes": end["seconds"] / 60,
               "measured_minutes": (end["seconds"] - warm["seconds"]) / 60,
               "per_minute": {"min": min(per_minute, default=None),
                              "median": statistics.median(per_minute) if per_minute else None,
                              "max": max(per_minute, default=None), "windows": len(per_minute)}}
    for kind, key in (("driver", "driver_rss"), ("executor", "executor_rss_max"), ("client", "client_rss")):
        figures[f"{kind}_rss_mib"] = {"warm": _mib_or_none(warm[key]), "end": _mib_or_none(end[key])}
    ran = end["tasks"] - warm["tasks"]
    for kind in ("driver", "executors", "client"):
        spent = (end[f"{kind}_cpu"] - warm[f"{kind}_cpu"]) if end[f"{kind}_cpu"] is not None else None
        figures[f"{kind}_cpu_us_per_task"] = round(spent / ran * 1e6, 2) if spent is not None and ran else None
    for name in ("wrong", "failed", "lost", "ran_twice"):
        figures[name] = report[name]
    figures["left_running"] = len(report["left_running"])
    tasks, counters = report["status"].get("tasks", {}), report["status"].get("counters", {})
    figures["driver_retried"] = tasks.get("retried")
    figures["executors_lost"] = counters.get("executors_lost")
    return figures


def _mib_or_none(value):
    return None if value is None else round(value / MIB, 1)


def print_summary(args, figures, report):
    rate = figures["per_minute"]
    print(f"zsched soak: {figures['tasks']:,} tasks in {figures['minutes']:.1f} minutes, "
          f"LocalCluster of {args.executors} executor(s) x {args.cores} core(s), waves of "
          f"{args.wave:,} via {args.via}, client over {args.transport}; {os.cpu_count()} CPUs")
    header = f"{'RSS MiB':<28}{'after warm-up':>14}{'at the end':>12}"
    print(header)
    print("-" * len(header))
    for kind, label in (("driver", "driver"), ("executor", "executor (largest)"), ("client", "client (this process)")):
        values = figures[f"{kind}_rss_mib"]
        print(f"{label:<28}{_fmt(values['warm']):>14}{_fmt(values['end']):>12}")
    print(f"throughput, tasks/min over {rate['windows']} windows of {args.rate_window:g} s: "
          f"min {_fmt(rate['min'], '{:,.0f}')}, median {_fmt(rate['median'], '{:,.0f}')}, "
          f"max {_fmt(rate['max'], '{:,.0f}')}")
    print(f"CPU per task after the warm-up, us: driver {_fmt(figures['driver_cpu_us_per_task'], '{:.2f}')}, "
          f"executors {_fmt(figures['executors_cpu_us_per_task'], '{:.2f}')}, "
          f"client {_fmt(figures['client_cpu_us_per_task'], '{:.2f}')}")
    print(f"lost {figures['lost']}, wrong {figures['wrong']}, failed {figures['failed']}, "
          f"ran twice {figures['ran_twice']}, processes left running {figures['left_running']}; "
          f"the driver retried {figures['driver_retried']} and lost {figures['executors_lost']} executor(s)")
    if report["first_error"]:
        print(f"first error: {report['first_error']}")
    print(f"samples: {report['csv']}")


def _fmt(value, spec="{:.1f}"):
    return "-" if value is None else spec.format(value)


def main(argv=None):
    args = parse_args(argv)
    conf = dict(pair.split("=", 1) for pair in args.conf)
    started = time.time()
    try:
        report = soak(args.tasks, min_seconds=args.min_minutes * 60, wave=args.wave, via=args.via,
                      executors=args.executors, cores=args.cores, transport=args.transport,
                      sample_interval=args.sample_interval, csv_path=args.csv, conf=conf,
                      progress=progress_printer(max(args.rate_window, args.sample_interval)))
    except Stall as exc:
        raise SystemExit(f"soak.py: stalled: {exc} (samples so far in {args.csv})") from None
    kill_pids(pid for pid, _ in report["left_running"])
    figures = summary(args, report)
    print_summary(args, figures, report)
    if args.plot:
        from soak_plot import plot
        plot(args.csv, args.plot, window=args.rate_window)
        print(f"plot: {args.plot}")
    print_json({"benchmark": "zsched-soak", **about_zsched(), **about_machine(), "started": started,
                "params": {k: v for k, v in vars(args).items() if k != "quick"}, **figures})
    bad = figures["lost"] or figures["wrong"] or figures["failed"] or figures["ran_twice"] or figures["left_running"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
