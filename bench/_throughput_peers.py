"""The peers that bench/throughput.py --compare measures zsched against, each with the
adapter of ``_throughput_zsched``: ProcessPoolExecutor, multiprocessing.Pool (one task per
call, and Pool.map with its own chunks), Dask distributed and Ray. A peer whose package does
not import raises NotInstalled when constructed.
"""
import concurrent.futures
import importlib
import multiprocessing
import time

from _common import Stall


class NotInstalled(Exception):
    """The system's package does not import."""


def import_peer(name):
    """The module ``name``; NotInstalled if it does not import."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise NotInstalled(str(exc)) from None


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


PEER_SYSTEMS = [ProcessPool, MpPool, MpPoolMap, DaskDistributed, Ray]
