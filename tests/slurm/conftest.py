"""The ``slurm`` fixture: a single-node Slurm of 2 CPUs for the session (see slurmcluster.py)."""
import os

import pytest

from .slurmcluster import SlurmCluster, SlurmUnavailable


@pytest.fixture(scope="session")
def slurm():
    """SlurmCluster(cpus=2) for the whole session, its SLURM_CONF in os.environ meanwhile
    (code under test runs sbatch, squeue... with this process's environment). Skipped where
    the machine cannot run it (not root, packages missing), except on CI (CI set), where
    that is a failure: there .ci/run installs the packages, and the Slurm tests must run."""
    try:
        cluster = SlurmCluster(cpus=2)
    except SlurmUnavailable as e:
        if os.environ.get("CI"):
            pytest.fail(f"the Slurm test cluster cannot run on CI: {e}", pytrace=False)
        pytest.skip(f"the Slurm test cluster cannot run here: {e}")
    saved = {name: os.environ.get(name) for name in cluster.env}
    os.environ.update(cluster.env)
    try:
        yield cluster
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        cluster.close()


@pytest.fixture
def slurm_empty(slurm):
    """The session's cluster with no job in its queue, before the test and after it."""
    slurm.cancel_all()
    yield slurm
    slurm.cancel_all()
