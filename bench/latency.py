"""A lone task's round trip, by transport: zsched over pipes and over TCP, beside
multiprocessing.Pool, alternated round by round; wall time and CPU time per round trip.

    python bench/latency.py                         # 5 rounds of 3,000 round trips each
    python bench/latency.py --systems tcp,pool --rounds 9
    python bench/latency.py --quick                 # a smoke run

Each system has 2 workers of one core and runs a no-op task, one at a time, from submit
until its result is back:

- ``pool``: ``multiprocessing.Pool(2)``, ``apply_async(noop, (i,)).get()``;
- ``pipes``: ``LocalCluster(2, 1)``, its executors and ``cluster.client()`` on pipes;
- ``await``: as ``pipes``, each result awaited (``await client.submit(noop, i)``) in a
  running asyncio event loop instead of ``result()``; then as many of each on the same
  cluster, in alternated blocks, for the ratio of their p50s (``await_vs_result``);
- ``await-uvloop``: as ``await``, in uvloop's event loop (``pip install uvloop``);
- ``tcp``: ``LocalCluster(2, 1, local_executor_link="socket")`` and
  ``zsched.Client(cluster.address, secret_file=...)``: every hop on loopback TCP, CURVE;
- ``ipc``: as ``tcp``, the client at ``cluster.local_address`` (a Unix socket, CURVE);
- ``floor``: what ZeroMQ alone costs on ``tcp``'s way: a DEALER sends a small message over
  TCP with CURVE to a ROUTER in another process, which relays it over a Unix socket to a
  DEALER in a third, and back the same way; each process a Python loop that only relays.

Every round starts each system afresh, in turn, warms it, then times ``--trips`` round
trips. Besides the wall-clock p50 and p99, the CPU time (user and system) of each process
over those round trips, divided by their number, is steadier on a shared machine: the
client (this process: its calling thread and its other threads), the driver and the
workers together (their main threads and their others: ZeroMQ's I/O threads, task
threads). Figures are medians over rounds. Output: a table, then one line ``JSON {...}``.
"""
import argparse
import functools
import gc
import os
import statistics
import sys
import threading
import time

from _common import about_machine, about_zsched, median, print_json, require_positive

SYSTEMS = ("pool", "pipes", "await", "await-uvloop", "tcp", "ipc", "floor")


def noop(x):
    return x


def cpu_seconds(process, main_id):
    """(all threads, the thread ``main_id``) CPU seconds of a psutil process; zeros once
    it is gone."""
    import psutil
    try:
        threads = process.threads()
    except psutil.Error:
        return 0.0, 0.0
    main = sum(t.user_time + t.system_time for t in threads if t.id == main_id)
    return sum(t.user_time + t.system_time for t in threads), main


def _processes(kind_of):
    """{name: (psutil process, main thread id)} of this process and its descendants that
    ``kind_of(process)`` names (None: left out); this process's main thread is the calling
    thread."""
    import psutil
    me = psutil.Process()
    found = {"client": (me, threading.get_native_id())}
    for child in sorted(me.children(recursive=True), key=lambda p: p.pid):
        try:
            kind = kind_of(child)
        except psutil.Error:
            continue
        if kind is not None:
            found[f"{kind} {child.pid}"] = (child, child.pid)
    return found


def _zsched_kind(process):
    cmdline = " ".join(process.cmdline())
    if "zsched.driver" in cmdline or "zsched-driver" in cmdline:
        return "driver"
    if "zsched.executor" in cmdline or "zsched-executor" in cmdline:
        return "workers"
    return None


def _pool_kind(process):
    return None if "resource_tracker" in " ".join(process.cmdline()) else "workers"


def timed_calls(call, trips):
    """The wall time of each of ``trips`` calls of ``call(i)``."""
    times = []
    clock = time.perf_counter
    for i in range(trips):
        t0 = clock()
        call(i)
        times.append(clock() - t0)
    return times


def timed_awaits(call, trips, new_loop=None):
    """The wall time of each of ``trips`` awaits of ``call(i)``, in a running event loop
    (asyncio's, or ``new_loop()``)."""
    import asyncio

    async def trips_in_a_loop():
        times = []
        clock = time.perf_counter
        for i in range(trips):
            t0 = clock()
            await call(i)
            times.append(clock() - t0)
        return times

    if new_loop is None:
        return asyncio.run(trips_in_a_loop())
    loop = new_loop()
    try:
        return loop.run_until_complete(trips_in_a_loop())
    finally:
        loop.close()


def measure(call, trips, warm, kind_of, expect_workers, timed=timed_calls):
    """Warm up, then time ``trips`` calls of ``call(i)`` (with ``timed``): wall p50, p99
    and CPU µs per round trip of each kind of process, split into main thread and the
    others."""
    timed(call, warm)
    deadline = time.monotonic() + 30
    while True:
        processes = _processes(kind_of)
        workers = sum(1 for name in processes if name.startswith("workers"))
        if workers >= expect_workers or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    gc.collect()
    before = {name: cpu_seconds(*pm) for name, pm in processes.items()}
    times = timed(call, trips)
    after = {name: cpu_seconds(*pm) for name, pm in processes.items()}
    q = statistics.quantiles(times, n=100)
    figures = {"p50_us": q[49] * 1e6, "p99_us": q[98] * 1e6}
    for name in processes:
        kind = name.split()[0]
        total, main = ((b - a) / trips * 1e6 for a, b in zip(before[name], after[name]))
        figures[f"{kind}_us"] = figures.get(f"{kind}_us", 0.0) + total
        figures[f"{kind}_main_us"] = figures.get(f"{kind}_main_us", 0.0) + main
    figures["all_us"] = sum(figures.get(f"{k}_us", 0.0) for k in ("client", "driver", "workers"))
    return figures


def run_pool(args):
    import multiprocessing
    with multiprocessing.Pool(2) as pool:
        return measure(lambda i: pool.apply_async(noop, (i,)).get(), args.trips, args.warm,
                       _pool_kind, 2)


def run_zsched(args, system):
    import zsched
    link = "pipe" if system in ("pipes", "await", "await-uvloop") else "socket"
    with zsched.LocalCluster(n_executors=2, cores_per_executor=1,
                             local_executor_link=link) as cluster:
        if system.startswith("await"):
            timed = timed_awaits
            if system == "await-uvloop":
                import uvloop
                timed = functools.partial(timed_awaits, new_loop=uvloop.new_event_loop)
            with cluster.client() as client:
                figures = measure(lambda i: client.submit(noop, i), args.trips, args.warm,
                                  _zsched_kind, 2, timed=timed)
                ratio, result_p50 = await_vs_result(client, args.trips, timed)
                figures["result_p50_us"] = result_p50 * 1e6
                figures["await_vs_result"] = ratio
                return figures
        if system == "pipes":
            client = cluster.client()
        else:
            address = cluster.address if system == "tcp" else cluster.local_address
            client = zsched.Client(address, secret_file=cluster.secret_file)
        with client:
            return measure(lambda i: client.submit(noop, i).result(), args.trips, args.warm,
                           _zsched_kind, 2)


def await_vs_result(client, trips, timed, blocks=10):
    """The p50 of awaited round trips over that of ``result()`` ones, and the latter, on
    one cluster: ``trips`` of each, in alternated blocks, so that the drift of a shared
    machine falls on both alike."""
    awaited, waited = [], []
    size = max(1, trips // blocks)
    for _ in range(blocks):
        awaited += timed(lambda i: client.submit(noop, i), size)
        waited += timed_calls(lambda i: client.submit(noop, i).result(), size)
    result_p50 = statistics.median(waited)
    return statistics.median(awaited) / result_p50, result_p50


def _relay_driver(keys, directory, ports):
    """The floor's middle process: a ROUTER at TCP (CURVE) and a Unix socket, relaying
    between the client and the one executor until told to stop."""
    import zmq
    router = zmq.Context().socket(zmq.ROUTER)
    router.curve_server, router.curve_publickey, router.curve_secretkey = True, *keys
    ports.send(router.bind_to_random_port("tcp://127.0.0.1"))
    router.bind(f"ipc://{directory}/relay")
    executor = client = None
    while True:
        rid, msg = router.recv_multipart()
        if msg == b"executor":
            executor = rid
            ports.send(0)
        elif rid == executor:
            router.send_multipart([client, msg])
            if msg == b"stop":
                return
        else:
            client = rid
            router.send_multipart([executor, msg])


def _relay_executor(server_key, directory):
    """The floor's executor: sends back what the relay sends it, until told to stop."""
    import zmq
    dealer = _curve_dealer(zmq.Context(), server_key)
    dealer.connect(f"ipc://{directory}/relay")
    dealer.send(b"executor")
    while True:
        msg = dealer.recv()
        dealer.send(msg)
        if msg == b"stop":
            return


def _curve_dealer(context, server_key):
    import zmq
    dealer = context.socket(zmq.DEALER)
    dealer.curve_serverkey = server_key
    dealer.curve_publickey, dealer.curve_secretkey = zmq.curve_keypair()
    return dealer


def run_floor(args):
    import multiprocessing
    import tempfile
    import zmq
    keys = zmq.curve_keypair()
    context = multiprocessing.get_context("fork")
    here, there = context.Pipe()
    with tempfile.TemporaryDirectory() as directory:
        middle = context.Process(target=_relay_driver, args=(keys, directory, there))
        middle.start()
        port = here.recv()
        end = context.Process(target=_relay_executor, args=(keys[0], directory))
        end.start()
        here.recv()  # the executor is there
        zcontext = zmq.Context()
        dealer = _curve_dealer(zcontext, keys[0])
        dealer.connect(f"tcp://127.0.0.1:{port}")
        message = b"x" * 60  # about a lone task's SubmitTasks
        kinds = {middle.pid: "driver", end.pid: "workers"}

        def call(_):
            dealer.send(message)
            dealer.recv()

        figures = measure(call, args.trips, args.warm, lambda p: kinds.get(p.pid), 1)
        dealer.send(b"stop")
        dealer.recv()
        middle.join(30)
        end.join(30)
        dealer.close(linger=0)
        zcontext.term()
    return figures


def run_system(args, system):
    if system == "pool":
        return run_pool(args)
    if system == "floor":
        return run_floor(args)
    return run_zsched(args, system)


def run(args, log):
    """The rounds: {system: [figures of each round]}."""
    results = {system: [] for system in args.systems}
    for r in range(args.rounds):
        for system in args.systems:
            figures = run_system(args, system)
            results[system].append(figures)
            log(f"round {r + 1}/{args.rounds} {system:<6} p50 {figures['p50_us']:7.0f} us, "
                f"CPU {figures['all_us']:6.0f} us per round trip")
    return results


def print_table(medians):
    header = (f"{'system':<8}{'p50 us':>8}{'p99 us':>8}{'CPU us':>8}{'client':>8}{'(call)':>8}"
              f"{'driver':>8}{'(loop)':>8}{'workers':>8}{'(main)':>8}")
    print(header)
    print("-" * len(header))
    for system, m in medians.items():
        cells = [m.get(k) for k in ("p50_us", "p99_us", "all_us", "client_us", "client_main_us",
                                    "driver_us", "driver_main_us", "workers_us",
                                    "workers_main_us")]
        print(f"{system:<8}" + "".join("       -" if c is None else f"{c:8.0f}" for c in cells))
    best_peer = medians.get("pool", {}).get("p50_us")
    if best_peer:
        for system, m in medians.items():
            if system != "pool":
                print(f"{system}: p50 {m['p50_us'] / best_peer:.2f}x multiprocessing.Pool's")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", default="pool,pipes,tcp",
                        help=f"comma-separated, of {','.join(SYSTEMS)} (default pool,pipes,tcp)")
    parser.add_argument("--rounds", type=int, default=None, metavar="R",
                        help="rounds, each system once in each (default 5; 1 with --quick)")
    parser.add_argument("--trips", type=int, default=None, metavar="N",
                        help="timed round trips per system and round (default 3000; 300 with --quick)")
    parser.add_argument("--warm", type=int, default=300, metavar="N",
                        help="round trips before the timed ones (default 300)")
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    args = parser.parse_args(argv)
    args.systems = [s for s in args.systems.split(",") if s]
    unknown = [s for s in args.systems if s not in SYSTEMS]
    if unknown or not args.systems:
        parser.error(f"--systems: unknown {','.join(unknown) or '(none)'}; known: {','.join(SYSTEMS)}")
    if args.rounds is None:
        args.rounds = 1 if args.quick else 5
    if args.trips is None:
        args.trips = 300 if args.quick else 3000
    if args.quick:
        args.warm = min(args.warm, 100)
    require_positive(parser, args, ("rounds", "trips", "warm"))
    return args


def main(argv=None):
    args = parse_args(argv)
    results = run(args, lambda message: print(message, file=sys.stderr, flush=True))
    medians = {system: {key: median(rounds, key) for key in rounds[0]}
               for system, rounds in results.items()}
    print(f"A lone no-op task's round trip, 2 workers of one core, medians of {args.rounds} "
          f"rounds of {args.trips:,}; CPU in us per round trip; {os.cpu_count()} CPUs")
    print_table(medians)
    print_json({"benchmark": "zsched-latency", **about_zsched(), **about_machine(),
                "params": {"systems": args.systems, "rounds": args.rounds, "trips": args.trips,
                           "warm": args.warm},
                "median": medians, "rounds": results})


if __name__ == "__main__":
    main()
