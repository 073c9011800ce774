"""The administrator's operations on the driver: one typed message per operation
(``protocol.AdminOp``), each answered by an AdminReply, the allocation contract behind
them (Spark's ExecutorAllocationClient), and the dynamic allocation policy applied to it."""
import logging
import time
from collections import deque

from .. import protocol as p
from .arena_cache import stats as memory_cache_stats
from ..fastpath import IMPLEMENTATION as FASTPATH_IMPLEMENTATION
from ..protocol import AdminOp

log = logging.getLogger("zsched.driver")

_HISTORY_POINTS = 1200  # the dashboard's snapshots charted: 10 minutes at two a second


class Admin:
    """The operations of ``AdminOp``, run in the driver loop's thread. An operation given
    arguments it cannot act on raises ValueError, which the requester gets back as the
    reply's error.

    It holds the dashboard's history and last snapshot, and when each executor was first
    seen idle (for the dynamic allocation policy). It is given the executor ``registry``,
    the ``scheduler``, the ``functions`` table (read for its size), ``send(rid, msg,
    quiet=False)``, the driver's ``clock`` and traffic ``counters``, its ``app_id`` and
    ``url``, ``is_ready()``; the ``allocator``, ``cluster_manager`` and
    ``dynamic_allocation`` policy (each None without a cluster manager); and the executor
    endpoint's ``remove_executor(executor_id, reason, notify=True, count_failure=True)``
    and ``send_control(executor, msg)``."""

    def __init__(self, *, registry, scheduler, functions, send, clock, counters, app_id, url,
                 is_ready, allocator, cluster_manager, dynamic_allocation, remove_executor,
                 send_control, longest_pause, clients, data):
        self._registry = registry
        self._scheduler = scheduler
        self._functions = functions
        self._send = send
        self._clock = clock
        self._counters = counters
        self._app_id, self._url = app_id, url
        self._is_ready = is_ready
        self._allocator = allocator
        self._cluster_manager = cluster_manager
        self._dynamic_allocation = dynamic_allocation
        self._remove_executor = remove_executor
        self._send_control = send_control
        self._longest_pause = longest_pause  # of the driver's loop, over the last minute
        self._clients = clients  # routing id -> ClientData, of the connected clients
        self._data = data  # the DataStore: large arguments and broadcast values
        self.dashboard_url = None  # set once the dashboard serves: status() tells clients
        self._history = deque(maxlen=_HISTORY_POINTS)
        self._snapshot = None
        self._idle_since = {}         # executor id -> when it was first seen idle
        self._operations = {
            AdminOp.PING: self.ping,
            AdminOp.EXECUTOR_IDS: self.executor_ids,
            AdminOp.TOTAL_CORES: self.total_cores,
            AdminOp.STATUS: self.status,
            AdminOp.IS_EXECUTOR_ACTIVE: self.is_executor_active,
            AdminOp.DECOMMISSION_EXECUTORS: self.decommission_executors,
            AdminOp.DECOMMISSION_EXECUTORS_ON_HOST: self.decommission_executors_on_host,
            AdminOp.REQUEST_TOTAL_EXECUTORS: self.request_total_executors,
            AdminOp.REQUEST_EXECUTORS: self.request_executors,
            AdminOp.KILL_EXECUTORS: self.kill_executors,
            AdminOp.KILL_EXECUTORS_ON_HOST: self.kill_executors_on_host,
        }
        assert set(self._operations) == set(AdminOp)

    def handle(self, rid, msg, known_client):
        """Answer admin message ``msg`` from peer ``rid``; ``known_client`` is whether that
        peer said hello as a client (others get an error, never an operation)."""
        if not known_client:
            self._send(rid, p.AdminReply(msg.request_id, False, p.UNKNOWN_CLIENT), quiet=True)
            return
        try:
            value = self._operations[msg.OP](*msg.args())
        except (TypeError, ValueError) as exc:
            self._send(rid, p.AdminReply(msg.request_id, False, f"{type(exc).__name__}: {exc}"))
            return
        self._send(rid, p.AdminReply(msg.request_id, True, value))

    # ------------------------------------------------------------ what the driver sees

    def ping(self):
        """Answered by the loop: a client over pipes asks it when the driver is silent."""
        return True

    def executor_ids(self):
        return self._registry.ids()

    def total_cores(self):
        """Cores of the registered executors that take tasks (``map`` sizes its chunks by it)."""
        return self._registry.cores(active_only=True)

    def is_executor_active(self, executor_id):
        return self._registry.is_active(executor_id)

    def status(self):
        """Executors, task counts, allocation and recent losses, as plain data."""
        scheduler, registry = self._scheduler, self._registry
        counts = dict(scheduler.counts)
        counts["queued"] = scheduler.n_pending
        counts["running"] = scheduler.running_count()
        counts["waiting_for_hosts"] = len(scheduler.locality)
        speculation, exclusion = scheduler.speculation, scheduler.exclusion
        counts["speculated"] = 0 if speculation is None else speculation.speculated
        counts["speculation_won"] = 0 if speculation is None else speculation.won
        now = self._clock()
        return {
            "app_id": self._app_id,
            "url": self._url,
            "dashboard_url": self.dashboard_url,
            "fast_path": FASTPATH_IMPLEMENTATION,
            "memory_cache": memory_cache_stats(),
            "ready": self._is_ready(),
            "executors": [
                {**e.metrics,  # rss, cpu, busy threads: from its last heartbeat
                 "id": e.executor_id, "host": e.hostname, "cores": e.cores, "pid": e.pid,
                 "state": registry.state(e),
                 "running": len(e.running), "slots": e.slots,
                 "free_slots": max(0, scheduler.slots.free(e.slot)),
                 "task_seconds": e.task_seconds,
                 "tasks_done": e.tasks_done, "tasks_failed": e.tasks_failed,
                 "last_heartbeat_age": registry.silence(e.executor_id, now),
                 "relief": e.executor_id in registry.reliefs}
                for e in (registry.get(i) for i in registry.ids())
            ],
            "tasks": counts,
            "heartbeat_interval": registry.liveness.interval,  # the longest an executor was given
            "excluded": {"executors": [], "hosts": [], "suspended": False, "kill": False}
            if exclusion is None else exclusion.status(now),
            "functions": len(self._functions),
            "data": self._data.status(),
            "allocation": self._allocation_status(),
            "losses": [{"id": i, "host": h, "reason": r, "time": t}
                       for i, h, r, t in registry.losses],
            "counters": dict(self._counters),
            "loop_longest_pause": self._longest_pause(),
            "clients": [self._client_status(client) for client in self._clients.values()],
        }

    @staticmethod
    def _client_status(client):
        """A client's tasks and results on their way; ``behind``: its queued tasks wait
        (``tasks_held``, not counted as queued) until it takes the results held for it."""
        return {"id": client.routing_id.hex(), "pid": client.pid, "tasks": len(client.tasks),
                "results_in_flight": client.in_flight_rows,
                "results_held_bytes": client.unsent_size + client.results.payload_size(),
                "behind": client.held is not None,
                "tasks_held": len(client.held or ())}

    def publish_snapshot(self):
        """What the dashboard shows: ``status()`` with the history of the figures charted,
        traffic counters and scheduling latency. A new dict each time (the dashboard's
        threads read the last one published, never one being built)."""
        status = self.status()
        tasks = status["tasks"]
        now = time.time()
        self._history.append([now, tasks["finished"], tasks["failed"], tasks["queued"],
                              tasks["running"], len(status["executors"])])
        self._snapshot = {**status, "time": now, "history": list(self._history),
                          "scheduling_latency": self._scheduler.latency.snapshot()}

    def dashboard_started(self, url):
        """The dashboard serves at ``url``: ``status()`` tells clients, and it gets its
        first snapshot."""
        self.dashboard_url = url
        self.publish_snapshot()

    def last_snapshot(self):
        """The snapshot published last; read by the dashboard's threads."""
        return self._snapshot

    def _allocation_status(self):
        allocator, manager = self._allocator, self._cluster_manager
        if allocator is None:
            return None
        return {"target": allocator.target, "starting": allocator.pending(),
                "capacity": manager.capacity(),
                "queued": len(manager.queued_ids()),
                "backoff": {str(h): s for h, s in allocator.backoff().items()},
                "start_failures": allocator.executor_start_failures,
                "dynamic": self._dynamic_allocation is not None,
                "locality_aware_tasks": allocator.locality_aware_tasks,
                "host_to_local_task_count": dict(allocator.host_to_local_task_count),
                "excluded_hosts": sorted(allocator.excluded_hosts)}

    # ------------------------------------------------------------ decommissioning

    def decommission_executors(self, executor_ids, adjust_target=True):
        """Decommission these executors: no new tasks, their unstarted ones go elsewhere,
        their running ones finish, then they exit. Returns the ids acknowledged."""
        acknowledged = []
        for executor_id in executor_ids:
            executor = self._registry.get(executor_id)
            if executor is None:
                log.warning("decommission: unknown executor %r skipped", executor_id)
                continue
            if executor.decommissioning:
                continue
            log.info("decommissioning executor %s (%d task(s) held)", executor_id,
                     len(executor.running))
            self._scheduler.decommission(executor)
            if adjust_target:
                self.forget_target(executor_id)
            self._send_control(executor, p.DecommissionExecutor("decommissioned by the driver"))
            acknowledged.append(executor_id)
        return acknowledged

    def decommission_executors_on_host(self, host):
        return bool(self.decommission_executors(self._registry.ids_on_host(host)))

    # ------------------------------------------------------------ the allocation contract

    def _allocator_or_refuse(self):
        if self._allocator is None:
            raise ValueError("this driver has no cluster manager: start it with --local N")
        return self._allocator

    def request_total_executors(self, n, locality_aware_tasks=0, host_to_local_task_count=None):
        """Have ``n`` executors: a later request overrides this one; never kills by itself.
        New executors go first to the hosts that ``host_to_local_task_count`` names most."""
        if n < 0:
            raise ValueError(f"cannot request a negative number of executors ({n})")
        allocator = self._allocator_or_refuse()
        allocator.set_locality(locality_aware_tasks, host_to_local_task_count)
        allocator.set_target(n, "requested total")
        return True

    def request_executors(self, n):
        """``n`` executors more than the current target."""
        if n < 0:
            raise ValueError(f"cannot request a negative number of additional executors ({n})")
        allocator = self._allocator_or_refuse()
        allocator.set_target(allocator.target + n, f"requested {n} more")
        return True

    def kill_executors(self, executor_ids, replace=False, force=False):
        """Kill these executors; busy ones only with ``force``; unknown ids are skipped with
        a warning. Without ``replace`` the target drops so that none replaces them (and
        their tasks are not charged); with it, the loss counts as a failure of their tasks.
        Returns the ids acknowledged."""
        killed = []
        for executor_id in executor_ids:
            executor = self._registry.get(executor_id)
            if executor is None:
                log.warning("kill: unknown executor %r skipped", executor_id)
                continue
            if executor.running and not force:
                log.info("kill: executor %s is busy (%d task(s)); not killed without force",
                         executor_id, len(executor.running))
                continue
            if not replace:
                self.forget_target(executor_id)
            self._remove_executor(executor_id, "killed by the driver" + (" (replaced)" if replace else ""),
                                  count_failure=replace)
            killed.append(executor_id)
        return killed

    def kill_executors_on_host(self, host):
        """Kill every executor on ``host``, busy or not; they are replaced."""
        ids = self._registry.ids_on_host(host)
        return bool(self.kill_executors(ids, replace=True, force=True))

    def stop_all_executors(self):
        """Remove every executor, none replaced (a client's StopExecutors)."""
        for executor_id in list(self._registry.by_id):
            self.forget_target(executor_id)
            self._remove_executor(executor_id, "killed by the driver (StopExecutors from a client)",
                                  count_failure=False)

    def forget_target(self, executor_id):
        """An executor the cluster manager started leaves on purpose: not replaced."""
        manager, allocator = self._cluster_manager, self._allocator
        if manager is not None and executor_id in manager.launched_ids():
            allocator.set_target(max(0, allocator.target - 1),
                                 f"executor {executor_id} leaves on purpose")

    def allocate_dynamically(self):
        """Apply the dynamic allocation policy to what the driver sees now."""
        now = self._clock()
        scheduler, allocator = self._scheduler, self._allocator
        idle_since = {e.executor_id: None if e.running else self._idle_since.get(e.executor_id, now)
                      for e in self._registry.by_id.values() if not e.decommissioning}
        self._idle_since = {i: since for i, since in idle_since.items() if since is not None}
        decision = self._dynamic_allocation.update(
            now, allocator.target, scheduler.n_pending, scheduler.running_count(),
            self._cluster_manager.cores_per_executor, idle_since)
        for reason in decision.reasons:
            log.info("dynamic allocation: %s", reason)
        if decision.decommission:
            self.decommission_executors(decision.decommission, adjust_target=False)
        allocator.set_target(decision.target, "dynamic allocation")
        if scheduler.locality or allocator.host_to_local_task_count:  # Spark's locality-aware request
            allocator.set_locality(len(scheduler.locality), scheduler.locality.waiting_by_host())
