"""Where one task's round trip goes, with the embedded client (``zsched.Client()``).

    python bench/latency_split.py                    # 2,000 round trips
    python bench/latency_split.py --samples 5000
    python bench/latency_split.py --through-socket   # a client with a socket, as LocalCluster's

A no-op task is submitted, waited for, and submitted again. Timestamps are taken (by
wrapping the driver's and the client's methods in this process) as the task passes each
stage; a stage's figure is the time from the previous stage to it, in µs, p50 and p90
over the round trips that passed every stage once. Wrapping adds about 1 µs per stage.
The executor is a process of its own: "executor round trip" is from the driver's send of
LaunchTasks until its loop starts reading the StatusUpdates (both hops, through the pipes of
an executor the driver started, and the executor's own work). Output: a table, then one line ``JSON {...}``.

``--through-socket``: the stages of ``LocalCluster().client()``'s round trip instead (the
client's I/O thread and socket, the driver's ROUTER), with the driver in a thread of this
process (``LocalCluster(in_process=True)``) so that one process holds every timestamp, and
the client connected through the cluster's local (Unix) socket. Only the GIL is shared,
unlike with a driver process.

Last, one piece of the driver's work on the path is timed both ways: the protocol check of
each lone SubmitTasks (``protocol.check``) as the driver's thread ran it in the round
trips, just after a wake-up, and the same call on the same message repeated in a loop
(warm caches). The ratio is how much slower Python runs on this path than in a loop.
"""
import argparse
import copy
import importlib.util
import json
import os
import sys
import time
import timeit

if importlib.util.find_spec("zsched") is None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import zsched  # noqa: E402
from zsched import client as client_module  # noqa: E402
from zsched import driver as driver_module  # noqa: E402
from zsched import protocol as p  # noqa: E402
from zsched import scheduler as scheduler_module  # noqa: E402

STAGES = [
    "driver's loop takes the submission",
    "SubmitTasks handled (task queued)",
    "resource offers start",
    "resource offers done",
    "LaunchTasks encoded and sent",
    "executor round trip",
    "StatusUpdates applied",
    "future completed (driver thread)",
    "result() returns (caller)",
]

SOCKET_STAGES = [
    "the client's I/O thread wakes",
    "SubmitTasks sent",
    "the driver's loop reads it",
    "SubmitTasks handled (task queued)",
    "resource offers done",
    "LaunchTasks encoded and sent",
    "executor round trip",
    "StatusUpdates applied",
    "TaskResults sent",
    "the client's I/O thread reads them",
    "future completed (I/O thread)",
    "result() returns (caller)",
]

marks = {}
check_ns = []  # protocol.check of each lone SubmitTasks, as the driver's thread ran it


def mark(stage):
    marks.setdefault(stage, time.perf_counter())


def wrap(cls, name, stage, after=False, when=lambda *args: True):
    original = getattr(cls, name)

    def wrapper(self, *args, **kwargs):
        if not after and when(self, *args):
            mark(stage)
        value = original(self, *args, **kwargs)
        if after and when(self, *args):
            mark(stage)
        return value
    setattr(cls, name, wrapper)


def instrument():
    Driver, Scheduler, Client = driver_module.Driver, scheduler_module.TaskScheduler, client_module.Client
    wrap(Driver, "_receive_local", STAGES[0],
         when=lambda d: any(c._outbox for c in d._local_clients.values()))
    wrap(Driver, "_receive_local", STAGES[1], after=True, when=lambda d: STAGES[0] in marks)
    wrap(Scheduler, "resource_offers", STAGES[2], when=lambda s: s.n_pending > 0)
    wrap(Scheduler, "resource_offers", STAGES[3], after=True, when=lambda s: STAGES[2] in marks)
    wrap(Driver, "_send", STAGES[4], after=True,
         when=lambda d, rid, msg, *rest: isinstance(msg, p.LaunchTasks))
    wrap(Driver, "_receive", STAGES[5], when=lambda d: STAGES[4] in marks)
    wrap(Driver, "_receive_link", STAGES[5], when=lambda d, *args: STAGES[4] in marks)
    wrap(Scheduler, "status_updates", STAGES[6], after=True)
    wrap(Client, "_complete", STAGES[7], after=True)


def instrument_socket_path():
    Driver, Scheduler, Client = driver_module.Driver, scheduler_module.TaskScheduler, client_module.Client
    S = SOCKET_STAGES
    wrap(Client, "_send_outbox", S[0], when=lambda c, send: bool(c._outbox))
    wrap(Client, "_send_outbox", S[1], after=True, when=lambda c, send: S[0] in marks)
    wrap(Driver, "_receive", S[2], when=lambda d: S[1] in marks)
    wrap(Driver, "_handle", S[3], after=True, when=lambda d, rid, msg: isinstance(msg, p.SubmitTasks))
    wrap(Scheduler, "resource_offers", S[4], after=True, when=lambda s: S[3] in marks)
    wrap(Driver, "_send", S[5], after=True,
         when=lambda d, rid, msg, *rest: isinstance(msg, p.LaunchTasks))
    wrap(Driver, "_receive", S[6], when=lambda d: S[5] in marks)
    wrap(Driver, "_receive_link", S[6], when=lambda d, *args: S[5] in marks)
    wrap(Scheduler, "status_updates", S[7], after=True)
    wrap(Driver, "_send_results", S[8], after=True, when=lambda d: S[7] in marks)
    wrap(Client, "_receive", S[9], when=lambda c, *args: S[8] in marks)
    wrap(Client, "_complete", S[10], after=True)


def time_checks():
    """Time ``protocol.check`` of each SubmitTasks in the driver's thread; a copy of the
    first one checked that carries no function."""
    original = p.check
    last = []

    def check(msg):
        start = time.perf_counter_ns()
        original(msg)
        if msg.TYPE == p.MsgType.SUBMIT_TASKS:
            check_ns.append(time.perf_counter_ns() - start)
            if not (last or msg.functions):  # a copy (the driver reuses the rows) of one
                last.append(copy.deepcopy(msg))  # as the round trips send, made in the warm-up
    p.check = check
    return original, last


def noop(x):
    return x


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--through-socket", action="store_true",
                        help="a client with a socket and an I/O thread (see above)")
    args = parser.parse_args(argv)
    if args.through_socket:
        STAGES[:] = SOCKET_STAGES
        instrument_socket_path()
        cluster = zsched.LocalCluster(n_executors=os.cpu_count() or 1, in_process=True)
        client = zsched.Client(cluster.local_address, secret_file=cluster.secret_file)
        label = "client through the cluster's local socket, driver in a thread"
    else:
        instrument()
        original_check, last_submit = time_checks()
        cluster, client = None, zsched.Client()
        label = "embedded client"
    rows = []
    with client:
        for i in range(300):  # warm-up: the function shipped, the executors' loops hot
            client.submit(noop, i).result()
        check_ns.clear()
        for i in range(args.samples):
            marks.clear()
            start = time.perf_counter()
            client.submit(noop, i).result()
            marks[STAGES[-1]] = time.perf_counter()
            if len(marks) == len(STAGES):
                times = [start] + [marks[stage] for stage in STAGES]
                rows.append([(b - a) * 1e6 for a, b in zip(times, times[1:])])
    if cluster is not None:
        cluster.close()
    if not rows:
        raise SystemExit("no round trip passed every stage once")
    print(f"zsched {os.path.dirname(zsched.__file__)}: {label}, 1 executor per core, "
          f"{len(rows)} of {args.samples} round trips")
    print(f"{'stage (time since the previous one)':<42}{'p50 us':>9}{'p90 us':>9}")
    print("-" * 60)
    figures = {}
    for k, stage in enumerate(STAGES):
        column = [row[k] for row in rows]
        figures[stage] = {"p50_us": percentile(column, 0.5), "p90_us": percentile(column, 0.9)}
        print(f"{stage:<42}{figures[stage]['p50_us']:>9.0f}{figures[stage]['p90_us']:>9.0f}")
    totals = [sum(row) for row in rows]
    print("-" * 60)
    print(f"{'round trip':<42}{percentile(totals, 0.5):>9.0f}{percentile(totals, 0.9):>9.0f}")
    result = {"samples": len(rows), "stages": figures,
              "round_trip_p50_us": percentile(totals, 0.5),
              "round_trip_p90_us": percentile(totals, 0.9)}
    if check_ns:
        p.check = original_check
        msg = last_submit[0]
        loops = 10000
        warm_ns = min(timeit.repeat(lambda: original_check(msg), number=loops, repeat=5)) / loops * 1e9
        in_path_ns = percentile(check_ns, 0.5)
        print(f"protocol check of a lone SubmitTasks: {in_path_ns / 1000:.1f} us p50 in the round "
              f"trips, {warm_ns / 1000:.1f} us in a loop ({in_path_ns / warm_ns:.1f}x)")
        result["check_in_round_trips_us"] = in_path_ns / 1000
        result["check_in_a_loop_us"] = warm_ns / 1000
    print("JSON " + json.dumps(result))


if __name__ == "__main__":
    main()
