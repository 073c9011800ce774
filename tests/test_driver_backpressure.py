"""Results on their way to clients (``driver/clients.py``): a window per client, results
held on the driver past it, a client's tasks held past its backlog, and a client dropped
only when it is gone, its futures told why."""
import threading
import time

import pytest

import zsched
from zsched.errors import DriverConnectionError

from conftest import wait_for


def test_a_failed_hand_over_to_a_client_in_the_drivers_process_fails_its_futures_with_the_reason():
    with zsched.LocalCluster(1, in_process=True) as cluster:
        broken = cluster.client()
        assert broken._transport.kind == "in-process"

        def from_driver(msg):
            raise RuntimeError("no room for results")
        broken._futures.from_driver = from_driver
        futures = [broken.submit(abs, -i) for i in range(3)]
        for future in futures:
            with pytest.raises(DriverConnectionError, match=r"dropped this client: handing it \w+ "
                                                            r"failed .*no room for results"):
                future.result(30)
        with cluster.client() as other:  # the driver serves on
            assert other.submit(abs, -5).result(30) == 5


def payload(i):
    """A result of about 1 KiB, after a millisecond."""
    time.sleep(0.001)
    return i, b"r" * 1024


@pytest.mark.parametrize("over", ["socket", "pipes"])
def test_a_client_whose_callback_blocks_falls_behind_holds_its_tasks_then_gets_every_result(over):
    with zsched.LocalCluster(2, client_results_window="64KiB", client_results_backlog="256KiB") as cluster:
        if over == "socket":
            client = zsched.Client(cluster.address, secret_file=cluster.secret_file)
        else:
            client = cluster.client()
        assert client.transport == over
        with client, cluster.client() as watcher:
            unblock = threading.Event()
            first = client.submit(time.sleep, 2)
            first.add_done_callback(lambda f: unblock.wait(60))  # the I/O thread waits in it
            futures = [client.submit(payload, i) for i in range(N_RESULTS)]

            def behind():
                late = [c for c in watcher.status()["clients"] if c["behind"]]
                return late[0] if late else None
            # past its backlog, the client's queued tasks wait: the queue stops draining
            held = wait_for(behind, 60, message="the client behind on its results")
            assert held["results_held_bytes"] > 128 << 10
            # what was launched ends; nothing more is
            wait_for(lambda: watcher.status()["tasks"]["running"] == 0, 30, message="launched tasks ended")
            late = behind()
            assert late["tasks_held"] > 0
            time.sleep(1)
            assert behind()["tasks_held"] == late["tasks_held"]
            assert watcher.status()["tasks"]["running"] == 0
            assert watcher.submit(abs, -7).result(30) == 7  # other clients are served
            unblock.set()
            assert [f.result(120) for f in futures] == [payload(i) for i in range(N_RESULTS)]
            assert not any(c["behind"] for c in watcher.status()["clients"])


N_RESULTS = 3_000


def large_payload(i):
    """A result of 96 KiB, whose bytes travel apart (TaskData), after 10 ms."""
    time.sleep(0.01)
    return i, bytes([i % 256]) * (96 << 10)


@pytest.mark.parametrize("over", ["socket", "pipes"])
def test_large_results_count_in_the_window_and_hold_the_tasks_of_a_client_behind(over):
    with zsched.LocalCluster(2, client_results_window="64KiB", client_results_backlog="256KiB") as cluster:
        client = (zsched.Client(cluster.address, secret_file=cluster.secret_file)
                  if over == "socket" else cluster.client())
        with client, cluster.client() as watcher:
            unblock = threading.Event()
            first = client.submit(time.sleep, 0.5)
            first.add_done_callback(lambda f: unblock.wait(60))  # the I/O thread waits in it
            futures = [client.submit(large_payload, i) for i in range(200)]
            held = wait_for(lambda: [c for c in watcher.status()["clients"] if c["behind"]], 60,
                            message="the client behind on its results")[0]
            wait_for(lambda: watcher.status()["tasks"]["running"] == 0, 30, message="launched tasks ended")
            assert held["tasks_held"] > 0  # its queue stopped draining: the data it gets is bounded
            unblock.set()
            assert [f.result(120) for f in futures] == [large_payload(i) for i in range(200)]
            assert not any(c["behind"] for c in watcher.status()["clients"])
