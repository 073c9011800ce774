"""The scheduling policies (``zsched/policies.py``): what each decides, on both
implementations, and the compiled ``_policies`` agreeing with its twin ``_policies_py``
step by step on random sequences of operations under a fake clock."""
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zsched import _fastpath, _fastpath_py, _policies, _policies_py, fastpath, policies

pytestmark = pytest.mark.unit

IMPLEMENTATIONS = [_policies_py, _policies]
IDS = ["reference", "compiled"]
both = pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=IDS)


class FakeTask:
    """What the policies read of a scheduling core's Task."""

    __slots__ = ("task_id", "queued_at", "cancelled")

    def __init__(self, task_id, queued_at=0.0, cancelled=False):
        self.task_id = task_id
        self.queued_at = queued_at
        self.cancelled = cancelled

    def __repr__(self):
        return f"FakeTask({self.task_id}, {self.queued_at}, {self.cancelled})"


def ids(tasks):
    return [task.task_id for task in tasks]


def test_both_define_the_policies_and_the_chooser_takes_those_the_rule_selects():
    for name in policies.__all__:
        assert hasattr(_policies, name) and hasattr(_policies_py, name), name
    chosen = _policies if fastpath.COMPILED else _policies_py
    assert all(getattr(policies, name) is getattr(chosen, name) for name in policies.__all__)
    assert _policies.RUNTIMES_KEPT == _policies_py.RUNTIMES_KEPT


# ---------------------------------------------------------------- Runtimes and stragglers

@both
def test_the_threshold_stays_infinite_until_the_quantile_has_finished(impl):
    group = impl.Runtimes()
    assert group.threshold(0.0, 1.5, 0.1) == math.inf  # none finished yet
    group.submit(4)
    group.finish(2.0)
    group.finish(2.0)
    assert group.threshold(0.75, 1.5, 0.1) == math.inf  # 2 of the 3 needed
    group.finish(4.0)
    assert (group.submitted, group.finished) == (4, 3)
    assert group.threshold(0.75, 1.5, 0.1) == 3.0       # 1.5 x the median, 2.0
    assert group.threshold(0.75, 1.5, 10.0) == 10.0     # at least the minimum


@both
def test_the_median_of_an_even_count_is_the_upper_one(impl):
    group = impl.Runtimes()
    assert group.median() is None
    for seconds in (4.0, 1.0, 3.0, 2.0):
        group.finish(seconds)
    assert group.median() == 3.0
    group.finish(0.5)
    assert group.median() == 2.0


@both
def test_the_median_is_of_the_latest_run_times(impl):
    group = impl.Runtimes()
    for _ in range(impl.RUNTIMES_KEPT):
        group.finish(1.0)
    for _ in range(impl.RUNTIMES_KEPT // 2):
        group.finish(9.0)
    assert group.median() == 9.0  # the upper of an even count: the oldest 1.0s are gone
    assert group.finished == impl.RUNTIMES_KEPT * 3 // 2


@both
def test_stragglers_are_the_tasks_past_the_threshold_oldest_first(impl):
    a, b, c = FakeTask(1), FakeTask(2), FakeTask(3)
    launches = {a: 0.0, b: 1.0, c: 5.0}
    assert impl.stragglers(launches, 6.0, 4.5) == [a, b]
    assert impl.stragglers(launches, 6.0, 5.0) == [a]   # b ran exactly 5.0: not more
    assert impl.stragglers(launches, 6.0, math.inf) == []
    assert impl.stragglers({}, 6.0, 0.0) == []


# ---------------------------------------------------------------- HealthTracker

@both
def test_an_executor_is_excluded_at_its_second_failure_within_the_timeout(impl):
    tracker = impl.HealthTracker(2, 2, 10.0)
    assert tracker.task_failed("e1", "A", 0.0, "boom") == []
    assert not tracker.is_excluded("e1", "A")
    made = tracker.task_failed("e1", "A", 9.0, "bang")
    assert made == [("executor", "e1", "2 failed task attempts (the latest: bang)")]
    assert tracker.is_excluded("e1", "A") and not tracker.is_excluded("e2", "A")
    assert tracker.executors == {"e1": (19.0, "A", made[0][2])}
    assert tracker.task_failed("e1", "A", 10.0, "again") == []  # excluded already


@both
def test_a_failure_older_than_the_timeout_no_longer_counts(impl):
    tracker = impl.HealthTracker(2, 2, 10.0)
    tracker.task_failed("e1", "A", 0.0, "boom")
    assert tracker.task_failed("e1", "A", 10.0, "bang") == []  # the first is 10 s old
    assert not tracker.is_excluded("e1", "A")
    assert tracker.task_failed("e1", "A", 11.0, "bang") != []


@both
def test_a_host_is_excluded_once_two_of_its_executors_are(impl):
    tracker = impl.HealthTracker(1, 2, 10.0)
    assert tracker.task_failed("e1", "A", 0.0, "x") == [("executor", "e1", "1 failed task attempts (the latest: x)")]
    assert tracker.task_failed("e3", "B", 1.0, "x")[0][0] == "executor"
    made = tracker.task_failed("e2", "A", 2.0, "y")
    assert made[1] == ("host", "A", "2 of its executors excluded (the latest: e2)")
    assert tracker.hosts == {"A": (12.0, made[1][2])}
    assert tracker.is_excluded("e9", "A") and not tracker.is_excluded("e9", "B")


@both
def test_exclusions_are_lifted_at_their_time(impl):
    tracker = impl.HealthTracker(1, 1, 10.0)
    tracker.task_failed("e1", "A", 0.0, "x")
    tracker.task_failed("e2", "B", 5.0, "x")
    assert tracker.expire(9.5) == []
    assert tracker.expire(10.0) == [("executor", "e1"), ("host", "A")]
    assert not tracker.is_excluded("e1", "A") and tracker.is_excluded("e2", "B")
    assert tracker.expire(15.0) == [("executor", "e2"), ("host", "B")]
    assert tracker.executors == {} and tracker.hosts == {}


@both
def test_an_exclusion_over_but_not_yet_expired_counts_no_more(impl):
    tracker = impl.HealthTracker(2, 2, 10.0)
    tracker.task_failed("e1", "A", 0.0, "x")
    tracker.task_failed("e1", "A", 1.0, "x")                    # e1 excluded until 11
    tracker.task_failed("e2", "A", 12.0, "x")                   # e1's exclusion is over
    made = tracker.task_failed("e2", "A", 13.0, "x")
    assert [kind for kind, _, _ in made] == ["executor"]        # A has one excluded: e2
    assert tracker.task_failed("e1", "A", 14.0, "x") == []      # e1's failures start again
    assert tracker.task_failed("e1", "A", 15.0, "x")[1][:2] == ("host", "A")
    assert tracker.expire(15.0) == [("executor", "e1")]         # reported once, in order


@both
def test_a_forgotten_executor_s_exclusion_stays_and_counts_for_its_host(impl):
    tracker = impl.HealthTracker(1, 2, 10.0)
    tracker.task_failed("e1", "A", 0.0, "x")
    tracker.forget_executor("e1")
    assert tracker.is_excluded("e1", "A")
    assert tracker.task_failed("e2", "A", 1.0, "x")[-1][:2] == ("host", "A")


@both
def test_the_snapshot_lists_exclusions_in_name_order_with_the_time_left(impl):
    tracker = impl.HealthTracker(1, 2, 10.0)
    tracker.task_failed("e2", "A", 0.0, "x")
    tracker.task_failed("e1", "A", 1.0, "y")
    snapshot = tracker.snapshot(3.0 + 1 / 3)
    assert snapshot == {
        "executors": [
            {"executor_id": "e1", "host": "A", "reason": "1 failed task attempts (the latest: y)",
             "seconds_left": 7.667},
            {"executor_id": "e2", "host": "A", "reason": "1 failed task attempts (the latest: x)",
             "seconds_left": 6.667}],
        "hosts": [{"host": "A", "reason": "2 of its executors excluded (the latest: e1)",
                   "seconds_left": 7.667}],
    }
    assert tracker.snapshot(100.0)["hosts"][0]["seconds_left"] == 0.0


# ---------------------------------------------------------------- LocalityQueue

@both
def test_a_task_preferring_a_host_is_taken_there_only(impl):
    queue = impl.LocalityQueue()
    a, b, ab = FakeTask(1), FakeTask(2), FakeTask(3)
    queue.add(a, ["A"])
    queue.add(b, ("B",))
    queue.add(ab, ["A", "B"])
    assert len(queue) == 3 and queue.waiting_by_host() == {"A": 2, "B": 2}
    assert queue.take_local("C", 5) == []
    assert queue.take_local("B", 5) == [b, ab]
    assert queue.take_local("B", 5) == []
    assert queue.take_local("A", 5) == [a]      # ab went to B already
    assert len(queue) == 0 and not queue


@both
def test_take_local_takes_up_to_its_count_oldest_first(impl):
    queue = impl.LocalityQueue()
    tasks = [FakeTask(i) for i in range(5)]
    for task in tasks:
        queue.add(task, ["A"])
    assert queue.take_local("A", 2) == tasks[:2]
    assert queue.take_local("A", 0) == []
    assert queue.take_local("A", 9) == tasks[2:]


@both
def test_take_any_gives_the_tasks_that_waited_then_those_whose_hosts_are_dead(impl):
    queue = impl.LocalityQueue()
    old = FakeTask(1, queued_at=0.0)
    older_dead = FakeTask(2, queued_at=0.5)
    young = FakeTask(3, queued_at=2.0)
    young_dead = FakeTask(4, queued_at=2.5)
    queue.add(old, ["A"])
    queue.add(older_dead, ["A", "D"])
    queue.add(young, ["A"])
    queue.add(young_dead, ["D"])
    live = {"A", "B"}
    assert queue.take_any(5, 3.0, 3.0, live) == [old, young_dead]  # D has no executor
    assert queue.take_any(5, 3.4, 3.0, live) == []    # older_dead waits for A, 2.9 s so far
    assert queue.take_any(5, 3.5, 3.0, live) == [older_dead]
    assert queue.take_any(5, 4.0, 3.0, {"B"}) == [young]  # A is gone
    assert len(queue) == 0


@both
def test_take_any_takes_up_to_its_count(impl):
    queue = impl.LocalityQueue()
    tasks = [FakeTask(i, queued_at=float(i)) for i in range(4)]
    for task in tasks:
        queue.add(task, ["D"])
    assert queue.take_any(1, 10.0, 3.0, set()) == tasks[:1]
    assert queue.take_any(2, 0.0, 3.0, set()) == tasks[1:3]  # none waited: D is dead
    assert queue.take_any(0, 10.0, 3.0, set()) == []
    assert queue.take_any(5, 10.0, 3.0, set()) == tasks[3:]


@both
def test_cancelled_and_discarded_tasks_are_dropped(impl):
    queue = impl.LocalityQueue()
    tasks = [FakeTask(i, queued_at=0.0) for i in range(4)]
    for task in tasks:
        queue.add(task, ["A"])
    tasks[0].cancelled = True
    assert queue.discard(tasks[1]) and not queue.discard(tasks[1])
    assert len(queue) == 3                         # a cancelled task counts until met
    assert queue.take_local("A", 1) == [tasks[2]]
    assert len(queue) == 1
    tasks[3].cancelled = True
    assert queue.take_any(5, 10.0, 1.0, {"A"}) == []
    assert len(queue) == 0 and queue.oldest_wait(10.0) == 0.0


@both
def test_oldest_wait_and_clear(impl):
    queue = impl.LocalityQueue()
    first, second = FakeTask(1, queued_at=1.0), FakeTask(2, queued_at=2.0)
    assert queue.oldest_wait(5.0) == 0.0
    queue.add(first, ["A"])
    queue.add(second, ["B"])
    assert queue.oldest_wait(5.0) == 4.0
    queue.discard(first)
    assert queue.oldest_wait(5.0) == 3.0
    queue.clear()
    assert len(queue) == 0 and queue.waiting_by_host() == {} and queue.take_any(5, 9.0, 0.0, set()) == []


@both
@pytest.mark.parametrize("core", [_fastpath_py, _fastpath], ids=["core reference", "core compiled"])
def test_the_scheduling_core_s_tasks_are_queued_and_taken(impl, core):
    tasks = [core.Task(i, None, i, 0, b"f", b"", float(i)) for i in range(3)]
    queue = impl.LocalityQueue()
    for task in tasks:
        queue.add(task, ["A"])
    tasks[0].cancelled = True
    assert queue.take_any(5, 3.5, 2.0, {"A"}) == [tasks[1]]
    assert queue.take_local("A", 5) == [tasks[2]]
    assert impl.stragglers({tasks[0]: 0.0, tasks[1]: 2.0}, 3.0, 1.5) == [tasks[0]]


# ---------------------------------------------------------------- agreement, step by step

def _agree(ops, make, step, check):
    """Run ``ops`` on an object of each implementation (``make(impl)``), each step by
    ``step(obj, op, clock)``, and require the same results and, after each step, the same
    ``check(obj, clock)``."""
    objs = [make(impl) for impl in IMPLEMENTATIONS]
    clock = [0.0]
    for op in ops:
        if op[0] == "advance":
            clock[0] += op[1]
            continue
        results = []
        for obj in objs:
            try:
                results.append(("ok", step(obj, op, clock[0])))
            except Exception as exc:  # the same exception from both
                results.append(("error", type(exc)))
        assert results[0] == results[1], (op, results)
        states = [check(obj, clock[0]) for obj in objs]
        assert states[0] == states[1], (op, states)


# times and fractions on a coarse grid too, so that ties (a task that waited exactly
# ``wait``, a failure exactly ``timeout`` old) occur
ADVANCE = st.one_of(st.tuples(st.just("advance"), st.sampled_from([0.0, 0.5, 1.0])),
                    st.tuples(st.just("advance"), st.floats(0.0, 5.0)))
FRACTION = st.one_of(st.sampled_from([0.0, 0.5, 0.75, 1.0]), st.floats(0.0, 1.0))
SECONDS = st.floats(0.0, 100.0)


def _runtimes_step(group, op, now):
    if op[0] == "submit":
        return group.submit(op[1])
    if op[0] == "finish":
        return group.finish(op[1])
    if op[0] == "finish_many":
        rng = random.Random(op[2])
        return [group.finish(rng.choice([rng.random() * 10, float(rng.randint(0, 5))]))
                for _ in range(op[1])]
    return group.threshold(*op[1:])


def _runtimes_state(group, now):
    return group.submitted, group.finished, group.median()


RUNTIMES_OPS = st.lists(st.one_of(
    st.tuples(st.just("submit"), st.integers(0, 20)),
    st.tuples(st.just("finish"), SECONDS),
    st.tuples(st.just("finish_many"), st.integers(0, 700), st.integers(0, 1000)),
    st.tuples(st.just("threshold"), FRACTION, st.floats(1.0, 3.0), st.floats(0.0, 20.0)),
), min_size=5, max_size=60)


@settings(max_examples=200, deadline=None)
@given(RUNTIMES_OPS)
def test_runtimes_agree(ops):
    _agree(ops, lambda impl: impl.Runtimes(), _runtimes_step, _runtimes_state)


@settings(max_examples=200, deadline=None)
@given(st.lists(SECONDS, max_size=20), st.floats(0.0, 200.0),
       st.one_of(SECONDS, st.just(math.inf)))
def test_stragglers_agree(launched, now, threshold):
    tasks = [FakeTask(i) for i in range(len(launched))]
    launches = dict(zip(tasks, sorted(launched)))
    assert (ids(_policies.stragglers(launches, now, threshold))
            == ids(_policies_py.stragglers(launches, now, threshold)))


EXECUTORS = st.sampled_from(["e0", "e1", "e2", "e3", "e4"])
HOSTS = st.sampled_from(["A", "B", "C"])
HEALTH_OPS = st.lists(st.one_of(
    ADVANCE, ADVANCE,
    st.tuples(st.just("failed"), EXECUTORS, HOSTS, st.sampled_from(["x", "y"])),
    st.tuples(st.just("failed"), EXECUTORS, HOSTS, st.sampled_from(["x", "y"])),
    st.tuples(st.just("expire")),
    st.tuples(st.just("forget"), EXECUTORS),
    st.tuples(st.just("is_excluded"), EXECUTORS, HOSTS),
), min_size=20, max_size=80)


def _health_step(tracker, op, now):
    if op[0] == "failed":
        return tracker.task_failed(op[1], op[2], now, op[3])
    if op[0] == "expire":
        return tracker.expire(now)
    if op[0] == "forget":
        return tracker.forget_executor(op[1])
    return tracker.is_excluded(op[1], op[2])


def _health_state(tracker, now):
    return tracker.executors, tracker.hosts, tracker.snapshot(now), tracker.timeout


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.one_of(st.sampled_from([1.0, 2.0]), st.floats(0.5, 20.0)),
       HEALTH_OPS)
def test_health_trackers_agree(max_tasks, max_executors, timeout, ops):
    _agree(ops, lambda impl: impl.HealthTracker(max_tasks, max_executors, timeout),
           _health_step, _health_state)


HOST_NAMES = ["A", "B", "C", "D"]
HOST_SETS = st.lists(st.sampled_from(HOST_NAMES), min_size=1, max_size=3, unique=True)
WAITS = st.one_of(st.sampled_from([0.0, 0.5, 1.0, 2.0, 1e6]), st.floats(0.0, 6.0))
LOCALITY_OPS = st.lists(st.one_of(
    ADVANCE,
    st.tuples(st.just("add"), HOST_SETS, st.sampled_from([0.0, 0.5, 1.0])),
    st.tuples(st.just("add"), HOST_SETS, st.floats(0.0, 3.0)),
    st.tuples(st.just("add"), HOST_SETS, st.just(0.0)),
    st.tuples(st.just("cancel"), st.integers(0, 50)),
    st.tuples(st.just("discard"), st.integers(0, 50)),
    st.tuples(st.just("take_local"), st.sampled_from(HOST_NAMES + ["E"]), st.integers(0, 4)),
    st.tuples(st.just("take_any"), st.integers(0, 6), WAITS, st.sets(st.sampled_from(HOST_NAMES))),
    st.tuples(st.just("take_any"), st.integers(0, 6), WAITS, st.sets(st.sampled_from(HOST_NAMES))),
    st.tuples(st.just("oldest_wait")),
    st.tuples(st.just("clear")),
), min_size=20, max_size=80)


class Locality:
    """One implementation's queue, and the tasks to add to it in turn: the same objects for
    both implementations, so a task cancelled is cancelled for both."""

    def __init__(self, impl, tasks):
        self.queue = impl.LocalityQueue()
        self.tasks = tasks
        self.added = 0

    def step(self, op, now):
        queue = self.queue
        if op[0] == "add":
            self.added += 1
            return queue.add(self.tasks[self.added - 1], op[1])
        if op[0] in ("cancel", "discard"):
            if not self.added:
                return None
            task = self.tasks[op[1] % self.added]
            if op[0] == "discard":
                return queue.discard(task)
            task.cancelled = True
            return None
        if op[0] == "take_local":
            return ids(queue.take_local(op[1], op[2]))
        if op[0] == "take_any":
            return ids(queue.take_any(op[1], now, op[2], op[3]))
        if op[0] == "oldest_wait":
            return queue.oldest_wait(now)
        return queue.clear()

    def state(self, now):
        return len(self.queue), bool(self.queue), self.queue.waiting_by_host()


def _locality_queues_agree(ops):
    # each add queues a new task, which joined a little before the time of its add
    tasks, now = [], 0.0
    for op in ops:
        if op[0] == "advance":
            now += op[1]
        elif op[0] == "add":
            tasks.append(FakeTask(len(tasks), queued_at=now - op[2]))
    _agree(ops, lambda impl: Locality(impl, tasks), Locality.step, Locality.state)


@settings(max_examples=300, deadline=None)
@given(LOCALITY_OPS)
def test_locality_queues_agree(ops):
    _locality_queues_agree(ops)


def _random_locality_ops(rng, n):
    ops = []
    for _ in range(n):
        kind = rng.choice(["advance", "add", "add", "add", "cancel", "discard", "take_local",
                           "take_any", "take_any", "oldest_wait"])
        if kind == "advance":
            ops.append((kind, rng.choice([0.0, 0.25, 0.5, 1.0])))
        elif kind == "add":
            ops.append((kind, rng.sample(HOST_NAMES, rng.randint(1, 3)), rng.choice([0.0, 0.5, 1.0])))
        elif kind in ("cancel", "discard"):
            ops.append((kind, rng.randrange(1000)))
        elif kind == "take_local":
            ops.append((kind, rng.choice(HOST_NAMES), rng.randint(0, 4)))
        elif kind == "take_any":
            live = {host for host in HOST_NAMES if rng.random() < 0.5}
            ops.append((kind, rng.randint(0, 6), rng.choice([0.0, 1.0, 2.0, 1e6]), live))
        else:
            ops.append((kind,))
    return ops


@pytest.mark.parametrize("seed", range(5))
def test_locality_queues_agree_at_scale(seed):
    _locality_queues_agree(_random_locality_ops(random.Random(seed), 5000))


def _random_health_ops(rng, n):
    ops = []
    for _ in range(n):
        kind = rng.choice(["advance", "advance", "failed", "failed", "failed", "expire", "forget"])
        executor = f"e{rng.randrange(8)}"
        if kind == "advance":
            ops.append((kind, rng.choice([0.0, 0.5, 1.0, 3.0])))
        elif kind == "failed":
            ops.append((kind, executor, f"h{int(executor[1:]) % 3}", rng.choice(["x", "y"])))
        elif kind == "forget":
            ops.append((kind, executor))
        else:
            ops.append((kind,))
    return ops


@pytest.mark.parametrize("seed", range(5))
def test_health_trackers_agree_at_scale(seed):
    rng = random.Random(seed)
    max_tasks, max_executors, timeout = rng.randint(1, 3), rng.randint(1, 3), rng.choice([2.0, 5.0, 10.0])
    _agree(_random_health_ops(rng, 5000), lambda impl: impl.HealthTracker(max_tasks, max_executors, timeout),
           _health_step, _health_state)
