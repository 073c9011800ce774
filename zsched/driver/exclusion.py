"""Exclusion of failing executors and hosts (Spark's ``excludeOnFailure``).

It is off unless the ``exclude_on_failure`` setting is on. A failure is a task attempt
that raised and was retried, or that was running when its executor was lost. After
``max_failed_tasks_per_executor`` failures within ``exclude_timeout`` an executor is
excluded; once ``max_failed_executors_per_host`` executors of a host are excluded, so is
the host, with every executor on it. An exclusion lasts ``exclude_timeout``
(``policies.HealthTracker`` decides).

An excluded executor is offered no task (its window is 0) and gives back those it has not
started. With ``exclude_kill`` it is killed, and the cluster manager replaces it, away from
excluded hosts where it can. The scheduler applies no exclusion while it would leave no
executor to run tasks on (``suspended``): a job never stalls for an hour on its last one.
"""
import logging

from ..policies import HealthTracker

log = logging.getLogger("zsched.driver")


class Exclusion:
    """The health tracker, with what the driver logs, shows and acts on."""

    def __init__(self, config):
        self.kill = config.exclude_kill
        self.tracker = HealthTracker(config.max_failed_tasks_per_executor,
                                     config.max_failed_executors_per_host, config.exclude_timeout)
        self.suspended = False  # every usable executor would be excluded: none is
        self.newly = []         # executors excluded since the driver last acted

    def failed(self, executor, n, reason, now):
        """``n`` attempts failed on ``executor`` at ``now``."""
        for _ in range(n):
            for kind, name, why in self.tracker.task_failed(executor.executor_id, executor.hostname,
                                                            now, reason):
                log.warning("excluded %s %s for %g s: %s", kind, name, self.tracker.timeout, why)

    def is_excluded(self, executor):
        return self.tracker.is_excluded(executor.executor_id, executor.hostname)

    def expire(self, now):
        for kind, name in self.tracker.expire(now):
            log.info("the exclusion of %s %s is over", kind, name)

    def forget(self, executor):
        self.tracker.forget_executor(executor.executor_id)

    def hosts(self):
        """The hosts excluded now."""
        return set(self.tracker.hosts)

    def take_newly(self):
        newly, self.newly = self.newly, []
        return newly

    def status(self, now):
        """``status()["excluded"]``: the exclusions, their reasons, and whether they apply."""
        return {**self.tracker.snapshot(now), "suspended": self.suspended, "kill": self.kill}
