"""Dynamic allocation: the policy that moves the executor target with the work (after
Spark's ExecutorAllocationManager). It holds no sockets and reads no clock of its own: the
driver gives it what it sees and applies what it decides.

- While tasks have waited longer than ``backlog_timeout``, the target grows in rounds of
  1, 2, 4, ... executors (one round per ``backlog_timeout``) up to what the work needs
  (queued + running tasks / cores per executor), never above ``max_executors``.
- When the work needs fewer executors than the target, the target drops to what it needs
  (never below ``min_executors``); that kills nothing.
- Executors idle longer than ``idle_timeout`` are decommissioned, never below ``min_executors``.
"""
import math
from dataclasses import dataclass, field

from .config import MAX_EXECUTORS, MIN_WAIT, WEEK, check_number
from .errors import ConfigError


@dataclass
class Decision:
    target: int                     # the new target (may equal the old one)
    decommission: list = field(default_factory=list)  # executor ids to decommission
    reasons: list = field(default_factory=list)       # one line per change, for the log


class DynamicAllocationPolicy:
    """The policy; bounds out of range are a ConfigError naming the argument."""

    def __init__(self, min_executors=0, max_executors=None, backlog_timeout=1.0,
                 idle_timeout=60.0):
        min_executors = check_number("min_executors", min_executors, 0, MAX_EXECUTORS, integer=True)
        if max_executors is None:
            max_executors = math.inf
        else:
            max_executors = check_number("max_executors", max_executors, 0, MAX_EXECUTORS,
                                         integer=True)
            if max_executors < min_executors:
                raise ConfigError(f"min_executors {min_executors} is above max_executors {max_executors}")
        backlog_timeout = check_number("backlog_timeout", backlog_timeout, MIN_WAIT, WEEK, unit="s")
        idle_timeout = check_number("idle_timeout", idle_timeout, MIN_WAIT, WEEK, unit="s")
        self.min_executors = min_executors
        self.max_executors = max_executors
        self.backlog_timeout = backlog_timeout
        self.idle_timeout = idle_timeout
        self._backlog_since = None   # when tasks started waiting
        self._next_add = None        # when the next round of additions may happen
        self._round = 1              # executors the next round adds

    def clamp(self, n):
        return int(max(self.min_executors, min(self.max_executors, n)))

    def update(self, now, target, queued, running, cores_per_executor, idle_since):
        """Decide from what the driver sees: the current ``target``, ``queued`` and
        ``running`` task counts, and ``idle_since``: executor id -> when it became idle (None
        while it runs tasks), for the executors registered and not leaving."""
        decision = Decision(target)
        needed = math.ceil((queued + running) / cores_per_executor)
        if queued == 0:
            self._backlog_since = self._next_add = None
            self._round = 1
        elif self._backlog_since is None:
            self._backlog_since = now
            self._next_add = now + self.backlog_timeout
        if needed < decision.target:
            lowered = self.clamp(needed)
            if lowered < decision.target:
                decision.reasons.append(f"target {decision.target} -> {lowered}: the work needs "
                                        f"{needed} executor(s) (min {self.min_executors})")
                decision.target = lowered
        elif self._next_add is not None and now >= self._next_add:
            wanted = min(decision.target + self._round, needed)
            grown = self.clamp(wanted)
            if grown > decision.target:
                clamp = " (max clamp)" if grown < wanted else ""
                decision.reasons.append(
                    f"target {decision.target} -> {grown}: backlog of {queued} task(s) waiting "
                    f"{now - self._backlog_since:.1f} s{clamp}")
                decision.target = grown
                self._round *= 2
            self._next_add = now + self.backlog_timeout
        removable = len(idle_since) - self.min_executors
        for executor_id, since in sorted(idle_since.items(), key=lambda item: (item[1] is None, item[1])):
            if removable <= 0 or since is None or now - since < self.idle_timeout:
                continue
            decision.decommission.append(executor_id)
            decision.reasons.append(f"decommission executor {executor_id}: idle for "
                                    f"{now - since:.0f} s (idle timeout {self.idle_timeout:g} s)")
            removable -= 1
        if decision.decommission:
            decision.target = self.clamp(min(decision.target, len(idle_since) - len(decision.decommission)))
        return decision


def executors_at_start(n_executors, initial_executors=None, policy=None):
    """How many executors a cluster starts with: ``n_executors``; under a dynamic allocation
    ``policy``, ``initial_executors`` if given (it counts only then), which must lie within
    the policy's bounds (ConfigError), else ``n_executors`` brought within them."""
    if policy is None:
        return n_executors
    if initial_executors is None:
        return policy.clamp(n_executors)
    if policy.clamp(initial_executors) != initial_executors:
        bounds = (f"at least {policy.min_executors}" if policy.max_executors == math.inf else
                  f"from {policy.min_executors} to {policy.max_executors}")
        raise ConfigError(f"initial executors must be {bounds}, within the dynamic "
                          f"allocation's bounds, got {initial_executors}")
    return initial_executors
