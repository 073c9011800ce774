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
import concurrent.futures
import gc
import importlib
import multiprocessing
import os
import sys
import time
import traceback

from _common import (Stall, about_machine, about_zsched, check_results, fmt, kill_pids, live_children,
                     median, new_log_file, output_to_log, percentile, print_json, report_log,
                     require_positive)


# ---------------------------------------------------------------- task functions
# Module level, so that every system (ProcessPoolExecutor included) can pickle them.

def noop(x):
    return x


def sleep_10ms(x):
    time.sleep(0.01)
    return x


# ---------------------------------------------------------------- helpers

class NotInstalled(Exception):
    """The system's package does not import."""


def import_peer(name):
    """The module ``name``; NotInstalled if it does not import."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise NotInstalled(str(exc)) from None


CELL = 12  # characters a figure's column takes: 99,999,999 and a space or two

FIGURES = [
    # key in the JSON, table header, format
    ("submit_tasks_per_s", "submit/s", "{:,.0f}"),
    ("map_tasks_per_s", "map/s", "{:,.0f}"),
    ("map_large_per_s", "map M/s", "{:,.0f}"),
    ("latency_p50_us", "p50 us", "{:,.0f}"),
    ("latency_p99_us", "p99 us", "{:,.0f}"),
    ("efficiency_10ms", "eff 10ms", "{:.2f}"),
    ("startup_s", "start s", "{:.2f}"),
    ("shutdown_s", "stop s", "{:.2f}"),
]


def phase_timeout(n_tasks):
    """Generous limit for one phase: a stall is reported, never waited for forever."""
    return 60.0 + n_tasks / 200.0


# ---------------------------------------------------------------- systems
# Each adapter: start(), submit(fn, x) -> handle, wait_all(handles, timeout) -> results,
# map(fn, xs, timeout), one(fn, x, timeout), close(); ``workers``: its task slots.

class ZschedLocal:
    name = "zsched"
    label = "zsched LocalCluster"
    large_map = True

    def __init__(self, workers):
        import zsched
        self.zsched = zsched
        self.workers = workers
        self.cluster = self.client = None

    def start(self):
        self.cluster = self.zsched.LocalCluster(n_executors=self.workers, cores_per_executor=1)
        self.client = self.cluster.client()

    def submit(self, fn, x):
        return self.client.submit(fn, x)

    def wait_all(self, futures, timeout):
        self._wait(futures, timeout, f"{len(futures)} tasks")
        return [f.result() for f in futures]

    def map(self, fn, xs, timeout):
        try:
            return list(self.client.map(fn, xs, timeout=timeout))
        except concurrent.futures.TimeoutError:
            raise Stall(f"map unfinished after {timeout:.0f} s{self._driver_view()}") from None

    def one(self, fn, x, timeout):
        future = self.client.submit(fn, x)
        try:
            return future.result(2.0)
        except concurrent.futures.TimeoutError:
            self._wait([future], timeout, "one task")
            return future.result()

    def _wait(self, futures, timeout, what):
        """Wait for ``futures``; a stall (or a cluster without executors) is an error that
        says what the driver sees, not an endless wait."""
        deadline = time.monotonic() + timeout
        pending = futures
        while True:
            slice_ = min(2.0, deadline - time.monotonic())
            _, pending = concurrent.futures.wait(pending, timeout=max(0.0, slice_))
            if not pending:
                return
            if time.monotonic() >= deadline:
                raise Stall(f"{what}: {len(pending)} unfinished after {timeout:.0f} s"
                            f"{self._driver_view()}")
            try:
                executors = self.client.executor_ids()
            except Exception:
                continue
            if not executors:
                raise Stall(f"{what}: {len(pending)} unfinished and the cluster has no executors "
                            f"left{self._driver_view()}")

    def _driver_view(self):
        """What the driver says about a stall (client.status()), for the error message."""
        try:
            status = self.client.status()
        except Exception as exc:
            return f"; client.status() failed: {type(exc).__name__}: {exc}"
        executors = ", ".join(
            f"{e.get('id')}: running {e.get('running')}, free slots {e.get('free_slots')}, "
            f"done {e.get('tasks_done')}, heartbeat age {e.get('last_heartbeat_age', 0):.1f} s"
            for e in status.get("executors", []))
        losses = ", ".join(f"{x.get('id')}: {x.get('reason')}" for x in status.get("losses", []))
        return (f"; driver status: tasks {status.get('tasks')}; executors [{executors}]; "
                f"executors lost [{losses}]")

    def close(self):
        try:
            if self.client is not None:
                self.client.shutdown(wait=True, cancel_futures=True)
        finally:
            self.client = None
            if self.cluster is not None:
                self.cluster.close()
                self.cluster = None


class ZschedEmbedded(ZschedLocal):
    """``zsched.Client()``: its own local cluster, one executor per core; every figure."""
    name = "zsched_embedded"
    label = "zsched Client() embedded"

    def __init__(self, workers):
        super().__init__(os.cpu_count() or 1)

    def start(self):
        self.client = self.zsched.Client()


class ProcessPool:
    name = "processpool"
    label = "ProcessPoolExecutor"

    def __init__(self, workers):
        self.workers = workers
        self.ex = None

    def start(self):
        self.ex = concurrent.futures.ProcessPoolExecutor(max_workers=self.workers)

    def submit(self, fn, x):
        return self.ex.submit(fn, x)

    def wait_all(self, futures, timeout):
        done, not_done = concurrent.futures.wait(futures, timeout=timeout)
        if not_done:
            raise Stall(f"{len(not_done)} of {len(futures)} tasks unfinished after {timeout:.0f} s")
        return [f.result() for f in futures]

    def map(self, fn, xs, timeout):
        try:
            return list(self.ex.map(fn, xs, timeout=timeout))
        except concurrent.futures.TimeoutError:
            raise Stall(f"map unfinished after {timeout:.0f} s") from None

    def one(self, fn, x, timeout):
        return self.ex.submit(fn, x).result(timeout)

    def close(self):
        if self.ex is not None:
            self.ex.shutdown(wait=True, cancel_futures=True)
            self.ex = None


class MpPool:
    name = "mp_pool"
    label = "multiprocessing.Pool"

    def __init__(self, workers):
        self.workers = workers
        self.pool = None
        self.failed = False

    def start(self):
        self.pool = multiprocessing.Pool(self.workers)

    def submit(self, fn, x):
        return self.pool.apply_async(fn, (x,))

    def wait_all(self, handles, timeout):
        deadline = time.monotonic() + timeout
        try:
            return [h.get(max(0.0, deadline - time.monotonic())) for h in handles]
        except multiprocessing.TimeoutError:
            self.failed = True
            raise Stall(f"tasks unfinished after {timeout:.0f} s") from None

    def map(self, fn, xs, timeout):
        # chunksize=1, as Executor.map: one task per element (Pool.map's default chunks them)
        try:
            return self.pool.map_async(fn, xs, chunksize=1).get(timeout)
        except multiprocessing.TimeoutError:
            self.failed = True
            raise Stall(f"map unfinished after {timeout:.0f} s") from None

    def one(self, fn, x, timeout):
        try:
            return self.pool.apply_async(fn, (x,)).get(timeout)
        except multiprocessing.TimeoutError:
            self.failed = True
            raise Stall(f"task unfinished after {timeout:.0f} s") from None

    def close(self):
        if self.pool is not None:
            pool, self.pool = self.pool, None
            if self.failed:
                pool.terminate()
            else:
                pool.close()
            pool.join()


class MpPoolMap(MpPool):
    name = "mp_pool_map"
    label = "multiprocessing.Pool.map"
    large_map = True

    def map(self, fn, xs, timeout):
        # Pool.map's own chunks: len(xs) / (4 x workers) calls each
        try:
            return self.pool.map_async(fn, xs).get(timeout)
        except multiprocessing.TimeoutError:
            self.failed = True
            raise Stall(f"map unfinished after {timeout:.0f} s") from None


class DaskDistributed:
    name = "dask"
    label = "Dask distributed"

    def __init__(self, workers):
        self.distributed = import_peer("distributed")
        self.workers = workers
        self.cluster = self.client = None

    def start(self):
        d = self.distributed
        self.cluster = d.LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=True,
                                      dashboard_address=None)
        self.client = d.Client(self.cluster)
        self.client.wait_for_workers(self.workers, timeout=120)

    def submit(self, fn, x):
        return self.client.submit(fn, x, pure=False)

    def wait_all(self, futures, timeout):
        try:
            self.distributed.wait(futures, timeout=timeout)
        except (TimeoutError, self.distributed.TimeoutError):
            raise Stall(f"tasks unfinished after {timeout:.0f} s") from None
        return self.client.gather(futures)

    def map(self, fn, xs, timeout):
        return self.wait_all(self.client.map(fn, list(xs), pure=False), timeout)

    def one(self, fn, x, timeout):
        return self.client.submit(fn, x, pure=False).result(timeout)

    def close(self):
        try:
            if self.client is not None:
                self.client.close(timeout=30)
        finally:
            self.client = None
            if self.cluster is not None:
                self.cluster.close(timeout=30)
                self.cluster = None


class Ray:
    name = "ray"
    label = "Ray"

    def __init__(self, workers):
        self.ray = import_peer("ray")
        self.workers = workers
        self.remote = {}
        self.started = False

    def start(self):
        self.ray.init(num_cpus=self.workers, include_dashboard=False, log_to_driver=False,
                      configure_logging=False)
        self.started = True

    def _remote(self, fn):
        if fn not in self.remote:
            self.remote[fn] = self.ray.remote(fn)
        return self.remote[fn]

    def submit(self, fn, x):
        return self._remote(fn).remote(x)

    def wait_all(self, refs, timeout):
        try:
            return self.ray.get(refs, timeout=timeout)
        except self.ray.exceptions.GetTimeoutError:
            raise Stall(f"tasks unfinished after {timeout:.0f} s") from None

    def map(self, fn, xs, timeout):
        remote = self._remote(fn)
        return self.wait_all([remote.remote(x) for x in xs], timeout)

    def one(self, fn, x, timeout):
        return self.wait_all(self._remote(fn).remote(x), timeout)

    def close(self):
        if self.started:
            self.started = False
            self.ray.shutdown()


ZSCHED_SYSTEMS = [ZschedLocal, ZschedEmbedded]
PEER_SYSTEMS = [ProcessPool, MpPool, MpPoolMap, DaskDistributed, Ray]


# ---------------------------------------------------------------- measuring

def run_round(cls, args, n_eff, log, stray):
    """One round of one system: start, measure, close; returns its figures. Processes of
    this one still running after its shutdown are killed and listed in ``stray``."""
    figures = {}
    system = cls(args.executors)
    timeout_small = phase_timeout(0)
    try:
        gc.collect()
        t0 = time.perf_counter()
        system.start()
        first = system.one(noop, -1, timeout_small)
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
        timeout = min(phase_timeout(n_tasks), 30.0 + 10.0 * n_tasks / warm_rate)

        xs = list(range(n_tasks))
        gc.collect()
        log(f"    submit x{n_tasks}")
        t0 = time.perf_counter()
        handles = [system.submit(noop, x) for x in xs]
        results = system.wait_all(handles, timeout)
        figures["submit_tasks_per_s"] = n_tasks / (time.perf_counter() - t0)
        check_results(list(results), xs, "submit")
        del handles, results

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
            del results

        gc.collect()
        log(f"    latency x{args.latency_samples}")
        samples = []
        perf = time.perf_counter
        for i in range(args.latency_samples):
            t0 = perf()
            value = system.one(noop, i, timeout_small)
            samples.append(perf() - t0)
            if value != i:
                raise AssertionError(f"latency task {i} returned {value!r}")
        samples.sort()
        figures["latency_p50_us"] = percentile(samples, 50) * 1e6
        figures["latency_p99_us"] = percentile(samples, 99) * 1e6

        gc.collect()
        log(f"    {n_eff} x 10 ms")
        ys = list(range(n_eff))
        t0 = time.perf_counter()
        results = system.wait_all([system.submit(sleep_10ms, y) for y in ys], phase_timeout(n_eff))
        elapsed = time.perf_counter() - t0
        check_results(list(results), ys, "10 ms tasks")
        figures["efficiency_10ms"] = (n_eff * 0.01 / system.workers) / elapsed
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


def print_table(order, labels, status, medians, per_round, args, n_eff):
    print(f"zsched throughput: {args.executors} executor(s) x 1 core, {args.tasks} no-op tasks, "
          f"{args.latency_samples} latency samples, {n_eff} x 10 ms tasks; median of "
          f"{args.rounds} round(s); {os.cpu_count()} CPUs")
    width = max(len(labels[n]) for n in order) + 2
    header = "system".ljust(width) + "".join(h.rjust(CELL) for _, h, _ in FIGURES)
    print(header)
    print("-" * len(header))
    for name in order:
        row = labels[name].ljust(width)
        if status[name] != "ok":
            text = status[name]
            print(row + (text if len(text) <= 100 else text[:97] + "..."))
            continue
        print(row + "".join(fmt(medians[name].get(k), f).rjust(CELL) for k, _, f in FIGURES))
    print("submit/s: N x submit(), then wait for all.  map/s: list(map(fn, range(N))) (Pool: map_async")
    print("  chunksize=1, Pool.map: its own chunks; Dask: client.map + gather; Ray: f.remote + ray.get).")
    print(f"  map M/s: the same with M = {args.large_map:,} calls, for the systems that chunk a map.  p50/p99: submit one,")
    print("  wait for it, repeat.  eff 10ms: ideal / measured time of the 10 ms tasks (1.00 = perfect).")
    print("  start s: construct until workers registered and a first task returned.  stop s: shutdown.")
    for name in order:
        counts = sorted({f["tasks"] for f in per_round[name] if "tasks" in f})
        if counts and counts[0] < args.tasks:
            print(f"  * {labels[name]} ran {'/'.join(f'{c:,}' for c in counts)} tasks per phase, not "
                  f"{args.tasks:,} (slow: capped to about {args.phase_budget:g} s by --phase-budget)")


def print_ratios(order, labels, status, medians):
    peers = [n for n in order if n not in ("zsched", "zsched_embedded") and status[n] == "ok"]
    if not peers or status.get("zsched") != "ok":
        return {}
    base = medians["zsched"]
    ratios = {}
    print()
    print("peer / zsched  (tasks/s, eff: below 1 = zsched better;  us, s: above 1 = zsched better)")
    width = max(len(labels[n]) for n in order) + 2
    header = "system".ljust(width) + "".join(h.rjust(CELL) for _, h, _ in FIGURES)
    print(header)
    print("-" * len(header))
    for name in peers:
        ratios[name] = {}
        cells = []
        for key, _, _ in FIGURES:
            a, b = medians[name].get(key), base.get(key)
            r = a / b if a is not None and b else None
            ratios[name][key] = r
            cells.append(("-" if r is None else f"{r:.2f}x").rjust(CELL))
        print(labels[name].ljust(width) + "".join(cells))
    return ratios


def print_map_against_pool(labels, status, medians):
    """zsched's map against Pool.map's own chunks, at N and M calls."""
    pool = medians.get("mp_pool_map")
    if status.get("mp_pool_map") != "ok" or not pool:
        return {}
    print()
    ratios = {}
    for name in ("zsched", "zsched_embedded"):
        if status[name] != "ok":
            continue
        ratios[name] = {k: medians[name][k] / pool[k] if medians[name].get(k) and pool.get(k) else None
                        for k in ("map_tasks_per_s", "map_large_per_s")}
        cells = ", ".join("-" if r is None else f"{r:.2f}x" for r in ratios[name].values())
        print(f"map: {labels[name]} / multiprocessing.Pool.map (N, M calls): {cells}")
    return ratios


def measure_detection(rounds):
    """How long a LocalCluster's driver takes to report a lost executor: SIGKILL (its pipes
    close) and SIGSTOP (found by heartbeats: executor_heartbeat_timeout over pipes)."""
    import signal
    import statistics

    import zsched

    def lost(client, executor_id):
        return [loss for loss in client.status()["losses"] if loss["id"] == executor_id]

    def wait_lost(client, executor_id, limit):
        deadline = time.monotonic() + limit
        while not lost(client, executor_id):
            if time.monotonic() > deadline:
                raise Stall(f"executor {executor_id} not reported lost within {limit} s")
            time.sleep(0.005)
        return lost(client, executor_id)[0]

    figures = {"sigkill_s": [], "sigstop_s": []}
    for _ in range(rounds):
        with zsched.LocalCluster(2, executor_heartbeat_interval=1, executor_heartbeat_timeout=5) as cluster:
            client = cluster.client()
            while len(client.executor_ids()) < 2:
                time.sleep(0.01)
            first, second = client.status()["executors"][:2]
            for executor, sig, key in ((first, signal.SIGKILL, "sigkill_s"), (second, signal.SIGSTOP, "sigstop_s")):
                sent = time.time()
                os.kill(executor["pid"], sig)
                try:
                    loss = wait_lost(client, executor["id"], 60)
                finally:
                    if sig == signal.SIGSTOP:
                        os.kill(executor["pid"], signal.SIGCONT)
                figures[key].append(loss["time"] - sent)
            client.shutdown()
    print(f"detection of a lost executor, LocalCluster(2), heartbeat timeout 5 s; median of {rounds}:")
    print(f"  SIGKILL {statistics.median(figures['sigkill_s']) * 1000:,.1f} ms   "
          f"SIGSTOP {statistics.median(figures['sigstop_s']):,.2f} s")
    print_json({"benchmark": "zsched-detection", **about_zsched(), **about_machine(), **figures})
    return 0


def main(argv=None):
    args = parse_args(argv)
    if args.detection:
        return measure_detection(args.rounds)
    started = time.perf_counter()
    n_eff = (20 if args.quick else 100) * args.executors
    classes = list(ZSCHED_SYSTEMS) + (list(PEER_SYSTEMS) if args.compare else [])
    order = [c.name for c in classes]
    labels = {c.name: c.label for c in classes}
    status = {c.name: "ok" for c in classes}
    errors = {}
    per_round = {c.name: [] for c in classes}
    leftovers = {}

    log_path = None if args.show_logs else new_log_file("zsched-bench-")
    with output_to_log(log_path, not args.show_logs) as progress:
        def log(message):
            print(message, file=progress, flush=True)

        runnable = []
        for cls in classes:
            try:
                cls(args.executors)  # constructing imports the system; nothing starts yet
                runnable.append(cls)
            except NotInstalled:
                status[cls.name] = "not installed"
        for r in range(args.rounds):
            shift = r % len(runnable)
            for cls in runnable[shift:] + runnable[:shift]:
                if status[cls.name] != "ok":
                    continue  # failed in an earlier round
                log(f"round {r + 1}/{args.rounds}: {cls.label}")
                t0 = time.perf_counter()
                stray = []
                try:
                    figures = run_round(cls, args, n_eff, log, stray)
                except Exception as exc:
                    status[cls.name] = f"error in round {r + 1}: {type(exc).__name__}: {exc}"
                    errors[cls.name] = traceback.format_exc()
                    log(f"  {cls.label} FAILED: {type(exc).__name__}: {exc}")
                else:
                    per_round[cls.name].append(figures)
                    log(f"  done in {time.perf_counter() - t0:.1f} s")
                finally:
                    if stray:
                        leftovers.setdefault(cls.name, []).extend(stray)
                        log(f"  {len(stray)} process(es) still running after shutdown: killed")
        stray = live_children(grace=5.0)
        if stray:
            leftovers.setdefault("end", []).extend(f"{pid} {cmd[:120]}" for pid, cmd in stray)
            kill_pids(pid for pid, _ in stray)

    medians = {name: {key: median(rounds, key) for key, _, _ in FIGURES}
               for name, rounds in per_round.items()}

    print_table(order, labels, status, medians, per_round, args, n_eff)
    ratios = print_ratios(order, labels, status, medians) if args.compare else {}
    map_ratios = print_map_against_pool(labels, status, medians) if args.compare else {}

    print()
    for name in errors:
        print(f"{labels[name]}: {status[name]}")
    for name, items in leftovers.items():
        print(f"processes still running after {labels.get(name, 'the end')} (killed): {len(items)}")
        for item in items[:10]:
            print(f"  {item}")
    n_notable = 0
    if log_path is not None:
        log_path, n_notable = report_log(log_path, keep=bool(errors or leftovers))

    report = {
        "benchmark": "zsched-throughput",
        **about_zsched(),
        **about_machine(),
        "params": {"tasks": args.tasks, "large_map": args.large_map,
                   "latency_samples": args.latency_samples,
                   "rounds": args.rounds, "executors": args.executors,
                   "efficiency_tasks": n_eff, "phase_budget_s": args.phase_budget,
                   "compare": args.compare, "quick": args.quick},
        "systems": {
            name: {"label": labels[name], "status": status[name],
                   "workers": (os.cpu_count() or 1) if name == "zsched_embedded" else args.executors,
                   "median": {k: v for k, v in medians[name].items() if v is not None},
                   "rounds": per_round[name],
                   **({"traceback": errors[name]} if name in errors else {})}
            for name in order
        },
        "ratios_peer_over_zsched": ratios,
        "map_over_pool_map": map_ratios,
        "leftover_processes": leftovers,
        "log_warnings": n_notable,
        "log_file": log_path,
        "elapsed_s": time.perf_counter() - started,
    }
    print_json(report)
    zsched_ok = all(status[n] == "ok" and not leftovers.get(n) for n in ("zsched", "zsched_embedded"))
    return 0 if zsched_ok else 1


if __name__ == "__main__":
    sys.exit(main())
