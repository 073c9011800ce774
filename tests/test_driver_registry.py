"""The driver's executor registry (zsched/driver/registry.py): executors by id, routing id
and host, their states, and the losses it remembers."""
from types import SimpleNamespace

from zsched.driver.registry import ExecutorRegistry


def _executor(executor_id, host="h", cores=2, decommissioning=False):
    return SimpleNamespace(executor_id=executor_id, routing_id=b"rid-" + executor_id.encode(),
                           hostname=host, cores=cores, decommissioning=decommissioning)


def test_lookups_by_id_routing_id_and_host_in_natural_order():
    registry = ExecutorRegistry()
    for executor_id, host in [("10", "a"), ("2", "b"), ("x", "a")]:
        registry.add(_executor(executor_id, host))
    assert registry.ids() == ["2", "10", "x"]
    assert registry.for_rid(b"rid-10").executor_id == "10"
    assert sorted(registry.ids_on_host("a")) == ["10", "x"]
    assert "2" in registry and len(registry) == 3


def test_states_and_cores_of_the_active_ones():
    registry = ExecutorRegistry()
    registry.add(_executor("1"))
    registry.add(_executor("2", decommissioning=True))
    assert registry.cores() == 4 and registry.cores(active_only=True) == 2
    assert registry.is_active("1") and not registry.is_active("2") and not registry.is_active("3")
    assert registry.mark_late("1") and not registry.mark_late("1")   # reported once
    assert [registry.state(e) for e in registry.all()] == ["late", "decommissioning"]
    assert registry.heard_from("1") and not registry.heard_from("1")
    assert registry.state(registry.get("1")) == "active"


def test_a_removal_is_remembered_as_a_loss_and_its_reason_can_grow():
    registry = ExecutorRegistry()
    registry.add(_executor("1"))
    registry.mark_late("1")
    assert registry.remove("1", "exited with code 1").executor_id == "1"
    assert registry.remove("1", "again") is None
    assert registry.for_rid(b"rid-1") is None and "1" not in registry.late
    assert registry.add_to_loss_reason("1", "the job was cancelled")
    assert not registry.add_to_loss_reason("1", "the job was cancelled")
    assert not registry.add_to_loss_reason("nobody", "x")
    [(executor_id, host, reason, _)] = registry.losses
    assert (executor_id, host, reason) == ("1", "h", "exited with code 1; the job was cancelled")


def test_only_the_last_hundred_losses_are_kept():
    registry = ExecutorRegistry()
    for i in range(150):
        registry.add(_executor(str(i)))
        registry.remove(str(i), "gone")
    assert len(registry.losses) == 100 and registry.losses[0][0] == "50"
