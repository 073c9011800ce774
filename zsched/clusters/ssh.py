"""``zsched.SSHCluster``: a driver process on this machine and executors started over SSH
on other hosts, as ``bin/driver --hosts FILE``."""
import os

from ..cluster_managers.hosts_file import parse_hosts, read_hosts_file
from .base import Cluster


class SSHCluster(Cluster):
    """A cluster of executors on ``hosts``; a context manager, like ``LocalCluster``.

    ``hosts`` is a hosts file's path or its lines (``["user@node1 4", "node2:2222"]``): at
    most that many executors run on each host, started with the system ssh client with
    ``ssh_options`` (each passed as ``-o OPT``) and ``remote_python`` (the interpreter on the
    hosts, with zsched installed). The driver listens on ``host`` (default every address:
    executors on each host get the address that host is reached from) and waits for
    ``wait_for_executors`` executors to register (default 1: the others join as they come;
    a host that cannot start executors is reported and retried without holding up the
    others). The other arguments are those of ``LocalCluster`` but ``in_process``: the
    driver runs in a process of its own.
    """

    def __init__(self, hosts, cores_per_executor=1, *, ssh_options=(), remote_python="python3",
                 host="0.0.0.0", wait_for_executors=1, **kwargs):
        if isinstance(hosts, (str, os.PathLike)):
            self.hosts_file, self.hosts = os.fspath(hosts), read_hosts_file(hosts)
            self._host_lines = None
        else:
            self._host_lines = [str(line) for line in hosts]
            self.hosts_file, self.hosts = None, parse_hosts(self._host_lines, "hosts")
        self._ssh_options = list(ssh_options)
        self._remote_python = remote_python
        capacity = sum(h.executors for h in self.hosts)
        super().__init__(capacity, cores_per_executor, host=host, wait=wait_for_executors, **kwargs)

    def _manager_arguments(self, n_executors):
        if self.hosts_file is None:
            self.hosts_file = os.path.join(self._private_dir, "hosts")
            with open(self.hosts_file, "w", encoding="utf-8") as f:
                f.write("\n".join(self._host_lines) + "\n")
        arguments = ["--hosts", self.hosts_file, "--remote-python", self._remote_python]
        for option in self._ssh_options:
            arguments += ["--ssh-option", option]
        return arguments
