"""What the driver does with its executors: registration, status updates, heartbeats,
removal, and the checks its loop runs on them (silence, exits)."""
import logging
from collections import namedtuple

from .. import protocol as p
from ..config import name_problem
from .reclaim import reclaim_hoarded_tasks

log = logging.getLogger("zsched.driver")

# seconds a lost executor's exit status has to arrive, while the loop goes on: it goes
# with how it ended, or after this with "the process still runs"
EXIT_STATUS_WAIT = 0.5

# a lost executor awaiting its exit status: until when, the problem, and whether it was
# decommissioning before it was offered nothing more
_AwaitedExit = namedtuple("_AwaitedExit", "deadline problem was_decommissioning")


class ExecutorEndpoint:
    """Spark's DriverEndpoint for executors: their messages and their liveness, in the
    driver loop's thread. It holds no state of its own.

    It is given the driver's ``app_id``, ``incarnation``, ``config`` and ``clock``; the
    executor ``registry`` and the ``scheduler`` it changes; the client ``sessions`` (a
    connection that is a client's does not register); ``peers``, to send and to set or
    forget a peer; the ``cluster_manager`` and ``allocator`` (None without a cluster
    manager); the ``executor_keys`` it revokes (None on an insecure bus); the traffic
    ``counters`` (it counts executors lost); the driver's ``warnings`` (a
    ``PeerWarnings``); ``ask_for_offers()``, called when cores or tasks may have freed
    up; and the ``pace`` (a ``HeartbeatPace``) that gives each executor its settings."""

    def __init__(self, *, app_id, incarnation, config, clock, registry, scheduler, sessions,
                 peers, cluster_manager, allocator, executor_keys, counters, warnings,
                 ask_for_offers, pace, data_push=lambda: None):
        self._app_id, self._incarnation = app_id, incarnation
        self._config, self._clock = config, clock
        self._registry, self._scheduler, self._sessions = registry, scheduler, sessions
        self._peers = peers
        self._cluster_manager, self._allocator = cluster_manager, allocator
        self._executor_keys = executor_keys
        self._counters = counters
        self._warnings = warnings
        self._ask_for_offers = ask_for_offers
        self._pace = pace
        self._data_push = data_push  # () -> the driver's push of tasks' data before a launch, or None
        self._awaiting_exit = {}  # executor id -> _AwaitedExit

    def on_hello(self, rid, msg):
        """An executor asks the settings it registers with."""
        settings = self._pace.welcome(len(self._registry))
        self._peers.send(rid, p.ClientWelcome(self._incarnation, self._app_id, settings))

    def on_register(self, rid, msg):
        registry, peers, clock = self._registry, self._peers, self._clock
        executor_id = msg.executor_id
        reason = self._registration_problem(rid, msg)
        if reason is not None:
            log.warning("refused registration of executor %.80r from %.80r: %s",
                        executor_id, msg.hostname, reason)
            peers.send(rid, p.RegisterExecutorFailed(reason))
            return
        executor = self._scheduler.add_executor(executor_id, rid, msg.hostname, msg.cores, msg.pid,
                                                clock())
        registry.add(executor, clock())
        log.info("Registered executor %s on %s (pid %d) with %d core(s)",
                 executor_id, msg.hostname, msg.pid, msg.cores)
        if self._cluster_manager is not None:
            self._allocator.registered(executor_id)
            self._cluster_manager.registered(executor_id)
        settings = self._pace.registration(len(registry))
        if self._pace.interval > registry.liveness.interval:
            registry.liveness.pace(self._pace.interval)  # late only past the longest interval
        peers.send(rid, p.RegisteredExecutor(self._incarnation, settings,
                                             registry.relief_tokens[executor_id]))
        self._ask_for_offers()

    def _registration_problem(self, rid, msg):
        """Why ``msg`` (a RegisterExecutor) from connection ``rid`` is refused, or None."""
        executor_id = msg.executor_id
        if msg.app_id != self._app_id:
            return f"app id {msg.app_id!r} does not match the driver's {self._app_id!r}"
        if name_problem(executor_id) is not None:
            return f"executor id {executor_id!r:.80}: {name_problem(executor_id)}"
        if executor_id in self._registry.by_id:
            return f"Duplicate executor ID: {executor_id}"
        if rid in self._registry.by_rid or rid in self._sessions.by_rid:
            return "this connection is already registered"
        if msg.cores < 1:
            return f"an executor needs at least one core, got {msg.cores}"
        if msg.cores > p.MAX_CORES:
            return f"an executor may have at most {p.MAX_CORES} cores, got {msg.cores}"
        return self._credential_problem(rid, executor_id)

    def _credential_problem(self, rid, executor_id):
        """Why connection ``rid`` may not register ``executor_id``, or None. A connection
        whose key (or pipes) the driver gave an executor registers that executor, once."""
        own = self._peers.get(rid).executor_id
        if own is None:
            return None
        if own != executor_id:
            return f"this connection's credential is executor {own}'s, not {executor_id!r:.80}'s"
        if self._executor_keys is not None and not self._executor_keys.first_registration(own):
            return f"the credential of executor {own} has registered once already"
        return None

    def _executor_for(self, rid, incarnation=None):
        registry = self._registry
        executor = registry.by_rid.get(rid)
        if executor is None or (incarnation is not None and incarnation != self._incarnation):
            # an executor declared lost and then woken, or one of an earlier driver: what it
            # says is ignored (its tasks already run elsewhere) and it is told to exit
            if self._warnings.first(rid):
                log.info("ignoring an executor that is not registered with this driver "
                         "(peer %s); told it to exit", rid.hex())
            self._peers.send(rid, p.StopExecutor("not registered with this driver (removed, or from "
                                                 "an earlier driver incarnation)"), quiet=True)
            if executor is not None:  # registered, yet it names another incarnation: told to
                # exit, it takes no more tasks here; those it holds run elsewhere at once
                self.remove_executor(executor.executor_id,
                                     "sent a message of another driver incarnation (told to exit)",
                                     notify=False, count_failure=False)
            return None
        if registry.heard_from(executor.executor_id, self._clock()):
            log.warning("executor %s is heard from again", executor.executor_id)
        if registry.covering and rid == registry.covering.get(executor.executor_id):
            registry.uncover(executor)  # its loop speaks: the long task has ended
        return executor

    def on_status_updates(self, rid, msg):
        executor = self._executor_for(rid, msg.incarnation)
        if executor is None:
            return
        stale = self._scheduler.status_updates(executor, msg.updates, msg.busy)
        if stale:
            log.info("ignored %d status update(s) for attempts no longer current from executor %s",
                     stale, executor.executor_id)
        self._ask_for_offers()

    def on_heartbeat(self, rid, msg):
        executor = self._executor_for(rid, msg.incarnation)
        if executor is None:
            return
        executor.metrics = p.heartbeat_metrics(msg.metrics)  # what the dashboard can serve
        registry = self._registry
        if rid == registry.reliefs.get(executor.executor_id):
            registry.cover(executor)  # its loop runs a long task: the relief reads
        self._peers.send(rid, p.HeartbeatAck(self._incarnation,
                                             self._pace.next_in(len(registry), self._clock())))

    def on_attach_relief(self, rid, msg):
        """An executor's relief thread connected: it gets a copy of each kill and stop."""
        registry = self._registry
        own = self._peers.get(rid).executor_id
        try:
            if msg.incarnation != self._incarnation or own not in (None, msg.executor_id):
                raise ValueError("not an executor of this driver, or not this one")
            registry.attach_relief(msg.executor_id, rid, msg.token)
        except ValueError as exc:
            self._warnings.warn(rid, f"AttachRelief of executor {msg.executor_id!r:.80} refused: {exc}")

    def send_control(self, executor, msg, quiet=False):
        """Send ``executor`` a kill or a stop on each of its connections: its relief thread
        may cover for a long task, and on its own one the message follows every launch
        sent there before. True if the executor's own connection took it."""
        registry = self._registry
        relief = registry.reliefs.get(executor.executor_id)
        if relief is not None:
            self._peers.send(relief, msg, quiet=True)
        own = registry.covering.get(executor.executor_id, executor.routing_id)
        return self._peers.send(own, msg, quiet)

    def relief_gone(self, rid):
        """If ``rid`` is an executor's relief connection, forget it: True if it was one."""
        if not self._registry.detach_relief(rid):
            return False
        self._peers.forget(rid)
        return True

    def on_remove(self, rid, msg):
        executor = self._registry.by_rid.get(rid)
        if executor is not None:  # the executor reports its own exit
            self.remove_executor(executor.executor_id, msg.reason, notify=False,
                                 count_failure=msg.charge_tasks)
        else:
            self._warnings.warn(rid, "RemoveExecutor from an unknown peer")

    def remove_executor(self, executor_id, reason, notify=True, count_failure=True):
        """Forget an executor (its tasks run elsewhere) for ``reason``; ``notify`` tells it to
        exit; ``count_failure`` is False when the driver caused the loss."""
        registry, peers = self._registry, self._peers
        relief = registry.reliefs.get(executor_id)
        executor = registry.remove(executor_id, reason)  # its routing id is its own again
        self.revoke(executor_id)
        awaited = self._awaiting_exit.pop(executor_id, None)
        if executor is None:
            return False
        if executor.decommissioning if awaited is None else awaited.was_decommissioning:
            count_failure = False
        log.log(logging.WARNING if count_failure else logging.INFO,
                "Removed executor %s on %s: %s (%d task(s) were running)",
                executor_id, executor.hostname, reason, len(executor.running))
        self._counters["executors_lost"] += 1
        self._scheduler.remove_executor(executor, reason, count_failure)
        if self._cluster_manager is not None:
            self._cluster_manager.kill([executor_id])  # if it still runs; it is replaced
        if notify:
            peers.send(executor.routing_id, p.StopExecutor(reason), quiet=True)
            if relief is not None:
                peers.send(relief, p.StopExecutor(reason), quiet=True)
        peers.forget(executor.routing_id)  # if piped: it stops at the end of its input
        if relief is not None:
            peers.forget(relief)
        self._ask_for_offers()
        return True

    def revoke(self, executor_id):
        """Executor ``executor_id`` is gone: its key, if the driver gave it one, dies."""
        if self._executor_keys is not None:
            self._executor_keys.revoke(executor_id)

    def check_heartbeats(self):
        """Declare lost the executors silent past ``executor_heartbeat_timeout``; report
        those silent for a third of it (a task holding the GIL stalls heartbeats)."""
        now = self._clock()
        liveness = self._registry.liveness
        silent, late = liveness.overdue(now)  # one look at each executor
        for executor_id in silent:
            self.remove_executor(executor_id,
                                 f"heartbeat timeout (no message for {liveness.timeout:g} s)")
        for executor_id in late:
            log.warning("executor %s has been silent for %.1f s (a task holding the GIL?); "
                        "it is declared lost after %g s", executor_id,
                        liveness.silence(executor_id, now), liveness.timeout)

    def check_exits(self):
        """Executors the cluster manager started that ended are removed with how they
        ended; then the allocator compares and acts (replacing lost executors while the
        target is unchanged)."""
        manager = self._cluster_manager
        if manager is None:
            return
        for executor_id, reason in manager.poll_exits():
            self.revoke(executor_id)
            self._allocator.ended(executor_id, reason)
            removed = self.remove_executor(executor_id, reason, notify=False)
            if not removed and manager.explains_losses_later:
                self._add_to_loss_reason(executor_id, reason)
        now = self._clock()
        for executor_id, awaited in list(self._awaiting_exit.items()):
            if now >= awaited.deadline:
                self.remove_executor(executor_id, f"disconnected ({awaited.problem}; the process "
                                                  f"still runs: stopped or cut off?)", notify=False)
        self._allocator.tick()

    def _add_to_loss_reason(self, executor_id, reason):
        """What the cluster manager learned later of a loss already recorded (a batch system
        says why it ended a job after its executors said they got SIGTERM)."""
        if self._registry.add_to_loss_reason(executor_id, reason):
            log.info("executor %s: %s", executor_id, reason)

    # ------------------------------------------------------------ connections lost

    def connection_lost(self, rid, problem):
        """Connection ``rid`` is gone or not reading for ``problem``. If it was an executor's,
        the executor goes (a relief connection alone is forgotten): True. Else False."""
        if self.relief_gone(rid):
            return True
        executor = self._registry.by_rid.get(rid)
        if executor is None:
            return False
        if not self._await_exit(executor, problem):
            self.remove_executor(executor.executor_id, f"disconnected ({problem})", notify=False)
        return True

    def _await_exit(self, executor, problem):
        """The connection of ``executor`` is lost: if the cluster manager started it, it
        goes with how it ended. Known already, at once; else ``check_exits`` removes it when
        the manager reports its exit, or after ``EXIT_STATUS_WAIT``, and it is offered
        nothing meanwhile. False if the manager did not start it."""
        manager = self._cluster_manager
        executor_id = executor.executor_id
        if executor_id in self._awaiting_exit:
            return True
        if manager is None or executor_id not in manager.launched_ids():
            return False
        reason = manager.exit_reason(executor_id)
        if reason is not None:
            self.remove_executor(executor_id, reason, notify=False)
            return True
        self._awaiting_exit[executor_id] = _AwaitedExit(self._clock() + EXIT_STATUS_WAIT, problem,
                                                        executor.decommissioning)
        self._scheduler.decommission(executor)
        return True

    def link_broke(self, rid, error):
        """Peer ``rid`` broke its link (the driver cut it off). If it was an executor's, the
        executor goes (a relief connection alone is forgotten): True. Else False."""
        if self.relief_gone(rid):
            return True
        executor = self._registry.by_rid.get(rid)
        if executor is None:
            return False
        self.remove_executor(executor.executor_id, f"broke its link: {error}", notify=False)
        return True

    # ------------------------------------------------------------ launches and placement

    def send_launches(self, launches):
        """Send each executor its LaunchTasks frames: ``[(executor, [frame, ...]), ...]``."""
        for executor, frames in launches:
            for frame in frames:
                self._peers.send(executor.routing_id, p.Encoded(p.LaunchTasks, frame))

    def speculate(self):
        """Copies of stragglers, launched on idle cores (``speculation``)."""
        launches = self._scheduler.placement.speculate()
        if launches:
            self.send_launches(self._scheduler.launch_frames(launches, self._data_push()))

    def reclaim_hoarded_tasks(self, silent_for):
        """Ask executors for unstarted tasks back while cores idle elsewhere
        (``reclaim.reclaim_hoarded_tasks``)."""
        for executor, count in reclaim_hoarded_tasks(self._scheduler, silent_for):
            log.debug("asking executor %s for up to %d unstarted tasks back (cores idle elsewhere)",
                      executor.executor_id, count)
            self._peers.send(executor.routing_id, p.ReturnTasks(count))

    def act_for_scheduler(self):
        """Send the kills the scheduler decided (the loser of a speculative race). Newly
        excluded executors give back their unstarted tasks, or with ``exclude_kill`` are
        killed (the cluster manager replaces them)."""
        scheduler = self._scheduler
        for executor, task, reason in scheduler.placement.take_kills():
            self.send_control(executor, p.KillTask(task.task_id, task.attempt, reason))
        exclusion = scheduler.exclusion
        if exclusion is None or not exclusion.newly:
            return
        if self._allocator is not None:
            self._allocator.excluded_hosts = exclusion.hosts()
        for executor in exclusion.take_newly():
            if self._registry.by_id.get(executor.executor_id) is not executor:
                continue  # gone already
            if exclusion.kill:
                self.remove_executor(executor.executor_id, "excluded for its failures (exclude_kill)",
                                     count_failure=False)
            elif executor.running:
                self._peers.send(executor.routing_id, p.ReturnTasks(len(executor.running)))

    def placement_tick(self):
        """Tasks waiting for their hosts may run anywhere now; exclusions may be over."""
        scheduler = self._scheduler
        if scheduler.locality:
            self._ask_for_offers()
        exclusion = scheduler.exclusion
        if exclusion is not None and (exclusion.tracker.executors or exclusion.tracker.hosts):
            scheduler.placement.refresh_exclusions()
            if self._allocator is not None:
                self._allocator.excluded_hosts = exclusion.hosts()
            self._ask_for_offers()

    def shut_down_all(self):
        """Tell every executor to shut down (the driver stops)."""
        for executor in list(self._registry.by_id.values()):
            self.send_control(executor, p.Shutdown(), quiet=True)
