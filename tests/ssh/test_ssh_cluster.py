"""Executors started over SSH on two real hosts (network namespaces with their own sshd,
see sshhosts.py): tasks on every host, the allocation contract, failing hosts, the secret,
fate-sharing with the driver and the ssh client, and a host cut off from the network."""
import os
import re
import signal
import stat
import sys
import time

import psutil
import pytest

import zsched
from conftest import REPO, DriverProcess, wait_for

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def remote_python(tmp_path_factory):
    """The hosts' python: this interpreter, importing this checkout's zsched (the hosts
    share this machine's file system)."""
    path = tmp_path_factory.mktemp("remote") / "python"
    path.write_text(f"#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} \"$@\"\n")
    path.chmod(stat.S_IRWXU)
    return str(path)


def network_namespace(_=None):
    """Which host a task runs on: the inode of its network namespace."""
    import os
    return os.stat("/proc/self/ns/net").st_ino


def processes_of(app_id):
    """{pid: command line} of this application's ssh clients, remote ends and executors."""
    found = {}
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if app_id in cmdline and re.search(r"zsched\.(executor|cluster_managers\.ssh_remote)", cmdline):
            found[proc.info["pid"]] = cmdline
    return found


def wait_for_executors(client, n, timeout=60):
    wait_for(lambda: len(client.executor_ids()) >= n, timeout, message=f"{n} executors")
    return client.executor_ids()


def start_driver(ssh_hosts, remote_python, tmp_path, lines, *extra, options=()):
    hosts_file = tmp_path / "hosts"
    hosts_file.write_text("\n".join(lines) + "\n")
    ssh_options = [arg for o in (*options, *ssh_hosts.ssh_options) for arg in ("--ssh-option", o)]
    return DriverProcess("--hosts", str(hosts_file), "--secret-file", str(tmp_path / "secret"),
                         "--remote-python", remote_python, "--app-id", f"ssh-{tmp_path.name}",
                         *ssh_options, *extra)


def task_environment(_=None):
    import os
    return dict(os.environ)


def test_tasks_run_on_every_host_and_nothing_secret_reaches_the_hosts(ssh_hosts, remote_python):
    """The cluster secret never reaches a host; each executor's own key is on no command
    line and in no environment, neither its nor its remote end's nor its tasks'."""
    lines = [f"{host.name} 2" for host in ssh_hosts.hosts]
    with zsched.SSHCluster(lines, ssh_options=ssh_hosts.ssh_options, remote_python=remote_python,
                           wait_for_executors=4) as cluster:
        client = cluster.client()
        namespaces = set(client.map(network_namespace, range(400), chunksize=1))  # 400 tasks
        assert network_namespace() not in namespaces and len(namespaces) == 2
        status = client.status()
        assert sorted(e["host"] for e in status["executors"]) == sorted(
            h.name for h in ssh_hosts.hosts for _ in range(2))
        assert status["tasks"]["finished"] == 400
        with open(cluster.secret_file, "rb") as f:
            secret = f.read().strip()
        ours = processes_of(cluster.app_id)
        assert len(ours) == 12  # per executor: ssh client, remote end, executor
        for pid in ours:
            for name in ("cmdline", "environ"):
                with open(f"/proc/{pid}/{name}", "rb") as f:
                    seen = f.read()
                assert secret not in seen and b"zsched-credential" not in seen, (pid, name)
                assert b"ZSCHED_SECRET" not in seen and b"ZSCHED_CREDENTIAL" not in seen
        executors = [pid for pid, cmd in ours.items() if "-m zsched.executor" in cmd]
        assert len(executors) == 4
        for pid in executors:
            assert "--credential-fd" in ours[pid]
        environments = client.map(task_environment, range(8), chunksize=1)
        for environment in environments:
            assert not any(name.startswith(("ZSCHED_SECRET", "ZSCHED_CREDENTIAL")) for name in environment)
            assert not any("zsched-credential" in value or secret.decode() in value
                           for value in environment.values())
        app_id = cluster.app_id
    wait_for(lambda: not processes_of(app_id), 20, message="nothing left on the hosts")


def test_allocation_contract_on_ssh_executors(ssh_hosts, remote_python, tmp_path):
    h1, h2 = ssh_hosts.hosts
    driver = start_driver(ssh_hosts, remote_python, tmp_path, [f"{h1.name} 2", f"{h2.name} 1"])
    try:
        with zsched.Client(driver.url, secret_file=driver.secret_file) as client:
            wait_for_executors(client, 3)
            def on(host):
                return sorted(e["id"] for e in client.status()["executors"] if e["host"] == host.name)

            first_on_h1 = on(h1)
            assert len(first_on_h1) == 2 and len(on(h2)) == 1
            # beyond the hosts' capacity: accepted, waits, reported once
            assert client.request_total_executors(5) is True
            wait_for(lambda: "beyond the capacity of the hosts (3 executors): 2 wait for room"
                     in driver.stdout_so_far(), 10, message="the capacity report")
            allocation = client.status()["allocation"]
            assert (allocation["target"], allocation["capacity"]) == (5, 3)
            assert len(client.executor_ids()) == 3
            assert client.request_total_executors(3) is True
            # kill on host: its executors go (their processes too) and are replaced there
            assert client.kill_executors_on_host(h1.name) is True
            wait_for(lambda: len(on(h1)) == 2 and not set(on(h1)) & set(first_on_h1), 60,
                     message="replacements on h1")
            assert not any(f"--executor-id {i} " in cmd for i in first_on_h1
                           for cmd in processes_of(f"ssh-{tmp_path.name}").values())
            # decommission on host: not replaced; kill without replace lowers the target
            assert client.decommission_executors_on_host(h2.name) is True
            wait_for(lambda: on(h2) == [], 30, message="h2 decommissioned")
            victim = on(h1)[0]
            assert client.kill_executors([victim]) == [victim]
            wait_for(lambda: len(client.executor_ids()) == 1, 30, message="one executor left")
            assert client.status()["allocation"]["target"] == 1
            assert client.submit(network_namespace).result(30) != network_namespace()
    finally:
        assert driver.stop() == 0
    wait_for(lambda: not processes_of(f"ssh-{tmp_path.name}"), 20, message="nothing left on the hosts")


def test_failing_hosts_are_reported_and_retried_while_the_others_work(ssh_hosts, remote_python, tmp_path):
    h1, h2 = ssh_hosts.hosts
    lines = [f"{h1.name} 2", ssh_hosts.unreachable_address, ssh_hosts.closed_port_host,
             f"nobody@{h2.name}"]
    driver = start_driver(ssh_hosts, remote_python, tmp_path, lines, options=["ConnectTimeout=2"])
    try:
        with zsched.Client(driver.url, secret_file=driver.secret_file) as client:
            wait_for_executors(client, 2)
            assert sum(client.map(abs, range(-100, 100))) == 10000
            host = ssh_hosts.closed_port_host.split(":")[0]
            expected = [
                rf"host {host}: executor \d+ ended before registering: ssh to {host} failed: "
                rf"ssh: connect to host {host} port 2299: Connection refused \(next start there in 0.5 s\)",
                rf"host {host}: .*Connection refused \(next start there in 1.0 s\)",  # retried
                rf"host {h2.name}: executor \d+ ended before registering: ssh to nobody@{h2.name} "
                rf"failed: nobody@{h2.name}: Permission denied \(publickey\)",
                rf"host {ssh_hosts.unreachable_address}: executor \d+ ended before registering: "
                rf"ssh to {ssh_hosts.unreachable_address} failed: .*Connection timed out",
            ]
            for pattern in expected:
                wait_for(lambda: re.search(pattern, driver.stdout_so_far()), 30, message=pattern)
                # and in the log, which its own pipe brings, maybe a little later
                wait_for(lambda: re.search(pattern, driver.stderr_so_far()), 30,
                         message=f"{pattern} in the log")
            status = client.status()
            assert sorted(e["host"] for e in status["executors"]) == [h1.name, h1.name]
            assert set(status["allocation"]["backoff"]) <= {host, h2.name, ssh_hosts.unreachable_address}
    finally:
        assert driver.stop() == 0


def test_a_missing_remote_python_is_reported_with_the_host(ssh_hosts, tmp_path):
    h1 = ssh_hosts.hosts[0]
    driver = start_driver(ssh_hosts, "/nonexistent/python3", tmp_path, [h1.name])
    try:
        pattern = (rf"host {h1.name}: executor 1 ended before registering: /nonexistent/python3 "
                   rf"not found on {h1.name}: .*/nonexistent/python3.*(No such file|not found)")
        wait_for(lambda: re.search(pattern, driver.stdout_so_far()), 30, message=pattern)
    finally:
        assert driver.stop() == 0


def test_driver_sigkill_leaves_nothing_on_any_host(ssh_hosts, remote_python, tmp_path):
    lines = [f"{host.name} 2" for host in ssh_hosts.hosts]
    driver = start_driver(ssh_hosts, remote_python, tmp_path, lines)
    app_id = f"ssh-{tmp_path.name}"
    with zsched.Client(driver.url, secret_file=driver.secret_file) as client:
        wait_for_executors(client, 4)
        futures = [client.submit(time.sleep, 30) for _ in range(4)]  # busy executors
        wait_for(lambda: client.status()["tasks"]["running"] == 4, 30, message="4 running tasks")
        assert len(processes_of(app_id)) == 12
        driver.proc.kill()
        for future in futures:
            with pytest.raises(zsched.DriverConnectionError):
                future.result(30)
    wait_for(lambda: not processes_of(app_id), 20, message="nothing left on the hosts")
    driver.stop()


@pytest.mark.parametrize("ending", ["ssh client SIGKILLed", "remote end hung up"])
def test_an_ended_session_ends_its_executor_which_is_replaced(ssh_hosts, remote_python, tmp_path, ending):
    h1 = ssh_hosts.hosts[0]
    driver = start_driver(ssh_hosts, remote_python, tmp_path, [f"{h1.name} 2"])
    app_id = f"ssh-{tmp_path.name}"
    try:
        with zsched.Client(driver.url, secret_file=driver.secret_file) as client:
            wait_for_executors(client, 2)
            ssh_client = ending == "ssh client SIGKILLed"  # else: its remote end
            (pid,) = [pid for pid, cmd in processes_of(app_id).items() if "--executor-id 1 " in cmd
                      and "-m zsched.cluster_managers.ssh_remote" in cmd and cmd.startswith("ssh ") == ssh_client]
            os.kill(pid, signal.SIGKILL if ssh_client else signal.SIGHUP)
            wait_for(lambda: not any("--executor-id 1 " in cmd for cmd in processes_of(app_id).values()),
                     20, message="executor 1 gone from its host")
            wait_for(lambda: client.executor_ids() == ["2", "3"], 30, message="executor 1 replaced")
            assert [loss["id"] for loss in client.status()["losses"]] == ["1"]
    finally:
        assert driver.stop() == 0


def test_a_partitioned_host_is_lost_its_tasks_rerun_and_its_executors_exit(ssh_hosts, remote_python, tmp_path):
    h1, h2 = ssh_hosts.hosts
    driver = start_driver(ssh_hosts, remote_python, tmp_path, [f"{h1.name} 1", f"{h2.name} 1"],
                          "--conf", "zmq_heartbeat_interval=0.5", "--conf", "zmq_heartbeat_timeout=3",
                          options=["ConnectTimeout=2"])
    app_id = f"ssh-{tmp_path.name}"
    try:
        with zsched.Client(driver.url, secret_file=driver.secret_file) as client:
            wait_for_executors(client, 2)

            def where(i):
                import os
                import time
                time.sleep(0.05)
                return i, os.stat("/proc/self/ns/net").st_ino

            futures = [client.submit(where, i) for i in range(200)]
            wait_for(lambda: client.status()["tasks"]["finished"] >= 20, 30, message="tasks under way")
            ssh_hosts.partition(h1)
            try:
                results = [f.result(120) for f in futures]
                assert [i for i, _ in results] == list(range(200))
                losses = client.status()["losses"]
                assert [loss["host"] for loss in losses][:1] == [h1.name]
                assert "disconnected" in losses[0]["reason"] or "heartbeat" in losses[0]["reason"]
                # cut off from its driver, the executor on h1 ends by itself
                wait_for(lambda: not any(f"--hostname {h1.name} " in cmd and "-m zsched.executor" in cmd
                                         for cmd in processes_of(app_id).values()),
                         30, message="the cut-off executor gone")
            finally:
                ssh_hosts.heal(h1)
            # back on the network: a replacement starts there
            wait_for(lambda: h1.name in [e["host"] for e in client.status()["executors"]], 90,
                     message="a replacement on h1")
            assert client.submit(abs, -3).result(30) == 3
    finally:
        assert driver.stop() == 0
    wait_for(lambda: not processes_of(app_id), 20, message="nothing left on the hosts")


def test_executors_leave_a_driver_silent_past_the_heartbeat_timeout(ssh_hosts, remote_python, tmp_path):
    lines = [f"{host.name} 1" for host in ssh_hosts.hosts]
    driver = start_driver(ssh_hosts, remote_python, tmp_path, lines,
                          "--conf", "zmq_heartbeat_interval=0.5", "--conf", "zmq_heartbeat_timeout=2",
                          "--conf", "executor_heartbeat_interval=0.5", "--conf", "executor_heartbeat_timeout=3")
    app_id = f"ssh-{tmp_path.name}"
    with zsched.Client(driver.url, secret_file=driver.secret_file) as client:
        wait_for_executors(client, 2)
    driver.proc.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: not any("-m zsched.executor" in cmd for cmd in processes_of(app_id).values()),
                 30, message="the executors gone from the hosts")
    finally:
        driver.proc.send_signal(signal.SIGCONT)
    assert driver.stop() == 0
    wait_for(lambda: not processes_of(app_id), 20, message="nothing left on the hosts")


def test_dynamic_allocation_grows_and_shrinks_over_ssh(ssh_hosts, remote_python, tmp_path):
    lines = [f"{host.name} 2" for host in ssh_hosts.hosts]
    driver = start_driver(ssh_hosts, remote_python, tmp_path, lines, "--dynamic-allocation",
                          "--min-executors", "0", "--initial-executors", "0",
                          "--backlog-timeout", "0.2", "--executor-idle-timeout", "1")
    try:
        with zsched.Client(driver.url, secret_file=driver.secret_file) as client:
            assert client.executor_ids() == []
            futures = [client.submit(time.sleep, 0.3) for _ in range(40)]
            wait_for(lambda: len(client.executor_ids()) == 4, 60, message="grown to the 4 the hosts hold")
            assert {e["host"] for e in client.status()["executors"]} == {h.name for h in ssh_hosts.hosts}
            for future in futures:
                future.result(60)
            wait_for(lambda: client.executor_ids() == [], 60, message="shrunk to none when idle")
    finally:
        assert driver.stop() == 0


def hold_the_gil(seconds):
    """Sleep in C holding the GIL (PyDLL keeps it), SIGTERM blocked in this thread: the
    executor's Python handler of SIGTERM never runs meanwhile."""
    import ctypes
    import signal
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    ctypes.PyDLL(None).sleep(seconds)


def executor_holding_the_gil(client):
    """Submit ``hold_the_gil`` to the one executor: (its future, the executor's process)."""
    future = client.submit(hold_the_gil, 600)
    wait_for(lambda: client.status()["tasks"]["running"] == 1, 30, message="the task running")
    time.sleep(0.5)  # inside the C call by now
    [executor] = client.status()["executors"]
    return future, psutil.Process(executor["pid"])  # the hosts share this machine's processes


def test_a_killed_executor_whose_task_holds_the_gil_is_gone_within_the_grace(ssh_hosts, remote_python, tmp_path):
    """Its session closed, its remote end follows SIGTERM with SIGKILL after the grace."""
    from zsched.cluster_managers.base import KILL_GRACE
    h1 = ssh_hosts.hosts[0]
    driver = start_driver(ssh_hosts, remote_python, tmp_path, [f"{h1.name} 1"])
    app_id = f"ssh-{tmp_path.name}"
    client = zsched.Client(driver.url, secret_file=driver.secret_file)
    try:
        wait_for_executors(client, 1)
        _, process = executor_holding_the_gil(client)
        killed_at = time.monotonic()
        assert client.kill_executors(["1"], force=True) == ["1"]
        process.wait(KILL_GRACE + 30)
        assert time.monotonic() - killed_at < KILL_GRACE + 5
    finally:
        client.shutdown(wait=False, cancel_futures=True)  # the task, requeued, never ends
        assert driver.stop() == 0
    wait_for(lambda: not processes_of(app_id), 20, message="nothing left on the hosts")


def test_a_cut_off_executor_whose_task_holds_the_gil_is_ended_by_its_remote_end(ssh_hosts, remote_python, tmp_path):
    """Cut off, the executor cannot leave by itself (its task holds the GIL), and nothing
    tells its host that the session is gone: its remote end, hearing nothing on the session
    for the driver's executor_heartbeat_timeout, stops it."""
    from zsched.cluster_managers.base import KILL_GRACE
    timeout = 10.0
    h1 = ssh_hosts.hosts[0]
    driver = start_driver(ssh_hosts, remote_python, tmp_path, [f"{h1.name} 1"],
                          "--conf", f"executor_heartbeat_timeout={timeout:g}")
    app_id = f"ssh-{tmp_path.name}"
    client = zsched.Client(driver.url, secret_file=driver.secret_file)
    try:
        wait_for_executors(client, 1)
        _, process = executor_holding_the_gil(client)
        (remote_end,) = [pid for pid, cmd in processes_of(app_id).items()
                         if "-m zsched.cluster_managers.ssh_remote" in cmd and not cmd.startswith("ssh ")]
        assert f"--session-timeout {timeout:g} " in processes_of(app_id)[remote_end]
        ssh_hosts.partition(h1)
        cut_at = time.monotonic()
        try:
            process.wait(timeout + KILL_GRACE + 60)
            assert time.monotonic() - cut_at >= timeout - 2  # not before its time
            wait_for(lambda: not psutil.pid_exists(remote_end), 30, message="the remote end gone")
        finally:
            ssh_hosts.heal(h1)
    finally:
        client.shutdown(wait=False, cancel_futures=True)  # the task, run again, never ends
        assert driver.stop() == 0
    wait_for(lambda: not processes_of(app_id), 20, message="nothing left on the hosts")
