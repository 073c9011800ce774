"""The measurements of bench/scale.py: one configuration of one round (registration, an
idle driver, the submit and map phases, the loss of every connection) and the driver's
memory per queued task. ``task`` is the no-op task function, defined in the script itself
so that it travels by value, as a user's function from ``__main__`` does.
"""
import concurrent.futures
import gc
import shutil
import tempfile
import time

from _common import Stall, check_results, profile_path
from _scale_cluster import Cluster, cpu_seconds, main_thread_cpu_seconds, rss


def wait_futures(cluster, futures, timeout, what):
    """Wait for ``futures``; Stall, with what the driver says, after ``timeout``."""
    deadline = time.monotonic() + timeout
    pending = futures
    while pending:
        _, pending = concurrent.futures.wait(pending, timeout=max(0.0, min(5.0, deadline - time.monotonic())))
        if pending and time.monotonic() >= deadline:
            raise Stall(f"{what}: {len(pending)} unfinished after {timeout:.0f} s{cluster.driver_view()}")


def phase_timeout(n_tasks):
    """The limit of one phase of ``n_tasks``: a stall is reported, never waited for forever."""
    return 60.0 + n_tasks / 4000.0


class FullCollections:
    """The cyclic GC's full collections in this process (the client) while it is active:
    how many, and the seconds they took. A flood holds many futures, which each full
    collection goes over."""

    def __init__(self):
        self.count = 0
        self.seconds = 0.0
        self._started = None

    def _callback(self, phase, info):
        if info["generation"] == 2:
            if phase == "start":
                self._started = time.perf_counter()
            elif self._started is not None:
                self.count += 1
                self.seconds += time.perf_counter() - self._started

    def __enter__(self):
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc):
        gc.callbacks.remove(self._callback)


def measure_phase(cluster, sim_pids, name, n_tasks, run, profile_path, log):
    """Run ``run()`` (which returns when all ``n_tasks`` are done); rate and CPU per task."""
    gc.collect()
    stats0 = cluster.stats()
    cluster.start_profile(profile_path)
    driver_cpu0 = cpu_seconds([cluster.driver.pid])
    driver_main0 = main_thread_cpu_seconds(cluster.driver.pid)
    sims_cpu0 = cpu_seconds(sim_pids)
    here0 = time.process_time()
    t0 = time.perf_counter()
    try:
        with FullCollections() as collections:
            run()
        elapsed = time.perf_counter() - t0
    finally:
        cluster.stop_profile()
    stats = cluster.stats()
    launches = stats["launches"] - stats0["launches"]
    updates = stats["updates"] - stats0["updates"]
    figures = {
        f"{name}_tasks_per_launch": (stats["tasks"] - stats0["tasks"]) / max(1, launches),
        f"{name}_tasks_per_update": (stats["tasks"] - stats0["tasks"]) / max(1, updates),
        f"{name}_heartbeats": stats["heartbeats"] - stats0["heartbeats"],
        f"{name}_tasks_per_s": n_tasks / elapsed,
        f"{name}_s": elapsed,
        f"{name}_driver_cpu_us": (cpu_seconds([cluster.driver.pid]) - driver_cpu0) / n_tasks * 1e6,
        f"{name}_driver_loop_cpu_us": (main_thread_cpu_seconds(cluster.driver.pid) - driver_main0) / n_tasks * 1e6,
        f"{name}_executors_cpu_us": (cpu_seconds(sim_pids) - sims_cpu0) / n_tasks * 1e6,
        f"{name}_client_cpu_us": (time.process_time() - here0) / n_tasks * 1e6,
        f"{name}_client_full_collections": collections.count,
        f"{name}_client_full_collections_s": collections.seconds,
    }
    figures[f"{name}_total_cpu_us"] = (figures[f"{name}_driver_cpu_us"] + figures[f"{name}_executors_cpu_us"]
                                       + figures[f"{name}_client_cpu_us"])
    log(f"    {name}: {n_tasks:,} tasks in {elapsed:.1f} s ({figures[f'{name}_tasks_per_s']:,.0f}/s)")
    return figures


def run_config(args, task, n_executors, round_index, log, killed):
    """One configuration of one round: a fresh driver and ``n_executors`` executors."""
    figures = {"executors": n_executors}
    workdir = tempfile.mkdtemp(prefix="zsched-scale-")
    cluster = None
    try:
        cluster = Cluster(args, workdir)
        processes = min(args.processes, n_executors)
        figures["processes"] = processes
        log(f"  {n_executors} executors x {args.cores} core(s) in {processes} process(es)")
        cluster.start_executors(n_executors, processes, args.cores)
        client = cluster.connect_client()
        figures.update(register(cluster, n_executors, log))
        figures.update(idle(cluster, client, args.quick, args.idle_seconds))
        figures.update(throughput(args, task, cluster, client, n_executors, round_index, log))
        loss_s, left = cluster.vanish(n_executors, 60 + n_executors / 10)
        figures["loss_s"] = loss_s
        if left:
            figures["loss_left"] = left
        figures["loop_pause_ms"] = 1000 * client.status()["loop_longest_pause"]
        log(f"    all connections closed: driver dropped them in "
            f"{'-' if loss_s is None else f'{loss_s:.2f} s'}; its loop's longest pause "
            f"over the last minute {figures['loop_pause_ms']:.1f} ms")
        return figures
    finally:
        if cluster is not None:
            killed.extend(f"{n_executors} executors: {name}" for name in cluster.close())
        shutil.rmtree(workdir, ignore_errors=True)


def register(cluster, n_executors, log):
    """Registration: its time, and the driver's CPU and memory per executor."""
    figures = {}
    driver_rss0 = rss(cluster.driver.pid)
    driver_cpu0 = cpu_seconds([cluster.driver.pid])
    figures["register_s"] = cluster.register(n_executors)
    if n_executors >= 50:  # the CPU clock ticks in 10 ms: meaningless for a handful
        figures["register_driver_cpu_ms"] = (
            (cpu_seconds([cluster.driver.pid]) - driver_cpu0) / n_executors * 1e3)
    figures["driver_rss_per_executor_kib"] = (
        (rss(cluster.driver.pid) - driver_rss0) / n_executors / 1024)
    log(f"    registered in {figures['register_s']:.2f} s")
    return figures


def idle(cluster, client, quick, idle_s=None):
    """An idle cluster, heartbeats (ours and ZeroMQ's) and the driver's timers only: the
    driver's CPU over ``idle_s`` seconds; then one ``client.status()``."""
    figures = {}
    # every executor has sent a heartbeat at the longest interval the driver gave
    time.sleep(0.5 if quick else 1.0 + client.status()["heartbeat_interval"])
    if idle_s is None:
        idle_s = 1.0 if quick else 6.0
    counters0 = client.status()["counters"]
    driver_cpu0 = cpu_seconds([cluster.driver.pid])
    driver_main0 = main_thread_cpu_seconds(cluster.driver.pid)
    time.sleep(idle_s)
    figures["idle_driver_cpu_pct"] = (cpu_seconds([cluster.driver.pid]) - driver_cpu0) / idle_s * 100
    figures["idle_driver_loop_cpu_pct"] = (
        (main_thread_cpu_seconds(cluster.driver.pid) - driver_main0) / idle_s * 100)
    counters = client.status()["counters"]  # a status is costly at this size: outside the window
    for name in ("messages_in", "messages_out"):
        figures[f"idle_{name}_per_s"] = (counters[name] - counters0[name]) / idle_s
    t0 = time.perf_counter()
    client.status()
    figures["status_ms"] = (time.perf_counter() - t0) * 1e3
    return figures


def throughput(args, task, cluster, client, n_executors, round_index, log):
    """A warm-up, the submit and map phases (``args.phases``), then map with its default
    chunking."""
    # warm-up, untimed: every executor runs tasks once, so that its window is sized
    warm = list(range(min(args.tasks, max(2000, 5 * n_executors * args.cores))))
    check_results(list(client.map(task, warm, timeout=phase_timeout(len(warm)), chunksize=1)),
                  warm, "warm-up")
    n = args.tasks
    xs = list(range(n))
    timeout = phase_timeout(n)

    def submit_all():
        futures = [client.submit(task, x) for x in xs]
        wait_futures(cluster, futures, timeout, "submit")
        check_results([f.result() for f in futures], xs, "submit")

    def map_all():
        try:  # one task per call, whatever map's default chunking
            results = list(client.map(task, xs, timeout=timeout, chunksize=1))
        except concurrent.futures.TimeoutError:
            raise Stall(f"map unfinished after {timeout:.0f} s{cluster.driver_view()}") from None
        check_results(results, xs, "map")

    figures = {}
    windows = [0]
    sim_pids = [sim.pid for sim in cluster.sims]
    for name, run in (("submit", submit_all), ("map", map_all)):
        if name in args.phases:
            path = profile_path(args, f"driver-{n_executors}ex-r{round_index + 1}-{name}")
            figures.update(measure_phase(cluster, sim_pids, name, n, run, path, log))
            # the windows the driver gives no-op tasks, read at once: an executor that
            # runs nothing for a whole revive_interval forgets its tasks' length
            windows.append(max(e["slots"] for e in client.status()["executors"]))
    figures.update(spread(cluster, client, windows))
    if "map" in args.phases:
        figures.update(map_default(cluster, client, task, xs, timeout, log))
    return figures


def spread(cluster, client, windows):
    """How the tasks spread over the executors, the largest window, the driver's RSS."""
    done = [e["tasks_done"] for e in client.status()["executors"]]
    return {"tasks_per_executor_min": min(done), "tasks_per_executor_max": max(done),
            "window_max": max(windows), "driver_rss_mib": rss(cluster.driver.pid) / 2**20}


def map_default(cluster, client, task, xs, timeout, log):
    """map as a user calls it: the client may make tasks of several calls (chunks)."""
    gc.collect()
    launched0 = cluster.stats()["tasks"]
    t0 = time.perf_counter()
    check_results(list(client.map(task, xs, timeout=timeout)), xs, "map, default chunking")
    figures = {"map_default_calls_per_s": len(xs) / (time.perf_counter() - t0),
               "map_default_tasks": cluster.stats()["tasks"] - launched0}
    log(f"    map, default chunking: {len(xs):,} calls in {figures['map_default_tasks']:,} tasks, "
        f"{figures['map_default_calls_per_s']:,.0f} calls/s")
    return figures


def run_memory(args, task, log, killed):
    """Driver RSS with ``args.tasks`` tasks queued and no executors, per task."""
    figures = {}
    workdir = tempfile.mkdtemp(prefix="zsched-scale-")
    cluster = None
    try:
        cluster = Cluster(args, workdir)
        client = cluster.connect_client()
        first = [client.submit(task, x) for x in range(10)]  # the function reaches the driver
        deadline = time.monotonic() + 30
        while client.status()["tasks"]["queued"] < 10:
            if time.monotonic() > deadline:
                raise Stall("10 tasks not queued after 30 s")
            time.sleep(0.05)
        time.sleep(0.5)
        before = rss(cluster.driver.pid)
        n = args.tasks
        t0 = time.perf_counter()
        pending = [client.submit(task, x) for x in range(n)]
        deadline = time.monotonic() + phase_timeout(n)
        while True:
            queued = client.status()["tasks"]["queued"]
            if queued >= n + 10:
                break
            if time.monotonic() > deadline:
                raise Stall(f"only {queued - 10} of {n} tasks queued after {phase_timeout(n):.0f} s")
            time.sleep(0.2)
        figures["queue_s"] = time.perf_counter() - t0
        time.sleep(1.0)
        after = rss(cluster.driver.pid)
        figures["driver_rss_before_mib"] = before / 2**20
        figures["driver_rss_queued_mib"] = after / 2**20
        figures["bytes_per_queued_task"] = (after - before) / n
        log(f"  {n:,} tasks queued: driver RSS {before / 2**20:.0f} -> {after / 2**20:.0f} MiB "
            f"({figures['bytes_per_queued_task']:.0f} B per task)")
        # cancel them all, so that the client leaves with nothing pending
        for future in first + pending:
            future.cancel()
        deadline = time.monotonic() + phase_timeout(n)
        while client.status()["tasks"]["queued"] > 0:
            if time.monotonic() > deadline:
                raise Stall(f"cancelled tasks still queued after {phase_timeout(n):.0f} s")
            time.sleep(0.2)
        return figures
    finally:
        if cluster is not None:
            killed.extend(f"memory: {name}" for name in cluster.close())
        shutil.rmtree(workdir, ignore_errors=True)

