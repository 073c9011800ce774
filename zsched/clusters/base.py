"""What every cluster users start has: a driver process on this host (``python -m
zsched.driver``, or a fork of this process: ``driver_start``), a secret file private to
the cluster, its clients, waiting for its executors, and closing it all.

The driver runs in a process of its own, not in a thread of the caller: a driver thread
would share the caller's GIL, so the caller's own Python work (building futures,
post-processing results) would slow every task of the cluster. The driver fate-shares with
the caller through its standard input: when this process dies, the driver and its executors
stop. Each subclass says how the driver starts its executors (``_manager_arguments``) and
where they run (``executors_on_this_host``).
"""
import atexit
import logging
import math
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from typing import NamedTuple, Optional, Union

from ..async_closing import AsyncClosing
from ..cluster_managers.local import fits_a_unix_socket, module_command
from ..config import (MAX_EXECUTORS, MAX_EXECUTORS_PER_HOST, MAX_PORT, MIN_WAIT, WEEK, Config,
                      check_name, check_number)
from ..dynamic_allocation import DynamicAllocationPolicy, executors_at_start
from ..errors import ConfigError, DriverConnectionError
from ..pipe_link import PipeLink, close_fds, pipe_pair
from ..protocol import MAX_CORES, frame_limit
from ..secret_file import create_secret_file, read_secret
from .driver_start import start_driver

log = logging.getLogger(__name__)

_live_clusters = weakref.WeakSet()
_LISTENING = re.compile(r"zsched driver listening on (tcp://\S+)$")
_REGISTERED_POLL = 0.002  # seconds between looks at the executors registered, while waiting


class _Start(NamedTuple):
    """How a cluster starts its driver: its arguments, checked."""
    n_executors: int
    initial_executors: Optional[int]
    policy: Optional[DynamicAllocationPolicy]
    at_start: int  # the executors to wait for (see executors_at_start)
    cores_per_executor: int
    host: str
    port: int
    ipc_path: Optional[str]
    log_level: str
    dashboard: bool
    wait: Union[bool, int]


@atexit.register
def _close_live_clusters():
    for cluster in list(_live_clusters):
        cluster.close()


class Cluster(AsyncClosing):
    """A driver process on this host and the executors it starts; a context manager.

    ``address`` and ``secret_file`` let any process connect (``zsched.Client(address,
    secret_file=...)``); ``client()`` returns a client in this process, which talks to the
    driver over a pair of pipes of its own (handed to the driver through a Unix socket the
    driver inherited, ``bin/driver --client-pipes``). The keyword arguments are those of
    ``LocalCluster``.
    """

    # where the executors run: on this host (at most MAX_EXECUTORS_PER_HOST of them), or
    # on other hosts (at most MAX_EXECUTORS)
    executors_on_this_host = False

    def __init__(self, n_executors=2, cores_per_executor=1, *, host="127.0.0.1", port=0,
                 secret_file=None, insecure=False, app_id=None, conf=None, wait=True,
                 log_level="WARNING", dynamic_allocation=False, min_executors=0,
                 max_executors=None, initial_executors=None, backlog_timeout=1.0,
                 executor_idle_timeout=60.0, dashboard=False, fork=True, **settings):
        # bad arguments fail here, naming them, rather than in the driver or in ZeroMQ
        n_executors, cores_per_executor, port, initial_executors, policy = self._checked(
            n_executors, cores_per_executor, port, initial_executors, dynamic_allocation,
            min_executors, max_executors, backlog_timeout, executor_idle_timeout)
        at_start = executors_at_start(n_executors, initial_executors, policy)
        values = {**(conf or {}), **settings}
        config = self._config = Config.from_mapping(values)
        self.n_executors = n_executors
        if app_id is not None:
            check_name("app_id", app_id)  # before any process or file is made
        self.app_id = app_id or f"local-{time.strftime('%Y%m%d%H%M%S')}-{secrets.token_hex(3)}"
        self._closed = False
        self._clients = weakref.WeakSet()
        self._private_dir = tempfile.mkdtemp(prefix="zsched-")  # mode 0700
        # the driver also listens at a Unix socket in it, for the executors and this
        # process's clients: lower latency than loopback TCP (none if the path is too long)
        ipc_path = os.path.join(self._private_dir, "driver.sock")
        if not fits_a_unix_socket(ipc_path):
            ipc_path = None
        if not insecure and secret_file is None:
            secret_file = os.path.join(self._private_dir, "secret")
        self.secret_file = None if insecure else secret_file
        self._process = None
        self._fork = bool(fork)  # the driver may be a fork of this process (driver_start)
        self._client_pipes = None  # hands the driver process a pipe pair per client()
        self._client_pipes_lock = threading.Lock()
        self._start(values, config, _Start(
            n_executors, initial_executors, policy, at_start, cores_per_executor, host, port,
            ipc_path, log_level, dashboard, wait))

    def _manager_arguments(self, n_executors):
        """The driver's cluster manager options (``bin/driver --local``, ``--hosts``, ...)."""
        raise NotImplementedError

    def _start(self, values, config, started):
        """Start the driver as ``started`` says and wait for its executors."""
        self._start_process(values, config, started)

    def _checked(self, n_executors, cores_per_executor, port, initial_executors,
                 dynamic_allocation, min_executors, max_executors, backlog_timeout,
                 executor_idle_timeout):
        """The arguments as numbers in their bounds, and the dynamic allocation policy (or
        None); ConfigError naming the first argument that is not."""
        n_executors = check_number(
            "n_executors", n_executors, 0,
            MAX_EXECUTORS_PER_HOST if self.executors_on_this_host else MAX_EXECUTORS,
            integer=True)
        cores_per_executor = check_number("cores_per_executor", cores_per_executor, 1, MAX_CORES,
                                          integer=True)
        port = check_number("port", port, 0, MAX_PORT, integer=True)
        if initial_executors is not None:
            initial_executors = check_number("initial_executors", initial_executors, 0,
                                             MAX_EXECUTORS, integer=True)
        executor_idle_timeout = check_number("executor_idle_timeout", executor_idle_timeout,
                                             MIN_WAIT, WEEK, unit="s")
        # the policy checks its bounds, also those of a cluster that does not use it
        policy = DynamicAllocationPolicy(min_executors, max_executors, backlog_timeout,
                                         executor_idle_timeout)
        return (n_executors, cores_per_executor, port, initial_executors,
                policy if dynamic_allocation else None)

    def _driver_command(self, values, started):
        """``bin/driver``'s command line for ``started``. Creates the secret file (unless
        insecure)."""
        command = module_command("zsched.driver") + [
            "--host", started.host, "--port", str(started.port), "--app-id", self.app_id,
            *self._manager_arguments(started.n_executors),
            "--cores-per-executor", str(started.cores_per_executor),
            "--log-level", started.log_level, "--exit-on-stdin-close"]
        if started.ipc_path is not None:
            command += ["--ipc-path", started.ipc_path]
        # the driver removes it when it stops, also after this process was killed
        command += ["--private-dir", self._private_dir]
        if started.dashboard:
            command += ["--dashboard-port", "0"]
        command += self._allocation_arguments(started)
        if self.secret_file is None:
            command.append("--insecure")
        else:
            create_secret_file(self.secret_file)
            command += ["--secret-file", self.secret_file]
        for name, value in values.items():
            command += ["--conf", f"{name}={value}"]
        return command

    @staticmethod
    def _allocation_arguments(started):
        """``bin/driver``'s dynamic allocation options for ``started`` (none without)."""
        policy = started.policy
        if policy is None:
            return []
        arguments = ["--dynamic-allocation", "--min-executors", str(policy.min_executors),
                     "--backlog-timeout", str(policy.backlog_timeout),
                     "--executor-idle-timeout", str(policy.idle_timeout)]
        if policy.max_executors != math.inf:
            arguments += ["--max-executors", str(policy.max_executors)]
        if started.initial_executors is not None:
            arguments += ["--initial-executors", str(started.initial_executors)]
        return arguments

    def _start_process(self, values, config, started):
        """Start ``bin/driver`` as ``started`` says and wait for its address (and executors)."""
        command = self._driver_command(values, started)
        # client() talks over a pipe pair (one thread woken per message, not three); the
        # driver gets each pair through this Unix socket, which it inherits
        self._client_pipes, driver_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        command += ["--client-pipes", str(driver_end.fileno())]
        try:
            self._process = start_driver(command, driver_end.fileno(), self._fork)
        except BaseException:
            self._close_client_pipes()
            raise
        finally:
            driver_end.close()
        self._close_at_exit()
        try:
            # the driver takes a while to start: meanwhile, import the client waiting takes
            from ..client import client  # noqa: F401
            self._read_addresses(started)
            # what the driver and the executors print later (tasks' output) goes to our stdout
            threading.Thread(target=self._forward_output, name="zsched-cluster-output",
                             daemon=True).start()
            self._wait_for_start(started, config.registration_timeout)
        except BaseException:
            self.close()
            raise

    def _close_at_exit(self):
        """Have this cluster closed when the interpreter exits, if it is open then."""
        _live_clusters.add(self)

    def _read_addresses(self, started):
        """The driver's addresses, from the lines it prints when it starts."""
        line = self._process.stdout.readline().strip()
        match = _LISTENING.match(line)
        if not match:
            raise DriverConnectionError(
                f"the cluster's driver did not start (exit status {self._process.wait(10)}); "
                f"see its log above")
        self.address = match.group(1)
        ipc_path = started.ipc_path
        self.local_address = f"ipc://{ipc_path}" if ipc_path is not None else self.address
        self.dashboard_url = None
        while started.dashboard and self.dashboard_url is None:
            line = self._process.stdout.readline()
            if not line:
                raise DriverConnectionError("the cluster's driver stopped while starting "
                                            "(see its log above)")
            if line.startswith("zsched dashboard at "):
                self.dashboard_url = line[len("zsched dashboard at "):].strip()

    def _wait_for_start(self, started, timeout):
        n_executors, wait = started.at_start, started.wait
        if wait:  # True: all of them; a number: that many
            count = n_executors if wait is True else min(int(wait), n_executors)
            self.wait_for_executors(count, timeout)

    def _forward_output(self):
        for line in self._process.stdout:
            if not line.startswith("zsched secret file: "):
                sys.stdout.write(line)
                sys.stdout.flush()

    def client(self, **kwargs):
        """A client of this cluster in this process, over a pair of pipes of its own; closed
        with the cluster."""
        return self.keep(self._new_client(**kwargs))

    def _new_client(self, **kwargs):
        """A client over a new pipe pair to the driver; over its socket once the cluster
        has no pipes to give (it is closed)."""
        from ..client import Client
        if (fds := self._pipes_to_driver()) is not None:
            kwargs.pop("secret_file", None)  # the pipes reach the driver alone
            kwargs.pop("insecure", None)
            link = PipeLink(*fds, frame_limit(Config().max_message_size))  # until the welcome
            return Client.over_pipes(link, self.local_address, **kwargs)
        if not kwargs.get("insecure"):  # the cluster's credential, or none if it has none
            kwargs.setdefault("secret_file", self.secret_file)
            kwargs["insecure"] = kwargs["secret_file"] is None
        return Client(self.local_address, **kwargs)

    def client_credential(self):
        """The path of a credential that only submits tasks and calls the client API
        (``zsched.Client(cluster.address, secret_file=path)``): it cannot register an
        executor. Written once, mode 0600, in the cluster's private directory."""
        if self.secret_file is None:
            raise ConfigError("an insecure cluster has no credentials")
        from ..credentials import write_credential_file
        from ..security import keys_of
        path = os.path.join(self._private_dir, "client-credential")
        if not os.path.exists(path):
            keys = keys_of(read_secret(self.secret_file), self.secret_file)
            write_credential_file(path, keys.client_credential)
        return path

    def keep(self, client):
        """``client``, to be closed with the cluster."""
        self._clients.add(client)
        return client

    @property
    def driver_pid(self):
        """The driver's process id."""
        return self._process.pid

    @property
    def driver_running(self):
        """Whether the driver still runs: False once it stopped, as after ``close()``."""
        return self._process.poll() is None

    def wait_for_executors(self, n, timeout):
        """Wait until ``n`` executors have registered."""
        deadline = time.monotonic() + timeout
        # over pipes: no handshake to make, no socket and no I/O thread of ZeroMQ's
        with self._new_client(timeout=timeout) as client:
            self._wait_until_registered(n, timeout, deadline, lambda: len(client.executor_ids()),
                                        lambda: self.driver_running)

    @staticmethod
    def _wait_until_registered(n, timeout, deadline, registered, driver_running):
        while (count := registered()) < n:
            if not driver_running():
                raise DriverConnectionError("the cluster's driver stopped while starting "
                                            "(see its log above)")
            if time.monotonic() > deadline:
                raise DriverConnectionError(f"only {count} of {n} executors registered "
                                            f"within {timeout:g} s")
            time.sleep(_REGISTERED_POLL)

    def close(self):
        """Stop the driver and its executors (bounded), and remove the private secret."""
        if self._closed:
            return
        self._closed = True
        _live_clusters.discard(self)
        for client in list(self._clients):
            client.close()
        self._close_client_pipes()
        self._stop_driver()
        shutil.rmtree(self._private_dir, ignore_errors=True)

    def _stop_driver(self):
        """Stop the driver process (and so its executors); kill it after 60 s."""
        process = self._process
        try:
            process.stdin.close()  # the driver stops at end of input, as on SIGTERM
        except OSError:
            pass
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            log.warning("the cluster's driver did not stop within 60 s: killing it")
            process.kill()
            process.wait()

    def _pipes_to_driver(self):
        """A new pipe pair to the driver process, through the client-pipes socket: this process's
        end of it (read fd, write fd); None when that socket is closed (the cluster too)."""
        with self._client_pipes_lock:
            if self._client_pipes is None:
                return None
            ours, theirs = pipe_pair()
            try:
                socket.send_fds(self._client_pipes, [b"p"], list(theirs))
            except OSError as exc:
                close_fds(*ours)
                raise DriverConnectionError(f"cannot connect to the cluster's driver: it is "
                                            f"gone ({exc.strerror})") from None
            finally:
                close_fds(*theirs)
            return ours

    def _close_client_pipes(self):
        with self._client_pipes_lock:
            if self._client_pipes is not None:
                self._client_pipes.close()
                self._client_pipes = None

    def _repr_html_(self):
        """The cluster in a notebook: its address, secret file, executors, cores and tasks."""
        from ..notebook import status_table
        title = f"zsched {type(self).__name__}"
        rows = [("Secret file", self.secret_file)] if self.secret_file else []
        if self._closed:
            return status_table(title + " (closed)", self.address, rows=rows)
        try:
            with self.client(timeout=5) as client:
                status = client.status()
        except Exception as exc:  # a repr never raises: it says why it has no figures
            return status_table(title, self.address, error=f"cannot ask the driver: {exc}",
                                rows=rows)
        return status_table(title, self.address, status, rows=rows)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
        return False
