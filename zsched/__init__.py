"""zsched: run very many Python tasks on a cluster of executor processes."""
from .client import Client, TaskFuture
from .config import Config
from .errors import (ConfigError, DriverConnectionError, MessageTooLarge, ProtocolError,
                     RemoteTraceback, TaskFailed, ZschedError)
from .local_cluster import LocalCluster
from .progress_bar import progress
from .slurm_cluster import SlurmCluster
from .ssh_cluster import SSHCluster

__version__ = "0.1.0"

__all__ = ["Client", "LocalCluster", "SlurmCluster", "SSHCluster", "progress", "TaskFuture", "Config", "ConfigError",
           "DriverConnectionError", "MessageTooLarge", "ProtocolError", "RemoteTraceback",
           "TaskFailed", "ZschedError", "__version__"]
