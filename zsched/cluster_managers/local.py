"""Executor processes on this host, started with the executor command line."""
import collections
import itertools
import logging
import os
import signal
import subprocess
import sys

from ..pipe_link import pipe_pair
from ..secret_file import SECRET_VARIABLES
from .base import KILL_GRACE, ClusterManager
from .processes import ChildProcesses

log = logging.getLogger(__name__)


UNIX_SOCKET_PATH_MAX = 107  # bytes of a Unix socket's path on Linux (sun_path, less its NUL)


def fits_a_unix_socket(path):
    """Whether ``path`` is short enough to name a Unix socket."""
    return len(os.fsencode(path)) <= UNIX_SOCKET_PATH_MAX


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
    return module_command("zsched.executor", python) + executor_arguments(
        driver_url, executor_id, hostname, cores, app_id, credential_fd, log_level, driver_fds,
        relief_fds)


def executor_arguments(driver_url, executor_id, hostname, cores, app_id, credential_fd=None,
                       log_level=None, driver_fds=None, relief_fds=None):
    """The arguments of ``bin/executor`` in ``executor_command``."""
    command = ["--driver-url", driver_url, "--executor-id", executor_id, "--hostname", hostname,
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
    they exit or are killed; killed ones are reaped (and reported) when they have exited.

    The driver's thread prepares each start (the executor's id, its pipes, adopted by the
    driver at once, and its command); the manager's thread (``ChildProcesses``) starts the
    process, signals it and reaps it."""

    on_this_host = True

    def __init__(self, cores_per_executor=1, hostname="127.0.0.1", log_level=None):
        if cores_per_executor < 1:
            raise ValueError(f"cores_per_executor must be >= 1, got {cores_per_executor}")
        self.cores_per_executor = cores_per_executor
        self.hostname = hostname
        self.log_level = log_level
        self._ids = itertools.count(1)
        self._launched = {}    # executor id -> None, in start order: counted toward the target
        self._leaving = set()  # executor ids killed and not yet reaped
        self._children = ChildProcesses("zsched-local-executors", _how_it_ended)
        self._forked = collections.deque()  # (executor id, process, our pipes): not yet requested

    def request_total(self, n, avoid_hosts=(), local_tasks=None, excluded_hosts=()):
        """Have ``n`` executors: start the missing ones (never kills); none while this host
        is to be avoided (backing off after failed starts). An error preparing a start is
        raised: a failed start. Locality and exclusion change nothing: one host."""
        while len(self._launched) < n and self.hostname not in avoid_hosts:
            self._start_one()

    def host_of(self, executor_id):
        return self.hostname

    def fork_first(self, n, driver_url, app_id, fork):
        """Start the first ``n`` executors at once, before the driver is built, with
        ``fork(arguments, keep_fds)`` (a process forked to run ``bin/executor``): they start
        while the driver does. Each talks to the driver over pipe pairs; the driver's first
        requests take them (``adopt_link``), and what they said meanwhile waits there."""
        self.driver_url, self.app_id = driver_url, app_id
        for _ in range(n):
            executor_id = str(next(self._ids))
            pairs = []
            try:
                for _ in range(2 if self.cores_per_executor == 1 else 1):
                    pairs.append(pipe_pair())
                theirs = [fds for _, fds in pairs]
                arguments = executor_arguments(
                    driver_url, executor_id, self.hostname, self.cores_per_executor, app_id,
                    log_level=self.log_level, driver_fds=theirs[0],
                    relief_fds=theirs[1] if len(theirs) > 1 else None)
                process = fork(arguments, [fd for fds in theirs for fd in fds])
            except BaseException:
                _close([fd for pair in pairs for fds in pair for fd in fds])
                raise
            _close([fd for _, fds in pairs for fd in fds])
            log.info("forked executor %s (pid %d)", executor_id, process.pid)
            self._forked.append((executor_id, process, [ours for ours, _ in pairs]))

    def _start_one(self):
        """Start an executor; with a driver that adopts links (``adopt_link``), it talks to
        the driver over a pipe pair instead of the driver's sockets."""
        if self._forked and self.adopt_link is not None:
            self._take_forked()
            return
        executor_id = str(next(self._ids))
        pairs = []  # (ours, theirs): the executor's link, and its relief thread's (one core)
        credential_fd = None  # the pipes are its credential; else a key of its own
        try:
            if self.adopt_link is not None:
                for _ in range(2 if self.cores_per_executor == 1 else 1):
                    pairs.append(pipe_pair())
            else:
                credential = self.credential(executor_id)
                credential_fd = credential_pipe(credential) if credential else None
        except BaseException:
            _close([fd for pair in pairs for fds in pair for fd in fds])
            raise
        theirs = [fd for _, fds in pairs for fd in fds]
        if credential_fd is not None:
            theirs.append(credential_fd)
        command = executor_command(self.driver_url, executor_id, self.hostname,
                                   self.cores_per_executor, self.app_id, credential_fd,
                                   log_level=self.log_level,
                                   driver_fds=pairs[0][1] if pairs else None,
                                   relief_fds=pairs[1][1] if len(pairs) > 1 else None)
        try:
            self._launch(executor_id, command, theirs)
        except BaseException:
            _close([fd for ours, _ in pairs for fd in ours] + theirs)
            raise
        for ours, _ in pairs:  # before it runs: the pipes hold what it says meanwhile
            self.adopt_link(executor_id, *ours)

    def _take_forked(self):
        """Count the next executor of ``fork_first`` as started, and hand its pipes to the
        driver."""
        executor_id, process, ours = self._forked.popleft()
        self._children.start(executor_id, lambda: process)
        self._launched[executor_id] = None
        for fds in ours:
            self.adopt_link(executor_id, *fds)

    def _launch(self, executor_id, command, pass_fds=()):
        """Have the manager's thread start ``command`` as executor ``executor_id``, handing
        it ``pass_fds`` (closed here once the child has them, or once it failed to start).
        It counts toward the target from now. Raises if the thread cannot start."""
        self._children.start(executor_id, lambda: _spawn(executor_id, command, pass_fds))
        self._launched[executor_id] = None

    def launched_ids(self):
        """Executors started and neither exited nor killed."""
        return list(self._launched)

    def kill(self, executor_ids):
        """Terminate these executors (SIGKILL after ``KILL_GRACE``); they stop counting
        toward the target at once."""
        for executor_id in executor_ids:
            if executor_id in self._launched:
                del self._launched[executor_id]
                self._leaving.add(executor_id)
                self._children.stop(executor_id, _STOP_STEPS)

    def exit_reason(self, executor_id):
        """How the executor ended, if its end was seen and not yet reported, else None."""
        return self._children.exit_of(executor_id)

    def poll_exits(self):
        """``[(executor id, how it ended)]`` for executors that ended since the last call."""
        exits = self._children.take_exits()
        for executor_id, _ in exits:
            self._launched.pop(executor_id, None)
            self._leaving.discard(executor_id)
        return exits

    def stop(self, timeout):
        """Wait up to ``timeout`` for executors told to stop, then terminate, then kill."""
        while self._forked:  # never requested: the driver stops as it starts
            _, process, ours = self._forked.popleft()
            process.kill()
            process.wait()
            _close([fd for fds in ours for fd in fds])
        children = self._children
        if not children.wait_idle(timeout):
            log.warning("executors still running at stop: terminate, then kill")
            for executor_id in list(self._launched) + list(self._leaving):
                children.stop(executor_id, _LAST_STEPS)
            children.wait_idle(_LAST_STEPS[-1][0] + 5.0)
        children.close()
        self._launched.clear()
        self._leaving.clear()


def _spawn(executor_id, command, pass_fds):
    """Start an executor's process (in the manager's thread); ``pass_fds`` are closed."""
    try:
        process = subprocess.Popen(command, env=child_environment(), stdin=subprocess.DEVNULL,
                                   pass_fds=pass_fds)
    finally:
        _close(pass_fds)  # the child's now: its exit closes the pipes' last ends
    log.info("started executor %s (pid %d)", executor_id, process.pid)
    return process


def _close(fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _how_it_ended(child):
    return describe_exit(child.process.returncode)


def _terminate(child):
    child.process.terminate()


def _kill_late(child):
    log.warning("executor %s still runs %g s after SIGTERM: SIGKILL", child.executor_id, KILL_GRACE)
    child.process.kill()


def _kill(child):
    child.process.kill()


# a killed executor: SIGTERM, then SIGKILL if a task holding the GIL kept it from ending
_STOP_STEPS = ((0.0, _terminate), (KILL_GRACE, _kill_late))
# executors still there when the driver stops, after their time to end by themselves
_LAST_STEPS = ((0.0, _terminate), (2.0, _kill))
