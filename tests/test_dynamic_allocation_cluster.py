"""Dynamic allocation on a real local cluster: grows under backlog, shrinks when idle."""
import os
import signal
import threading
import time

import zsched
from conftest import wait_for


def work(x):
    time.sleep(0.05)
    return x


def test_scales_from_zero_to_max_under_backlog_and_back_to_min_when_idle():
    with zsched.LocalCluster(0, dynamic_allocation=True, min_executors=0, max_executors=3,
                             backlog_timeout=0.5, executor_idle_timeout=2,
                             allocation_batch_delay=0.2) as cluster:
        client = cluster.client()
        assert client.executor_ids() == []
        counts = []
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                counts.append(len(client.executor_ids()))
                time.sleep(0.1)
        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            assert list(client.map(work, range(300))) == list(range(300))
            wait_for(lambda: client.executor_ids() == [], timeout=30, message="back to 0 when idle")
        finally:
            stop.set()
            sampler.join()
        assert max(counts) == 3  # and back to 0 (wait_for above)
        reasons = [loss["reason"] for loss in client.status()["losses"]]
        # a decommissioned executor leaves cleanly: its goodbye, or its exit seen first
        assert reasons and all(r in ("decommissioned", "exited with code 0") for r in reasons), reasons
        client.shutdown()


def test_random_sigkills_never_push_the_count_above_max():
    with zsched.LocalCluster(2, dynamic_allocation=True, min_executors=1, max_executors=3,
                             backlog_timeout=0.3, executor_idle_timeout=30,
                             allocation_batch_delay=0.2) as cluster:
        client = cluster.client()
        futures = [client.submit(work, i) for i in range(600)]
        counts, kills = [], 0
        while not all(f.done() for f in futures):
            status = client.status()["executors"]
            counts.append(len(status))
            if status and kills < 4 and len(counts) % 10 == 0:
                os.kill(status[0]["pid"], signal.SIGKILL)
                kills += 1
            time.sleep(0.1)
        assert [f.result() for f in futures] == list(range(600))
        assert kills >= 1 and max(counts) <= 3
        client.shutdown()
