"""The Slurm cluster manager's own parts: the job script, the sbatch command line, how an
ended job is described (its work against a real Slurm is in tests/slurm/)."""
import shlex
import subprocess
import sys

from zsched.cluster_managers.slurm import (SlurmClusterManager, SlurmJob, describe_ended_job, job_credentials,
                                          parse_scontrol)


def make(**kwargs):
    manager = SlurmClusterManager(**kwargs)
    manager.driver_url, manager.app_id, manager.job_name = "tcp://head:7077", "app-1", "zsched-app-1"
    return manager


def test_a_job_script_starts_its_executors_side_by_side_and_waits_for_them(tmp_path):
    manager = make(cores_per_executor=2, python="/opt/py 3/bin/python", log_level="INFO")
    script = manager.job_script(SlurmJob(["7", "8"]))
    lines = script.splitlines()
    assert lines[0] == "#!/bin/sh" and lines[-1] == "exit $status"
    end = ' --hostname "$host" & pids="$pids $!"'
    starts = [line for line in lines if line.endswith(end)]
    assert len(starts) == 2
    words = shlex.split(starts[1][:-len(end)])
    assert words[0] == "/opt/py 3/bin/python" and "zsched.executor" in words[2]
    assert words[3:] == ["--driver-url", "tcp://head:7077", "--executor-id", "8", "--cores", "2",
                         "--app-id", "app-1", "--log-level", "INFO", "--insecure"]  # no credentials
    # the script is valid sh that reaches the executor command (here: echo in its place)
    echo = make(python="echo").job_script(SlurmJob(["1"]))
    run = subprocess.run(["sh", "-c", echo], capture_output=True, text=True,
                         env={"SLURMD_NODENAME": "node7", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0 and run.stdout.rstrip().endswith("--hostname node7")
    # an executor that fails fails the job, with its status
    missing = make(python="/nonexistent/python3").job_script(SlurmJob(["1", "2"]))
    assert subprocess.run(["sh", "-c", missing], capture_output=True).returncode == 127


def test_a_job_script_hands_each_executor_its_credential_on_standard_input_alone(tmp_path):
    fake_python = tmp_path / "python"
    fake_python.write_text('#!/bin/sh\nIFS= read -r line\necho "$* got $line"\nenv\n')
    fake_python.chmod(0o755)
    job = SlurmJob(["1", "2"])
    job.credentials = [b"zsched-credential executor 1 K1 S1\n", b"zsched-credential executor 2 K2 S2\n"]
    script = make(python=str(fake_python)).job_script(job)
    assert "zsched-credential" not in script and "--insecure" not in script
    run = subprocess.run(["sh", "-c", script], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", **job_credentials(job)})
    assert run.returncode == 0, run.stderr
    got = sorted(line.split(" got ")[1] for line in run.stdout.splitlines() if " got " in line)
    assert got == ["zsched-credential executor 1 K1 S1", "zsched-credential executor 2 K2 S2"]
    assert all("--credential-fd 0" in line for line in run.stdout.splitlines() if " got " in line)
    assert "ZSCHED_CREDENTIAL" not in run.stdout  # the executors' environments


def test_sbatch_asks_for_the_cores_of_all_its_executors_and_user_options_come_last():
    manager = make(cores_per_executor=2, partition="gpu", slurm_options=["--time=60", "--qos=low"])
    arguments = manager.sbatch_arguments(SlurmJob(["1", "2", "3"]))
    assert arguments == ["sbatch", "--parsable", "--job-name", "zsched-app-1", "--ntasks", "1",
                         "--cpus-per-task", "6", "--no-requeue", "--partition", "gpu",
                         "--time=60", "--qos=low"]


def test_an_ended_job_is_described_in_slurms_words():
    fields = parse_scontrol("JobId=12 JobName=zsched-app-1 JobState=FAILED Reason=NonZeroExitCode "
                            "Dependency=(null) ExitCode=3:0 RunTime=00:00:01")
    assert describe_ended_job("12", fields) == "Slurm job 12 FAILED (NonZeroExitCode), exit code 3:0"
    assert describe_ended_job("13", {"JobState": "CANCELLED", "Reason": "None", "ExitCode": "0:15"}) == \
        "Slurm job 13 CANCELLED, exit code 0:15"
    assert describe_ended_job("14", {"JobState": "TIMEOUT", "Reason": "TimeLimit", "ExitCode": "0:0"}) == \
        "Slurm job 14 TIMEOUT (TimeLimit)"
    assert describe_ended_job("15", {"JobState": "COMPLETED", "Reason": "None", "ExitCode": "0:0"}) == \
        "Slurm job 15 COMPLETED"


def test_executors_of_a_job_are_pending_until_it_runs_and_killing_a_waiting_one_cancels_its_job():
    manager = make(executors_per_job=2)
    manager.request_total(3)
    assert manager.launched_ids() == ["1", "2", "3"] and manager.queued_ids() == ["1", "2", "3"]
    assert [job.executor_ids for job in manager._jobs] == [["1", "2"], ["3"]]
    manager.kill(["1"])  # its job still waits: cancelled whole, executor 2 goes with it
    assert manager.launched_ids() == ["3"] and manager._jobs[0].cancel
    manager.request_total(3)  # replaced by a new job
    assert manager.launched_ids() == ["3", "4", "5"]
    assert manager.host_of("3") is None and manager.capacity() is None
    assert sys.executable == SlurmClusterManager().python
