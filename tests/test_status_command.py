"""``zsched status`` (``zsched/cli.py``, ``zsched/status_report.py``): what a running
cluster is doing, as text and as JSON, from the installed command and ``python -m
zsched``, and a clear error with exit status 1 when the driver cannot be reached or
refuses the credential."""
import json
import os
import subprocess
import sys

import pytest

import zsched
from zsched.secret_file import create_secret_file
from zsched.status_report import report

from conftest import wait_for

WAIT = 60
INSTALLED = os.path.join(os.path.dirname(sys.executable), "zsched")


def run(*args, command=None):
    command = command or [sys.executable, "-m", "zsched"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=WAIT)


@pytest.fixture(scope="module")
def cluster():
    with zsched.LocalCluster(n_executors=2) as cluster, cluster.client() as client:
        assert list(client.map(abs, range(-30, 0), chunksize=1)) == list(range(30, 0, -1))
        yield cluster


@pytest.mark.parametrize("command", [None, [INSTALLED]], ids=["python -m zsched", "zsched"])
def test_the_status_of_a_running_cluster(cluster, command):
    out = run("status", cluster.address, "--secret-file", cluster.secret_file, command=command)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.startswith(f"zsched cluster at {cluster.address}")
    assert "127.0.0.1: 2 executor(s), 2 core(s)" in text
    assert text.count("  executor ") == 2 and "heartbeat" in text
    assert "done 30   failed 0" in text
    assert "target 2 executor(s) (static)" in text
    assert text.rstrip().endswith("======== Exclusions ========\nnone")


def test_json_for_scripts(cluster):
    out = run("status", cluster.address, "--secret-file", cluster.secret_file, "--json")
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    assert len(status["executors"]) == 2 and status["tasks"]["finished"] == 30
    assert status["allocation"]["target"] == 2 and status["url"] == cluster.address


def test_a_refused_credential_exits_1_saying_so(cluster, tmp_path):
    wrong = tmp_path / "wrong-secret"
    create_secret_file(str(wrong))
    out = run("status", cluster.address, "--secret-file", str(wrong), "--timeout", "5")
    assert out.returncode == 1 and out.stdout == ""
    assert "authentication failed (the driver does not hold the same secret)" in out.stderr
    out = run("status", cluster.address, "--insecure", "--timeout", "5")
    assert out.returncode == 1 and "authentication failed" in out.stderr


def test_an_unreachable_driver_exits_1_saying_so(tmp_path):
    out = run("status", "tcp://127.0.0.1:1", "--insecure", "--timeout", "1")
    assert out.returncode == 1 and "no answer within 1 s" in out.stderr
    out = run("status", "not-an-address", "--insecure")
    assert out.returncode == 1 and "not-an-address" in out.stderr
    out = run("status", "tcp://127.0.0.1:1", "--timeout", "0")
    assert out.returncode == 2 and "--timeout" in out.stderr


def test_usage_and_the_other_commands():
    assert run().returncode == 2 and "zsched status ADDRESS" in run().stdout
    assert run("--help").returncode == 0
    out = run("launch")
    assert out.returncode == 2 and "unknown command 'launch'" in out.stderr
    assert run("driver", "--help").returncode == 0
    assert run("executor", "--help").returncode == 0


@pytest.mark.unit
def test_the_report_shows_exclusions_and_a_cluster_without_a_manager():
    status = {
        "url": "tcp://10.0.0.1:7077", "app_id": "app-1", "dashboard_url": "http://h:8/?token=t",
        "executors": [
            {"id": "10", "host": "b", "cores": 4, "running": 3, "busy_threads": 3,
             "last_heartbeat_age": 1.25, "state": "active", "pid": 7},
            {"id": "2", "host": "a", "cores": 2, "running": 0, "last_heartbeat_age": None,
             "state": "excluded", "pid": 8},
            {"id": "9", "host": "b", "cores": 4, "running": 1, "state": "late", "pid": 9},
        ],
        "tasks": {"queued": 5, "running": 4, "finished": 100, "failed": 1},
        "allocation": None,
        "excluded": {"executors": [{"executor_id": "2", "host": "a", "reason": "2 failed "
                                    "task attempts", "seconds_left": 3590.4}],
                     "hosts": [{"host": "c", "reason": "2 executors excluded",
                                "seconds_left": 12.0}], "suspended": True},
    }
    text = report(status)
    lines = text.splitlines()
    assert lines[1] == "dashboard  http://h:8/?token=t"
    hosts = [line for line in lines if line[:1] in ("a", "b")]
    assert hosts == ["a: 1 executor(s), 2 core(s), 0 task(s) held",
                     "b: 2 executor(s), 8 core(s), 4 task(s) held"]
    executors = [line.split()[1] for line in lines if line.startswith("  executor ")]
    assert executors == ["2", "9", "10"]  # by host, then by id as a number
    assert "busy 3/4" in text and "heartbeat 1.2 s ago" in text
    assert "queued 5   running 4   done 100   failed 1" in text
    assert "no cluster manager" in text
    assert "executor 2 on a: 2 failed task attempts (3590 s left)" in text
    assert "host c: 2 executors excluded (12 s left)" in text
    assert "suspended" in text
    assert report({"executors": [], "tasks": {}}).count("(none registered)") == 1


def test_busy_cores_are_the_tasks_running_now(tmp_path):
    """The last heartbeat of an executor with task threads may be seconds old while its
    tasks run: its busy cores come from the driver's count."""
    gate = tmp_path / "go"
    with zsched.LocalCluster(n_executors=2, cores_per_executor=2, executor_heartbeat_interval=60,
                             executor_heartbeat_timeout=120) as cluster, cluster.client() as client:
        futures = [client.submit(_wait_for_file, str(gate)) for _ in range(5)]
        try:
            wait_for(lambda: [e["running"] for e in client.status()["executors"]].count(2) == 2,
                     timeout=WAIT, message="two tasks launched at each executor")
            out = run("status", cluster.address, "--secret-file", cluster.secret_file)
        finally:
            gate.touch()
        assert [f.result(WAIT) for f in futures] == [True] * 5
    assert out.returncode == 0, out.stderr
    busy = [line.split("busy ")[1].split()[0] for line in out.stdout.splitlines()
            if line.startswith("  executor ")]
    assert busy == ["2/2", "2/2"]


def _wait_for_file(path):
    import os
    import time
    while not os.path.exists(path):
        time.sleep(0.02)
    return True
