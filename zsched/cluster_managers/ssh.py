"""Executors on other hosts, started with the system OpenSSH client.

Each executor is one ``ssh`` process running ``zsched.cluster_managers.ssh_remote`` on its host, so
users' ``~/.ssh/config``, agents and ProxyJump apply. The executor's own credential (a key
pair the driver made for it alone) travels on the session's standard input (never on a
command line, in a file or in an environment), and that input stays open for the
executor's life: when it closes (the executor is killed, the driver stops or dies, the
ssh client dies, the connection drops) the remote end stops the executor, with SIGKILL
after ``KILL_GRACE``. The driver also writes an empty line to it every
``SESSION_KEEPALIVE``: a remote end that hears nothing for ``SESSION_TIMEOUT`` (its host
cut off, the driver stopped) stops its executor too. Whatever the remote end prints (the
executor's log, ssh's own errors) is forwarded to the driver's standard error, prefixed
with the host and executor, and its last lines give the reason when a start fails: an
unreachable host, a refused key, a missing remote python.

The ssh processes are started, read, stopped and reaped by the manager's one thread
(``processes.ChildProcesses``); the driver's calls only change its bookkeeping.
"""
import itertools
import logging
import os
import shlex
import socket
import subprocess
import sys
from collections import Counter, deque

from .base import KILL_GRACE, ClusterManager
from .local import describe_exit, environment_without_secrets
from .processes import ChildProcesses

log = logging.getLogger(__name__)

# the remote end (ssh_remote.py) prints this and how the executor ended, on its last line
EXIT_MARKER = "zsched ssh_remote: executor ended: "

# after the user's --ssh-option (ssh keeps an option's first value): never wait at a
# password prompt; a connection cut off ends the ssh client
DEFAULT_SSH_OPTIONS = ("BatchMode=yes", "ConnectTimeout=10", "ServerAliveInterval=5",
                       "ServerAliveCountMax=3")
# seconds from closing an executor's session to terminating its ssh client: the remote
# end's own grace first, so that it can SIGKILL a stuck executor
CLIENT_GRACE = KILL_GRACE + 2.0
SESSION_KEEPALIVE = 5.0  # seconds between the empty lines that tell a remote end its driver is there
SESSION_TIMEOUT = 60.0   # seconds of silence on its session after which a remote end stops its executor
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
    """One executor over ssh: where it runs and what it printed (read by the manager's
    thread)."""

    def __init__(self, executor_id, host):
        self.executor_id = executor_id
        self.host = host
        self.tail = deque(maxlen=20)   # its last lines of output
        self.ended_as = None           # how the executor ended, as its remote end said

    def line(self, line):
        """A line its ssh process printed: forwarded to standard error, prefixed."""
        if line.startswith(EXIT_MARKER):
            self.ended_as = line[len(EXIT_MARKER):]
            return
        if line.strip():
            self.tail.append(line.strip())
        try:
            sys.stderr.write(f"[{self.host.name} executor {self.executor_id}] {line}\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass

    def reason(self, code, remote_python):
        """How it ended, in words, once its ssh process has exited with ``code``."""
        if self.ended_as is not None:
            return self.ended_as
        last = self.tail[-1] if self.tail else ""
        if code == 255:
            return f"ssh to {self.host.destination} failed: {last or 'exit status 255'}"
        if code == 127:
            return f"{remote_python} not found on {self.host.name}: {last}"
        return f"{describe_exit(code)} on {self.host.name}" + (f": {last}" if last else "")


def _keep_session_alive(child):
    """An empty line to the remote end, without waiting (see ``SESSION_TIMEOUT``)."""
    stdin = child.process.stdin
    try:
        os.write(stdin.fileno(), b"\n")
    except (OSError, ValueError):
        pass  # ssh is not reading (the line before still waits there), or it ended


def _close_session(child):
    """End of input for the remote end: it stops the executor."""
    try:
        child.process.stdin.close()
    except OSError:
        pass


def _terminate(child):
    child.process.terminate()


def _kill(child):
    child.process.kill()


# a killed executor: its session closed (its remote end stops it), then its ssh client
# terminated, then killed, if still there
_STOP_STEPS = ((0.0, _close_session), (CLIENT_GRACE, _terminate), (2 * CLIENT_GRACE, _kill))


class SSHClusterManager(ClusterManager):
    """Executors on ``hosts`` (``hosts_file.Host``), at most ``host.executors`` on each,
    spread over the hosts with the most room."""

    def __init__(self, hosts, cores_per_executor=1, ssh_options=(), remote_python="python3",
                 driver_host="0.0.0.0", log_level=None, ssh_command="ssh",
                 session_timeout=SESSION_TIMEOUT):
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
        self.session_timeout = session_timeout
        self._urls = {}        # host name -> the driver URL executors there connect to
        self._ids = itertools.count(1)
        self._running = {}     # executor id -> RemoteExecutor, counted toward the target
        self._leaving = {}     # executor id -> RemoteExecutor, killed and not yet reaped
        self._children = ChildProcesses(
            "zsched-ssh-executors", lambda child: child.owner.reason(child.process.returncode, remote_python),
            on_line=lambda child, line: child.owner.line(line),
            keepalive=(min(SESSION_KEEPALIVE, session_timeout / 4), _keep_session_alive))

    def capacity(self):
        return sum(host.executors for host in self.hosts)

    def host_of(self, executor_id):
        remote = self._running.get(executor_id) or self._leaving.get(executor_id)
        return None if remote is None else remote.host.name

    # -- starting

    def request_total(self, n, avoid_hosts=(), local_tasks=None, excluded_hosts=()):
        """Have ``n`` executors, as far as the hosts have room; none on ``avoid_hosts``.
        Each goes to the host with the most waiting tasks that prefer it (``local_tasks``),
        which it lowers by the tasks it can take, then to the one with the most room;
        ``excluded_hosts`` get one only when no other host has room."""
        wanted = dict(local_tasks or {})
        while len(self._running) < n:
            host, why = self._place(avoid_hosts, wanted, excluded_hosts)
            if host is None:
                return
            if host.name in wanted:
                wanted[host.name] -= self.cores_per_executor
            executor_id = self._start_one(host)
            if why:
                log.info("executor %s goes to %s: %s", executor_id, host.name, why)

    def _place(self, avoid_hosts, wanted, excluded_hosts):
        """(host, why): the host with the most ``wanted`` tasks, then the most room left
        (executors still leaving take room), off ``excluded_hosts`` unless only they have
        room; ``why`` says what locality or exclusion decided (None: room alone)."""
        load = Counter(r.host for r in itertools.chain(self._running.values(), self._leaving.values()))
        room = {host: host.executors - load[host] for host in self.hosts
                if host.name not in avoid_hosts and load[host] < host.executors}
        if not room:
            return None, None
        allowed = [host for host in room if host.name not in excluded_hosts]
        skipped = sorted(host.name for host in room if host.name in excluded_hosts)
        host = max(allowed or room, key=lambda h: (max(wanted.get(h.name, 0), 0), room[h]))
        if not allowed:
            return host, "excluded for failures, but no other host has room"
        reasons = []
        if wanted.get(host.name, 0) > 0:
            reasons.append(f"{wanted[host.name]} waiting task(s) prefer it")
        if skipped:
            reasons.append(f"not on {', '.join(skipped)}, excluded for failures")
        return host, "; ".join(reasons) or None

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
                   "--session-timeout", f"{self.session_timeout:g}", "--driver-url", self.driver_url_for(host), "--executor-id", executor_id,
                   "--hostname", host.name, "--cores", str(self.cores_per_executor),
                   "--app-id", self.app_id]
        if self.log_level:
            command += ["--log-level", self.log_level]
        return shlex.join(command)

    def _start_one(self, host):
        executor_id = str(next(self._ids))
        arguments = self.ssh_arguments(host, self.remote_command(host, executor_id))
        # its credential on the session's standard input (an empty line: insecure), then an
        # empty line: the driver keeps the session alive (see SESSION_TIMEOUT)
        first_words = self.credential(executor_id).rstrip(b"\n") + b"\n\n"
        remote = RemoteExecutor(executor_id, host)
        self._children.start(executor_id, lambda: _spawn(remote, arguments, first_words), remote)
        self._running[executor_id] = remote
        return executor_id

    # -- what runs

    def launched_ids(self):
        """Executors started and neither ended nor killed."""
        return list(self._running)

    def kill(self, executor_ids):
        """Close these executors' sessions (their remote ends stop them); their ssh clients
        are terminated if still there after ``CLIENT_GRACE``. They stop counting at once."""
        for executor_id in executor_ids:
            remote = self._running.pop(executor_id, None)
            if remote is not None:
                self._leaving[executor_id] = remote
                self._children.stop(executor_id, _STOP_STEPS)

    def exit_reason(self, executor_id):
        return self._children.exit_of(executor_id)

    def poll_exits(self):
        exits = self._children.take_exits()
        for executor_id, _ in exits:
            self._running.pop(executor_id, None)
            self._leaving.pop(executor_id, None)
        return exits

    def stop(self, timeout):
        """Wait up to ``timeout`` for executors told to stop; then close every session, and
        terminate, then kill, ssh clients still there."""
        children = self._children
        if not children.wait_idle(timeout):
            log.warning("executors still running at stop: their sessions closed")
            for executor_id in list(self._running) + list(self._leaving):
                children.stop(executor_id, _STOP_STEPS)
            children.wait_idle(_STOP_STEPS[-1][0] + 5.0)
        children.close()
        self._running.clear()
        self._leaving.clear()


def _spawn(remote, arguments, first_words):
    """Start an executor's ssh process (in the manager's thread) and hand it ``first_words``."""
    # a session of its own: a Ctrl-C at the driver's terminal is the driver's to handle
    process = subprocess.Popen(arguments, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, start_new_session=True,
                               env=environment_without_secrets())
    os.set_blocking(process.stdin.fileno(), False)
    try:  # a line or two into an empty pipe: it fits
        os.write(process.stdin.fileno(), first_words)
    except OSError:
        pass  # ssh already ended: its exit is reported
    log.info("starting executor %s on %s (ssh pid %d)", remote.executor_id, remote.host.destination,
             process.pid)
    return process
