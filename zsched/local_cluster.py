"""``zsched.LocalCluster``: a driver in a thread of this process and executor processes
on this host, secured with a secret file private to the cluster."""
import atexit
import logging
import os
import shutil
import tempfile
import time
import weakref

from .cluster import LocalClusterManager
from .config import Config
from .errors import DriverConnectionError
from .security import create_secret_file, load_keys

log = logging.getLogger(__name__)

_live_clusters = weakref.WeakSet()


@atexit.register
def _close_live_clusters():
    for cluster in list(_live_clusters):
        cluster.close()


class LocalCluster:
    """A local zsched cluster; a context manager.

    ``address`` and ``secret_file`` let other processes connect (``zsched.Client(address,
    secret_file=...)``); ``client()`` returns a client in this process. Settings are
    keyword arguments (``max_message_size=...``) or a ``conf`` mapping.
    """

    def __init__(self, n_executors=2, cores_per_executor=1, *, host="127.0.0.1", port=0,
                 secret_file=None, insecure=False, app_id=None, conf=None, wait=True,
                 log_level="WARNING", **settings):
        if n_executors < 0:
            raise ValueError(f"n_executors must be >= 0, got {n_executors}")
        from .driver import Driver  # not at import: `python -m zsched.driver` imports zsched first
        config = Config.from_mapping({**(conf or {}), **settings})
        self._private_dir = None
        self.secret_file = None
        keys = None
        if not insecure:
            if secret_file is None:
                self._private_dir = tempfile.mkdtemp(prefix="zsched-")
                secret_file = os.path.join(self._private_dir, "secret")
            create_secret_file(secret_file)
            self.secret_file = secret_file
            keys = load_keys(secret_file, use_environment=False)
        self.n_executors = n_executors
        # executors of an in-process cluster speak up only for warnings and errors
        self._manager = LocalClusterManager(cores_per_executor, hostname=host, log_level=log_level)
        self._driver = Driver(config, host=host, port=port, app_id=app_id, keys=keys,
                              cluster_manager=self._manager, initial_executors=n_executors,
                              secret_file=secret_file)
        self._closed = False
        self._clients = weakref.WeakSet()   # in-process clients, sharing the driver's context
        self._driver.start_thread()
        _live_clusters.add(self)
        if wait:
            try:
                self.wait_for_executors(n_executors, config.registration_timeout)
            except BaseException:
                self.close()
                raise

    @property
    def address(self):
        return self._driver.url

    @property
    def app_id(self):
        return self._driver.app_id

    @property
    def inproc_address(self):
        return self._driver.inproc_url

    @property
    def context(self):
        return self._driver.context

    def client(self, **kwargs):
        """A client in this process, connected over inproc; closed with the cluster."""
        from .client import Client
        return Client(cluster=self, **kwargs)

    def _add_client(self, client):
        self._clients.add(client)

    def wait_for_executors(self, n, timeout):
        """Wait until ``n`` executors have registered (a read-only look at the driver's
        count: the driver thread alone changes it)."""
        deadline = time.monotonic() + timeout
        while len(self._driver.executors) < n:
            if not self._driver.is_running():
                raise DriverConnectionError("the cluster's driver stopped while starting "
                                            "(see the log for why)")
            if time.monotonic() > deadline:
                raise DriverConnectionError(
                    f"only {len(self._driver.executors)} of {n} executors registered "
                    f"within {timeout:g} s")
            time.sleep(0.005)

    def close(self):
        if self._closed:
            return
        self._closed = True
        _live_clusters.discard(self)
        # in-process clients share the driver's ZeroMQ context: close them first, so that
        # the driver can end the context; their unfinished futures fail
        for client in list(self._clients):
            client.shutdown(wait=False, cancel_futures=True, _now=True)
        self._driver.request_stop()
        self._driver.join()
        if self._private_dir is not None:
            shutil.rmtree(self._private_dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
        return False
