"""The executors registered with the driver: by executor id, by routing id and by host,
with their states (active, late, decommissioning) and the recent losses."""
import secrets
import time

from ..liveness import HeartbeatMonitor

_LOSSES_KEPT = 100


class ExecutorRegistry:
    """Registered executors and what the driver remembers of those lost.

    ``by_id`` maps executor id to ``ExecutorData`` and ``by_rid`` routing id to the same
    (an executor's relief connection included); both are read directly on the hot path.
    ``reliefs`` maps executor id to the routing id of its relief thread's connection;
    ``covering`` holds, for an executor whose relief thread covers for its loop (which
    runs a long task), its own routing id: its ``routing_id`` is the relief's meanwhile,
    so that what the driver sends reaches the thread that reads. ``relief_tokens`` maps
    executor id to the token its relief connection proves itself with. Only the driver's
    loop changes them.
    ``liveness`` watches each registered executor's heartbeats (by default: a 5 s interval
    and a 30 s timeout on the monotonic clock)."""

    def __init__(self, liveness=None):
        self.by_id = {}
        self.by_rid = {}
        self.reliefs = {}
        self.covering = {}
        self._functions_before_cover = {}  # executor id -> the functions it held then
        self.relief_tokens = {}
        self.liveness = liveness if liveness is not None else HeartbeatMonitor(5.0, 30.0)
        self.losses = []      # recent (executor id, host, reason, wall-clock time)

    def __len__(self):
        return len(self.by_id)

    def __contains__(self, executor_id):
        return executor_id in self.by_id

    def get(self, executor_id):
        return self.by_id.get(executor_id)

    def for_rid(self, rid):
        return self.by_rid.get(rid)

    def all(self):
        """A list of the executors, safe to iterate while some are removed."""
        return list(self.by_id.values())

    def add(self, executor, now=None):
        """Register ``executor``, heard from at ``now``; ValueError if its id or its routing
        id is taken."""
        if executor.executor_id in self.by_id or executor.routing_id in self.by_rid:
            raise ValueError(f"executor {executor.executor_id} or its connection is registered already")
        self.by_id[executor.executor_id] = executor
        self.by_rid[executor.routing_id] = executor
        self.relief_tokens[executor.executor_id] = secrets.token_bytes(16)
        self.liveness.heard(executor.executor_id, now)

    def remove(self, executor_id, reason):
        """Forget ``executor_id`` and record its loss for ``reason``: the executor, or None."""
        executor = self.by_id.pop(executor_id, None)
        if executor is None:
            return None
        self.uncover(executor)
        del self.by_rid[executor.routing_id]
        del self.relief_tokens[executor_id]
        relief = self.reliefs.pop(executor_id, None)
        if relief is not None:
            del self.by_rid[relief]
        self.liveness.forget(executor_id)
        self.losses.append((executor_id, executor.hostname, reason, time.time()))
        del self.losses[:-_LOSSES_KEPT]
        return executor

    def attach_relief(self, executor_id, rid, token):
        """Connection ``rid``, proven by ``token``, is the relief thread's of
        ``executor_id``; ValueError if the executor is not registered, the token is not its
        own, it has a relief already, or ``rid`` is taken."""
        executor = self.by_id.get(executor_id)
        if executor is None or not secrets.compare_digest(token, self.relief_tokens[executor_id]):
            raise ValueError("no such executor, or not its token")
        if executor_id in self.reliefs or rid in self.by_rid:
            raise ValueError(f"no relief connection for executor {executor_id} from here")
        self.reliefs[executor_id] = rid
        self.by_rid[rid] = executor

    def detach_relief(self, rid):
        """Forget ``rid`` if it is a relief connection (it is gone): True if it was one."""
        executor = self.by_rid.get(rid)
        if executor is None or self.reliefs.get(executor.executor_id) != rid:
            return False
        self.uncover(executor)
        del self.reliefs[executor.executor_id]
        del self.by_rid[rid]
        return True

    def cover(self, executor):
        """``executor``'s relief thread covers for its loop: send to the relief."""
        relief = self.reliefs.get(executor.executor_id)
        if relief is not None and executor.executor_id not in self.covering:
            self.covering[executor.executor_id] = executor.routing_id
            self._functions_before_cover[executor.executor_id] = set(executor.functions)
            executor.routing_id = relief

    def uncover(self, executor):
        """``executor``'s loop speaks again: send to its own connection. The functions sent
        to the relief meanwhile count as not sent: a launch there may still wait to be
        read when a later one, on the loop's connection, needs its function."""
        own = self.covering.pop(executor.executor_id, None)
        if own is not None:
            executor.routing_id = own
            executor.functions &= self._functions_before_cover.pop(executor.executor_id)

    def add_to_loss_reason(self, executor_id, reason):
        """Append ``reason`` to the last loss recorded for ``executor_id``; True if it was
        news (the loss is known and did not say it yet)."""
        losses = self.losses
        for i in range(len(losses) - 1, -1, -1):
            lost_id, host, known, when = losses[i]
            if lost_id == executor_id:
                if reason in known:
                    return False
                losses[i] = (lost_id, host, f"{known}; {reason}", when)
                return True
        return False

    def ids(self):
        """Executor ids in natural order (``2`` before ``10``)."""
        return sorted(self.by_id, key=_natural_key)

    def ids_on_host(self, host):
        return [e.executor_id for e in self.by_id.values() if e.hostname == host]

    def cores(self, active_only=False):
        """Cores of the registered executors (without the decommissioning ones if asked)."""
        return sum(e.cores for e in self.by_id.values()
                   if not (active_only and e.decommissioning))

    def is_active(self, executor_id):
        executor = self.by_id.get(executor_id)
        return executor is not None and not executor.decommissioning

    def state(self, executor):
        if executor.decommissioning:
            return "decommissioning"
        if executor.excluded:
            return "excluded"
        return "late" if self.liveness.is_late(executor.executor_id) else "active"

    def heard_from(self, executor_id, now=None):
        """``executor_id`` spoke at ``now``: no longer late. True if it was."""
        return self.liveness.heard(executor_id, now)

    def silence(self, executor_id, now=None):
        """Seconds ``executor_id`` has been silent at ``now``."""
        return self.liveness.silence(executor_id, now)


def _natural_key(executor_id):
    """Numbers in their order, then the other ids (``isdigit`` alone takes '²' too)."""
    numeric = executor_id.isascii() and executor_id.isdigit()
    return (0, int(executor_id), "") if numeric else (1, 0, executor_id)
