"""The interface every cluster manager has (see the package docstring)."""

# seconds from SIGTERM to SIGKILL for an executor stopped (a task holding the GIL in C, or
# blocking SIGTERM, keeps the first from ending it)
KILL_GRACE = 3.0


class ClusterManager:
    """A cluster manager that starts nothing: executors are started by someone else.

    Subclasses start and stop executors; this base gives the bookkeeping a manager that
    starts nothing needs, so a driver can work with it unchanged."""

    cores_per_executor = 1
    # True when how an executor ended is known only after the executor itself said why it
    # left (a batch system ends a job with SIGTERM, then says why): the driver adds it then
    explains_losses_later = False
    # True when its executors run on the driver's host: they may reach it by its Unix socket
    on_this_host = False
    # set by a driver on this host: ``adopt_link(executor id, read fd, write fd)`` takes the
    # driver's end of a pipe pair to an executor the manager starts (see pipe_link)
    adopt_link = None
    # set by ``attach``: the credential of an executor about to start (None: insecure)
    credential_for = None

    def attach(self, driver_url, app_id, credential_for):
        """``credential_for(executor_id)``: the credential (one line, bytes) that an executor
        it starts connects with, None on an insecure bus."""
        self.driver_url, self.app_id, self.credential_for = driver_url, app_id, credential_for

    def credential(self, executor_id):
        """A fresh credential for executor ``executor_id``: b"" on an insecure bus, and for
        a manager not attached (called ``attach`` with no ``credential_for``)."""
        if self.credential_for is None:
            return b""
        return self.credential_for(executor_id) or b""

    def request_total(self, n, avoid_hosts=(), local_tasks=None, excluded_hosts=()):
        """Have ``n`` executors, none on ``avoid_hosts``. New ones go first where
        ``local_tasks`` (``{host: waiting tasks that prefer it}``, or None) names most tasks,
        and on ``excluded_hosts`` only when no other host has room."""

    def host_of(self, executor_id):
        """The host an executor it started runs on (None: it has no hosts to choose from)."""
        return None

    def queued_ids(self):
        """Executors waiting for resources in a queue outside zsched (a batch system's): they
        are not timed out for not registering while they wait."""
        return []

    def capacity(self):
        """How many executors it can run at most (None: no limit)."""
        return None

    def launched_ids(self):
        return []

    def registered(self, executor_id):
        """An executor it started registered with the driver (so it runs)."""

    def kill(self, executor_ids):
        pass

    def exit_reason(self, executor_id):
        """How an executor ended, if the manager knows it yet (never waits), else None."""
        return None

    def poll_exits(self):
        return []

    def stop(self, timeout):
        pass
