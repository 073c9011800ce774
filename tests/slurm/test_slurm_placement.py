"""Where a job of executors asks to run, on a real single-node Slurm (see slurmcluster.py):
on the node its waiting tasks prefer, and off the nodes excluded for failures unless no
other node is left. The job runs either way."""
import re

import pytest

import zsched
from conftest import wait_for
from zsched.cluster_managers import SlurmClusterManager
from zsched.config import Config
from zsched.driver import Driver, DriverOptions

from .test_slurm_cluster import our_jobs, start_driver

pytestmark = pytest.mark.timeout(240)


def job_fields(slurm, job_id):
    result = slurm.run("scontrol", "-o", "show", "job", str(job_id))
    return dict(re.findall(r"(?:^|\s)(\w+)=(\S*)", result.stdout))


def test_a_job_asks_for_the_node_its_waiting_tasks_prefer_and_runs(slurm_empty, tmp_path):
    slurm = slurm_empty
    driver = start_driver(slurm, tmp_path, "--initial-executors", "0")
    try:
        with zsched.Client(driver.url, secret_file=driver.secret_file) as client:
            assert client.request_total_executors(1, 3, {slurm.node: 3}) is True
            wait_for(lambda: len(client.executor_ids()) == 1, 60, message="1 executor")
            assert client.submit(abs, -4).result(30) == 4
            (job,) = our_jobs(slurm, driver)
            assert job_fields(slurm, job["id"])["ReqNodeList"] == slurm.node
            log = driver.stderr_so_far()
            assert (f"submitted Slurm job {job['id']} for executor(s) 1 (asked for {slurm.node}, "
                    "where waiting tasks want it)") in log
            # this Slurm takes --prefer, but the node has no feature of its name
            assert "Invalid preferred feature specification" in log
            assert "--nodelist from now on" in log
    finally:
        assert driver.stop() == 0
    wait_for(lambda: not our_jobs(slurm, driver), 30, message="the jobs ended")


def test_a_job_excluding_every_node_is_submitted_without_and_runs(slurm_empty, tmp_path, caplog):
    """The driver's exclusion of a node (set here as the driver sets it) is a wish: with no
    other node, sbatch refuses the job, and it is submitted again without it."""
    caplog.set_level("INFO", logger="zsched.cluster_managers.slurm")
    slurm = slurm_empty
    manager = SlurmClusterManager(slurm_options=[f"--output={slurm.jobs_dir}/%j.out"])
    secret_file = str(tmp_path / "secret")
    options = DriverOptions.create(Config(allocation_batch_delay=0.2), secret_file=secret_file,
                                   cluster_manager=manager, initial_executors=1, host="0.0.0.0",
                                   app_id=f"slurm-{tmp_path.name}"[:40])
    driver = Driver(options)
    driver.allocator.excluded_hosts = {slurm.node}
    driver.start_thread()
    try:
        with zsched.Client(driver.url, secret_file=secret_file) as client:
            wait_for(lambda: len(client.executor_ids()) == 1, 60, message="1 executor")
            assert client.submit(abs, -5).result(30) == 5
            said = [r.getMessage() for r in caplog.records]
            assert any(m.startswith(f"sbatch refused a job with --exclude={slurm.node} (")
                       and m.endswith("): submitted without") for m in said), said
    finally:
        driver.request_stop()
        driver.join(60)
        assert not driver.is_running()
