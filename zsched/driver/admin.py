"""The administrator's operations on the driver: one typed message per operation
(``protocol.AdminOp``), each answered by an AdminReply, and the allocation contract behind
them (Spark's ExecutorAllocationClient)."""
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
    """The operations of ``AdminOp`` on ``driver``, run in its loop's thread. An operation
    given arguments it cannot act on raises ValueError, which the requester gets back as the
    reply's error."""

    def __init__(self, driver):
        self.driver = driver
        self._history = deque(maxlen=_HISTORY_POINTS)
        self._snapshot = None
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

    def send(self, rid, msg, quiet=False):
        return self.driver.peers.send(rid, msg, quiet)

    def handle(self, rid, msg, known_client):
        """Answer admin message ``msg`` from peer ``rid``; ``known_client`` is whether that
        peer said hello as a client (others get an error, never an operation)."""
        if not known_client:
            self.send(rid, p.AdminReply(msg.request_id, False, p.UNKNOWN_CLIENT), quiet=True)
            return
        try:
            value = self._operations[msg.OP](*msg.args())
        except (TypeError, ValueError) as exc:
            self.send(rid, p.AdminReply(msg.request_id, False, f"{type(exc).__name__}: {exc}"))
            return
        self.send(rid, p.AdminReply(msg.request_id, True, value))

    # ------------------------------------------------------------ what the driver sees

    def ping(self):
        """Answered by the loop: a client over pipes asks it when the driver is silent."""
        return True

    def executor_ids(self):
        return self.driver.registry.ids()

    def total_cores(self):
        """Cores of the registered executors that take tasks (``map`` sizes its chunks by it)."""
        return self.driver.registry.cores(active_only=True)

    def is_executor_active(self, executor_id):
        return self.driver.registry.is_active(executor_id)

    def status(self):
        """Executors, task counts, allocation and recent losses, as plain data."""
        d = self.driver
        scheduler, registry = d.scheduler, d.registry
        counts = dict(scheduler.counts)
        counts["queued"] = scheduler.n_pending
        counts["running"] = scheduler.running_count()
        now = d.clock()
        return {
            "app_id": d.app_id,
            "url": d.url,
            "fast_path": FASTPATH_IMPLEMENTATION,
            "memory_cache": memory_cache_stats(),
            "ready": d.is_ready(),
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
            "functions": len(d.functions),
            "allocation": self._allocation_status(),
            "losses": [{"id": i, "host": h, "reason": r, "time": t}
                       for i, h, r, t in registry.losses],
            "counters": dict(d.counters),
        }

    def publish_snapshot(self):
        """What the dashboard shows: ``status()`` with the history of the figures charted,
        traffic counters and scheduling latency. A new dict each time (the dashboard's
        threads read the last one published, never one being built)."""
        d = self.driver
        status = self.status()
        tasks = status["tasks"]
        now = time.time()
        self._history.append([now, tasks["finished"], tasks["failed"], tasks["queued"],
                              tasks["running"], len(status["executors"])])
        self._snapshot = {**status, "time": now, "history": list(self._history),
                          "scheduling_latency": d.scheduling_latency.snapshot()}

    def last_snapshot(self):
        """The snapshot published last; read by the dashboard's threads."""
        return self._snapshot

    def _allocation_status(self):
        d = self.driver
        if d.allocator is None:
            return None
        return {"target": d.allocator.target, "starting": d.allocator.pending(),
                "capacity": d.cluster_manager.capacity(),
                "queued": len(d.cluster_manager.queued_ids()),
                "backoff": {str(h): s for h, s in d.allocator.backoff().items()},
                "dynamic": d.dynamic_allocation is not None}

    # ------------------------------------------------------------ decommissioning

    def decommission_executors(self, executor_ids, adjust_target=True):
        """Decommission these executors: no new tasks, their unstarted ones go elsewhere,
        their running ones finish, then they exit. Returns the ids acknowledged."""
        d = self.driver
        acknowledged = []
        for executor_id in executor_ids:
            executor = d.registry.get(executor_id)
            if executor is None:
                log.warning("decommission: unknown executor %r skipped", executor_id)
                continue
            if executor.decommissioning:
                continue
            log.info("decommissioning executor %s (%d task(s) held)", executor_id,
                     len(executor.running))
            d.scheduler.decommission(executor)
            if adjust_target:
                self.forget_target(executor_id)
            d.executor_endpoint.send_control(executor,
                                             p.DecommissionExecutor("decommissioned by the driver"))
            acknowledged.append(executor_id)
        return acknowledged

    def decommission_executors_on_host(self, host):
        return bool(self.decommission_executors(self.driver.registry.ids_on_host(host)))

    # ------------------------------------------------------------ the allocation contract

    def _allocator(self):
        if self.driver.allocator is None:
            raise ValueError("this driver has no cluster manager: start it with --local N")
        return self.driver.allocator

    def request_total_executors(self, n, locality_aware_tasks=0, host_to_local_task_count=None):
        """Have ``n`` executors: a later request overrides this one; never kills by itself."""
        if n < 0:
            raise ValueError(f"cannot request a negative number of executors ({n})")
        self._allocator().set_target(n, "requested total")
        return True

    def request_executors(self, n):
        """``n`` executors more than the current target."""
        if n < 0:
            raise ValueError(f"cannot request a negative number of additional executors ({n})")
        allocator = self._allocator()
        allocator.set_target(allocator.target + n, f"requested {n} more")
        return True

    def kill_executors(self, executor_ids, replace=False, force=False):
        """Kill these executors; busy ones only with ``force``; unknown ids are skipped with
        a warning. Without ``replace`` the target drops so that none replaces them (and
        their tasks are not charged); with it, the loss counts as a failure of their tasks.
        Returns the ids acknowledged."""
        d = self.driver
        killed = []
        for executor_id in executor_ids:
            executor = d.registry.get(executor_id)
            if executor is None:
                log.warning("kill: unknown executor %r skipped", executor_id)
                continue
            if executor.running and not force:
                log.info("kill: executor %s is busy (%d task(s)); not killed without force",
                         executor_id, len(executor.running))
                continue
            if not replace:
                self.forget_target(executor_id)
            d.remove_executor(executor_id, "killed by the driver" + (" (replaced)" if replace else ""),
                              count_failure=replace)
            killed.append(executor_id)
        return killed

    def kill_executors_on_host(self, host):
        """Kill every executor on ``host``, busy or not; they are replaced."""
        ids = self.driver.registry.ids_on_host(host)
        return bool(self.kill_executors(ids, replace=True, force=True))

    def stop_all_executors(self):
        """Remove every executor, none replaced (a client's StopExecutors)."""
        d = self.driver
        for executor_id in list(d.registry.by_id):
            self.forget_target(executor_id)
            d.remove_executor(executor_id, "killed by the driver (StopExecutors from a client)",
                              count_failure=False)

    def forget_target(self, executor_id):
        """An executor the cluster manager started leaves on purpose: not replaced."""
        d = self.driver
        if d.cluster_manager is not None and executor_id in d.cluster_manager.launched_ids():
            d.allocator.set_target(max(0, d.allocator.target - 1),
                                   f"executor {executor_id} leaves on purpose")
