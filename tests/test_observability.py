"""Seeing the cluster: ``status()`` figures, the dashboard's URL and token, ``/metrics``
against the work done, and progress bars; real drivers and executors on loopback."""
import io
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

import zsched
from conftest import BIN, DriverProcess, wait_for

pytestmark = pytest.mark.timeout(120)


def fail_once(marker):
    """Raises the first time (creating ``marker``), returns the second."""
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError("first attempt fails")
    return "second attempt"


def boom(i):
    raise ValueError(f"task {i} fails")


def get(url, token=None):
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, response.read().decode()


def metric_values(text):
    """{(name, frozenset(labels)): value} of a Prometheus text exposition."""
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


HEARTBEAT_TIMEOUT = 30.0  # the default executor_heartbeat_timeout, given explicitly


def test_status_figures_match_a_known_workload(tmp_path):
    with zsched.LocalCluster(2, executor_heartbeat_interval=0.2,
                             executor_heartbeat_timeout=HEARTBEAT_TIMEOUT) as cluster:
        client = cluster.client()
        ok = [client.submit(abs, -i) for i in range(50)]
        bad = [client.submit(boom, i) for i in range(7)]
        flaky = [client.options(retries=1).submit(fail_once, str(tmp_path / f"m{i}")) for i in range(3)]
        assert [f.result(30) for f in ok] == list(range(50))
        assert all(isinstance(f.exception(30), ValueError) for f in bad)
        assert [f.result(30) for f in flaky] == ["second attempt"] * 3
        wait_for(lambda: all("rss" in e for e in client.status()["executors"]), 10,
                 message="heartbeat metrics")
        status = client.status()
        assert status["tasks"] == {"submitted": 60, "finished": 53, "failed": 7, "cancelled": 0,
                                   "retried": 3, "queued": 0, "running": 0,
                                   "waiting_for_hosts": 0, "speculated": 0, "speculation_won": 0}
        executors = status["executors"]
        assert [e["id"] for e in executors] == ["1", "2"]
        assert sum(e["tasks_done"] for e in executors) == 53
        assert sum(e["tasks_failed"] for e in executors) == 10  # 7 failures and 3 first attempts
        for e in executors:
            assert e["host"] == "127.0.0.1" and e["cores"] == 1 and e["state"] == "active"
            assert e["running"] == 0 and e["free_slots"] >= 1
            assert e["rss"] > 10_000_000 and e["cpu"] >= 0 and e["busy_threads"] == 0
            # seconds of silence, less than would make it lost
            assert 0 <= e["last_heartbeat_age"] < HEARTBEAT_TIMEOUT
        assert status["losses"] == []
        assert 0 < status["loop_longest_pause"] < 60  # seconds, over the last minute
        # LocalCluster's driver runs in a process of its own: it keeps freed memory
        from zsched.fastpath import COMPILED
        if COMPILED:
            cache = status["memory_cache"]
            assert cache["installed"] and cache["limit"] == 1 << 30
            assert 0 <= cache["kept_bytes"] <= cache["limit"]
        else:
            assert status["memory_cache"] is None
        # a loss, with its reason
        os.kill(executors[0]["pid"], signal.SIGKILL)
        wait_for(lambda: client.status()["losses"], 20, message="the loss reported")
        (loss,) = client.status()["losses"]
        assert (loss["id"], loss["host"], loss["reason"]) == ("1", "127.0.0.1", "killed by signal SIGKILL")


def test_the_dashboard_prints_its_url_with_a_token_and_metrics_match_the_work(tmp_path):
    driver = DriverProcess("--local", "2", "--dashboard-port", "0", "--secret-file", str(tmp_path / "secret"))
    try:
        line = wait_for(lambda: re.search(r"zsched dashboard at (http://127\.0\.0\.1:\d+/)\?token=(\w+)\n",
                                          driver.stdout_so_far()), 10, message="the dashboard line")
        base, token = line.group(1), line.group(2)
        with pytest.raises(urllib.error.HTTPError) as refused:
            get(base + "metrics")
        assert refused.value.code == 401
        assert get(f"{base}?token={token}")[0] == 200
        with zsched.Client(driver.url, secret_file=driver.secret_file) as client:
            wait_for(lambda: len(client.executor_ids()) == 2, 30, message="2 executors")
            assert sum(client.map(abs, range(-100, 0), chunksize=1)) == 5050  # 100 tasks
            bad = client.submit(boom, 1)
            assert isinstance(bad.exception(30), ValueError)

            def settled():
                values = metric_values(get(base + "metrics", token)[1])
                return values if values[("zsched_tasks_total", frozenset({("state", "finished")}))] == 100 \
                    and values[("zsched_tasks_total", frozenset({("state", "failed")}))] == 1 else None

            values = wait_for(settled, 10, message="metrics of the work done")
        assert values[("zsched_tasks_total", frozenset({("state", "submitted")}))] == 101
        assert values[("zsched_queue_depth", frozenset())] == 0
        assert values[("zsched_executors", frozenset({("state", "active")}))] == 2
        assert values[("zsched_scheduling_latency_seconds_count", frozenset())] == 101
        assert values[("zsched_scheduling_latency_seconds_bucket", frozenset({("le", "+Inf")}))] == 101
        assert values[("zsched_received_bytes_total", frozenset())] > 0
        assert values[("zsched_sent_bytes_total", frozenset())] > 0
        assert values[("zsched_driver_loop_longest_pause_seconds", frozenset())] > 0
    finally:
        assert driver.stop() == 0


def test_progress_bar_counts_done_and_failed_and_returns_the_futures_in_order(capsys):
    with zsched.LocalCluster(2) as cluster:
        client = cluster.client()
        futures = [client.submit(abs, -i) for i in range(8)] + [client.submit(boom, i) for i in range(2)]
        out = io.StringIO()
        assert zsched.progress(futures, file=out) == futures
        assert "10/10" in out.getvalue() and "done=8, failed=2" in out.getvalue()
        assert list(client.map(abs, range(-50, 0), progress=True)) == list(range(50, 0, -1))
        seen = []
        wait_for(lambda: seen.append(capsys.readouterr().err) or "50/50" in "".join(seen), 10,
                 message="the map's bar at 50/50")
        # a large map runs chunks of calls: the bar still counts calls
        assert list(client.map(abs, range(-5000, 0), progress=True)) == list(range(5000, 0, -1))
        wait_for(lambda: seen.append(capsys.readouterr().err) or "5000/5000" in "".join(seen), 10,
                 message="the map's bar at 5000/5000")
        assert "done=5000, failed=0" in "".join(seen)
        assert "call/s" in "".join(seen) and "task/s" not in "".join(seen)  # it counts calls


def test_an_insecure_driver_serves_its_dashboard_without_a_token():
    driver = DriverProcess("--insecure", "--dashboard-port", "0")
    try:
        line = wait_for(lambda: re.search(r"zsched dashboard at (http://127\.0\.0\.1:\d+/)\n",
                                          driver.stdout_so_far()), 10, message="the dashboard line")
        status, body = get(line.group(1) + "api/status")
        assert status == 200 and '"executors": []' in body
    finally:
        assert driver.stop() == 0


def test_a_dashboard_port_in_use_is_a_clear_error(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, os.path.join(BIN, "driver"), "--insecure",
                                 "--dashboard-port", str(port)],
                                capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert "cannot listen on 127.0.0.1" in result.stderr and "Address already in use" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args, bound", [
    (["--host", "0.0.0.0"], "127.0.0.1"),  # the bus on every address, the dashboard not
    (["--host", "0.0.0.0", "--dashboard-host", "0.0.0.0"], "0.0.0.0"),
])
def test_the_dashboard_listens_on_its_own_host(args, bound):
    import psutil
    driver = DriverProcess("--insecure", "--dashboard-port", "0", *args)
    try:
        line = wait_for(lambda: re.search(r"zsched dashboard at http://[^:/]+:(\d+)/\n",
                                          driver.stdout_so_far()), 10, message="the dashboard line")
        port = int(line.group(1))
        process = psutil.Process(driver.proc.pid)
        connections = getattr(process, "net_connections", None) or process.connections  # psutil < 6
        listening = [c.laddr.ip for c in connections("tcp")
                     if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
        assert listening == [bound]
        status, _ = get(f"http://127.0.0.1:{port}/api/status")
        assert status == 200
    finally:
        assert driver.stop() == 0
