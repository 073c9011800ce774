"""The executor allocator on its own: a fake cluster manager and a fake clock."""
import itertools

import pytest

from zsched.config import MAX_EXECUTORS

from zsched.driver.allocation import ExecutorAllocator
from zsched.cluster_managers import ClusterManager
from zsched.config import Config

pytestmark = pytest.mark.unit


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class FakeManager(ClusterManager):
    """Starts executors instantly (as ids), kills them on request."""

    def __init__(self):
        self.ids = itertools.count(1)
        self.live = []
        self.killed = []

    def request_total(self, n, avoid_hosts=(), local_tasks=None, excluded_hosts=()):
        while len(self.live) < n:
            self.live.append(str(next(self.ids)))

    def launched_ids(self):
        return list(self.live)

    def kill(self, executor_ids):
        for executor_id in executor_ids:
            if executor_id in self.live:
                self.live.remove(executor_id)
                self.killed.append(executor_id)


class FakeHostsManager(FakeManager):
    """Hosts with room for ``capacity[host]`` executors each; ids say where: 'a1', 'b2'."""

    def __init__(self, capacity):
        super().__init__()
        self.capacity_of = capacity

    def request_total(self, n, avoid_hosts=(), local_tasks=None, excluded_hosts=()):
        for host, room in self.capacity_of.items():
            while len(self.live) < n and host not in avoid_hosts and \
                    sum(i[0] == host for i in self.live) < room:
                self.live.append(f"{host}{next(self.ids)}")

    def host_of(self, executor_id):
        return executor_id[0]

    def capacity(self):
        return sum(self.capacity_of.values())


def make(target=0, **settings):
    clock, manager = FakeClock(), FakeManager()
    return ExecutorAllocator(manager, Config(**settings), clock, target), manager, clock


def test_starts_at_most_a_batch_per_round_and_never_kills_for_a_lower_target():
    allocator, manager, clock = make(12, allocation_batch_size=5, allocation_batch_delay=1)
    allocator.tick()
    assert len(manager.live) == 5
    allocator.tick()                       # within the batch delay: nothing
    assert len(manager.live) == 5
    clock.now = 1.0
    allocator.tick()
    clock.now = 2.0
    allocator.tick()
    assert len(manager.live) == 12
    allocator.set_target(3, "test")
    clock.now = 3.0
    allocator.tick()
    assert len(manager.live) == 12 and manager.killed == []


def test_lost_executors_are_replaced_with_new_ids():
    allocator, manager, clock = make(2)
    allocator.round()
    for executor_id in manager.live:
        allocator.registered(executor_id)
    manager.live.remove("1")               # lost unexpectedly: the target is unchanged
    allocator.ended("1", "killed by signal SIGKILL")
    allocator.round()
    assert manager.live == ["2", "3"]


def test_an_executor_that_never_registers_is_killed_and_retried_with_backoff():
    allocator, manager, clock = make(1, executor_start_timeout=60)
    allocator.round()
    assert manager.live == ["1"]
    clock.now = 60.0
    allocator.round()                      # not past the timeout yet
    assert manager.live == ["1"]
    clock.now = 60.5
    allocator.round()
    assert manager.killed == ["1"] and manager.live == []  # killed; backoff 0.5 s
    clock.now = 60.9
    allocator.round()
    assert manager.live == []
    clock.now = 61.0
    allocator.round()
    assert manager.live == ["2"]
    clock.now = 121.5
    allocator.round()                      # second failure in a row: backoff 1 s
    assert manager.live == []
    clock.now = 122.4
    allocator.round()
    assert manager.live == []
    clock.now = 122.5
    allocator.round()
    assert manager.live == ["3"]
    assert allocator.backoff() == {}
    allocator.registered("3")              # a registration resets the backoff
    assert allocator._failed_starts == {}
    texts = [text for _, text in allocator.events]
    assert any("did not register within executor_start_timeout (60 s)" in t for t in texts)


def test_backoff_after_executors_that_end_before_registering_is_bounded():
    allocator, manager, clock = make(1)
    delays = []
    for _ in range(10):
        allocator.round()
        (executor_id,) = manager.live
        manager.live.clear()
        allocator.ended(executor_id, "exited with code 1")
        (delay,) = allocator.backoff().values()
        delays.append(delay)
        clock.now += delay
    assert delays[:4] == [0.5, 1.0, 2.0, 4.0] and max(delays) == 30.0


@pytest.mark.parametrize("n", [-1, MAX_EXECUTORS + 1, (1 << 64) - 1])
def test_a_target_out_of_bounds_is_refused(n):
    """A target beyond any cluster (a client's request of 2**64 - 1 more, say) would also
    be a number the status cannot carry."""
    allocator, _, _ = make()
    with pytest.raises(ValueError, match="must be from 0 to"):
        allocator.set_target(n, "test")
    allocator.set_target(MAX_EXECUTORS, "test")


def test_failed_starts_back_off_per_host_and_the_other_hosts_go_on():
    manager = FakeHostsManager({"a": 2, "b": 2})
    clock = FakeClock()
    allocator = ExecutorAllocator(manager, Config(), clock, 4)
    allocator.round()
    assert manager.live == ["a1", "a2", "b3", "b4"]
    for executor_id in ("a1", "a2"):       # host a cannot start executors
        manager.live.remove(executor_id)
        allocator.ended(executor_id, "ssh to a failed: Connection refused")
    allocator.registered("b3")
    allocator.registered("b4")
    assert set(allocator.backoff()) == {"a"}
    manager.live.remove("b4")              # b loses one: replaced at once, a waits
    allocator.ended("b4", "killed by signal SIGKILL")
    allocator.round()
    assert manager.live == ["b3", "b5"]
    clock.now = 1.0                        # a's backoff (1 s after two failures) is over
    allocator.round()
    assert sorted(manager.live) == ["a6", "a7", "b3", "b5"]
    texts = [text for _, text in allocator.events]
    assert any(t.startswith("host a: executor a2 ended before registering: ssh to a failed") and
               "next start there in 1.0 s" in t for t in texts)


def test_a_target_beyond_capacity_waits_and_is_reported_once():
    reports = []
    manager = FakeHostsManager({"a": 1, "b": 2})
    allocator = ExecutorAllocator(manager, Config(), FakeClock(), 5, report=reports.append)
    allocator.round()
    allocator.round()
    assert len(manager.live) == 3
    assert reports == ["target 5 is beyond the capacity of the hosts (3 executors): 2 wait for room"]
    manager.capacity_of["c"] = 2            # room appears (a host added, or executors leave)
    allocator.round()
    assert len(manager.live) == 5 and len(reports) == 1


class FailingManager(FakeManager):
    """Raises ``error`` while starting executors, until it is set to None."""

    def __init__(self, error):
        super().__init__()
        self.error = error
        self.calls = 0

    def request_total(self, n, avoid_hosts=(), local_tasks=None, excluded_hosts=()):
        self.calls += 1
        if self.error is not None:
            raise self.error
        super().request_total(n, avoid_hosts)


def test_an_error_while_starting_is_a_failed_start_counted_and_backed_off():
    """Out of descriptors, memory or threads: the allocator goes on, the manager as a whole
    backs off, and the starts resume once the error is gone."""
    reports = []
    clock, manager = FakeClock(), FailingManager(OSError(24, "Too many open files"))
    allocator = ExecutorAllocator(manager, Config(), clock, 2, report=reports.append)
    allocator.round()
    assert allocator.executor_start_failures == 1 and allocator.backoff() == {None: 0.5}
    assert reports == ["could not start executors: OSError: [Errno 24] Too many open files "
                       "(next start in 0.5 s)"]
    allocator.round()                      # backing off: not tried
    assert manager.calls == 1
    clock.now = 0.5
    manager.error = RuntimeError("can't start new thread")
    allocator.round()
    assert allocator.executor_start_failures == 2 and allocator.backoff() == {None: 1.0}
    clock.now = 1.5
    manager.error = None
    allocator.round()
    assert manager.live == ["1", "2"] and allocator.pending() == 2
    allocator.registered("1")              # a registration resets the backoff
    assert allocator.backoff() == {} and allocator.executor_start_failures == 2


def test_failed_starts_are_all_counted_and_a_reason_logged_once_per_backoff():
    """Executors failing together for one reason make one warning, not one each; the next
    warning, after the backoff, says how many were not logged."""
    reports = []
    manager = FakeHostsManager({"a": 4})
    clock = FakeClock()
    allocator = ExecutorAllocator(manager, Config(), clock, 4, report=reports.append)
    allocator.round()
    for executor_id in list(manager.live):
        manager.live.remove(executor_id)
        allocator.ended(executor_id, "could not start: OSError: [Errno 11] Resource temporarily unavailable")
    assert allocator.executor_start_failures == 4
    assert len(allocator.events) == 5      # the start, and every failure
    assert reports == ["host a: executor a1 ended before registering: could not start: OSError: "
                       "[Errno 11] Resource temporarily unavailable (next start there in 0.5 s)"]
    allocator.ended("a9", "exited with code 1")  # not started here: not a failed start
    clock.now = 4.0                        # after the backoff (4 s after four failures)
    allocator.round()
    (executor_id, *_) = manager.live
    allocator.ended(executor_id, "could not start: OSError: [Errno 11] Resource temporarily unavailable")
    assert allocator.executor_start_failures == 5 and len(reports) == 2
    assert reports[1].endswith("(next start there in 8.0 s) (3 more like it not logged)")


class PlacementManager(FakeHostsManager):
    """Records what each round asked for besides the number."""

    cores_per_executor = 2

    def __init__(self, capacity):
        super().__init__(capacity)
        self.asked = []

    def request_total(self, n, avoid_hosts=(), local_tasks=None, excluded_hosts=()):
        self.asked.append((local_tasks, excluded_hosts))
        super().request_total(n, avoid_hosts)


def test_locality_and_excluded_hosts_reach_the_manager_at_each_round():
    manager = PlacementManager({"a": 2, "b": 2})
    allocator = ExecutorAllocator(manager, Config(allocation_batch_size=1), FakeClock(), 2)
    allocator.set_locality(7, {"b": 5, "c": 0})
    allocator.excluded_hosts = {"a"}
    assert (allocator.locality_aware_tasks, allocator.host_to_local_task_count) == (7, {"b": 5})
    allocator.round()
    assert manager.asked == [({"b": 5}, frozenset({"a"}))]
    # the executor starting on a (the fake's choice) takes none of b's tasks; one starting
    # on b would lower b's count by its two cores
    assert allocator.local_tasks_left() == {"b": 5}
    allocator._starting["b9"] = (0.0, "b")
    assert allocator.local_tasks_left() == {"b": 3}
    allocator._starting["b10"] = (0.0, "b")
    allocator._starting["b11"] = (0.0, "b")
    assert allocator.local_tasks_left() is None      # b's tasks are all spoken for
    allocator.set_locality(0, None)                  # cleared
    allocator.excluded_hosts = set()
    allocator.round()
    assert manager.asked[-1] == (None, frozenset())


@pytest.mark.parametrize("aware, counts, complaint", [
    (-1, None, "locality_aware_tasks must be a count of tasks (an integer >= 0), got -1"),
    (True, None, "locality_aware_tasks must be a count of tasks"),
    (1.5, None, "locality_aware_tasks must be a count of tasks"),
    (1, ["a"], "host_to_local_task_count must be a dict of host -> task count, got list"),
    (1, {"a": -2}, "host_to_local_task_count['a'] must be a count of tasks (an integer >= 0), got -2"),
    (1, {"a": "3"}, "host_to_local_task_count['a'] must be a count of tasks"),
    (1, {3: 1}, "host_to_local_task_count: a host must be a name, got 3"),
    (1, {"": 1}, "host_to_local_task_count: a host must be a name, got ''"),
])
def test_a_bad_locality_is_refused_and_the_last_one_kept(aware, counts, complaint):
    allocator, _, _ = make()
    allocator.set_locality(2, {"a": 2})
    with pytest.raises(ValueError) as caught:
        allocator.set_locality(aware, counts)
    assert complaint in str(caught.value)
    assert (allocator.locality_aware_tasks, allocator.host_to_local_task_count) == (2, {"a": 2})
