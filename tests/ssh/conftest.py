"""The ``ssh_hosts`` fixture: two simulated hosts with their own sshd (see sshhosts.py)."""
import os

import pytest

from .sshhosts import HostsUnavailable, SSHHosts


@pytest.fixture(scope="session")
def ssh_hosts():
    """SSHHosts(2) for the whole session. Skipped where the machine cannot make them (not
    root, no sshd, no namespaces), except on CI (CI set), where that is a failure: there
    .ci/run installs what they need, and the SSH tests must run."""
    try:
        hosts = SSHHosts(2)
    except HostsUnavailable as e:
        if os.environ.get("CI"):
            pytest.fail(f"the SSH test hosts cannot be made on CI: {e}", pytrace=False)
        pytest.skip(f"the SSH test hosts cannot be made here: {e}")
    try:
        yield hosts
    finally:
        hosts.close()
