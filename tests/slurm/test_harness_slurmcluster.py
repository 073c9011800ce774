"""The Slurm test cluster itself: a node of 2 CPUs, jobs that run, pend, fail and are
cancelled, and a close() that leaves nothing behind."""
import os
import subprocess
import sys
import time

import psutil
import pytest

from conftest import wait_for

from .slurmcluster import (BACKFILL_INTERVAL, SlurmCluster, cluster_processes, process_names,
                           remove_stale)

pytestmark = pytest.mark.timeout(180)


def state(cluster, job_id):
    return (cluster.job_state(job_id) or ("", "", ""))[0]


def alive(procs):
    def running(proc):
        try:
            return proc.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False
    return [p for p in procs if running(p)]


def test_one_idle_node_of_two_cpus_in_two_partitions(slurm):
    # one line per partition of the node
    assert set(slurm.run("sinfo", "-h", "-N", "-o", "%N %T %c").stdout.splitlines()) == {
        f"{slurm.node} idle 2"}
    assert slurm.run("sinfo", "-h", "-o", "%R").stdout.split() == list(slurm.partitions)
    assert slurm.partitions == ("debug", "tiny")
    assert os.path.isfile(os.path.join(slurm.log_dir, "slurmctld.log"))


def test_code_under_test_finds_the_cluster_through_the_environment(slurm):
    assert os.environ["SLURM_CONF"] == slurm.conf_path
    # no env= given: what a driver under test does (munged's socket is in slurm.conf)
    result = subprocess.run(["squeue", "-h"], capture_output=True, text=True, timeout=30)
    assert (result.returncode, result.stderr) == (0, "")


def test_a_job_runs_and_is_cancelled(slurm_empty):
    slurm = slurm_empty
    job = slurm.submit("-o", "/dev/null", "--wrap", "sleep 30")
    wait_for(lambda: state(slurm, job) == "RUNNING", 15, message="the job to run")
    assert slurm.jobs() == [{"id": job, "name": "wrap", "state": "RUNNING", "reason": "None",
                             "node": slurm.node}]
    assert slurm.run("scancel", job).returncode == 0
    wait_for(lambda: not slurm.jobs(), 15, message="the job to leave the queue")
    assert slurm.job_state(job)[0] == "CANCELLED"


def test_a_third_one_cpu_job_waits_for_a_free_cpu(slurm_empty):
    slurm = slurm_empty
    jobs = [slurm.submit("-o", "/dev/null", "--cpus-per-task=1", "--wrap", "sleep 60")
            for _ in range(3)]

    def states():
        return {j["id"]: (j["state"], j["reason"]) for j in slurm.jobs()}
    # a pending job's Reason is None (or Priority) until a scheduling pass gives it Resources
    wait_for(lambda: states() == {jobs[0]: ("RUNNING", "None"), jobs[1]: ("RUNNING", "None"),
                                  jobs[2]: ("PENDING", "Resources")},
             15, message="2 running, 1 pending")
    slurm.run("scancel", jobs[0])
    wait_for(lambda: states() == {jobs[1]: ("RUNNING", "None"), jobs[2]: ("RUNNING", "None")}, 15,
             message="the pending job to start on the freed CPU")


def test_a_failing_job_ends_failed_with_its_exit_code(slurm_empty, tmp_path):
    slurm = slurm_empty
    script = tmp_path / "fail.sh"
    script.write_text("#!/bin/sh\nexit 3\n")
    job = slurm.submit("-o", "/dev/null", str(script))
    wait_for(lambda: state(slurm, job) not in ("", "PENDING", "RUNNING", "COMPLETING"), 15,
             message="the job to end")
    assert slurm.job_state(job) == ("FAILED", "NonZeroExitCode", "3:0")


def test_a_job_carries_the_submitters_environment(slurm_empty, tmp_path):
    slurm = slurm_empty
    out = tmp_path / "out"
    job = slurm.submit("-o", str(out), "--wrap", 'echo "FOO=$FOO"', env={"FOO": "bar"})
    wait_for(lambda: state(slurm, job) == "COMPLETED", 15, message="the job to complete")
    assert slurm.job_state(job) == ("COMPLETED", "None", "0:0")
    assert out.read_text() == "FOO=bar\n"


@pytest.mark.parametrize("partition, cpus", [("tiny", 2), ("debug", 3)])
def test_a_job_asking_more_cpus_than_its_partition_gives_pends_forever(slurm_empty, partition,
                                                                       cpus):
    """EnforcePartLimits=NO: sbatch accepts the job, which waits for a partition that can
    never hold it (tiny: MaxCPUsPerNode=1; debug: a node of 2 CPUs)."""
    slurm = slurm_empty
    job = slurm.submit("-o", "/dev/null", "-p", partition, f"--cpus-per-task={cpus}",
                       "--wrap", "true")
    small = slurm.submit("-o", "/dev/null", "-p", partition, "--wrap", "true")
    wait_for(lambda: state(slurm, small) == "COMPLETED", 15, message="a job that fits to run")
    # a check that nothing happens: still pending after several of the scheduler's passes
    time.sleep(3 * BACKFILL_INTERVAL)
    assert slurm.job_state(job) == ("PENDING", "PartitionConfig", "0:0")


def test_close_leaves_no_process_and_no_directory(slurm, tmp_path):
    """A cluster of its own beside the session's: close() with a job that ignores SIGTERM
    and one that left a process outside its slurmstepd's tree, which scancel does not end."""
    with SlurmCluster(cpus=1) as cluster:
        ready = tmp_path / "ready"
        job = cluster.submit("-o", "/dev/null", "--wrap",
                             f"(setsid sleep 301 &); trap '' TERM; touch {ready}; sleep 300")
        wait_for(ready.exists, 15, message="the job to run")
        procs = cluster_processes(cluster.base)
        names = process_names(procs)
        assert {"munged", "slurmctld", "slurmscriptd", "slurmd", "slurmstepd", "sleep"} <= names
        assert {"sleep 300", "sleep 301"} <= {" ".join(p.cmdline()) for p in procs}
        assert cluster.job_state(job)[0] == "RUNNING"
        cluster.close()
        cluster.close()
    assert not alive(procs)
    assert not cluster_processes(cluster.base)
    assert not os.path.exists(cluster.base)


def test_the_next_run_removes_what_a_killed_run_left(slurm, tmp_path):
    """A test run killed with its cluster and a job running (beside the session's): the next
    one stops them all and removes the directory."""
    script = ("import time; from slurmcluster import SlurmCluster; c = SlurmCluster(1); "
              "c.submit('-o', '/dev/null', '--wrap', 'sleep 300'); print(c.base, flush=True); "
              "time.sleep(300)")
    run = subprocess.Popen([sys.executable, "-c", script], cwd=os.path.dirname(__file__),
                           stdout=subprocess.PIPE, text=True)
    base = run.stdout.readline().strip()
    run.kill()
    run.wait()
    run.stdout.close()
    assert base and os.path.isdir(base)
    wait_for(lambda: {"slurmstepd", "sleep"} <= process_names(cluster_processes(base)), 15,
             message="the job to run")
    remove_stale()
    assert not cluster_processes(base)
    assert not os.path.exists(base)
