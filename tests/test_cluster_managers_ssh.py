"""Where the SSH cluster manager starts new executors: room, the hosts the waiting tasks
prefer, the hosts excluded for failures (real objects; ssh is ``true``)."""
import pytest

from zsched.cluster_managers.hosts_file import parse_hosts
from zsched.cluster_managers.ssh import SSHClusterManager

pytestmark = pytest.mark.unit


def placed(manager):
    """The hosts of the executors started, in start order."""
    return [manager.host_of(i) for i in manager.launched_ids()]


@pytest.fixture
def three_hosts():
    """Hosts a (3 executors), b (2) and c (2); executors of two cores; ssh is ``true``."""
    manager = SSHClusterManager(parse_hosts(["a 3", "b 2", "c 2"]), 2, ssh_command="true")
    manager.attach("tcp://127.0.0.1:1", "app-1", None)
    yield manager
    manager.stop(5)


def test_new_executors_go_first_to_the_hosts_most_tasks_prefer_in_proportion(three_hosts, caplog):
    caplog.set_level("INFO", logger="zsched.cluster_managers.ssh")
    # c is wanted most: its first executor takes two of its five tasks, then c (3 left)
    # and b (3) tie, b wins on room, and so on; with no task left, room decides (a)
    three_hosts.request_total(5, local_tasks={"b": 3, "c": 5})
    assert placed(three_hosts) == ["c", "b", "c", "b", "a"]
    said = [r.getMessage() for r in caplog.records if " goes to " in r.getMessage()]
    assert said[0] == "executor 1 goes to c: 5 waiting task(s) prefer it"
    assert said[1] == "executor 2 goes to b: 3 waiting task(s) prefer it"
    assert len(said) == 4  # the last one: room alone, nothing to say


def test_an_unknown_or_full_preferred_host_falls_back_to_room(three_hosts):
    three_hosts.request_total(2, local_tasks={"elsewhere": 9})
    assert placed(three_hosts) == ["a", "a"]
    three_hosts.request_total(4, local_tasks={"b": 1}, avoid_hosts={"b"})
    assert placed(three_hosts) == ["a", "a", "c", "a"]  # b backing off: room decides


def test_excluded_hosts_get_an_executor_only_when_no_other_host_has_room(three_hosts, caplog):
    caplog.set_level("INFO", logger="zsched.cluster_managers.ssh")
    three_hosts.request_total(4, local_tasks={"a": 4}, excluded_hosts={"a", "c"})
    assert placed(three_hosts) == ["b", "b", "a", "a"]
    said = [r.getMessage() for r in caplog.records if " goes to " in r.getMessage()]
    assert said[0] == "executor 1 goes to b: not on a, c, excluded for failures"
    assert said[2] == "executor 3 goes to a: excluded for failures, but no other host has room"
