"""What the driver does with its executors: registration, status updates, heartbeats,
removal, and the checks its loop runs on them (silence, exits, dynamic allocation)."""
import logging

from .. import protocol as p
from .peers import Role

log = logging.getLogger("zsched.driver")


class ExecutorEndpoint:
    """Spark's DriverEndpoint for executors: their messages and their liveness, on the
    state of ``driver`` (its registry, scheduler, allocator and peers), in its loop's
    thread."""

    def __init__(self, driver):
        self.driver = driver
        self._idle_since = {}         # executor id -> when it was first seen idle

    def on_register(self, rid, msg):
        d = self.driver
        executor_id = msg.executor_id
        reason = None
        if msg.app_id != d.app_id:
            reason = f"app id {msg.app_id!r} does not match the driver's {d.app_id!r}"
        elif executor_id in d.executors:
            reason = f"Duplicate executor ID: {executor_id}"
        elif rid in d.registry.by_rid or rid in d.clients:
            reason = "this connection is already registered"
        elif msg.cores < 1:
            reason = f"an executor needs at least one core, got {msg.cores}"
        elif msg.cores > p.MAX_CORES:
            reason = f"an executor may have at most {p.MAX_CORES} cores, got {msg.cores}"
        elif not executor_id:
            reason = "empty executor id"
        if reason is not None:
            log.warning("refused registration of executor %r from %s: %s",
                        executor_id, msg.hostname, reason)
            d.peers.send(rid, p.RegisterExecutorFailed(reason))
            return
        executor = d.scheduler.add_executor(executor_id, rid, msg.hostname, msg.cores, msg.pid,
                                            d.clock())
        d.registry.add(executor, d.clock())
        d.peers.peer_for(rid).role = Role.EXECUTOR
        log.info("Registered executor %s on %s (pid %d) with %d core(s)",
                 executor_id, msg.hostname, msg.pid, msg.cores)
        if d.cluster_manager is not None:
            d.allocator.registered(executor_id)
            d.cluster_manager.registered(executor_id)
        d.peers.send(rid, p.RegisteredExecutor(d.incarnation, d.config.to_settings()))
        d.offers_needed = True

    def _executor_for(self, rid, incarnation=None):
        d = self.driver
        executor = d.registry.by_rid.get(rid)
        if executor is None or (incarnation is not None and incarnation != d.incarnation):
            # an executor declared lost and then woken, or one of an earlier driver: what it
            # says is ignored (its tasks already run elsewhere) and it is told to exit
            if rid not in d.warned_peers:
                d.warned_peers.add(rid)
                log.info("ignoring an executor that is not registered with this driver "
                         "(peer %s); told it to exit", rid.hex())
            d.peers.send(rid, p.StopExecutor("not registered with this driver (removed, or from "
                                           "an earlier driver incarnation)"), quiet=True)
            if executor is not None:  # registered, yet it names another incarnation: told to
                # exit, it takes no more tasks here; those it holds run elsewhere at once
                self.remove_executor(executor.executor_id,
                                     "sent a message of another driver incarnation (told to exit)",
                                     notify=False, count_failure=False)
            return None
        registry = d.registry
        if registry.heard_from(executor.executor_id, d.clock()):
            log.warning("executor %s is heard from again", executor.executor_id)
        if registry.covering and rid == registry.covering.get(executor.executor_id):
            registry.uncover(executor)  # its loop speaks: the long task has ended
        return executor

    def on_status_updates(self, rid, msg):
        d = self.driver
        executor = self._executor_for(rid, msg.incarnation)
        if executor is None:
            return
        stale = d.scheduler.status_updates(executor, msg.updates, msg.busy)
        if stale:
            log.info("ignored %d status update(s) for attempts no longer current from executor %s",
                     stale, executor.executor_id)
        d.offers_needed = True

    def on_heartbeat(self, rid, msg):
        d = self.driver
        executor = self._executor_for(rid, msg.incarnation)
        if executor is None:
            return
        executor.metrics = p.heartbeat_metrics(msg.metrics)  # what the dashboard can serve
        if rid == d.registry.reliefs.get(executor.executor_id):
            d.registry.cover(executor)  # its loop runs a long task: the relief reads
        d.peers.send(rid, p.HeartbeatAck(d.incarnation))

    def on_attach_relief(self, rid, msg):
        """An executor's relief thread connected: it gets a copy of each kill and stop."""
        d = self.driver
        executor = d.registry.get(msg.executor_id)
        try:
            if executor is None or msg.incarnation != d.incarnation or msg.pid != executor.pid:
                raise ValueError("no such executor of this driver")
            d.registry.attach_relief(msg.executor_id, rid)
        except ValueError as exc:
            d.warn_peer(rid, f"AttachRelief of executor {msg.executor_id!r} refused: {exc}")
            return
        d.peers.peer_for(rid).role = Role.EXECUTOR

    def send_control(self, executor, msg, quiet=False):
        """Send ``executor`` a kill or a stop on each of its connections: its relief thread
        may cover for a long task, and on its own one the message follows every launch
        sent there before. True if the executor's own connection took it."""
        d = self.driver
        registry = d.registry
        relief = registry.reliefs.get(executor.executor_id)
        if relief is not None:
            d.peers.send(relief, msg, quiet=True)
        own = registry.covering.get(executor.executor_id, executor.routing_id)
        return d.peers.send(own, msg, quiet)

    def relief_gone(self, rid):
        """If ``rid`` is an executor's relief connection, forget it: True if it was one."""
        d = self.driver
        if not d.registry.detach_relief(rid):
            return False
        d.peers.forget(rid)
        return True

    def on_remove(self, rid, msg):
        d = self.driver
        executor = d.registry.by_rid.get(rid)
        if executor is not None:  # the executor reports its own exit
            self.remove_executor(executor.executor_id, msg.reason, notify=False,
                                 count_failure=msg.charge_tasks)
        else:
            d.warn_peer(rid, "RemoveExecutor from an unknown peer")

    def remove_executor(self, executor_id, reason, notify=True, count_failure=True):
        """Forget an executor (its tasks run elsewhere) for ``reason``; ``notify`` tells it to
        exit; ``count_failure`` is False when the driver caused the loss."""
        d = self.driver
        relief = d.registry.reliefs.get(executor_id)
        executor = d.registry.remove(executor_id, reason)  # its routing id is its own again
        if executor is None:
            return False
        if executor.decommissioning:
            count_failure = False
        log.log(logging.WARNING if count_failure else logging.INFO,
                "Removed executor %s on %s: %s (%d task(s) were running)",
                executor_id, executor.hostname, reason, len(executor.running))
        d.counters["executors_lost"] += 1
        d.scheduler.remove_executor(executor, reason, count_failure)
        if d.cluster_manager is not None:
            d.cluster_manager.kill([executor_id])  # if it still runs; it is replaced
        if notify:
            d.peers.send(executor.routing_id, p.StopExecutor(reason), quiet=True)
            if relief is not None:
                d.peers.send(relief, p.StopExecutor(reason), quiet=True)
        d.peers.forget(executor.routing_id)  # if piped: it stops at the end of its input
        if relief is not None:
            d.peers.forget(relief)
        d.offers_needed = True
        return True

    def check_heartbeats(self):
        """Declare lost the executors silent past ``executor_heartbeat_timeout``; report
        those silent for a third of it (a task holding the GIL stalls heartbeats)."""
        d = self.driver
        now = d.clock()
        liveness = d.registry.liveness
        for executor_id in liveness.silent(now):
            self.remove_executor(executor_id,
                                 f"heartbeat timeout (no message for {liveness.timeout:g} s)")
        for executor_id in liveness.late(now):
            log.warning("executor %s has been silent for %.1f s (a task holding the GIL?); "
                        "it is declared lost after %g s", executor_id,
                        liveness.silence(executor_id, now), liveness.timeout)

    def allocate_dynamically(self):
        """Apply the dynamic allocation policy to what the driver sees now."""
        d = self.driver
        now = d.clock()
        idle_since = {e.executor_id: None if e.running else self._idle_since.get(e.executor_id, now)
                      for e in d.executors.values() if not e.decommissioning}
        self._idle_since = {i: since for i, since in idle_since.items() if since is not None}
        decision = d.dynamic_allocation.update(
            now, d.allocator.target, d.scheduler.n_pending, d.scheduler.running_count(),
            d.cluster_manager.cores_per_executor, idle_since)
        for reason in decision.reasons:
            log.info("dynamic allocation: %s", reason)
        if decision.decommission:
            d.admin.decommission_executors(decision.decommission, adjust_target=False)
        d.allocator.set_target(decision.target, "dynamic allocation")

    def check_exits(self):
        """Executors the cluster manager started that ended are removed with how they
        ended; then the allocator compares and acts (replacing lost executors while the
        target is unchanged)."""
        d = self.driver
        if d.cluster_manager is None:
            return
        for executor_id, reason in d.cluster_manager.poll_exits():
            d.allocator.ended(executor_id, reason)
            removed = self.remove_executor(executor_id, reason, notify=False)
            if not removed and d.cluster_manager.explains_losses_later:
                self._add_to_loss_reason(executor_id, reason)
        d.allocator.tick()

    def _add_to_loss_reason(self, executor_id, reason):
        """What the cluster manager learned later of a loss already recorded (a batch system
        says why it ended a job after its executors said they got SIGTERM)."""
        d = self.driver
        if d.registry.add_to_loss_reason(executor_id, reason):
            log.info("executor %s: %s", executor_id, reason)
