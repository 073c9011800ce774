"""What a client asks of the cluster besides tasks: its executors, its status, and
changes to its executors. Each is one admin request to the driver (``Client._admin``)."""
from .. import protocol as p


class ClusterAdmin:
    """The administration calls of ``Client``."""

    __slots__ = ()

    def total_cores(self):
        """The cores of the executors registered now, as the driver counts them."""
        return self._admin(p.AdminTotalCores)

    def executor_ids(self):
        """Ids of the registered executors."""
        return self._admin(p.AdminExecutorIds)

    def is_executor_active(self, executor_id):
        return self._admin(p.AdminIsExecutorActive, executor_id)

    def status(self):
        """Executors, task counts and recent executor losses, as the driver sees them."""
        return self._admin(p.AdminStatus)

    def decommission_executors(self, executor_ids):
        """Decommission executors: they take no new tasks, finish their running ones
        (whose results arrive as usual), then exit; not counted as failures, not replaced.
        Their unstarted tasks run elsewhere. Returns the ids the driver acknowledged."""
        return self._admin(p.AdminDecommissionExecutors, list(executor_ids))

    def request_total_executors(self, n, locality_aware_tasks=0, host_to_local_task_count=None):
        """Have ``n`` executors (a later request overrides this one; running executors are
        never killed to reach a lower number). True when the driver acknowledged it."""
        if n < 0:
            raise ValueError(f"cannot request a negative number of executors ({n})")
        return self._admin(p.AdminRequestTotalExecutors, n, locality_aware_tasks,
                           host_to_local_task_count)

    def request_executors(self, n):
        """``n`` executors more than requested so far."""
        if n < 0:
            raise ValueError(f"cannot request a negative number of additional executors ({n})")
        return self._admin(p.AdminRequestExecutors, n)

    def kill_executors(self, executor_ids, *, replace=False, force=False):
        """Kill executors (busy ones only with ``force``); without ``replace`` none replaces
        them. Returns the ids the driver acknowledged."""
        return self._admin(p.AdminKillExecutors, list(executor_ids), bool(replace), bool(force))

    def kill_executors_on_host(self, host):
        """Kill every executor on ``host`` (they are replaced); True if there was one."""
        return self._admin(p.AdminKillExecutorsOnHost, host)

    def decommission_executors_on_host(self, host):
        """Decommission every executor on ``host``; True if there was one."""
        return self._admin(p.AdminDecommissionExecutorsOnHost, host)
