"""zsched's systems for bench/throughput.py, with the adapter every system has: start(),
submit(fn, x) -> handle, wait_all(handles, timeout) -> results, map(fn, xs, timeout),
one(fn, x, timeout), close(); ``workers``: its task slots. Also the time a driver takes
to report a lost executor (``--detection``).
"""
import concurrent.futures
import os
import signal
import statistics
import time

from _common import Stall, about_machine, about_zsched, print_json


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


ZSCHED_SYSTEMS = [ZschedLocal, ZschedEmbedded]


def measure_detection(rounds):
    """How long a LocalCluster's driver takes to report a lost executor: SIGKILL (its pipes
    close) and SIGSTOP (found by heartbeats: executor_heartbeat_timeout over pipes)."""
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

