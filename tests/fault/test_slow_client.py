"""A remote client that stops reading for a while (its done-callback blocks the I/O
thread) while its results flow: it is not dropped, and every future completes once it
reads again. The driver's settings are the defaults."""
import threading
import time

import pytest

import zsched

pytestmark = pytest.mark.timeout(300)

N_TASKS = 100_000


def test_a_socket_client_blocked_for_20_s_while_its_results_flow_gets_every_one():
    with zsched.LocalCluster(2) as cluster:
        with zsched.Client(cluster.address, secret_file=cluster.secret_file) as client, \
                cluster.client() as watcher:
            blocked = threading.Event()
            first = client.submit(time.sleep, 1)

            def block(_):
                blocked.set()
                time.sleep(20)
            first.add_done_callback(block)
            futures = [client.submit(abs, -i) for i in range(N_TASKS)]
            assert blocked.wait(60)
            time.sleep(5)  # results flow meanwhile, up to the window; the rest waits
            clients = watcher.status()["clients"]
            assert len(clients) == 2
            # the window, and at most the one frame that crossed it (512 rows)
            assert all(c["results_in_flight"] <= zsched.protocol.RESULTS_WINDOW_ROWS + 512
                       for c in clients)
            assert [f.result(120) for f in futures] == list(range(N_TASKS))
            status = watcher.status()
            assert status["tasks"]["finished"] == N_TASKS + 1
            assert not any(c["behind"] for c in status["clients"])
