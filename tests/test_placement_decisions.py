"""Speculation, exclusion and locality decided by the task scheduler on its own, under a
fake clock: no sockets, no processes. Run on both implementations of the scheduling core
(CI runs the unit tier with ``ZSCHED_PUREPYTHON=1`` too)."""
import pytest

from conftest import FakeClock
from test_driver_scheduler import offers, report, results_of
from zsched import protocol as p
from zsched.config import Config
from zsched.driver.records import ClientData
from zsched.driver.scheduler import TaskScheduler
from zsched.protocol import TaskState

pytestmark = pytest.mark.unit

FINISHED, FAILED = TaskState.FINISHED, TaskState.FAILED


def make(**settings):
    clock = FakeClock(100.0)
    scheduler = TaskScheduler(Config(**settings), functions={b"f": b"blob", b"g": b"blob"},
                              clock=clock)
    return scheduler, ClientData(b"client", 1), clock


def submit(scheduler, client, ids, function=b"f", retries=0, placement=None):
    rows = [[i, function, b"args", retries] for i in ids]
    scheduler.submit(client, p.decode(p.encode(p.SubmitTasks({}, rows))).tasks, placement)


def launched(scheduler):
    """``{client task id: executor id}`` of the tasks an offer launches now."""
    return {task.client_task_id: executor.executor_id
            for executor, tasks in offers(scheduler) for task in tasks}


def finish(scheduler, executor, task, state=FINISHED, payload=b"r"):
    return report(scheduler, executor, [[task.task_id, task.attempt, state, payload]])


def running(executor):
    return {task.client_task_id: task for task in executor.running.values()}


# -- speculation


def speculating():
    """Two single-core executors; tasks 1 and 2 of function f launched, 1 on a."""
    scheduler, client, clock = make(speculation=True, speculation_quantile=0.5,
                                     speculation_multiplier=2.0, speculation_min_runtime=0.5)
    a = scheduler.add_executor("a", b"ra", "h1", 1, 10, clock())
    b = scheduler.add_executor("b", b"rb", "h2", 1, 11, clock())
    submit(scheduler, client, [1, 2])
    assert launched(scheduler) == {1: "a", 2: "b"}
    return scheduler, client, clock, a, b


def test_no_copy_before_the_quantile_of_the_group_finished():
    scheduler, client, clock, a, b = speculating()
    clock.set(200.0)  # long past any threshold, but nothing finished: no median
    assert scheduler.placement.speculate() == []


def test_a_straggler_gets_a_copy_on_an_idle_core_elsewhere_and_the_copy_wins():
    scheduler, client, clock, a, b = speculating()
    clock.set(101.0)
    finish(scheduler, b, running(b)[2])  # ran 1 s: the threshold is 2 s
    assert results_of(client) == [[2, FINISHED, b"r"]]
    clock.set(101.9)
    assert scheduler.placement.speculate() == []  # 1.9 s: not past 2 x the median, 1 s
    clock.set(102.1)
    (executor, rows, functions), = scheduler.placement.speculate()
    assert executor is b and rows[0][2] == b"f" and rows[0][3] == b"args"
    copy = running(b)[1]
    assert copy.task_id != running(a)[1].task_id
    assert scheduler.placement.speculate() == []  # one copy at a time
    finish(scheduler, b, copy, payload=b"from the copy")
    assert results_of(client)[-1] == [1, FINISHED, b"from the copy"]
    original = running(a)[1]
    assert original.cancelled
    kills = scheduler.placement.take_kills()
    assert [(e.executor_id, t.task_id) for e, t, _ in kills] == [("a", original.task_id)]
    # the loser's late result is ignored: the future completes once
    finish(scheduler, a, original, payload=b"late")
    assert [row for row in results_of(client) if row[0] == 1] == [[1, FINISHED, b"from the copy"]]
    assert scheduler.counts["finished"] == 2 and scheduler.counts["failed"] == 0
    assert scheduler.speculation.speculated == 1 and scheduler.speculation.won == 1


def test_when_the_original_wins_the_copy_is_killed():
    scheduler, client, clock, a, b = speculating()
    clock.set(101.0)
    finish(scheduler, b, running(b)[2])
    clock.set(104.0)
    scheduler.placement.speculate()
    copy = running(b)[1]
    finish(scheduler, a, running(a)[1], payload=b"original")
    assert copy.cancelled
    assert [(e.executor_id, t.task_id) for e, t, _ in scheduler.placement.take_kills()] == [
        ("b", copy.task_id)]
    finish(scheduler, b, copy, state=TaskState.KILLED, payload=b"")
    assert [row for row in results_of(client) if row[0] == 1] == [[1, FINISHED, b"original"]]
    assert scheduler.speculation.won == 0 and scheduler.counts["failed"] == 0


def test_a_copy_that_fails_is_dropped_and_the_original_runs_on():
    scheduler, client, clock, a, b = speculating()
    clock.set(101.0)
    finish(scheduler, b, running(b)[2])
    clock.set(104.0)
    scheduler.placement.speculate()
    finish(scheduler, b, running(b)[1], state=FAILED, payload=b"copy raised")
    assert [row for row in results_of(client) if row[0] == 1] == []
    assert scheduler.counts["failed"] == 0 and not running(a)[1].cancelled
    finish(scheduler, a, running(a)[1], payload=b"original")
    assert [row for row in results_of(client) if row[0] == 1] == [[1, FINISHED, b"original"]]


def test_a_lost_copy_is_dropped_and_never_queued():
    scheduler, client, clock, a, b = speculating()
    clock.set(101.0)
    finish(scheduler, b, running(b)[2])
    clock.set(104.0)
    scheduler.placement.speculate()
    scheduler.remove_executor(b, "lost")
    assert scheduler.n_pending == 0 and not scheduler.pending
    assert scheduler.speculation.copy_of == {}
    clock.set(110.0)
    assert scheduler.placement.speculate() == []  # no idle core besides a's


def test_no_copy_without_an_idle_core_on_another_executor():
    scheduler, client, clock, a, b = speculating()
    submit(scheduler, client, [3])
    clock.set(101.0)
    finish(scheduler, b, running(b)[2])
    assert launched(scheduler) == {3: "b"}
    clock.set(104.0)
    assert scheduler.placement.speculate() == []


def test_tasks_that_opted_out_are_never_copied():
    scheduler, client, clock = make(speculation=True, speculation_quantile=0.5,
                                    speculation_min_runtime=0.1)
    scheduler.add_executor("a", b"ra", "h1", 1, 10, clock())
    b = scheduler.add_executor("b", b"rb", "h2", 1, 11, clock())
    submit(scheduler, client, [1, 2], placement={1: ((), False)})
    launched(scheduler)
    clock.set(101.0)
    finish(scheduler, b, running(b)[2])
    clock.set(150.0)
    assert scheduler.placement.speculate() == []


def test_groups_are_per_function():
    scheduler, client, clock = make(speculation=True, speculation_quantile=0.5,
                                    speculation_min_runtime=0.1)
    scheduler.add_executor("a", b"ra", "h1", 1, 10, clock())
    b = scheduler.add_executor("b", b"rb", "h2", 1, 11, clock())
    submit(scheduler, client, [1], function=b"g")
    submit(scheduler, client, [2])
    launched(scheduler)
    clock.set(101.0)
    finish(scheduler, b, running(b)[2])  # f's median is 1 s; g has no finished task
    clock.set(150.0)
    assert scheduler.placement.speculate() == []


def test_cancelling_a_speculated_task_kills_both_attempts():
    scheduler, client, clock, a, b = speculating()
    clock.set(101.0)
    finish(scheduler, b, running(b)[2])
    clock.set(104.0)
    scheduler.placement.speculate()
    to_kill = scheduler.cancel(client, [1])
    assert sorted(e.executor_id for e, _ in to_kill) == ["a", "b"]


# -- exclusion


def excluding(**settings):
    scheduler, client, clock = make(exclude_on_failure=True, **settings)
    a = scheduler.add_executor("a", b"ra", "h1", 1, 10, clock())
    b = scheduler.add_executor("b", b"rb", "h2", 1, 11, clock())
    return scheduler, client, clock, a, b


def test_a_retried_task_is_not_offered_again_where_it_raised():
    scheduler, client, clock, a, b = excluding(max_failed_tasks_per_executor=100)
    submit(scheduler, client, [1], retries=3)
    assert launched(scheduler) == {1: "a"}
    finish(scheduler, a, running(a)[1], state=FAILED, payload=b"raised")
    assert scheduler.failed_on
    # a is offered first (its core is idle) but takes nothing: b does
    assert launched(scheduler) == {1: "b"}
    assert not scheduler.failed_on


def test_with_no_other_executor_a_retried_task_runs_where_it_raised():
    scheduler, client, clock = make(exclude_on_failure=True, max_failed_tasks_per_executor=100)
    a = scheduler.add_executor("a", b"ra", "h1", 1, 10, clock())
    submit(scheduler, client, [1], retries=3)
    launched(scheduler)
    finish(scheduler, a, running(a)[1], state=FAILED, payload=b"raised")
    assert launched(scheduler) == {1: "a"}


def test_an_executor_is_excluded_at_its_second_failure_until_the_timeout():
    scheduler, client, clock, a, b = excluding(exclude_timeout=60)
    submit(scheduler, client, [1, 2, 3, 4], retries=3)
    assert launched(scheduler) == {1: "a", 2: "b"}
    finish(scheduler, a, running(a)[1], state=FAILED)
    assert not a.excluded
    assert launched(scheduler) == {3: "a", 4: "a"}  # 1 waits for b: it raised on a
    task = next(iter(a.running.values()))
    finish(scheduler, a, task, state=FAILED)
    assert a.excluded and a.slots == 0 and scheduler.exclusion.newly == [a]
    status = scheduler.exclusion.status(clock())
    assert [e["executor_id"] for e in status["executors"]] == ["a"]
    assert status["executors"][0]["seconds_left"] == 60.0
    clock.set(161.0)
    scheduler.placement.refresh_exclusions()
    assert not a.excluded and a.slots >= 1


def test_a_host_is_excluded_with_every_executor_on_it():
    scheduler, client, clock = make(exclude_on_failure=True, max_failed_tasks_per_executor=1,
                                    max_failed_executors_per_host=2)
    a1 = scheduler.add_executor("a1", b"r1", "bad", 1, 10, clock())
    a2 = scheduler.add_executor("a2", b"r2", "bad", 1, 11, clock())
    scheduler.add_executor("b", b"r3", "good", 1, 12, clock())
    submit(scheduler, client, [1, 2, 3], retries=3)
    launched(scheduler)
    finish(scheduler, a1, next(iter(a1.running.values())), state=FAILED)
    assert a1.excluded and not a2.excluded
    finish(scheduler, a2, next(iter(a2.running.values())), state=FAILED)
    assert a2.excluded and scheduler.exclusion.hosts() == {"bad"}
    late = scheduler.add_executor("a3", b"r4", "bad", 1, 13, clock())
    assert late.excluded  # a newcomer on an excluded host


def test_an_executor_lost_with_tasks_counts_against_its_host():
    scheduler, client, clock = make(exclude_on_failure=True, max_failed_executors_per_host=1)
    a = scheduler.add_executor("a", b"ra", "bad", 2, 10, clock())
    b = scheduler.add_executor("b", b"rb", "good", 1, 11, clock())
    submit(scheduler, client, [1, 2, 3])
    launched(scheduler)
    scheduler.remove_executor(a, "crashed")
    assert scheduler.exclusion.hosts() == {"bad"}
    assert not b.excluded


def test_excluding_every_executor_is_suspended():
    scheduler, client, clock = make(exclude_on_failure=True, max_failed_tasks_per_executor=1)
    a = scheduler.add_executor("a", b"ra", "h1", 1, 10, clock())
    submit(scheduler, client, [1, 2], retries=1)
    launched(scheduler)
    finish(scheduler, a, running(a)[1], state=FAILED)
    assert not a.excluded and scheduler.exclusion.suspended
    assert launched(scheduler)  # tasks still run


# -- locality


def placed(scheduler, client, ids, hosts):
    submit(scheduler, client, ids, placement={i: (tuple(hosts), True) for i in ids})


def test_tasks_that_prefer_a_host_wait_for_it_then_run_anywhere():
    scheduler, client, clock = make(locality_wait=3.0)
    scheduler.add_executor("a", b"ra", "alpha", 1, 10, clock())
    b = scheduler.add_executor("b", b"rb", "beta", 1, 11, clock())
    placed(scheduler, client, [1, 2, 3], ["beta"])
    assert scheduler.n_pending == 3 and len(scheduler.locality) == 3
    assert launched(scheduler) == {1: "b"}  # a's idle core takes none of them
    clock.set(102.9)
    assert launched(scheduler) == {}
    clock.set(103.0)
    assert launched(scheduler) == {2: "a"}
    finish(scheduler, b, running(b)[1])
    assert launched(scheduler) == {3: "b"}
    assert scheduler.n_pending == 0 and len(scheduler.locality) == 0


def test_tasks_with_and_without_a_preference_share_the_cores():
    scheduler, client, clock = make(locality_wait=60.0)
    scheduler.add_executor("a", b"ra", "alpha", 1, 10, clock())
    scheduler.add_executor("b", b"rb", "beta", 1, 11, clock())
    placed(scheduler, client, [1], ["beta"])
    submit(scheduler, client, [2])
    assert launched(scheduler) == {1: "b", 2: "a"}


def test_a_task_whose_hosts_have_no_executor_runs_at_once():
    scheduler, client, clock = make(locality_wait=3600.0)
    scheduler.add_executor("a", b"ra", "alpha", 1, 10, clock())
    placed(scheduler, client, [1], ["gone"])
    assert launched(scheduler) == {1: "a"}


def test_cancelled_tasks_leave_the_locality_queue():
    scheduler, client, clock = make(locality_wait=3600.0)
    scheduler.add_executor("a", b"ra", "alpha", 1, 10, clock())
    placed(scheduler, client, [1, 2], ["beta"])
    scheduler.add_executor("b", b"rb", "beta", 0 + 1, 11, clock())
    scheduler.cancel(client, [1, 2])
    assert scheduler.n_pending == 0 and launched(scheduler) == {}
    assert scheduler.locality.waiting_by_host() == {}


def test_no_choice_no_cost_the_fused_offer_runs():
    scheduler, client, clock = make()
    assert not scheduler.placement.needs_choice() and scheduler.speculation is None
    assert scheduler.exclusion is None
