"""What the clusters users start share: where each says its executors run, and the bounds
that follow from it, checked before anything starts."""
import re
import tempfile

import pytest

from zsched.clusters.base import Cluster
from zsched.clusters.local import LocalCluster
from zsched.clusters.slurm import SlurmCluster
from zsched.clusters.ssh import SSHCluster
from zsched.config import MAX_EXECUTORS, MAX_EXECUTORS_PER_HOST
from zsched.errors import ConfigError

pytestmark = pytest.mark.unit


class Started(Exception):
    """Raised where a cluster would make its private directory: its arguments passed."""


@pytest.fixture
def no_start(monkeypatch):
    def refuse(**_):
        raise Started
    monkeypatch.setattr(tempfile, "mkdtemp", refuse)


def test_each_cluster_says_where_its_executors_run():
    assert LocalCluster.executors_on_this_host
    assert not SSHCluster.executors_on_this_host
    assert not SlurmCluster.executors_on_this_host
    for cluster in (LocalCluster, SSHCluster, SlurmCluster):
        assert cluster.__bases__ == (Cluster,)


def test_executors_on_this_host_are_bounded_per_host(no_start):
    with pytest.raises(ConfigError, match=f"n_executors must be from 0 to {MAX_EXECUTORS_PER_HOST}"):
        LocalCluster(MAX_EXECUTORS_PER_HOST + 1)
    with pytest.raises(Started):
        LocalCluster(MAX_EXECUTORS_PER_HOST)


def test_executors_elsewhere_are_bounded_per_cluster(no_start):
    with pytest.raises(Started):
        SlurmCluster(MAX_EXECUTORS_PER_HOST + 1)
    with pytest.raises(ConfigError, match=f"n_executors must be from 0 to {MAX_EXECUTORS}"):
        SlurmCluster(MAX_EXECUTORS + 1)


@pytest.mark.parametrize("make", [lambda **kw: SSHCluster(["node1 2"], **kw),
                                  lambda **kw: SlurmCluster(2, **kw)], ids=["ssh", "slurm"])
def test_only_a_local_cluster_runs_its_driver_in_process(make, no_start):
    with pytest.raises(ConfigError, match=re.escape("'in_process'")):
        make(in_process=True)
