"""zsched: run very many Python tasks on a cluster of executor processes."""
import importlib

__version__ = "0.1.0"

# Each name is imported from its module on first use, so a driver or an executor process
# does not pay for the client's imports (cloudpickle, tqdm, ...) at start.
_SOURCES = {
    "Client": "client", "TaskFuture": "future",
    "Config": "config",
    "ConfigError": "errors", "DriverConnectionError": "errors", "MessageTooLarge": "errors",
    "ProtocolError": "errors", "RemoteTraceback": "errors", "TaskFailed": "errors",
    "ZschedError": "errors",
    "LocalCluster": "local_cluster",
    "progress": "progress_bar",
    "SlurmCluster": "slurm_cluster",
    "SSHCluster": "ssh_cluster",
}

__all__ = ["Client", "LocalCluster", "SlurmCluster", "SSHCluster", "progress", "TaskFuture", "Config",
           "ConfigError", "DriverConnectionError", "MessageTooLarge", "ProtocolError",
           "RemoteTraceback", "TaskFailed", "ZschedError", "__version__"]


def __getattr__(name):
    module = _SOURCES.get(name)
    if module is None:
        raise AttributeError(f"module 'zsched' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups find it directly
    return value


def __dir__():
    return sorted(__all__)
