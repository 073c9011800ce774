"""Cluster managers: they start and stop executor processes for a driver.

Every manager has the same small interface:

- ``attach(driver_url, app_id, credential_for)``: called once, when the driver is bound.
  ``credential_for(executor_id)`` gives the credential of an executor about to start (None
  on an insecure bus): it hands it over on a pipe, never in a file, an argument or the
  executor's environment.
- ``request_total(n, avoid_hosts, local_tasks, excluded_hosts)``: have ``n`` executors
  (starting new ones as needed, never killing), none on ``avoid_hosts`` (hosts backing off
  after failed starts). New ones go first to the hosts that ``local_tasks`` (``{host:
  waiting tasks that prefer it}`` or None) names most; ``excluded_hosts`` (excluded for
  failures) get one only when no other host has room. An executor that cannot start is
  reported by ``poll_exits`` ("could not start: ..."); an error raised here is a failed
  start of the manager as a whole.
- ``host_of(executor_id)``: the host it runs on; ``capacity()``: the most it can run (or None);
  ``queued_ids()``: executors waiting in a batch system's queue (not timed out meanwhile).
- ``kill(executor_ids)``: stop these executors, SIGKILL after ``KILL_GRACE`` if still
  there; they no longer count toward the target.
- ``launched_ids()``: ids of the executors it started that have neither exited nor been killed.
- ``exit_reason(executor_id)``: how an executor ended, or None while it runs (or while its
  end is not known yet).
- ``poll_exits()``: ``[(executor id, reason)]`` for executors that ended since last call.
- ``cores_per_executor``: the size of the executors it starts.
- ``stop(timeout)``: stop every executor and wait for them (bounded).
- ``adopt_link``: set by a driver to a manager whose executors run on its host
  (``on_this_host``); a manager that starts processes itself may give each a pipe pair
  to the driver and hand the driver its end (``LocalClusterManager`` does).

The driver's loop makes these calls, and none but ``stop`` waits: a manager starts, signals and
reaps processes, and runs commands (ssh, sbatch, scancel), in a thread of its own
(``processes.ChildProcesses``, or the Slurm manager's watcher), whose findings the driver
takes when it polls. The driver's ``ExecutorAllocator`` (``zsched/driver/allocation.py``)
decides how many to have.
"""
from ..entry import lazy_exports

# imported on first use: a local cluster's processes do not import the SSH and Slurm managers
_SOURCES = {"ClusterManager": "base", "LocalClusterManager": "local",
            "SlurmClusterManager": "slurm", "SSHClusterManager": "ssh"}
__all__ = ["ClusterManager", "LocalClusterManager", "SlurmClusterManager", "SSHClusterManager"]
__getattr__, __dir__ = lazy_exports(__name__, _SOURCES)
