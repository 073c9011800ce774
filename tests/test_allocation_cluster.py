"""The allocation contract on a real local cluster: requests, kills, replacement."""
import os
import subprocess
import sys
import threading
import time

import pytest

import zsched
from conftest import wait_for
from zsched.cluster import LocalClusterManager
from zsched.config import Config
from zsched.driver import Driver, DriverOptions


def ids(client):
    return client.executor_ids()


def gate(path):
    while not os.path.exists(path):
        time.sleep(0.01)
    return 1


def settle(seconds=2.5):
    """Longer than two allocation rounds: anything the allocator would start, it has."""
    time.sleep(seconds)


def test_request_total_grows_and_a_lower_total_kills_nothing():
    with zsched.LocalCluster(1, allocation_batch_delay=0.2) as cluster:
        client = cluster.client()
        assert client.request_total_executors(3) is True
        wait_for(lambda: len(ids(client)) == 3, timeout=30, message="3 executors")
        assert client.request_total_executors(1) is True
        settle()
        assert ids(client) == ["1", "2", "3"]  # never killed to reach a lower target
        with pytest.raises(ValueError):
            client.request_total_executors(-1)
        client.shutdown()


def test_request_executors_adds_to_the_target():
    with zsched.LocalCluster(1, allocation_batch_delay=0.2) as cluster:
        client = cluster.client()
        assert client.request_executors(2) is True
        wait_for(lambda: len(ids(client)) == 3, timeout=30, message="3 executors")
        with pytest.raises(ValueError):
            client.request_executors(-1)
        client.shutdown()


def test_kill_without_replace_shrinks_and_with_replace_gets_a_new_id():
    with zsched.LocalCluster(3, allocation_batch_delay=0.2) as cluster:
        client = cluster.client()
        wait_for(lambda: len(ids(client)) == 3, timeout=30, message="3 executors")
        assert client.kill_executors(["1", "no-such"]) == ["1"]
        settle()
        assert ids(client) == ["2", "3"]
        assert client.kill_executors(["2"], replace=True) == ["2"]
        wait_for(lambda: ids(client) == ["3", "4"], timeout=30, message="a replacement, id 4")
        assert client.kill_executors(["2"]) == []  # already gone
        losses = [loss["reason"] for loss in client.status()["losses"]]
        assert losses == ["killed by the driver", "killed by the driver (replaced)"]
        client.shutdown()


def test_busy_executors_are_killed_only_with_force(tmp_path):
    release = str(tmp_path / "release")
    with zsched.LocalCluster(1, allocation_batch_delay=0.2) as cluster:
        client = cluster.client()
        future = client.submit(gate, release)
        wait_for(lambda: client.status()["tasks"]["running"] == 1, timeout=30, message="busy")
        assert client.kill_executors(["1"]) == []
        assert ids(client) == ["1"]
        assert client.kill_executors(["1"], force=True) == ["1"]
        assert ids(client) == []
        # its task waits for an executor: none comes (the target dropped) until asked
        settle()
        assert not future.done() and ids(client) == []
        client.request_total_executors(1)
        open(release, "w").close()
        assert future.result(60) == 1
        client.shutdown()


def test_kill_on_host_kills_every_executor_there_and_they_are_replaced():
    with zsched.LocalCluster(2, allocation_batch_delay=0.2) as cluster:
        client = cluster.client()
        wait_for(lambda: len(ids(client)) == 2, timeout=30, message="2 executors")
        assert client.kill_executors_on_host("no-such-host") is False
        assert client.kill_executors_on_host("127.0.0.1") is True
        wait_for(lambda: ids(client) == ["3", "4"], timeout=30, message="2 replacements")
        assert client.submit(pow, 2, 5).result(30) == 32
        client.shutdown()


def test_a_driver_without_cluster_manager_says_why_it_cannot_allocate(driver_factory):
    driver = driver_factory("--insecure")
    client = zsched.Client(driver.url, timeout=20)
    with pytest.raises(ValueError, match="no cluster manager"):
        client.request_total_executors(2)
    client.shutdown()


class NeverRegistering(LocalClusterManager):
    """Starts processes that never register (a broken executor command)."""

    def _start_one(self):
        executor_id = str(next(self._ids))
        self._processes[executor_id] = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)"], stdin=subprocess.DEVNULL)


def test_executors_that_never_register_are_given_up_and_retried_with_backoff_not_in_a_loop():
    manager = NeverRegistering()
    driver = Driver(DriverOptions(Config(executor_start_timeout=1, allocation_batch_delay=0.2),
                                  cluster_manager=manager, initial_executors=1))
    driver.start_thread()
    try:
        time.sleep(8)
        events = [text for _, text in driver.allocator.events]
    finally:
        driver.request_stop()
        driver.join(30)
    gave_up = [e for e in events if "did not register within executor_start_timeout (1 s): killed" in e]
    started = [e for e in events if e.startswith("started")]
    # start, 1 s timeout, then backoffs of 0.5, 1, 2, 4 s: a handful of tries in 8 s, not a loop
    assert 2 <= len(gave_up) <= 5, events
    assert len(started) <= len(gave_up) + 1, events
    assert "next start there in 1.0 s" in " ".join(events)


def test_interleaved_requests_and_kills_from_two_clients_keep_counts_consistent():
    with zsched.LocalCluster(2, allocation_batch_delay=0.2) as cluster:
        first, second = cluster.client(), cluster.client()
        wait_for(lambda: len(ids(first)) == 2, timeout=30, message="2 executors")
        seen = []

        def grow():
            for _ in range(3):
                assert first.request_executors(1)
                seen.append(len(ids(first)))
                time.sleep(0.3)

        def shrink():
            killed = 0
            while killed < 2:
                victims = ids(second)
                if victims:
                    killed += len(second.kill_executors(victims[:1]))
                seen.append(len(ids(second)))
                time.sleep(0.4)

        threads = [threading.Thread(target=grow), threading.Thread(target=shrink)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        # 2 + 3 requested - 2 killed without replacement
        assert first.status()["allocation"]["target"] == 3
        wait_for(lambda: len(ids(first)) == 3, timeout=30, message="3 executors")
        settle()
        assert len(ids(second)) == 3 and max(seen) <= 5
        client_ids = [int(i) for i in ids(first)]
        assert len(set(client_ids)) == 3
        first.shutdown()
        second.shutdown()
