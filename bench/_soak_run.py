"""The soak run of ``bench/soak.py``: tasks in waves through a LocalCluster, the memory of
every process sampled, every result checked, every run counted.

A task is ``work(x)``: it returns ``7 * x + 3``, the pid of the process that ran it and how
many tasks that process has run so far, itself included. The client checks each result
against its input, and for each process keeps how many of its results came back and the
highest run number among them: a run whose result never came back (a task run twice, one
of its results dropped) leaves that number above the count. ``bench/`` is on the path of
the executors (a cluster's children import what this process can), so ``work`` travels by
reference and its counter lives as long as the executor.
"""
import collections
import csv
import itertools
import os
import statistics
import threading
import time

from _common import Stall

_RUNS = itertools.count(1)


def work(x):
    """A soak task: (7 x + 3, this process's pid, the number of this run in this process)."""
    return 7 * x + 3, os.getpid(), next(_RUNS)


class Tally:
    """What came back: results checked, failures, and runs per executor process."""

    def __init__(self):
        self.done = 0     # results that came back, right or wrong
        self.wrong = 0
        self.failed = 0   # tasks that raised, or never came back from a map that raised
        self.first_error = None
        self.runs = {}    # pid -> [results seen, highest run number seen]

    def take(self, x, result):
        value, pid, run = result
        if value != 7 * x + 3:
            self.wrong += 1
        seen = self.runs.get(pid)
        if seen is None:
            self.runs[pid] = [1, run]
        else:
            seen[0] += 1
            if run > seen[1]:
                seen[1] = run
        self.done += 1

    def fail(self, n, error):
        self.failed += n
        if self.first_error is None:
            self.first_error = repr(error)

    def unseen_runs(self):
        """Runs whose result never came back: each is a task that ran twice."""
        return sum(high - seen for seen, high in self.runs.values())


# ---------------------------------------------------------------- sampling

FIELDS = ["seconds", "tasks", "client_rss", "driver_rss", "executors", "executor_rss_mean",
          "executor_rss_max", "client_cpu", "driver_cpu", "executors_cpu"]


def _rss_and_cpu(process):
    """(RSS, CPU seconds so far) of a psutil process; Nones once it is gone."""
    import psutil
    try:
        with process.oneshot():
            times = process.cpu_times()
            return process.memory_info().rss, times.user + times.system
    except psutil.Error:
        return None, None


def cluster_processes(driver):
    """[the driver's executor processes] (psutil processes)."""
    import psutil
    found = []
    try:
        children = driver.children()
    except psutil.Error:
        return found
    for child in children:
        try:
            if "zsched.executor" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            pass
    return found


def sample(driver, executors, tally, t0):
    """One row of FIELDS: the RSS and CPU seconds so far of this process, the driver and
    its ``executors`` (together), now."""
    import psutil
    found = [m for m in map(_rss_and_cpu, executors) if m[0] is not None]
    sizes = [rss for rss, _ in found]
    (client_rss, client_cpu), (driver_rss, driver_cpu) = _rss_and_cpu(psutil.Process()), _rss_and_cpu(driver)
    return {"seconds": round(time.monotonic() - t0, 3), "tasks": tally.done,
            "client_rss": client_rss, "driver_rss": driver_rss, "executors": len(sizes),
            "executor_rss_mean": int(statistics.fmean(sizes)) if sizes else None,
            "executor_rss_max": max(sizes) if sizes else None,
            "client_cpu": _round(client_cpu), "driver_cpu": _round(driver_cpu),
            "executors_cpu": _round(sum(cpu for _, cpu in found)) if found else None}


def _round(seconds):
    return None if seconds is None else round(seconds, 3)


class Sampler(threading.Thread):
    """Samples every ``interval`` seconds into ``rows``, and into ``csv_path`` as it goes."""

    def __init__(self, driver_pid, tally, interval, csv_path, t0, progress=None):
        super().__init__(name="soak-sampler", daemon=True)
        import psutil
        self.driver = psutil.Process(driver_pid)
        self.seen = {driver_pid: self.driver}  # every process of the cluster sampled
        self.tally, self.interval, self.t0, self.progress = tally, interval, t0, progress
        self.rows = []
        self._file = open(csv_path, "w", newline="")  # closed by run()
        self._writer = csv.DictWriter(self._file, FIELDS)
        self._writer.writeheader()
        self._stop_event = threading.Event()
        self._lock = threading.Lock()

    def run(self):
        try:
            self.take()
            while not self._stop_event.wait(self.interval):
                self.take()
            self.take()
        finally:
            with self._lock:
                self._file.close()

    def take(self):
        """One sample, now; the row."""
        executors = cluster_processes(self.driver)
        row = sample(self.driver, executors, self.tally, self.t0)
        with self._lock:
            self.seen.update((p.pid, p) for p in executors)
            self.rows.append(row)
            self._writer.writerow(row)
            self._file.flush()
        if self.progress:
            self.progress(row)
        return row

    def stop(self):
        self._stop_event.set()
        self.join()


# ---------------------------------------------------------------- waves

class Waves:
    """Waves of ``work`` tasks, ``depth`` in flight at once, alternately by ``submit`` and
    by ``map`` (one task per call) when ``via`` is "both"."""

    def __init__(self, client, tally, size, via="both", depth=2, timeout=300):
        self.client, self.tally, self.size, self.depth, self.timeout = client, tally, size, depth, timeout
        self.kinds = itertools.cycle(["submit", "map"] if via == "both" else [via])
        self.next_x = 0
        self.in_flight = collections.deque()

    def submit_one(self):
        start, n = self.next_x, self.size
        self.next_x += n
        xs = range(start, start + n)
        if next(self.kinds) == "submit":
            handle = [self.client.submit(work, x) for x in xs]
        else:
            handle = self.client.map(work, xs, chunksize=1, timeout=self.timeout)
        self.in_flight.append((xs, handle))
        if len(self.in_flight) >= self.depth:
            self.collect_one()

    def collect_one(self):
        xs, handle = self.in_flight.popleft()
        if isinstance(handle, list):
            self._collect_futures(xs, handle)
        else:
            self._collect_map(xs, handle)

    def _collect_futures(self, xs, futures):
        import concurrent.futures
        done, pending = concurrent.futures.wait(futures, self.timeout)
        if pending:
            raise Stall(f"{len(pending)} of a wave's {len(futures)} tasks not done in {self.timeout} s")
        for x, future in zip(xs, futures):
            error = future.exception()
            if error is None:
                self.tally.take(x, future.result())
            else:
                self.tally.fail(1, error)

    def _collect_map(self, xs, results):
        import concurrent.futures
        taken = 0
        try:
            for x, result in zip(xs, results):
                self.tally.take(x, result)
                taken += 1
        except concurrent.futures.TimeoutError:
            raise Stall(f"a map's results not done in {self.timeout} s") from None
        except Exception as error:
            self.tally.fail(len(xs) - taken, error)

    def drain(self):
        while self.in_flight:
            self.collect_one()


# ---------------------------------------------------------------- the run

def soak(tasks, *, min_seconds=0.0, wave=20_000, warmup_waves=2, via="both", executors=2,
         cores=1, transport="pipes", sample_interval=5.0, csv_path="soak.csv", conf=None,
         progress=None, timeout=300):
    """Run at least ``tasks`` tasks (the warm-up's waves among them), and for at least
    ``min_seconds``; the report (a dict)."""
    import zsched
    tally = Tally()
    report = {"tasks_wanted": tasks, "wave": wave, "via": via, "executors": executors,
              "cores": cores, "transport": transport, "csv": csv_path}
    t0 = time.monotonic()
    with zsched.LocalCluster(n_executors=executors, cores_per_executor=cores, conf=conf or {}) as cluster:
        client = (cluster.client() if transport == "pipes" else
                  zsched.Client(cluster.address, secret_file=cluster.client_credential()))
        sampler = Sampler(cluster.driver_pid, tally, sample_interval, csv_path, t0, progress)
        sampler.start()
        try:
            waves = Waves(client, tally, wave, via, timeout=timeout)
            for _ in range(warmup_waves):
                waves.submit_one()
            waves.drain()
            report["warm"] = sampler.take()
            while waves.next_x < tasks or time.monotonic() - t0 < min_seconds:
                waves.submit_one()
            waves.drain()
            report["end"] = sampler.take()
            report["status"] = client.status()
        finally:
            sampler.stop()
            client.shutdown(cancel_futures=True)
    report["left_running"] = still_running(sampler.seen.values(), 15)
    report.update(_outcome(tally, waves.next_x, sampler.rows))
    return report


def still_running(processes, grace):
    """[(pid, command line)] of ``processes`` (psutil) still running after ``grace`` seconds."""
    import psutil
    deadline = time.monotonic() + grace
    while True:
        alive = []
        for process in processes:
            try:
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    alive.append((process.pid, " ".join(process.cmdline())))
            except psutil.Error:
                pass
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.1)


def _outcome(tally, submitted, rows):
    return {"submitted": submitted, "done": tally.done, "wrong": tally.wrong,
            "failed": tally.failed, "first_error": tally.first_error,
            "lost": submitted - tally.done - tally.failed, "ran_twice": tally.unseen_runs(),
            "executor_processes": len(tally.runs), "rows": rows}


def rates(rows, window, since=0.0):
    """Tasks per minute in each whole ``window`` seconds from ``since`` on, the tasks done
    at each border interpolated between samples."""
    points = [(r["seconds"], r["tasks"]) for r in rows]

    def done_at(t):
        for (t1, n1), (t2, n2) in zip(points, points[1:]):
            if t1 <= t <= t2:
                return n1 + (n2 - n1) * (t - t1) / (t2 - t1) if t2 > t1 else n2
        return None

    found, start = [], since
    while points and start + window <= points[-1][0]:
        a, b = done_at(start), done_at(start + window)
        if a is not None and b is not None:
            found.append((b - a) * 60.0 / window)
        start += window
    return found
