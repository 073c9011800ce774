"""``zsched.LocalCluster``: a driver process and executor processes on this host, secured
with a secret file private to the cluster.

The driver runs in its own process (``python -m zsched.driver --local N``), as every
cluster's does (see ``base.py``). ``in_process=True`` runs the driver in a thread instead,
for the lowest single-task latency of a client in this process (over inproc://); see
``LocalCluster``.
"""
import logging
import os
import shutil
import time

from .base import Cluster

log = logging.getLogger(__name__)


class LocalCluster(Cluster):
    """A local zsched cluster; a context manager.

    ``address`` and ``secret_file`` let any process connect (``zsched.Client(address,
    secret_file=...)``); ``client()`` returns a client in this process, which talks to the
    driver over a pair of pipes of its own (handed to the driver through a Unix socket the
    driver inherited, ``bin/driver --client-pipes``). Settings are keyword arguments
    (``max_message_size=...``) or a ``conf`` mapping, as ``--conf`` of ``bin/driver``.
    ``dynamic_allocation=True`` (with ``min_executors``, ``max_executors``,
    ``initial_executors``, ``backlog_timeout``, ``executor_idle_timeout``) grows the cluster
    with the backlog and shrinks it when idle, as ``bin/driver --dynamic-allocation``.
    ``wait=True`` returns once every executor registered, ``wait=N`` once N have.
    ``dashboard=True`` serves the live dashboard and Prometheus ``/metrics`` on a free port
    of 127.0.0.1; ``dashboard_url`` is its address (with the token it needs).
    The driver process is a fork of this one while this process runs a single thread
    (it starts sooner: nothing to import again); ``fork=False`` always starts a new
    interpreter, as does a process with other threads (see ``driver_start``). With
    ``in_process=True`` the first executors are forks of this process, on the same terms.

    ``in_process=True`` runs the driver in a thread of this process instead (the executors
    are processes either way): ``client()`` and the embedded ``zsched.Client()`` then hand
    their tasks to the driver's thread without a socket, and that thread completes their
    futures, which is what gives them their latency: a task crosses two processes instead
    of four, and no thread besides the caller's and the driver's. Besides ``address``, the
    driver also listens at ``inproc_address`` for sockets in this process that use
    ``context``. It shares this process's GIL with the caller, so a caller busy in Python slows
    the cluster; when this process dies the executors lose their
    connection to the driver and exit.
    """

    executors_on_this_host = True

    def __init__(self, n_executors=2, cores_per_executor=1, *, in_process=False, **kwargs):
        self._in_process = in_process
        self._driver = None  # with the driver in this process: its zsched.driver.Driver
        self.inproc_address = self.context = None
        self.channel = None  # with the driver in this process: its zsched.channel.Channel
        super().__init__(n_executors, cores_per_executor, **kwargs)

    def _manager_arguments(self, n_executors):
        # the first executors fork from the driver's process: they need not import zsched
        return ["--local", str(n_executors), "--fork-executors"]

    def _start(self, values, config, started):
        if self._in_process:
            self._start_in_process(config, started)
        else:
            self._start_process(values, config, started)

    def _start_in_process(self, config, started):
        """The driver in a thread of this process (see the class docstring)."""
        from ..driver import Driver, local_options
        try:
            options = local_options(
                config, started.n_executors, started.cores_per_executor, host=started.host,
                log_level=started.log_level, dynamic_allocation=started.policy,
                initial_executors=started.initial_executors, secret_file=self.secret_file,
                insecure=self.secret_file is None, ipc_path=started.ipc_path, port=started.port,
                app_id=self.app_id, inproc=True,
                dashboard_port=0 if started.dashboard else None)
            forked = self._fork_first_executors(options, config, started)
            try:
                self._driver = Driver(options)
            except BaseException:
                if forked:  # executors that no driver will take
                    options.cluster_manager.stop(0)
                raise
        except BaseException:
            shutil.rmtree(self._private_dir, ignore_errors=True)
            raise
        self.address = self._driver.url
        self.local_address = self._driver.ipc_url or self.address
        self.inproc_address = self._driver.inproc_url
        self.channel = self._driver.channel
        self.context = self._driver.context
        self.dashboard_url = self._driver.dashboard.url if self._driver.dashboard else None
        self._close_at_exit()
        try:
            self._driver.start_thread()
            self._wait_for_start(started, config.registration_timeout)
        except BaseException:
            self.close()
            raise

    def _fork_first_executors(self, options, config, started):
        """With the driver in this process: fork its first executors from this process
        before the driver makes a socket or a thread, as ``bin/driver --fork-executors``
        does; whether it did. Only where they reach it over pipes at a known address, and
        a fork of this process is safe (``zsched.forking.fork_is_safe``)."""
        from ..driver.forked_executors import fork_executor, may_fork_first
        count = options.initial_executors
        if not (self._fork and may_fork_first(count, started.ipc_path, config)):
            return False
        from ..executor import cli  # noqa: F401  imported once here, not in each fork
        options.cluster_manager.fork_first(count, f"ipc://{started.ipc_path}", self.app_id,
                                           fork_executor)
        return True

    def client(self, **kwargs):
        """A client of this cluster in this process; closed with the cluster. With the
        driver in this process (``in_process``) it reaches the driver without a socket; else
        over a pair of pipes of its own."""
        if self.channel is None:
            return super().client(**kwargs)
        from ..client import Client
        kwargs.pop("secret_file", None)  # nothing to authenticate in this process
        kwargs.pop("insecure", None)
        return self.keep(Client.in_process(self.channel, **kwargs))

    @property
    def driver_pid(self):
        """The driver's process id: this process's own when the driver runs in a thread."""
        return os.getpid() if self._driver is not None else super().driver_pid

    @property
    def driver_running(self):
        """Whether the driver still runs: False once it stopped, as after ``close()``."""
        if self._driver is not None:
            return self._driver.is_running()
        return super().driver_running

    def wait_for_executors(self, n, timeout):
        """Wait until ``n`` executors have registered."""
        if self.channel is None:
            super().wait_for_executors(n, timeout)
            return
        from ..client import Client
        deadline = time.monotonic() + timeout
        with Client.in_process(self.channel, timeout=timeout) as client:  # as any client asks
            self._wait_until_registered(n, timeout, deadline, lambda: len(client.executor_ids()),
                                        self.channel.is_open)

    def _stop_driver(self):
        if self._driver is None:
            super()._stop_driver()
            return
        self._driver.request_stop()  # it stops its executors, then closes its sockets
        wait = 60 + self._config.shutdown_timeout
        self._driver.join(wait)
        if self._driver.is_running():
            log.warning("the cluster's driver did not stop within %g s", wait)
