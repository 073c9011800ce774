"""The allocation contract on a real local cluster: requests, kills, replacement."""
import itertools
import os
import re
import resource
import sys
import threading
import time

import pytest

import zsched
from conftest import wait_for
from zsched.cluster_managers import LocalClusterManager
from zsched.config import Config
from zsched.driver import Driver, DriverOptions


def ids(client):
    return client.executor_ids()


def gate(path):
    while not os.path.exists(path):
        time.sleep(0.01)
    return 1


BATCH_DELAY = 0.2  # these clusters' allocation_batch_delay: the allocator acts this often


def settle():
    """A check that nothing happens: a dozen allocation rounds pass, time for the allocator
    to start an executor it should not, and for that executor to register."""
    time.sleep(12 * BATCH_DELAY)


def test_request_total_grows_and_a_lower_total_kills_nothing():
    with zsched.LocalCluster(1, allocation_batch_delay=BATCH_DELAY) as cluster:
        client = cluster.client()
        assert client.request_total_executors(3) is True
        wait_for(lambda: len(ids(client)) == 3, timeout=30, message="3 executors")
        assert client.request_total_executors(1) is True
        settle()
        assert ids(client) == ["1", "2", "3"]  # never killed to reach a lower target
        with pytest.raises(ValueError):
            client.request_total_executors(-1)
        client.shutdown()


def test_a_requests_locality_is_in_the_status_and_a_bad_one_is_refused():
    """On one host, the locality changes nothing but what the status shows."""
    with zsched.LocalCluster(1, allocation_batch_delay=BATCH_DELAY) as cluster:
        client = cluster.client()
        assert client.request_total_executors(2, 5, {"node-b": 4, "node-c": 1}) is True
        wait_for(lambda: len(ids(client)) == 2, timeout=30, message="2 executors")
        allocation = client.status()["allocation"]
        assert allocation["locality_aware_tasks"] == 5
        assert allocation["host_to_local_task_count"] == {"node-b": 4, "node-c": 1}
        assert allocation["excluded_hosts"] == []
        with pytest.raises(ValueError, match=r"host_to_local_task_count\['node-b'\] must be a count"):
            client.request_total_executors(3, 1, {"node-b": -1})
        allocation = client.status()["allocation"]
        assert allocation["target"] == 2 and allocation["locality_aware_tasks"] == 5
        assert client.request_total_executors(2) is True  # a request without locality clears it
        allocation = client.status()["allocation"]
        assert (allocation["locality_aware_tasks"], allocation["host_to_local_task_count"]) == (0, {})
        client.shutdown()


def test_request_executors_adds_to_the_target():
    with zsched.LocalCluster(1, allocation_batch_delay=BATCH_DELAY) as cluster:
        client = cluster.client()
        assert client.request_executors(2) is True
        wait_for(lambda: len(ids(client)) == 3, timeout=30, message="3 executors")
        with pytest.raises(ValueError):
            client.request_executors(-1)
        client.shutdown()


def test_kill_without_replace_shrinks_and_with_replace_gets_a_new_id():
    with zsched.LocalCluster(3, allocation_batch_delay=BATCH_DELAY) as cluster:
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
    with zsched.LocalCluster(1, allocation_batch_delay=BATCH_DELAY) as cluster:
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
    with zsched.LocalCluster(2, allocation_batch_delay=BATCH_DELAY) as cluster:
        client = cluster.client()
        wait_for(lambda: len(ids(client)) == 2, timeout=30, message="2 executors")
        assert client.kill_executors_on_host("no-such-host") is False
        assert client.kill_executors_on_host("127.0.0.1") is True
        wait_for(lambda: ids(client) == ["3", "4"], timeout=30, message="2 replacements")
        assert client.submit(pow, 2, 5).result(30) == 32
        client.shutdown()


def test_a_driver_without_cluster_manager_says_why_it_cannot_allocate(driver_factory):
    driver = driver_factory("--insecure")
    client = zsched.Client(driver.url, insecure=True, timeout=20)
    with pytest.raises(ValueError, match="no cluster manager"):
        client.request_total_executors(2)
    client.shutdown()


class NeverRegistering(LocalClusterManager):
    """Starts processes that never register (a broken executor command)."""

    def _start_one(self):
        executor_id = str(next(self._ids))
        self._launch(executor_id, [sys.executable, "-c", "import time; time.sleep(600)"])


def test_executors_that_never_register_are_given_up_and_retried_with_backoff_not_in_a_loop():
    manager = NeverRegistering()
    config = Config(executor_start_timeout=1, allocation_batch_delay=BATCH_DELAY)
    driver = Driver(DriverOptions(config, cluster_manager=manager, initial_executors=1))
    driver.start_thread()

    def given_up(events):
        return [(at, text) for at, text in events
                if "did not register within executor_start_timeout (1 s): killed" in text]

    def three_given_up():
        events = list(driver.allocator.events)  # a copy at once: the driver's thread appends
        return len(given_up(events)) >= 3 and events
    try:
        events = wait_for(three_given_up, timeout=60, message="three starts given up")
    finally:
        driver.request_stop()
        driver.join(30)
    failures = given_up(events)
    starts = [text for _, text in events if text.startswith("started")]
    # each start given up after the start timeout, the next one tried after a backoff that
    # doubles from 0.5 s: failures come further and further apart, not in a loop
    backoffs = [float(re.search(r"next start there in ([\d.]+) s", text).group(1))
                for _, text in failures]
    assert backoffs[:3] == [0.5, 1.0, 2.0], events
    assert len(starts) <= len(failures) + 1, events
    for (before, _), (after, _), backoff in zip(failures, failures[1:], backoffs):
        # apart by the backoff and the start timeout at least (less a round of the
        # allocator: within their rounds, the two were timed at different moments)
        assert after - before >= backoff + config.executor_start_timeout - config.allocation_batch_delay, \
            events


class CannotStart(LocalClusterManager):
    """Its executors' command does not exist: every start fails in the manager's thread."""

    def _start_one(self):
        self._launch(str(next(self._ids)), ["/nonexistent/zsched-executor"])


def test_an_executor_that_cannot_start_is_a_failed_start_retried_with_backoff():
    config = Config(allocation_batch_delay=BATCH_DELAY)
    driver = Driver(DriverOptions(config, cluster_manager=CannotStart(), initial_executors=1))
    driver.start_thread()

    def two_failed():
        texts = [text for _, text in list(driver.allocator.events) if "could not start" in text]
        return len(texts) >= 2 and texts
    try:
        texts = wait_for(two_failed, timeout=60, message="two failed starts")
        assert driver.is_running() and driver.allocator.executor_start_failures >= 2
    finally:
        driver.request_stop()
        driver.join(30)
    assert texts[:2] == [
        f"host 127.0.0.1: executor {i} ended before registering: could not start: FileNotFoundError: "
        f"[Errno 2] No such file or directory: '/nonexistent/zsched-executor' (next start there in {delay} s)"
        for i, delay in ((1, "0.5"), (2, "1.0"))]


def test_interleaved_requests_and_kills_from_two_clients_keep_counts_consistent():
    with zsched.LocalCluster(2, allocation_batch_delay=BATCH_DELAY) as cluster:
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


def lowest_free_descriptor(pid):
    used = {int(fd) for fd in os.listdir(f"/proc/{pid}/fd")}
    return next(fd for fd in itertools.count() if fd not in used)


def test_a_driver_out_of_descriptors_serves_on_and_starts_executors_once_it_can(driver_factory):
    """Starting executors fails with EMFILE: each failure is a failed start, logged and
    backed off (not one line per round), while the driver answers; once it has
    descriptors again, executors start and every task completes."""
    driver = driver_factory("--insecure", "--local", "0", "--conf", f"allocation_batch_delay={BATCH_DELAY}")
    client = zsched.Client(driver.url, insecure=True, timeout=60)
    pid = driver.proc.pid
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    limit = lowest_free_descriptor(pid)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, hard))  # no new descriptor
    try:
        futures = [client.submit(pow, 2, i) for i in range(20)]
        assert client.request_total_executors(2) is True
        failures = "could not start executors: OSError: [Errno 24] Too many open files"
        wait_for(lambda: failures in driver.stderr_so_far(), timeout=30, message="a failed start logged")
        began, backing_off = time.monotonic(), []
        while time.monotonic() - began < 3.5:  # the backoff grows: 0.5, 1, 2 s...
            status = client.status()  # the driver serves meanwhile
            assert status["executors"] == [] and status["tasks"]["queued"] == 20
            backing_off.append(bool(status["allocation"]["backoff"]))
            time.sleep(0.1)
        assert sum(backing_off) > len(backing_off) / 2
        assert client.status()["allocation"]["start_failures"] >= 2  # counted
        logged = driver.stderr_so_far().count(failures)
        # a line per backoff, not one per allocation round (every BATCH_DELAY)
        assert 2 <= logged < 3.5 / BATCH_DELAY / 2, driver.stderr_so_far()
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
    assert [f.result(120) for f in futures] == [2 ** i for i in range(20)]
    wait_for(lambda: len(ids(client)) == 2, timeout=60, message="2 executors")
    assert driver.proc.poll() is None
    client.shutdown()
