"""The simulated SSH hosts themselves: logins, environment, addresses, reachability of the
root namespace, refusals, failures to connect, partitions."""
import os
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from .sshhosts import RUN_MARK, remove_stale

pytestmark = pytest.mark.timeout(120)

FAST_FAIL = ["ConnectTimeout=3"]


@pytest.fixture
def run_mark(monkeypatch):
    if not os.environ.get(RUN_MARK):
        monkeypatch.setenv(RUN_MARK, uuid.uuid4().hex)
    return os.environ[RUN_MARK]


def test_ssh_runs_commands_on_each_host(ssh_hosts):
    assert len(ssh_hosts.hosts) == 2
    for host in ssh_hosts.hosts:
        result = ssh_hosts.ssh(host, "hostname && echo ok")
        assert result.returncode == 0, result.stderr
        assert result.stdout.split()[-1] == "ok"
        # the client side, as a cluster manager runs it
        ssh = subprocess.run(["ssh", *(f"-o{o}" for o in ssh_hosts.ssh_options),
                              f"root@{host.name}", "id -u"],
                             capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        assert (ssh.returncode, ssh.stdout.strip()) == (0, "0"), ssh.stderr


def test_remote_command_sees_the_run_mark(ssh_hosts, run_mark):
    for host in ssh_hosts.hosts:
        result = ssh_hosts.ssh(host, f"echo ${RUN_MARK}")
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == run_mark


def test_each_host_has_its_own_address(ssh_hosts):
    for k, host in enumerate(ssh_hosts.hosts, 1):
        assert (host.address, host.gateway) == (f"10.250.{k}.2", f"10.250.{k}.1")
        inside = ssh_hosts.exec_in(host, "ip", "-4", "-o", "addr", "show")
        addresses = {line.split()[3] for line in inside.stdout.splitlines()}
        assert addresses == {"127.0.0.1/8", f"{host.address}/24"}
        over_ssh = ssh_hosts.ssh(host, "ip -4 -o addr show dev eth0")
        assert f"inet {host.address}/24" in over_ssh.stdout, over_ssh.stderr


CONNECT = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
print(s.getsockname()[0], s.recv(100).decode())
"""


def test_hosts_reach_the_root_namespace_at_any_gateway(ssh_hosts):
    """A listener on 0.0.0.0 here (the driver's case) is reached from every host, at its
    own gateway and at another host's."""
    server = socket.create_server(("0.0.0.0", 0))
    server.settimeout(60)
    port = server.getsockname()[1]
    gateways = [h.gateway for h in ssh_hosts.hosts]
    accepted = []

    def serve():
        for _ in range(len(ssh_hosts.hosts) * len(gateways)):
            conn, peer = server.accept()
            accepted.append(peer[0])
            conn.sendall(b"hello")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        for host in ssh_hosts.hosts:
            for gateway in gateways:
                result = ssh_hosts.exec_in(host, sys.executable, "-c", CONNECT, gateway, str(port))
                assert result.returncode == 0, result.stderr
                assert result.stdout.split() == [host.address, "hello"]
        thread.join(30)
    finally:
        server.close()
    assert sorted(accepted) == sorted(h.address for h in ssh_hosts.hosts for _ in gateways)


def test_only_root_is_authorized(ssh_hosts):
    result = ssh_hosts.ssh(ssh_hosts.hosts[0], "echo ok", user="nobody")
    assert result.returncode == 255
    assert "Permission denied (publickey)" in result.stderr


@pytest.mark.parametrize("target", ["unreachable_address", "closed_port_host"])
def test_connecting_nowhere_fails_soon(ssh_hosts, target):
    result = ssh_hosts.ssh(getattr(ssh_hosts, target), "echo ok", options=FAST_FAIL)
    assert result.returncode == 255
    expected = "timed out" if target == "unreachable_address" else "Connection refused"
    assert expected in result.stderr


def test_partition_cuts_one_host_and_heal_restores_it(ssh_hosts):
    cut, other = ssh_hosts.hosts
    ssh_hosts.partition(cut)
    try:
        result = ssh_hosts.ssh(cut, "echo ok", options=FAST_FAIL)
        assert result.returncode == 255
        assert "timed out" in result.stderr
        assert ssh_hosts.ssh(other, "echo ok", options=FAST_FAIL).stdout == "ok\n"
    finally:
        ssh_hosts.heal(cut)
    result = ssh_hosts.ssh(cut, "echo ok", options=FAST_FAIL)
    assert (result.returncode, result.stdout) == (0, "ok\n"), result.stderr


def test_a_connection_outlives_a_short_partition(ssh_hosts):
    """Nothing is reset: a session open across a partition goes on after heal."""
    host = ssh_hosts.hosts[0]
    args = ["ssh", *(f"-o{o}" for o in ssh_hosts.ssh_options), f"root@{host.name}",
            "echo started; read line; echo got $line"]
    session = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert session.stdout.readline() == "started\n"
        ssh_hosts.partition(host)
        session.stdin.write("through\n")
        session.stdin.flush()
        # a check that nothing happens: the partition lasts a while (TCP retransmits what
        # was written, unanswered), and the session does not end
        time.sleep(2)
        assert session.poll() is None
        ssh_hosts.heal(host)
        out, err = session.communicate(timeout=60)
        assert (session.returncode, out) == (0, "got through\n"), err
    finally:
        ssh_hosts.heal(host)
        if session.poll() is None:
            session.kill()
            session.communicate()


def test_leftovers_of_a_dead_run_are_removed(ssh_hosts):
    dead = "zs9999999"  # above any pid_max: never a live process

    def ip(*args):
        return subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout

    ip("netns", "add", f"{dead}h1")
    ip("link", "add", f"{dead}s0", "type", "veth", "peer", "name", f"{dead}s1")
    remove_stale()
    assert dead not in ip("netns", "list") + ip("link")
    # and the live run's own hosts are untouched
    assert ssh_hosts.ssh(ssh_hosts.hosts[0], "echo ok").stdout == "ok\n"
