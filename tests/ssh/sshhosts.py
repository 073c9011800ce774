"""Simulated remote hosts for the SSH cluster tests: Linux network namespaces, each with
its own sshd.

Topology of ``SSHHosts(n)`` (one test run; names carry the run's pid, ``zs{pid}``)::

    root namespace (the test process, the driver)          namespace zs{pid}h{k} (host k)
    10.250.k.1/24 on veth zs{pid}h{k}  <------------------>  eth0 10.250.k.2/24, lo up
                                                             default route via 10.250.k.1
                                                             sshd on 10.250.k.2:22

    10.250.0.0/16 (lowest priority) -> veth zs{pid}s0, whose peer stays down: a sink

Host k is reached from the root namespace at 10.250.k.2. Every packet a host sends to an
address outside its /24 goes to the root namespace, so a process on any host reaches every
address of the root namespace (each 10.250.*.1, also another host's gateway): a driver
listening on 0.0.0.0 is reached at any gateway address. It is not reached by the machine's
hostname, which may resolve to 127.0.0.1, the host's own loopback. Hosts do not reach each
other (the root namespace does not forward, unless the machine has ip_forward on).

The sink silently drops whatever the root namespace sends into 10.250.0.0/16 with no host
behind it: an address with no host, or a partitioned host. Without it such packets would
follow the machine's default route out, where something may even answer.

Addresses are fixed, so one test run at a time per machine. sshd authorizes only root, by
a key made for the run; ``ssh_options`` log a client in without prompts.
"""
import dataclasses
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

SSHD = "/usr/sbin/sshd"
RUN_MARK = "ZSCHED_TEST_RUN"
NAME = re.compile(r"^zs(\d+)[hs]\d+")


class HostsUnavailable(RuntimeError):
    """This machine cannot make the hosts: not root, a tool missing, no namespaces."""


@dataclasses.dataclass
class Host:
    name: str        # what a client connects to: the address
    address: str     # 10.250.k.2, inside the namespace
    gateway: str     # 10.250.k.1, the root namespace's end of the link
    namespace: str   # for `ip netns exec`
    link: str        # the root namespace's end of the veth pair
    log_file: str    # sshd's log (VERBOSE)


def run(*args, check=True):
    return subprocess.run(args, capture_output=True, text=True, check=check,
                          stdin=subprocess.DEVNULL, timeout=60)


def run_or_unavailable(*args):
    """``run`` for a step this machine may not allow (a namespace, a veth link)."""
    try:
        return run(*args)
    except subprocess.CalledProcessError as e:
        raise HostsUnavailable(f"cannot run {' '.join(args)}: {e.stderr.strip()}") from None


def unavailable():
    """Why this machine cannot make the hosts, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in (SSHD, shutil.which("ssh"), shutil.which("ssh-keygen"), shutil.which("ip")):
        if not tool or not os.access(tool, os.X_OK):
            return "needs openssh-server, openssh-client and iproute2 (sshd, ssh, ssh-keygen, ip)"
    return None


def can_connect(address, port, timeout=1.0):
    try:
        socket.create_connection((address, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _kill_namespace(namespace):
    """SIGKILL every process in the namespace, then delete it."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        pids = [int(p) for p in run("ip", "netns", "pids", namespace, check=False).stdout.split()]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    run("ip", "netns", "del", namespace, check=False)


def _our_names():
    """[(name, pid)] of the namespaces and of the links named like ours."""
    namespaces = run("ip", "netns", "list").stdout.splitlines()
    links = [line.split(": ")[1] for line in run("ip", "-o", "link", "show").stdout.splitlines()]
    return [(m.group(0), int(m.group(1))) for m in map(NAME.match, namespaces + links) if m]


def remove_stale():
    """Delete the namespaces, links and key directories of earlier runs whose process is
    gone; raise if a live other run holds some."""
    for name in os.listdir(tempfile.gettempdir()):
        if (m := re.match(r"zsched-ssh-(\d+)-", name)) and not _alive(int(m.group(1))):
            shutil.rmtree(os.path.join(tempfile.gettempdir(), name), ignore_errors=True)
    for name, pid in _our_names():
        if not _alive(pid):  # a namespace, or a link in this one
            _kill_namespace(name)
            run("ip", "link", "del", name, check=False)
    others = sorted({pid for _, pid in _our_names() if pid != os.getpid()})
    if others:
        raise RuntimeError(f"another test run (pid {others}) holds the 10.250.0.0/16 hosts")


def _sshd_version():
    match = re.search(r"OpenSSH_(\d+)\.(\d+)", run(SSHD, "-V", check=False).stderr)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


class SSHHosts:
    """``n`` hosts, each a network namespace with its own sshd; ``close()`` removes all."""

    unreachable_address = "10.250.99.2"
    """Nothing answers here: a connect times out (packets are silently dropped)."""

    closed_port_host = "10.250.1.2:2299"
    """Host 1, a port nobody listens on: a connect is refused at once."""

    def __init__(self, n=2):
        if not 1 <= n <= 50:
            raise ValueError("1 to 50 hosts")
        reason = unavailable()
        if reason:
            raise HostsUnavailable(reason)
        self.prefix = f"zs{os.getpid()}"
        self.hosts, self._sshds, self._closed = [], [], False
        self.tmpdir = tempfile.mkdtemp(prefix=f"zsched-ssh-{os.getpid()}-")  # mode 0700
        try:
            remove_stale()
            self._make_keys()
            self._make_sink()
            for k in range(1, n + 1):
                self._make_host(k)
            for host in self.hosts:
                self._start_sshd(host)
            for host in self.hosts:
                self._wait_reachable(host)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ making

    def _make_keys(self):
        self.host_key = os.path.join(self.tmpdir, "host_key")
        self.key_file = os.path.join(self.tmpdir, "id_ed25519")
        for path in (self.host_key, self.key_file):
            run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "zsched-test", "-f", path)
        shutil.copy(self.key_file + ".pub", os.path.join(self.tmpdir, "authorized_keys_root"))
        self.ssh_options = [
            f"IdentityFile={self.key_file}", "IdentitiesOnly=yes", "BatchMode=yes",
            "StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null", "LogLevel=ERROR",
            f"SendEnv={RUN_MARK}"]

    def _make_sink(self):
        sink, peer = f"{self.prefix}s0", f"{self.prefix}s1"
        run_or_unavailable("ip", "link", "add", sink, "type", "veth", "peer", "name", peer)
        run("ip", "link", "set", sink, "arp", "off", "up")
        run("ip", "route", "add", "10.250.0.0/16", "dev", sink, "metric", "4000")

    def _make_host(self, k):
        namespace = link = f"{self.prefix}h{k}"
        gateway, address = f"10.250.{k}.1", f"10.250.{k}.2"
        run_or_unavailable("ip", "netns", "add", namespace)
        host = Host(address, address, gateway, namespace, link,
                    os.path.join(self.tmpdir, f"sshd{k}.log"))
        self.hosts.append(host)  # from here on close() removes it
        peer = f"{self.prefix}p{k}"
        run("ip", "link", "add", link, "type", "veth", "peer", "name", peer, "netns", namespace)
        run("ip", "addr", "add", f"{gateway}/24", "dev", link)
        run("ip", "link", "set", link, "up")
        ns = ("ip", "-n", namespace)
        run(*ns, "link", "set", peer, "name", "eth0")
        run(*ns, "addr", "add", f"{address}/24", "dev", "eth0")
        run(*ns, "link", "set", "eth0", "up")
        run(*ns, "link", "set", "lo", "up")
        run(*ns, "route", "add", "default", "via", gateway)

    def _start_sshd(self, host):
        k = self.hosts.index(host) + 1
        config = os.path.join(self.tmpdir, f"sshd{k}.conf")
        lines = [
            f"ListenAddress {host.address}", "Port 22", f"HostKey {self.host_key}",
            f"AuthorizedKeysFile {self.tmpdir}/authorized_keys_%u",
            "PermitRootLogin prohibit-password", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
            f"PidFile {self.tmpdir}/sshd{k}.pid", f"AcceptEnv {RUN_MARK}", "LogLevel VERBOSE",
            "MaxStartups 100:30:200", "MaxSessions 100", "PrintMotd no", "PrintLastLog no"]
        if _sshd_version() >= (9, 8):
            lines.append("PerSourcePenalties no")  # refused logins must not block the tests
        with open(config, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        with open(host.log_file, "ab") as log:
            self._sshds.append(subprocess.Popen(
                ["ip", "netns", "exec", host.namespace, SSHD, "-D", "-e", "-f", config],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log))

    def _wait_reachable(self, host, timeout=15):
        deadline = time.monotonic() + timeout
        while not can_connect(host.address, 22):
            sshd = self._sshds[self.hosts.index(host)]
            if sshd.poll() is not None or time.monotonic() > deadline:
                with open(host.log_file) as f:
                    raise RuntimeError(f"sshd on {host.name} not reachable "
                                       f"(exit status {sshd.poll()}):\n{f.read()}")
            time.sleep(0.05)

    # ------------------------------------------------------------ using

    def _host(self, host):
        if isinstance(host, Host):
            return host
        for h in self.hosts:
            if host in (h.name, h.namespace):
                return h
        raise KeyError(f"no such host: {host}")

    def ssh(self, host, command, timeout=30, user="root", options=()):
        """Run ``command`` on ``host`` (a Host, or a name, possibly ``address:port``) with the
        system ssh client and ``ssh_options``: the CompletedProcess (text)."""
        name = host.name if isinstance(host, Host) else host
        address, _, port = name.partition(":")
        args = ["ssh", *(f"-o{o}" for o in [*self.ssh_options, *options]), "-p", port or "22",
                f"{user}@{address}", command]
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def exec_in(self, host, *args, **kwargs):
        """``ip netns exec``: run ``args`` on ``host`` directly, without ssh."""
        return subprocess.run(["ip", "netns", "exec", self._host(host).namespace, *args],
                              **{"capture_output": True, "text": True, "timeout": 60, **kwargs})

    def partition(self, host):
        """Cut ``host`` off: its link goes down, and every packet to or from it is
        silently dropped (connections time out, established ones are not reset)."""
        run("ip", "link", "set", self._host(host).link, "down")

    def heal(self, host, timeout=15):
        """Undo ``partition``; returns once the host's sshd is reachable again."""
        host = self._host(host)
        run("ip", "link", "set", host.link, "up")
        run("ip", "-n", host.namespace, "route", "replace", "default", "via", host.gateway)
        self._wait_reachable(host, timeout)

    def close(self):
        """Stop every process on the hosts, remove the namespaces, links and keys. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for sshd in self._sshds:
            sshd.terminate()
        for sshd in self._sshds:
            try:
                sshd.wait(10)
            except subprocess.TimeoutExpired:
                sshd.kill()
                sshd.wait()
        for host in self.hosts:
            _kill_namespace(host.namespace)
            run("ip", "link", "del", host.link, check=False)
        run("ip", "link", "del", f"{self.prefix}s0", check=False)
        shutil.rmtree(self.tmpdir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
