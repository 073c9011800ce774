"""The dynamic allocation policy on its own, with a fake clock (plain numbers)."""
import pytest

from zsched.dynamic_allocation import DynamicAllocationPolicy

pytestmark = pytest.mark.unit


def test_backlog_grows_the_target_in_rounds_of_1_2_4_up_to_max():
    policy = DynamicAllocationPolicy(min_executors=0, max_executors=6, backlog_timeout=1)
    target, targets = 0, []
    for now in [0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0]:
        target = policy.update(now, target, queued=1000, running=target, cores_per_executor=1,
                               idle_since={}).target
        targets.append(target)
    assert targets == [0, 0, 1, 1, 3, 6, 6, 6]


def test_growth_stops_at_what_the_work_needs_and_drops_when_it_needs_less():
    policy = DynamicAllocationPolicy(min_executors=1, max_executors=100, backlog_timeout=1)
    decision = policy.update(0, 1, queued=5, running=1, cores_per_executor=2, idle_since={})
    decision = policy.update(1, decision.target, queued=5, running=1, cores_per_executor=2, idle_since={})
    assert decision.target == 2
    decision = policy.update(2, decision.target, queued=5, running=1, cores_per_executor=2, idle_since={})
    assert decision.target == 3  # (5 + 1) / 2: not 4
    decision = policy.update(3, 3, queued=0, running=1, cores_per_executor=2, idle_since={})
    assert decision.target == 1 and "needs 1" in decision.reasons[0]
    decision = policy.update(4, 1, queued=0, running=0, cores_per_executor=2, idle_since={})
    assert decision.target == 1  # never below min


def test_rounds_restart_at_one_after_the_backlog_clears():
    policy = DynamicAllocationPolicy(max_executors=100, backlog_timeout=1)
    target = 0
    for now in [0, 1, 2]:
        target = policy.update(now, target, 1000, target, 1, {}).target
    assert target == 3
    policy.update(3, target, 0, target, 1, {})
    for now in [4, 5]:
        target = policy.update(now, target, 1000, target, 1, {}).target
    assert target == 4  # +1, not +4


def test_idle_executors_are_decommissioned_oldest_first_never_below_min():
    policy = DynamicAllocationPolicy(min_executors=1, max_executors=10, idle_timeout=60)
    idle = {"1": 0.0, "2": 10.0, "3": None, "4": 50.0}
    decision = policy.update(71.0, 4, queued=0, running=1, cores_per_executor=1, idle_since=idle)
    assert decision.decommission == ["1", "2"]
    assert decision.target == 1 and any("idle for 71 s" in r for r in decision.reasons)
    decision = policy.update(200.0, 2, queued=0, running=0, cores_per_executor=1,
                             idle_since={"3": 100.0, "4": 50.0})
    assert decision.decommission == ["4"] and decision.target == 1


@pytest.mark.parametrize("kwargs", [dict(min_executors=-1), dict(min_executors=3, max_executors=2),
                                    dict(backlog_timeout=0), dict(idle_timeout=0)])
def test_bad_bounds_are_refused(kwargs):
    with pytest.raises(ValueError):
        DynamicAllocationPolicy(**kwargs)
