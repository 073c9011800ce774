"""zsched: run very many Python tasks on a cluster of executor processes."""
import importlib
import importlib.machinery
import os
import sys

from . import embedded as _embedded
from .entry import lazy_exports

__version__ = "0.1.0"


def _has_compiled(directory):
    return any(os.path.exists(os.path.join(directory, "_wire" + suffix))
               for suffix in importlib.machinery.EXTENSION_SUFFIXES)


def _compiled_elsewhere():
    """The directory of an installed, compiled zsched when this one is an uncompiled checkout.

    ``python -m zsched.driver`` run from a checkout's root finds the checkout's sources
    first; a user who ran ``pip install .`` means the package they installed."""
    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("ZSCHED_PUREPYTHON", "") not in ("", "0") or _has_compiled(here):
        return None
    for entry in sys.path:
        candidate = os.path.join(os.path.abspath(entry or os.curdir), "zsched")
        if candidate != here and os.path.isfile(os.path.join(candidate, "__init__.py")) \
                and _has_compiled(candidate):
            return candidate
    return None


_installed = _compiled_elsewhere()
if _installed is not None:
    __path__[:] = [_installed]  # every submodule now comes from the installed package
    __file__ = os.path.join(_installed, "__init__.py")
del _installed

# Each name is imported from its module on first use, so a driver or an executor process
# does not pay for the client's imports (cloudpickle, tqdm, ...) at start.

_SOURCES = {
    "Client": "client", "TaskFuture": "client.future",
    "Config": "config",
    "ConfigError": "errors", "DataRefused": "errors", "DriverConnectionError": "errors",
    "ExceptionTooLarge": "errors", "Broadcast": "broadcast",
    "MessageTooLarge": "errors",
    "ProtocolError": "errors", "RemoteTraceback": "errors", "TaskFailed": "errors",
    "ZschedError": "errors",
    "LocalCluster": "clusters.local",
    "progress": "client.progress_bar",
    "SlurmCluster": "clusters.slurm",
    "SSHCluster": "clusters.ssh",
}

__all__ = ["Client", "LocalCluster", "SlurmCluster", "SSHCluster", "progress", "TaskFuture", "Config",
           "Broadcast", "ConfigError", "DataRefused", "DriverConnectionError", "ExceptionTooLarge", "MessageTooLarge", "ProtocolError",
           "RemoteTraceback", "TaskFailed", "ZschedError", "__version__"]


__getattr__ = lazy_exports(__name__, _SOURCES)[0]


def _embedded_cluster(n_executors):
    """The cluster of ``zsched.Client()``: a ``LocalCluster`` whose driver runs in a thread
    of this process. Taken through the package's names, as ``zsched.LocalCluster``."""
    from . import LocalCluster
    return LocalCluster(n_executors=n_executors, in_process=True)


_embedded.register(_embedded_cluster)


def __dir__():
    return sorted(__all__)
