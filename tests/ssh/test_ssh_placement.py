"""Where new executors start on two real hosts: first on the host the waiting tasks prefer
(as ``request_total_executors`` says), and on a host excluded for failures only when the
other has no room."""
import pytest

from conftest import wait_for

# remote_python is a fixture, used as the test's argument
from .test_ssh_cluster import remote_python, start_driver, wait_for_executors  # noqa: F401

import zsched
from zsched.cluster_managers import SSHClusterManager
from zsched.cluster_managers.hosts_file import parse_hosts
from zsched.config import Config
from zsched.driver import Driver, DriverOptions

pytestmark = pytest.mark.timeout(240)


def hosts_of(client):
    """The hosts of the registered executors, by executor id."""
    return {e["id"]: e["host"] for e in client.status()["executors"]}


def test_new_executors_start_first_on_the_host_the_waiting_tasks_prefer(
        ssh_hosts, remote_python, tmp_path):  # noqa: F811
    h1, h2 = ssh_hosts.hosts
    driver = start_driver(ssh_hosts, remote_python, tmp_path, [f"{h1.name} 2", f"{h2.name} 2"],
                          "--initial-executors", "0")
    try:
        with zsched.Client(driver.url, secret_file=driver.secret_file) as client:
            assert client.request_total_executors(2, 4, {h2.name: 4}) is True
            wait_for_executors(client, 2)
            assert sorted(hosts_of(client).values()) == [h2.name, h2.name]
            wait_for(lambda: f"goes to {h2.name}: 4 waiting task(s) prefer it"
                     in driver.stderr_so_far(), 10, message="the choice in the log")
            assert client.status()["allocation"]["host_to_local_task_count"] == {h2.name: 4}
            # h2 is full: the next one goes where there is room
            assert client.request_total_executors(3, 4, {h2.name: 4}) is True
            wait_for_executors(client, 3)
            assert sorted(hosts_of(client).values()) == [h1.name, h2.name, h2.name]
    finally:
        assert driver.stop() == 0


def test_an_excluded_host_gets_no_executor_while_another_has_room(
        ssh_hosts, remote_python, tmp_path, caplog):  # noqa: F811
    """The driver's exclusion of a host (set here as the driver sets it) keeps new executors
    off it; once the other host is full, it gets one anyway."""
    caplog.set_level("INFO", logger="zsched.cluster_managers.ssh")
    h1, h2 = ssh_hosts.hosts
    manager = SSHClusterManager(parse_hosts([f"{h1.name} 2", f"{h2.name} 2"]),
                                ssh_options=ssh_hosts.ssh_options, remote_python=remote_python,
                                driver_host="0.0.0.0")
    secret_file = str(tmp_path / "secret")
    options = DriverOptions.create(Config(allocation_batch_delay=0.2), secret_file=secret_file,
                                   cluster_manager=manager, initial_executors=2, host="0.0.0.0",
                                   app_id=f"ssh-{tmp_path.name}")
    driver = Driver(options)
    driver.allocator.excluded_hosts = {h1.name}
    driver.start_thread()
    try:
        with zsched.Client(driver.url, secret_file=secret_file) as client:
            wait_for_executors(client, 2)
            assert sorted(hosts_of(client).values()) == [h2.name, h2.name]
            assert client.status()["allocation"]["excluded_hosts"] == [h1.name]
            said = [r.getMessage() for r in caplog.records if " goes to " in r.getMessage()]
            assert said[0] == f"executor 1 goes to {h2.name}: not on {h1.name}, excluded for failures"
            assert client.request_total_executors(3) is True
            wait_for_executors(client, 3)
            assert sorted(hosts_of(client).values()) == [h1.name, h2.name, h2.name]
            wait_for(lambda: any(r.getMessage() == f"executor 3 goes to {h1.name}: excluded for "
                                 "failures, but no other host has room" for r in caplog.records),
                     10, message="the log of the excluded host's executor")
    finally:
        driver.request_stop()
        driver.join(60)
        assert not driver.is_running()
