"""The executor registry (``zsched/driver/registry.py``): the registered executors by
executor id, by routing id and by host, their states (active, late, decommissioning), their
cores, and the recent losses the driver remembers."""
import pytest

from zsched.driver.registry import ExecutorRegistry
from zsched.liveness import HeartbeatMonitor
from zsched.driver.records import ExecutorData

pytestmark = pytest.mark.unit


def executor(executor_id, host="host-a", cores=2, rid=None):
    rid = rid if rid is not None else b"rid-" + executor_id.encode()
    return ExecutorData(executor_id, rid, host, cores, 100, 0, cores, 0.0)


def test_an_added_executor_is_found_by_id_and_by_routing_id():
    registry = ExecutorRegistry()
    a = executor("1")
    registry.add(a)
    assert len(registry) == 1
    assert "1" in registry
    assert registry.get("1") is a
    assert registry.for_rid(b"rid-1") is a
    assert registry.all() == [a]


def test_lookups_of_an_unknown_executor_find_nothing():
    registry = ExecutorRegistry()
    assert registry.get("nope") is None
    assert registry.for_rid(b"nope") is None
    assert "nope" not in registry
    assert len(registry) == 0
    assert not registry.is_active("nope")


def test_remove_forgets_both_keys_and_records_the_loss():
    registry = ExecutorRegistry()
    a, b = executor("1", host="h1"), executor("2")
    registry.add(a)
    registry.add(b)
    assert registry.remove("1", "heartbeat timeout") is a
    assert registry.get("1") is None
    assert registry.for_rid(b"rid-1") is None
    assert registry.get("2") is b
    assert len(registry) == 1
    [(lost_id, host, reason, when)] = registry.losses
    assert (lost_id, host, reason) == ("1", "h1", "heartbeat timeout")
    assert isinstance(when, float)


def test_removing_an_unknown_executor_records_nothing():
    registry = ExecutorRegistry()
    assert registry.remove("ghost", "whatever") is None
    assert registry.losses == []


def test_all_is_safe_to_iterate_while_removing():
    registry = ExecutorRegistry()
    for i in range(5):
        registry.add(executor(str(i)))
    for e in registry.all():
        registry.remove(e.executor_id, "stopped")
    assert len(registry) == 0
    assert [loss[0] for loss in registry.losses] == ["0", "1", "2", "3", "4"]


def test_ids_are_in_natural_order():
    registry = ExecutorRegistry()
    for executor_id in ["10", "b", "2", "a", "1"]:
        registry.add(executor(executor_id))
    assert registry.ids() == ["1", "2", "10", "a", "b"]


def test_ids_on_host():
    registry = ExecutorRegistry()
    registry.add(executor("1", host="h1"))
    registry.add(executor("2", host="h2"))
    registry.add(executor("3", host="h1"))
    assert sorted(registry.ids_on_host("h1")) == ["1", "3"]
    assert registry.ids_on_host("h2") == ["2"]
    assert registry.ids_on_host("h3") == []


def test_a_restarted_executor_under_a_new_routing_id_is_a_new_incarnation():
    registry = ExecutorRegistry()
    registry.add(executor("1", rid=b"old"))
    registry.remove("1", "lost")
    new = executor("1", rid=b"new")
    registry.add(new)
    assert registry.get("1") is new
    assert registry.for_rid(b"old") is None
    assert registry.for_rid(b"new") is new


def test_a_duplicate_executor_id_or_connection_is_refused_and_leaves_nothing_stale():
    registry = ExecutorRegistry()
    first = executor("1", rid=b"first")
    registry.add(first)
    for duplicate in (executor("1", rid=b"second"), executor("2", rid=b"first")):
        with pytest.raises(ValueError):
            registry.add(duplicate)
    assert registry.get("1") is first and registry.get("2") is None
    assert registry.for_rid(b"first") is first and registry.for_rid(b"second") is None
    registry.remove("1", "gone")
    assert registry.for_rid(b"first") is None and len(registry) == 0


def test_a_relief_connection_finds_its_executor_until_either_goes():
    registry = ExecutorRegistry()
    a, b = executor("1"), executor("2")
    registry.add(a)
    registry.add(b)
    tokens = registry.relief_tokens
    assert len(tokens["1"]) == 16 and tokens["1"] != tokens["2"]
    registry.attach_relief("1", b"relief-1", tokens["1"])
    assert registry.for_rid(b"relief-1") is a and registry.reliefs == {"1": b"relief-1"}
    for executor_id, rid, token in [("1", b"relief-x", tokens["1"]),   # it has one already
                                    ("3", b"relief-3", tokens["1"]),   # no such executor
                                    ("2", b"rid-1", tokens["2"]),      # an executor's own connection
                                    ("2", b"relief-1", tokens["2"]),   # another's relief
                                    ("2", b"relief-2", tokens["1"]),   # another's token
                                    ("2", b"relief-2", b"")]:          # no token
        with pytest.raises(ValueError):
            registry.attach_relief(executor_id, rid, token)
    assert registry.reliefs == {"1": b"relief-1"}
    assert not registry.detach_relief(b"rid-1")  # not a relief: kept
    assert registry.detach_relief(b"relief-1")
    assert registry.for_rid(b"relief-1") is None and registry.get("1") is a
    registry.attach_relief("2", b"relief-2", tokens["2"])
    registry.remove("2", "gone")  # its relief goes with it, and its token
    assert registry.for_rid(b"relief-2") is None and registry.reliefs == {}
    assert "2" not in registry.relief_tokens
    assert not registry.detach_relief(b"relief-2")


def test_while_its_relief_covers_an_executor_is_reached_there():
    registry = ExecutorRegistry()
    a = executor("1")
    registry.add(a)
    registry.cover(a)  # no relief: nothing changes
    assert a.routing_id == b"rid-1" and registry.covering == {}
    registry.attach_relief("1", b"relief-1", registry.relief_tokens["1"])
    registry.cover(a)
    registry.cover(a)  # a second heartbeat there changes nothing more
    assert a.routing_id == b"relief-1" and registry.covering == {"1": b"rid-1"}
    assert registry.for_rid(b"rid-1") is a and registry.for_rid(b"relief-1") is a
    registry.uncover(a)
    assert a.routing_id == b"rid-1" and registry.covering == {}
    registry.cover(a)
    assert registry.detach_relief(b"relief-1")  # the relief goes: its own connection again
    assert a.routing_id == b"rid-1" and registry.covering == {}
    registry.attach_relief("1", b"relief-2", registry.relief_tokens["1"])
    registry.cover(a)
    assert registry.remove("1", "gone") is a  # removed while covered: both keys go
    assert a.routing_id == b"rid-1"
    assert registry.by_rid == {} and registry.reliefs == {} and registry.covering == {}


def test_cores_count_every_executor_or_only_the_active_ones():
    registry = ExecutorRegistry()
    a, b, c = executor("1", cores=1), executor("2", cores=4), executor("3", cores=8)
    for e in (a, b, c):
        registry.add(e)
    assert registry.cores() == 13
    assert registry.cores(active_only=True) == 13
    c.decommissioning = True
    assert registry.cores() == 13
    assert registry.cores(active_only=True) == 5
    registry.remove("2", "killed")
    assert registry.cores() == 9
    assert registry.cores(active_only=True) == 1


def test_states_active_late_and_decommissioning():
    # heartbeats every 1 s, lost after 9 s, late after 3 s (a third of the timeout)
    registry = ExecutorRegistry(HeartbeatMonitor(1.0, 9.0, clock=lambda: 0.0))
    a = executor("1")
    registry.add(a, now=0.0)
    assert registry.state(a) == "active"
    assert registry.is_active("1")
    assert registry.liveness.late(3.0) == []  # not past late_after yet
    assert registry.liveness.late(3.5) == ["1"]
    assert registry.state(a) == "late"
    assert registry.silence("1", 3.5) == 3.5
    assert registry.is_active("1")  # late, still taking tasks
    assert registry.liveness.late(4.0) == []  # already late: no news
    assert registry.heard_from("1", 4.0) is True
    assert registry.state(a) == "active"
    assert registry.heard_from("1", 4.5) is False
    assert registry.liveness.silent(13.5) == [] and registry.liveness.silent(13.6) == ["1"]
    a.decommissioning = True
    assert registry.state(a) == "decommissioning"
    assert not registry.is_active("1")


def test_decommissioning_outranks_late():
    registry = ExecutorRegistry(HeartbeatMonitor(1.0, 9.0, clock=lambda: 0.0))
    a = executor("1")
    registry.add(a, now=0.0)
    assert registry.liveness.late(5.0) == ["1"]
    a.decommissioning = True
    assert registry.state(a) == "decommissioning"


def test_a_removed_executor_is_no_longer_late_nor_watched():
    registry = ExecutorRegistry(HeartbeatMonitor(1.0, 9.0, clock=lambda: 0.0))
    registry.add(executor("1"), now=0.0)
    assert registry.liveness.late(5.0) == ["1"]
    registry.remove("1", "heartbeat timeout")
    assert registry.liveness.silent(100.0) == []
    again = executor("1", rid=b"again")
    registry.add(again, now=6.0)
    assert registry.state(again) == "active"
    assert registry.heard_from("1", 6.5) is False


def test_a_later_reason_is_added_to_the_last_loss_once():
    registry = ExecutorRegistry()
    registry.add(executor("1"))
    registry.remove("1", "got SIGTERM")
    assert registry.add_to_loss_reason("1", "job cancelled") is True
    assert registry.add_to_loss_reason("1", "job cancelled") is False
    assert registry.losses[-1][2] == "got SIGTERM; job cancelled"
    assert registry.add_to_loss_reason("never-seen", "anything") is False


def test_the_reason_goes_to_the_latest_loss_of_that_executor():
    registry = ExecutorRegistry()
    for rid in (b"first", b"second"):
        registry.add(executor("1", rid=rid))
        registry.remove("1", f"lost {rid.decode()}")
    assert registry.add_to_loss_reason("1", "late news")
    assert [loss[2] for loss in registry.losses] == ["lost first", "lost second; late news"]


def test_only_recent_losses_are_kept():
    registry = ExecutorRegistry()
    for i in range(1000):
        registry.add(executor(str(i)))
        registry.remove(str(i), "lost")
    assert 0 < len(registry.losses) < 1000
    assert registry.losses[-1][0] == "999"
    ids = [int(loss[0]) for loss in registry.losses]
    assert ids == sorted(ids) and ids[-1] - ids[0] == len(ids) - 1  # the latest, in order


def test_functions_sent_to_a_covering_relief_are_sent_again_once_the_loop_speaks():
    registry = ExecutorRegistry()
    a = executor("1")
    registry.add(a)
    registry.attach_relief("1", b"relief-1", registry.relief_tokens["1"])
    a.functions.update({b"f", b"g"})
    registry.cover(a)
    a.functions.add(b"h")      # sent with a launch on the relief's connection
    a.functions.discard(b"g")  # forgotten meanwhile
    registry.uncover(a)
    # that launch may still wait on the relief's connection when the next one, on the
    # loop's, needs h: h goes again with it
    assert a.functions == {b"f"}
