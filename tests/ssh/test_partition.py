"""A host cut off from the network in the middle of a map, then back: its executors are
declared lost, their tasks run elsewhere, the map completes with every result right and
no task run twice but for the runs the cut-off host made, the cut-off executors exit, and
nothing is left running on any host."""
import collections
import os
import subprocess
import sys

import pytest

from conftest import wait_for

# remote_python is a fixture, used as the test's argument
from .test_ssh_cluster import processes_of, remote_python, start_driver  # noqa: F401

import zsched

pytestmark = pytest.mark.timeout(300)

TASKS = 400


def run_and_record(i, runs_dir):
    """A task: sleeps a little, then records its run as the file ``i.pid.netns`` in
    ``runs_dir`` (the hosts share this machine's file system); returns the same facts."""
    import os
    import time
    time.sleep(0.05)
    pid, netns = os.getpid(), os.stat("/proc/self/ns/net").st_ino
    os.close(os.open(os.path.join(runs_dir, f"{i}.{pid}.{netns}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    return i, pid, netns


def network_namespace_of(ssh_hosts, host):
    result = ssh_hosts.exec_in(host, sys.executable, "-c", "import os; print(os.stat('/proc/self/ns/net').st_ino)")
    return int(result.stdout)


def runs_by_task(runs_dir):
    """{task: [(pid, netns) of each run]}."""
    runs = collections.defaultdict(list)
    for name in os.listdir(runs_dir):
        i, pid, netns = map(int, name.split("."))
        runs[i].append((pid, netns))
    return runs


def executor_ids_on(client, host):
    return sorted(e["id"] for e in client.status()["executors"] if e["host"] == host.name)


def executors_running(app_id, host, executor_ids):
    """The command lines of the executors ``executor_ids`` on ``host`` still running."""
    return [cmd for cmd in processes_of(app_id).values() if "-m zsched.executor" in cmd
            and f"--hostname {host.name} " in cmd
            and any(f"--executor-id {i} " in cmd for i in executor_ids)]


def only_sshd_on(ssh_hosts):
    """Whether every process on the hosts is an sshd (its listener, or a session ending)."""
    for host in ssh_hosts.hosts:
        for pid in subprocess.run(["ip", "netns", "pids", host.namespace], capture_output=True,
                                  text=True, check=True).stdout.split():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    command = f.read().split(b"\0")[0]
            except FileNotFoundError:
                continue
            if not os.path.basename(command).startswith(b"sshd"):
                return False
    return True


def test_a_host_cut_off_mid_map_then_back_loses_and_doubles_nothing(ssh_hosts, remote_python, tmp_path):  # noqa: F811
    h1, h2 = ssh_hosts.hosts
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    driver = start_driver(ssh_hosts, remote_python, tmp_path, [f"{h1.name} 2", f"{h2.name} 2"],
                          "--conf", "executor_heartbeat_interval=0.5", "--conf", "executor_heartbeat_timeout=3",
                          options=["ConnectTimeout=2"])
    app_id = f"ssh-{tmp_path.name}"
    cut_off_netns = network_namespace_of(ssh_hosts, h1)
    try:
        with zsched.Client(driver.url, secret_file=driver.secret_file) as client:
            wait_for(lambda: len(executor_ids_on(client, h1)) == 2 and len(executor_ids_on(client, h2)) == 2,
                     60, message="two executors on each host")
            cut_off = executor_ids_on(client, h1)
            results = client.map(run_and_record, range(TASKS), [str(runs_dir)] * TASKS,
                                 chunksize=1, timeout=240)
            wait_for(lambda: client.status()["tasks"]["finished"] >= TASKS // 10, 60, message="tasks under way")
            ssh_hosts.partition(h1)
            try:
                wait_for(lambda: set(cut_off) <= {loss["id"] for loss in client.status()["losses"]},
                         60, message="the cut-off executors declared lost")
            finally:
                ssh_hosts.heal(h1)
            results = list(results)
            # back on the network, the cut-off executors end (told they are unknown, or
            # having found their driver silent)
            wait_for(lambda: not executors_running(app_id, h1, cut_off), 60,
                     message="the cut-off executors gone from h1")
            status = client.status()
    finally:
        assert driver.stop() == 0
    wait_for(lambda: not processes_of(app_id), 30, message="nothing of the application left")
    wait_for(lambda: only_sshd_on(ssh_hosts), 30, message="nothing but sshd left on the hosts")

    assert [i for i, _, _ in results] == list(range(TASKS))
    assert status["tasks"]["finished"] == TASKS and status["tasks"]["failed"] == 0
    assert status["tasks"]["retried"] >= 1, "no task of the cut-off host ran again elsewhere"
    runs = runs_by_task(runs_dir)
    assert sorted(runs) == list(range(TASKS))
    for i, pid, netns in results:
        assert (pid, netns) in runs[i], f"task {i}: its result is from no run it recorded"
        elsewhere = [run for run in runs[i] if run[1] != cut_off_netns]
        assert len(elsewhere) <= 1, f"task {i} ran {len(elsewhere)} times on the executors kept: {runs[i]}"
    reran = [i for i, task_runs in runs.items() if len(task_runs) > 1]
    assert all(netns != cut_off_netns for _, _, netns in (results[i] for i in reran)), (
        "a task that ran again elsewhere has the cut-off host's result")
