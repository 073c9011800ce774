"""The interface every cluster manager has (see the package docstring)."""


class ClusterManager:
    """A cluster manager that starts nothing: executors are started by someone else.

    Subclasses start and stop executors; this base gives the bookkeeping a manager that
    starts nothing needs, so a driver can work with it unchanged."""

    cores_per_executor = 1

    def __init__(self):
        self._target = 0
        self._registered = set()

    def attach(self, driver_url, app_id, secret_file):
        self.driver_url, self.app_id, self.secret_file = driver_url, app_id, secret_file

    def expected_executors(self):
        return self._target

    def set_target(self, n):
        self._target = n

    def request_total(self, n):
        self._target = n

    def launched_ids(self):
        return []

    def registered(self, executor_id):
        self._registered.add(executor_id)

    def was_registered(self, executor_id):
        return executor_id in self._registered

    def kill(self, executor_ids):
        pass

    def exit_reason(self, executor_id, wait=0.0):
        return None

    def poll_exits(self):
        return []

    def stop(self, timeout):
        pass
