"""Executor processes on this host, started with the executor command line."""
import itertools
import logging
import os
import signal
import subprocess
import sys
import time

from ..pipe_link import pipe_pair
from ..security import SECRET_VARIABLES
from .base import ClusterManager

log = logging.getLogger(__name__)


KILL_GRACE = 3.0  # seconds from SIGTERM to SIGKILL for an executor killed (a task may hold the GIL)
UNIX_SOCKET_PATH_MAX = 107  # bytes of a Unix socket's path on Linux (sun_path, less its NUL)


def fits_a_unix_socket(path):
    """Whether ``path`` is short enough to name a Unix socket."""
    return len(os.fsencode(path)) <= UNIX_SOCKET_PATH_MAX


def wait_all(processes, seconds):
    """Wait for the processes to exit, ``seconds`` at most in all."""
    deadline = time.monotonic() + seconds
    for process in processes:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass


def describe_exit(returncode):
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return f"killed by signal {name}"
    return f"exited with code {returncode}"


# ``-m`` with the working directory last on sys.path: a child started in a checkout imports
# the zsched that started it (PYTHONPATH), not the checkout's sources
_RUN_MODULE = ("import runpy, sys; sys.path.append(sys.path.pop(0)); "
               "runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")


def module_command(module, python=sys.executable):
    """The command that runs ``module`` like ``python -m module`` in a child process."""
    return [python, "-c", _RUN_MODULE.format(module=module)]


def child_environment():
    """The environment for a child process: it imports what this process can (this zsched
    first, then the user's modules wherever they were found), and holds no secret."""
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = [package_parent] + [p for p in sys.path if p and os.path.isdir(p)]
    return {**environment_without_secrets(), "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}


def environment_without_secrets():
    """This process's environment without the cluster secret's variables."""
    return {name: value for name, value in os.environ.items() if name not in SECRET_VARIABLES}


def credential_pipe(credential):
    """A pipe holding ``credential`` for a child to read: its read end (the writer's is
    closed, so the child reads to the end)."""
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, credential)  # one line: far under a pipe's buffer
    finally:
        os.close(write_fd)
    return read_fd


def executor_command(driver_url, executor_id, hostname, cores, app_id, credential_fd=None,
                     python=sys.executable, log_level=None, driver_fds=None, relief_fds=None):
    """The executor's command line: over pipes (``driver_fds``), else with its credential
    on ``credential_fd``, else insecure."""
    command = module_command("zsched.executor", python) + ["--driver-url", driver_url,
               "--executor-id", executor_id, "--hostname", hostname,
               "--cores", str(cores), "--app-id", app_id]
    if driver_fds is not None:
        command += ["--driver-fds", "%d,%d" % driver_fds]
        if relief_fds is not None:
            command += ["--relief-fds", "%d,%d" % relief_fds]
    elif credential_fd is not None:
        command += ["--credential-fd", str(credential_fd)]
    else:
        command.append("--insecure")
    if log_level:
        command += ["--log-level", log_level]
    return command


class LocalClusterManager(ClusterManager):
    """Executor processes on this host. Executors it started count toward the target until
    they exit or are killed; killed ones are reaped (and reported) when they have exited."""

    on_this_host = True

    def __init__(self, cores_per_executor=1, hostname="127.0.0.1", log_level=None):
        if cores_per_executor < 1:
            raise ValueError(f"cores_per_executor must be >= 1, got {cores_per_executor}")
        self.cores_per_executor = cores_per_executor
        self.hostname = hostname
        self.log_level = log_level
        self._ids = itertools.count(1)
        self._processes = {}   # executor id -> Popen, counted toward the target
        self._leaving = {}     # executor id -> Popen, killed and not yet reaped
        self._kill_at = {}     # executor id -> when a killed one still there gets SIGKILL

    def request_total(self, n, avoid_hosts=()):
        """Have ``n`` executors: start the missing ones (never kills); none while this host
        is to be avoided (backing off after failed starts)."""
        while len(self._processes) < n and self.hostname not in avoid_hosts:
            self._start_one()

    def host_of(self, executor_id):
        return self.hostname

    def _start_one(self):
        """Start an executor; with a driver that adopts links (``adopt_link``), it talks to
        the driver over a pipe pair instead of the driver's sockets."""
        executor_id = str(next(self._ids))
        pairs = []  # (ours, theirs): the executor's link, and its relief thread's (one core)
        credential_fd = None  # the pipes are its credential; else a key of its own
        if self.adopt_link is not None:
            pairs = [pipe_pair() for _ in range(2 if self.cores_per_executor == 1 else 1)]
        else:
            credential = self.credential(executor_id)
            credential_fd = credential_pipe(credential) if credential else None
        theirs = [fd for _, fds in pairs for fd in fds]
        if credential_fd is not None:
            theirs.append(credential_fd)
        command = executor_command(self.driver_url, executor_id, self.hostname,
                                   self.cores_per_executor, self.app_id, credential_fd,
                                   log_level=self.log_level,
                                   driver_fds=pairs[0][1] if pairs else None,
                                   relief_fds=pairs[1][1] if len(pairs) > 1 else None)
        try:
            process = subprocess.Popen(command, env=child_environment(), stdin=subprocess.DEVNULL,
                                       pass_fds=theirs)
        except BaseException:
            for fd in [fd for pair in pairs for fds in pair for fd in fds]:
                os.close(fd)
            if credential_fd is not None:
                os.close(credential_fd)
            raise
        self._processes[executor_id] = process
        for fd in theirs:  # the child's now: its exit closes the pipes' last ends
            os.close(fd)
        for ours, _ in pairs:
            self.adopt_link(executor_id, *ours)
        log.info("started executor %s (pid %d)", executor_id, process.pid)

    def launched_ids(self):
        """Executors started and neither exited nor killed."""
        return list(self._processes)

    def kill(self, executor_ids):
        """Terminate these executors (SIGKILL after ``KILL_GRACE``, see ``poll_exits``); they
        stop counting toward the target at once."""
        for executor_id in executor_ids:
            process = self._processes.pop(executor_id, None)
            if process is None:
                continue
            if process.poll() is None:
                process.terminate()
                self._kill_at[executor_id] = time.monotonic() + KILL_GRACE
            self._leaving[executor_id] = process

    def exit_reason(self, executor_id, wait=0.0):
        """How the executor ended (waiting up to ``wait`` seconds), or None if it runs."""
        process = self._processes.get(executor_id) or self._leaving.get(executor_id)
        if process is None:
            return None
        try:
            process.wait(wait)
        except subprocess.TimeoutExpired:
            return None
        return describe_exit(process.returncode)

    def poll_exits(self):
        """``[(executor id, how it ended)]`` for executors that ended since the last call."""
        exits = []
        for processes in (self._processes, self._leaving):
            for executor_id, process in list(processes.items()):
                if process.poll() is not None:
                    del processes[executor_id]
                    self._kill_at.pop(executor_id, None)
                    exits.append((executor_id, describe_exit(process.returncode)))
        now = time.monotonic()
        for executor_id, when in list(self._kill_at.items()):
            if now >= when:  # SIGTERM was not enough (a task holding the GIL in C)
                del self._kill_at[executor_id]
                log.warning("executor %s still runs %g s after SIGTERM: SIGKILL", executor_id, KILL_GRACE)
                self._leaving[executor_id].kill()
        return exits

    def stop(self, timeout):
        """Wait up to ``timeout`` for executors told to stop, then terminate, then kill."""
        processes = list(self._processes.values()) + list(self._leaving.values())
        wait_all(processes, timeout)
        for sig_name, grace in (("terminate", 2.0), ("kill", 5.0)):
            alive = [p for p in processes if p.poll() is None]
            if not alive:
                break
            log.warning("%d executor(s) still running at stop: %s", len(alive), sig_name)
            for process in alive:
                getattr(process, sig_name)()
            wait_all(alive, grace)
        self._processes.clear()
        self._leaving.clear()
        self._kill_at.clear()
