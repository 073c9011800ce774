"""The allocation contract on a real local cluster: requests, kills, replacement."""
import os
import time

import pytest

import zsched
from conftest import wait_for


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
