"""The Slurm cluster manager's own parts: the job script, the sbatch command line, how an
ended job is described (its work against a real Slurm is in tests/slurm/)."""
import shlex
import subprocess
import sys

from zsched.cluster_managers.slurm import (SlurmClusterManager, SlurmJob, describe_ended_job, job_credentials,
                                          parse_scontrol)
from zsched.cluster_managers.slurm_placement import NODELIST, PREFER, node_option


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


def test_jobs_ask_for_the_nodes_most_tasks_want_in_proportion_and_not_excluded_ones():
    manager = make(cores_per_executor=2)
    manager.request_total(4, local_tasks={"n1": 3, "n2": 9, "n3": 1}, excluded_hosts={"n2", "n9"})
    # n2 is excluded; n1's first job takes two of its three tasks, then n1 (1) and n3 (1)
    # tie and n1 comes first; then no task is left
    assert [job.wanted_node for job in manager._jobs] == ["n1", "n1", "n3", None]
    assert {job.exclude for job in manager._jobs} == {("n2", "n9")}
    manager.request_total(5)  # a request without them asks for nothing
    assert (manager._jobs[-1].wanted_node, manager._jobs[-1].exclude) == (None, ())


def test_the_sbatch_command_line_with_prefer_or_nodelist_and_exclude():
    manager = make(slurm_options=["--time=60"])
    job = SlurmJob(["1"])
    job.wanted_node, job.exclude = "n3", ("n1", "n2")
    plain = ["sbatch", "--parsable", "--job-name", "zsched-app-1", "--ntasks", "1",
             "--cpus-per-task", "1", "--no-requeue"]
    manager.node_option = PREFER
    assert manager.sbatch_arguments(job) == [*plain, "--prefer=n3", "--exclude=n1,n2", "--time=60"]
    manager.node_option = NODELIST
    assert manager.sbatch_arguments(job) == [*plain, "--nodelist=n3", "--exclude=n1,n2", "--time=60"]
    assert manager.sbatch_arguments(job, placed=False) == [*plain, "--time=60"]
    job.wanted_node = None
    assert manager.sbatch_arguments(job) == [*plain, "--exclude=n1,n2", "--time=60"]
    assert node_option(lambda arguments: 0) == PREFER      # sbatch took --prefer
    assert node_option(lambda arguments: 255) == NODELIST  # unrecognized option


FAKE_SBATCH = """#!/bin/sh
echo "$*" >> "$0.calls"
case " $* " in *" --version "*) echo "slurm-wlm 22.05.8"; exit 0 ;; esac
cat > /dev/null
for word in "$@"; do
    case "$word" in
        --prefer=*) echo "sbatch: error: Batch job submission failed: Invalid preferred feature specification" >&2; exit 1 ;;
        --nodelist=gone) echo "sbatch: error: Batch job submission failed: Invalid node name specified" >&2; exit 1 ;;
    esac
done
echo 42
"""


def test_sbatch_refusing_prefer_turns_to_nodelist_and_a_refused_placement_is_dropped(tmp_path):
    """Slurm 22.05's sbatch takes --prefer, but it names node features: a node name that is
    no feature is refused, and the manager keeps to --nodelist from then on. A job refused
    with its placement (a node Slurm does not know) is submitted again without it."""
    sbatch = tmp_path / "sbatch"
    sbatch.write_text(FAKE_SBATCH)
    sbatch.chmod(0o755)
    manager = make()
    manager._environment = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    manager.request_total(3, local_tasks={"node7": 1, "gone": 1})
    first, second, third = manager._jobs
    assert (first.wanted_node, second.wanted_node, third.wanted_node) == ("node7", "gone", None)
    assert manager._sbatch(first)[:2] == (0, "42\n")
    assert manager.node_option == NODELIST and first.wanted_node == "node7"
    assert manager._sbatch(second)[:2] == (0, "42\n")
    assert second.wanted_node is None  # submitted without
    calls = [line.split(" --no-requeue")[-1].strip() for line in
             (tmp_path / "sbatch.calls").read_text().splitlines()]
    assert calls == ["--prefer=zsched --version", "--prefer=node7", "--nodelist=node7",
                     "--nodelist=gone", ""]
