"""The hosts file of an SSH cluster, and the ssh command line made from it."""
import pytest

from zsched.cluster_managers.hosts_file import Host, parse_hosts, read_hosts_file
from zsched.cluster_managers.ssh import DEFAULT_SSH_OPTIONS, SSHClusterManager
from zsched.errors import ConfigError

pytestmark = pytest.mark.unit


def test_every_form_of_a_line():
    hosts = parse_hosts("""
        # the rack
        node1
        alice@node2 4      # four executors
        node3:2222 2
        bob@[fd00::5]:2200
        10.0.0.7:22 1
    """.splitlines())
    assert hosts == [
        Host("node1", line=3),
        Host("node2", user="alice", executors=4, line=4),
        Host("node3", port=2222, executors=2, line=5),
        Host("fd00::5", user="bob", port=2200, line=6),
        Host("10.0.0.7", port=22, line=7),
    ]
    assert [h.destination for h in hosts] == ["node1", "alice@node2", "node3", "bob@fd00::5", "10.0.0.7"]


@pytest.mark.parametrize("line, complaint", [
    ("node1 two", "must be an integer >= 1, got 'two'"),
    ("node1 0", "must be an integer >= 1, got '0'"),
    ("node1 2 3", "got 3 fields"),
    ("node1:http", "got 'node1:http'"),
    ("node1:70000", "port 70000 is out of range"),
    ("@node1", "got '@node1'"),
    ("a@b@node1", "got 'a@b@node1'"),
])
def test_a_malformed_line_is_an_error_naming_it(tmp_path, line, complaint):
    path = tmp_path / "hosts"
    path.write_text(f"# ok\nnode0 2\n{line}\n")
    with pytest.raises(ConfigError) as caught:
        read_hosts_file(str(path))
    assert f"hosts file {path}, line 3: " in str(caught.value)
    assert complaint in str(caught.value) and repr(line) in str(caught.value)


def test_repeated_and_empty_and_missing_files_are_errors(tmp_path):
    with pytest.raises(ConfigError, match="line 2: 'node1 2' repeats line 1"):
        parse_hosts(["node1", "node1 2"])
    with pytest.raises(ConfigError, match="lists no hosts"):
        parse_hosts(["# nothing", ""])
    with pytest.raises(ConfigError, match="cannot read hosts file .*nope"):
        read_hosts_file(str(tmp_path / "nope"))


def test_the_ssh_command_line_lets_user_options_win_and_quotes_the_remote_command():
    manager = SSHClusterManager(parse_hosts(["alice@node2:2222 2"]), 3,
                                ssh_options=["ConnectTimeout=2", "ProxyJump=gate"],
                                remote_python="/opt/py 3/bin/python", driver_host="10.0.0.1")
    manager.attach("tcp://10.0.0.1:7077", "app-1", None)
    host = manager.hosts[0]
    command = manager.ssh_arguments(host, manager.remote_command(host, "7"))
    options = [command[i + 1] for i, arg in enumerate(command) if arg == "-o"]
    # ssh takes the first value of an option: the user's come first
    assert options == ["ConnectTimeout=2", "ProxyJump=gate", *DEFAULT_SSH_OPTIONS]
    assert command[:2] == ["ssh", "-T"] and "BatchMode=yes" in options
    assert command[-4:-1] == ["2222", "--", "alice@node2"]
    assert command[-1] == ("'/opt/py 3/bin/python' -m zsched.cluster_managers.ssh_remote "
                           "--session-timeout 60 --driver-url tcp://10.0.0.1:7077 --executor-id 7 --hostname node2 --cores 3 "
                           "--app-id app-1")
    assert manager.capacity() == 2


def test_executors_are_spread_over_the_hosts_with_most_room_and_never_beyond_capacity():
    manager = SSHClusterManager(parse_hosts(["a 3", "b 1"]), ssh_command="true")
    manager.attach("tcp://127.0.0.1:1", "app-1", None)
    try:
        manager.request_total(10, avoid_hosts={"b"})
        assert sorted(manager.host_of(i) for i in manager.launched_ids()) == ["a", "a", "a"]
        manager.request_total(10)
        assert sorted(manager.host_of(i) for i in manager.launched_ids()) == ["a", "a", "a", "b"]
    finally:
        manager.stop(5)
