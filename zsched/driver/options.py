"""How a driver is set up: one frozen ``DriverOptions``, built alike by ``bin/driver`` and
by ``LocalCluster``, and the steps both take to build it (secret, cluster manager,
executors at start)."""
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..cluster_managers.local import (
    UNIX_SOCKET_PATH_MAX,
    LocalClusterManager,
    fits_a_unix_socket,
)
from ..config import Config, check_name
from ..dynamic_allocation import executors_at_start
from ..errors import ConfigError
from ..secret_file import create_secret_file
from ..security import load_keys

log = logging.getLogger("zsched.driver")


@dataclass(frozen=True)
class DriverOptions:
    """Everything a ``Driver`` is made from.

    ``cluster_manager`` starts and stops executors (None: executors come by themselves);
    ``dynamic_allocation`` is a ``DynamicAllocationPolicy`` or None. ``keys`` are the CURVE
    keys of ``secret_file`` (None: insecure). ``stop_on_eof_fd``: the driver stops when this
    descriptor reaches end of file. ``client_pipes``: a Unix socket's descriptor through
    which the program that started the driver passes a pipe pair per client. ``inproc``:
    the ROUTER also listens at an inproc:// address; ``ipc_path``: also at this Unix socket,
    in a directory private to the user. ``report`` is given the text of each allocation
    warning. ``dashboard_port`` (None: no dashboard) is served on ``dashboard_host``.
    ``clock`` is the driver's monotonic clock."""

    config: Config = field(default_factory=Config)
    host: str = "127.0.0.1"
    port: int = 0
    app_id: str | None = None
    keys: Any = None
    secret_file: str | None = None
    cluster_manager: Any = None
    initial_executors: int = 0
    dynamic_allocation: Any = None
    stop_on_eof_fd: int | None = None
    client_pipes: int | None = None
    report: Callable[[str], None] | None = None
    dashboard_port: int | None = None
    dashboard_host: str = "127.0.0.1"
    inproc: bool = False
    ipc_path: str | None = None
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def create(cls, config, *, secret_file=None, insecure=False, cluster_manager=None,
               initial_executors=0, dynamic_allocation=None, ipc_path=None, **others):
        """Options checked as at start-up (``ConfigError`` names what is wrong): the secret
        file is created if missing (unless ``insecure``) and its keys loaded;
        ``initial_executors`` is what ``executors_at_start`` decided."""
        if ipc_path is not None:
            check_ipc_path(ipc_path)
        if others.get("app_id") is not None:
            check_name("app id", others["app_id"])
        if dynamic_allocation is not None:
            if cluster_manager is None:
                raise ConfigError("--dynamic-allocation needs a cluster manager: --local N, "
                                  "--hosts FILE or --slurm")
        keys = None
        if insecure:
            secret_file = None
        elif secret_file is None:
            raise ConfigError("a secret file is needed unless the driver runs insecure")
        else:
            keys = _secure(secret_file)
        return cls(config, secret_file=secret_file, keys=keys, cluster_manager=cluster_manager,
                   initial_executors=initial_executors, dynamic_allocation=dynamic_allocation,
                   ipc_path=ipc_path, **others)


def _secure(secret_file):
    """The CURVE keys of ``secret_file``, created (mode 0600) if missing."""
    try:
        created = create_secret_file(secret_file)
    except OSError as exc:
        raise ConfigError(f"cannot create secret file {secret_file}: {exc}") from None
    if created:
        log.info("created secret file %s", secret_file)
    return load_keys(secret_file, use_environment=False)


def new_app_id():
    """A fresh application id, as a driver given none takes."""
    return f"app-{time.strftime('%Y%m%d%H%M%S')}-{secrets.token_hex(3)}"


def local_options(config, n_executors, cores_per_executor, *, host="127.0.0.1",
                  log_level="WARNING", dynamic_allocation=None, initial_executors=None,
                  **others):
    """The options of a driver that runs its executors on this host, as ``LocalCluster``
    gives them: ``initial_executors`` counts only with a dynamic allocation policy."""
    return DriverOptions.create(
        config, cluster_manager=local_manager(host, cores_per_executor, log_level),
        initial_executors=executors_at_start(n_executors, initial_executors, dynamic_allocation),
        dynamic_allocation=dynamic_allocation, host=host, **others)


def local_manager(host, cores_per_executor, log_level):
    """The cluster manager of executors on this host, for a driver bound to ``host``."""
    hostname = host if host not in ("0.0.0.0", "*") else socket.gethostname()
    return LocalClusterManager(cores_per_executor, hostname=hostname, log_level=log_level)


def check_ipc_path(path):
    """ConfigError unless a driver can listen at Unix socket ``path``."""
    if not fits_a_unix_socket(path):
        raise ConfigError(f"--ipc-path must be at most {UNIX_SOCKET_PATH_MAX} bytes long, got {path!r}")
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise ConfigError(f"--ipc-path: no directory {os.path.dirname(os.path.abspath(path))!r}")
    if os.path.exists(path):  # ZeroMQ would replace it: refuse to take a live one over
        probe = socket.socket(socket.AF_UNIX)
        try:
            probe.connect(path)
        except OSError:
            pass  # left behind by a process that is gone
        else:
            raise ConfigError(f"--ipc-path {path!r} is in use by another process")
        finally:
            probe.close()
