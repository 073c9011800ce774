"""Executors on other hosts, started with the system OpenSSH client.

Each executor is one ``ssh`` process running ``zsched.cluster_managers.ssh_remote`` on its host, so
users' ``~/.ssh/config``, agents and ProxyJump apply. The executor's own credential (a key
pair the driver made for it alone) travels on the session's standard input (never on a
command line, in a file or in an environment), and that input stays open for the
executor's life: when it closes (the executor is killed, the driver stops or dies, the
ssh client dies, the connection drops) the remote end stops the executor. Whatever the
remote end prints (the executor's log, ssh's own errors) is forwarded to the driver's
standard error, prefixed with the host and executor, and its last lines give the reason
when a start fails: an unreachable host, a refused key, a missing remote python.
"""
import itertools
import logging
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections import Counter, deque

from .base import ClusterManager
from .local import describe_exit, environment_without_secrets, wait_all

log = logging.getLogger(__name__)

# the remote end (ssh_remote.py) prints this and how the executor ended, on its last line
EXIT_MARKER = "zsched ssh_remote: executor ended: "

# after the user's --ssh-option (ssh keeps an option's first value): never wait at a
# password prompt; a connection cut off ends the ssh client
DEFAULT_SSH_OPTIONS = ("BatchMode=yes", "ConnectTimeout=10", "ServerAliveInterval=5",
                       "ServerAliveCountMax=3")
KILL_GRACE = 5.0  # seconds from closing an executor's session to terminating its ssh client
_WILDCARDS = ("0.0.0.0", "*", "", "::")


def route_source_address(name):
    """The address of this machine that packets to ``name`` leave from (no packet is sent),
    or None if ``name`` does not resolve here (an alias of ~/.ssh/config, say)."""
    try:
        infos = socket.getaddrinfo(name, 9, type=socket.SOCK_DGRAM)
    except OSError:
        return None
    for family, kind, proto, _, address in infos:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.connect(address)
                return probe.getsockname()[0]
        except OSError:
            continue
    return None


class RemoteExecutor:
    """One executor's ssh process and what it printed."""

    def __init__(self, executor_id, host, process):
        self.executor_id = executor_id
        self.host = host
        self.process = process
        self.tail = deque(maxlen=20)   # its last lines of output
        self.ended_as = None           # how the executor ended, as its remote end said
        self.kill_at = None            # when to terminate the ssh client (after a kill)
        self.reader = threading.Thread(target=self._read_output, daemon=True,
                                       name=f"zsched-ssh-{executor_id}")
        self.reader.start()

    def _read_output(self):
        prefix = f"[{self.host.name} executor {self.executor_id}] "
        for raw in self.process.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            if line.startswith(EXIT_MARKER):
                self.ended_as = line[len(EXIT_MARKER):]
                continue
            if line.strip():
                self.tail.append(line.strip())
            try:
                sys.stderr.write(prefix + line + "\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
        self.process.stdout.close()

    def close_session(self):
        """End of input for the remote end: it stops the executor."""
        try:
            self.process.stdin.close()
        except OSError:
            pass

    def reason(self, remote_python):
        """How it ended, in words, once the ssh process has exited."""
        self.reader.join(0.2)  # its last words
        if self.ended_as is not None:
            return self.ended_as
        code = self.process.returncode
        last = self.tail[-1] if self.tail else ""
        if code == 255:
            return f"ssh to {self.host.destination} failed: {last or 'exit status 255'}"
        if code == 127:
            return f"{remote_python} not found on {self.host.name}: {last}"
        return f"{describe_exit(code)} on {self.host.name}" + (f": {last}" if last else "")


class SSHClusterManager(ClusterManager):
    """Executors on ``hosts`` (``hosts_file.Host``), at most ``host.executors`` on each,
    spread over the hosts with the most room."""

    def __init__(self, hosts, cores_per_executor=1, ssh_options=(), remote_python="python3",
                 driver_host="0.0.0.0", log_level=None, ssh_command="ssh"):
        if cores_per_executor < 1:
            raise ValueError(f"cores_per_executor must be >= 1, got {cores_per_executor}")
        if not hosts:
            raise ValueError("an SSH cluster needs at least one host")
        self.hosts = list(hosts)
        self.cores_per_executor = cores_per_executor
        self.ssh_options = list(ssh_options)
        self.remote_python = remote_python
        self.driver_host = driver_host
        self.log_level = log_level
        self.ssh_command = ssh_command
        self._urls = {}        # host name -> the driver URL executors there connect to
        self._ids = itertools.count(1)
        self._running = {}     # executor id -> RemoteExecutor, counted toward the target
        self._leaving = {}     # executor id -> RemoteExecutor, killed and not yet reaped

    def capacity(self):
        return sum(host.executors for host in self.hosts)

    def host_of(self, executor_id):
        remote = self._running.get(executor_id) or self._leaving.get(executor_id)
        return None if remote is None else remote.host.name

    # -- starting

    def request_total(self, n, avoid_hosts=()):
        """Have ``n`` executors, as far as the hosts have room; none on ``avoid_hosts``."""
        while len(self._running) < n:
            host = self._place(avoid_hosts)
            if host is None:
                return
            self._start_one(host)

    def _place(self, avoid_hosts):
        """The host with the most room left (executors still leaving take room), or None."""
        load = Counter(r.host for r in itertools.chain(self._running.values(), self._leaving.values()))
        room = {host: host.executors - load[host] for host in self.hosts
                if host.name not in avoid_hosts and load[host] < host.executors}
        return max(room, key=room.get) if room else None

    def driver_url_for(self, host):
        """The driver's URL as seen from ``host``: when the driver listens on every address,
        the one this machine reaches ``host`` from."""
        if self.driver_host not in _WILDCARDS:
            return self.driver_url
        if host.name not in self._urls:
            port = self.driver_url.rsplit(":", 1)[1]
            address = route_source_address(host.name) or socket.getfqdn()
            if ":" in address:
                address = f"[{address}]"
            self._urls[host.name] = f"tcp://{address}:{port}"
            log.info("executors on %s connect to %s", host.name, self._urls[host.name])
        return self._urls[host.name]

    def ssh_arguments(self, host, remote_command):
        arguments = [self.ssh_command, "-T"]
        for option in (*self.ssh_options, *DEFAULT_SSH_OPTIONS):
            arguments += ["-o", option]
        if host.port is not None:
            arguments += ["-p", str(host.port)]
        return arguments + ["--", host.destination, remote_command]

    def remote_command(self, host, executor_id):
        command = [self.remote_python, "-m", "zsched.cluster_managers.ssh_remote",
                   "--driver-url", self.driver_url_for(host), "--executor-id", executor_id,
                   "--hostname", host.name, "--cores", str(self.cores_per_executor),
                   "--app-id", self.app_id]
        if self.log_level:
            command += ["--log-level", self.log_level]
        return shlex.join(command)

    def _start_one(self, host):
        executor_id = str(next(self._ids))
        arguments = self.ssh_arguments(host, self.remote_command(host, executor_id))
        # a session of its own: a Ctrl-C at the driver's terminal is the driver's to handle
        process = subprocess.Popen(arguments, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, start_new_session=True,
                                   env=environment_without_secrets())
        try:  # its credential, on the session's standard input (an empty line: insecure)
            process.stdin.write(self.credential(executor_id).rstrip(b"\n") + b"\n")
            process.stdin.flush()
        except OSError:
            pass  # ssh already ended: its exit is reported
        self._running[executor_id] = RemoteExecutor(executor_id, host, process)
        log.info("starting executor %s on %s (ssh pid %d)", executor_id, host.destination, process.pid)

    # -- what runs

    def launched_ids(self):
        """Executors started and neither ended nor killed."""
        return list(self._running)

    def kill(self, executor_ids):
        """Close these executors' sessions (their remote ends stop them); their ssh clients
        are terminated if still there after ``KILL_GRACE``. They stop counting at once."""
        for executor_id in executor_ids:
            remote = self._running.pop(executor_id, None)
            if remote is None:
                continue
            remote.close_session()
            remote.kill_at = time.monotonic() + KILL_GRACE
            self._leaving[executor_id] = remote

    def exit_reason(self, executor_id, wait=0.0):
        remote = self._running.get(executor_id) or self._leaving.get(executor_id)
        if remote is None:
            return None
        try:
            remote.process.wait(wait)
        except subprocess.TimeoutExpired:
            return None
        return remote.reason(self.remote_python)

    def poll_exits(self):
        exits = []
        now = time.monotonic()
        for remotes in (self._running, self._leaving):
            for executor_id, remote in list(remotes.items()):
                if remote.process.poll() is not None:
                    del remotes[executor_id]
                    exits.append((executor_id, remote.reason(self.remote_python)))
                elif remote.kill_at is not None and now > remote.kill_at + KILL_GRACE:
                    remote.process.kill()
                elif remote.kill_at is not None and now > remote.kill_at:
                    remote.process.terminate()
        return exits

    def stop(self, timeout):
        """Wait up to ``timeout`` for executors told to stop; then close every session, and
        terminate, then kill, ssh clients still there."""
        remotes = list(self._running.values()) + list(self._leaving.values())
        processes = [remote.process for remote in remotes]
        wait_all(processes, timeout)
        for remote in remotes:
            remote.close_session()  # the remote ends stop their executors
        wait_all(processes, KILL_GRACE)
        for step, grace in (("terminate", 2.0), ("kill", 5.0)):
            alive = [process for process in processes if process.poll() is None]
            if not alive:
                break
            log.warning("%d ssh client(s) still running at stop: %s", len(alive), step)
            for process in alive:
                getattr(process, step)()
            wait_all(alive, grace)
        for remote in remotes:
            remote.reader.join(1.0)
        self._running.clear()
        self._leaving.clear()
