"""Large arguments, large results and broadcast variables: zsched against the stdlib pools.

Every system has 2 workers of one core. The phases, each timed from the first submit to
the last result:

- ``args N MiB``: tasks that sum a numpy array of N MiB passed as their argument.
- ``results 8 MiB``: tasks that return a numpy array of 8 MiB.
- ``broadcast``: (zsched only) a 256 MiB array broadcast once and used by 1,000 tasks,
  beside the time to send it as the argument of two tasks, as if once to each executor.

Each round starts each system afresh and runs each phase ``--repeat`` times, keeping the
best (a warm system); the systems are interleaved round by round, and the figures are
medians over rounds, in GiB/s of payload moved (broadcast: seconds).

    python bench/data.py                 # 3 rounds of 3 runs, about 10 minutes
    python bench/data.py --quick         # a smoke run
"""
import argparse
import concurrent.futures
import multiprocessing
import os
import sys
import time

from _common import about_machine, about_zsched, fmt, median, print_json

MIB = 1 << 20
# (MiB per argument, tasks): each phase moves a few hundred MiB or more
ARG_PHASES = ((1, 400), (8, 100), (64, 12))
RESULT_PHASE = (8, 100)
BROADCAST_MIB, BROADCAST_TASKS = 256, 1000


def array_sum(array):
    return float(array.sum())


def make_array(n_bytes):
    import numpy
    return numpy.ones(n_bytes // 8, dtype=numpy.float64)


def broadcast_len(handle):
    return len(handle.value)


class Zsched:
    """A LocalCluster of two one-core executors: over pipes, or (``tcp``) the executors and
    the client over TCP with CURVE."""

    def __init__(self, tcp):
        self.tcp = tcp
        self.label = "zsched TCP+CURVE" if tcp else "zsched LocalCluster"
        self.cluster = self.client = None

    def start(self):
        import zsched
        # room for the broadcast's baseline: the value as the argument of a task
        settings = {"max_message_size": 2 * BROADCAST_MIB * MIB}
        if self.tcp:
            self.cluster = zsched.LocalCluster(2, 1, local_executor_link="socket", wait=True,
                                               **settings)
            self.client = zsched.Client(self.cluster.address, secret_file=self.cluster.secret_file)
        else:
            self.cluster = zsched.LocalCluster(2, 1, wait=True, **settings)
            self.client = self.cluster.client()

    def submit(self, fn, *args):
        return self.client.submit(fn, *args)

    def broadcast(self, value):
        return self.client.broadcast(value)

    def close(self):
        self.client.close()
        self.cluster.close()


class Stdlib:
    """``ProcessPoolExecutor(2)`` or ``multiprocessing.Pool(2)``."""

    def __init__(self, pool):
        self.pool_kind = pool
        self.label = "multiprocessing.Pool" if pool else "ProcessPoolExecutor"
        self.pool = None

    def start(self):
        if self.pool_kind:
            self.pool = multiprocessing.Pool(2)
        else:
            self.pool = concurrent.futures.ProcessPoolExecutor(2)

    def submit(self, fn, *args):
        if self.pool_kind:
            return _AsyncResult(self.pool.apply_async(fn, args))
        return self.pool.submit(fn, *args)

    broadcast = None

    def close(self):
        if self.pool_kind:
            self.pool.close()
            self.pool.join()
        else:
            self.pool.shutdown()


class _AsyncResult:
    def __init__(self, result):
        self._result = result

    def result(self, timeout=None):
        return self._result.get(timeout)


def timed(system, fn, args, count, timeout):
    """Seconds from the first submit to the last result, checking each result."""
    start = time.perf_counter()
    futures = [system.submit(fn, *args) for _ in range(count)]
    results = [f.result(timeout) for f in futures]
    elapsed = time.perf_counter() - start
    return elapsed, results


def best(repeat, measure):
    """The shortest of ``repeat`` runs of ``measure()`` (seconds): a warm system, as a
    user's second call finds it."""
    return min(measure() for _ in range(repeat))


def run_round(system, phases, result_phase, broadcast, timeout, repeat):
    import numpy
    figures = {}

    def args_phase(array, count):
        elapsed, results = timed(system, array_sum, (array,), count, timeout)
        if results != [float(array.sum())] * count:
            raise AssertionError(f"{system.label}: wrong sums at {array.nbytes} bytes")
        return elapsed

    for mib, count in phases:
        array = make_array(mib * MIB)
        seconds = best(repeat, lambda array=array, count=count: args_phase(array, count))
        figures[f"args_{mib}"] = mib * count / 1024 / seconds

    def results_phase(mib, count):
        elapsed, results = timed(system, make_array, (mib * MIB,), count, timeout)
        if not all(isinstance(r, numpy.ndarray) and r.nbytes == mib * MIB for r in results):
            raise AssertionError(f"{system.label}: wrong results")
        return elapsed

    if result_phase is not None:
        mib, count = result_phase
        figures[f"results_{mib}"] = mib * count / 1024 / best(repeat, lambda: results_phase(mib, count))
    if broadcast and system.broadcast is not None:
        mib, count = broadcast
        array = make_array(mib * MIB)

        def broadcast_phase():
            start = time.perf_counter()
            handle = system.broadcast(array)
            futures = [system.submit(broadcast_len, handle) for _ in range(count)]
            results = [f.result(timeout) for f in futures]
            elapsed = time.perf_counter() - start
            handle.destroy()
            if results != [len(array)] * count:
                raise AssertionError(f"{system.label}: wrong broadcast results")
            return elapsed

        figures["broadcast_s"] = best(repeat, broadcast_phase)
        figures["send_twice_s"] = best(repeat, lambda: timed(system, len, (array,), 2, timeout)[0])
    return figures


def zmq_hop(curve, mib=8, count=64):
    """GiB/s of ``count`` messages of ``mib`` MiB from a DEALER to a ROUTER over TCP on
    loopback, with CURVE or without: the ceiling of one hop of the TCP cluster."""
    import threading

    import zmq
    context = zmq.Context()
    router, dealer = context.socket(zmq.ROUTER), context.socket(zmq.DEALER)
    if curve:
        server_public, server_secret = zmq.curve_keypair()
        client_public, client_secret = zmq.curve_keypair()
        router.curve_server, router.curve_secretkey = True, server_secret
        dealer.curve_serverkey, dealer.curve_publickey = server_public, client_public
        dealer.curve_secretkey = client_secret
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealer.connect(f"tcp://127.0.0.1:{port}")
    payload = bytes(mib * MIB)

    def receive():
        for _ in range(count + 1):
            router.recv_multipart(copy=False)

    reader = threading.Thread(target=receive)
    reader.start()
    dealer.send(b"warm-up")
    start = time.perf_counter()
    for _ in range(count):
        dealer.send(payload, copy=False)
    reader.join()
    elapsed = time.perf_counter() - start
    router.close(0)
    dealer.close(0)
    context.term()
    return mib * count / 1024 / elapsed


COLUMNS = [("args_1", "args 1M GiB/s", "{:.2f}"), ("args_8", "args 8M GiB/s", "{:.2f}"),
           ("args_64", "args 64M GiB/s", "{:.2f}"), ("results_8", "res 8M GiB/s", "{:.2f}"),
           ("broadcast_s", "bcast s", "{:.2f}"), ("send_twice_s", "send x2 s", "{:.2f}")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="system starts, interleaved")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each phase per start; the best counts")
    parser.add_argument("--quick", action="store_true", help="a smoke run: small phases, 1 round")
    parser.add_argument("--systems", default="zsched,tcp,ppe,pool",
                        help="comma-separated: zsched, tcp, ppe, pool")
    parser.add_argument("--no-broadcast", action="store_true")
    parser.add_argument("--args", default=",".join(str(mib) for mib, _ in ARG_PHASES),
                        help="the argument phases to run, in MiB (of 1, 8, 64)")
    parser.add_argument("--no-results", action="store_true")
    args = parser.parse_args()
    if args.rounds < 1 or args.repeat < 1:
        parser.error("--rounds and --repeat must be >= 1")
    phases, result_phase, broadcast = ARG_PHASES, RESULT_PHASE, (BROADCAST_MIB, BROADCAST_TASKS)
    if args.quick:
        args.rounds = args.repeat = 1
        phases, result_phase, broadcast = ((1, 20), (8, 4)), (8, 4), (8, 50)
    if args.no_broadcast:
        broadcast = None
    chosen = {int(mib) for mib in args.args.split(",") if mib}
    phases = [(mib, count) for mib, count in phases if mib in chosen]
    if args.no_results:
        result_phase = None
    makers = {"zsched": lambda: Zsched(False), "tcp": lambda: Zsched(True),
              "ppe": lambda: Stdlib(False), "pool": lambda: Stdlib(True)}
    names = [n for n in args.systems.split(",") if n]
    unknown = set(names) - set(makers)
    if unknown:
        parser.error(f"unknown systems: {', '.join(sorted(unknown))}")
    rounds = {name: [] for name in names}
    labels = {}
    for index in range(args.rounds):
        for name in names:
            system = makers[name]()
            labels[name] = system.label
            system.start()
            try:
                rounds[name].append(run_round(system, phases, result_phase, broadcast, 600, args.repeat))
            finally:
                system.close()
            print(f"round {index + 1} {system.label}: {rounds[name][-1]}", file=sys.stderr)
    header = f"{'system':<24}" + "".join(f"{title:>16}" for _, title, _ in COLUMNS)
    print(header)
    print("-" * len(header))
    report = {"machine": about_machine(), **about_zsched(), "rounds": args.rounds, "systems": {}}
    for name in names:
        figures = {key: median(rounds[name], key) for key, _, _ in COLUMNS}
        report["systems"][labels[name]] = figures
        print(f"{labels[name]:<24}" + "".join(f"{fmt(figures[key], spec):>16}"
                                               for key, _, spec in COLUMNS))
    hops = {"plain": zmq_hop(False), "curve": zmq_hop(True)}
    report["zmq_hop_gib_s"] = hops
    print(f"\nZeroMQ alone, one hop over TCP on loopback, 8 MiB messages: {hops['plain']:.2f} GiB/s "
          f"plain, {hops['curve']:.2f} GiB/s with CURVE")
    print_json(report)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
