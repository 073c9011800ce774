"""Executors as jobs of a real single-node Slurm of 2 CPUs (see slurmcluster.py): tasks on
them, scaling up and down, kills, jobs cancelled from outside, a partition with no room,
executors sharing a job, dynamic allocation, and the jobs of a stopped or killed driver."""
import os
import signal
import time

import psutil
import pytest

import zsched
from conftest import DriverProcess, wait_for

pytestmark = pytest.mark.timeout(240)


def start_driver(slurm, tmp_path, *args, env=None):
    app_id = f"slurm-{tmp_path.name}"[:40]
    driver = DriverProcess("--slurm", "--secret-file", str(tmp_path / "secret"), "--app-id", app_id,
                           f"--slurm-option=--output={slurm.jobs_dir}/%j.out", *args, env=env)
    driver.app_id = app_id
    return driver


def our_jobs(slurm, driver):
    return [job for job in slurm.jobs() if job["name"] == f"zsched-{driver.app_id}"]


def running(slurm, driver):
    return sorted(job["id"] for job in our_jobs(slurm, driver) if job["state"] == "RUNNING")


def task_environment(_=None):
    import os
    return dict(os.environ)


def test_executors_run_as_jobs_and_nothing_secret_reaches_them(slurm, tmp_path):
    """The cluster secret never reaches a job; each executor's key leaves the job's
    environment at once: it is in no executor's environment or command line, nor in a
    task's environment."""
    driver = start_driver(slurm, tmp_path, "--initial-executors", "2")
    try:
        with zsched.Client(driver.url, secret_file=driver.secret_file) as client:
            wait_for(lambda: len(client.executor_ids()) == 2, 60, message="2 executors")
            assert sorted(client.map(abs, range(-50, 50))) == sorted(abs(i) for i in range(-50, 50))
            status = client.status()
            assert {e["host"] for e in status["executors"]} == {slurm.node}
            assert len(running(slurm, driver)) == 2
            with open(driver.secret_file, "rb") as f:
                secret = f.read().strip()
            executors = []
            for proc in psutil.process_iter(["cmdline"]):
                cmdline = " ".join(proc.info["cmdline"] or [])
                assert secret.decode() not in cmdline and "zsched-credential" not in cmdline
                if "zsched.executor" in cmdline and driver.app_id in cmdline:
                    executors.append(proc)
            assert len(executors) == 2
            for proc in executors:
                assert "--credential-fd" in proc.cmdline()
                with open(f"/proc/{proc.pid}/environ", "rb") as f:
                    environ = f.read()
                assert secret not in environ and b"zsched-credential" not in environ
                assert b"ZSCHED_SECRET" not in environ and b"ZSCHED_CREDENTIAL" not in environ
            for environment in client.map(task_environment, range(4), chunksize=1):
                assert not any(name.startswith(("ZSCHED_SECRET", "ZSCHED_CREDENTIAL"))
                               for name in environment)
    finally:
        assert driver.stop() == 0
    wait_for(lambda: not our_jobs(slurm, driver), 30, message="the jobs ended")


def test_scale_up_and_down_kill_and_no_room(slurm, tmp_path):
    driver = start_driver(slurm, tmp_path, "--initial-executors", "1",
                          "--conf", "executor_start_timeout=3", "--conf", "allocation_batch_delay=0.2")
    try:
        with zsched.Client(driver.url, secret_file=driver.secret_file) as client:
            wait_for(lambda: client.executor_ids() == ["1"], 60, message="executor 1")
            # 3 executors of 1 core on a node of 2 CPUs: the third job waits, without error
            # and without being timed out, however long it waits
            assert client.request_total_executors(3) is True
            wait_for(lambda: len(client.executor_ids()) == 2, 60, message="2 executors")
            wait_for(lambda: client.status()["allocation"]["queued"] == 1, 30, message="1 queued")
            pending = [job for job in our_jobs(slurm, driver) if job["state"] == "PENDING"]
            assert len(pending) == 1
            waited = client.status()["allocation"]
            assert waited["target"] == 3 and waited["starting"] == 1
            # kill one: its job is cancelled, not replaced; the waiting one gets its room
            first = client.executor_ids()[0]
            assert client.kill_executors([first]) == [first]
            wait_for(lambda: first not in client.executor_ids() and len(client.executor_ids()) == 2,
                     60, message="the waiting executor in its place")
            assert "did not register" not in driver.stderr_so_far()
            assert client.status()["allocation"]["target"] == 2
            assert len(our_jobs(slurm, driver)) == 2
            # down to one: request_total never kills; kill without replace does
            victim = client.executor_ids()[0]
            assert client.kill_executors([victim]) == [victim]
            wait_for(lambda: len(our_jobs(slurm, driver)) == 1, 30, message="one job left")
            assert client.status()["allocation"]["target"] == 1
    finally:
        assert driver.stop() == 0
    wait_for(lambda: not our_jobs(slurm, driver), 30, message="the jobs ended")


def test_a_job_cancelled_from_outside_is_a_loss_with_slurms_reason_and_replaced(slurm, tmp_path):
    driver = start_driver(slurm, tmp_path, "--initial-executors", "1")
    try:
        with zsched.Client(driver.url, secret_file=driver.secret_file) as client:
            wait_for(lambda: client.executor_ids() == ["1"], 60, message="executor 1")
            (job,) = our_jobs(slurm, driver)
            assert slurm.run("scancel", job["id"]).returncode == 0
            wait_for(lambda: client.executor_ids() == ["2"], 60, message="executor 1 replaced")
            wait_for(lambda: "CANCELLED" in client.status()["losses"][0]["reason"], 30,
                     message="Slurm's reason in the loss")
            (loss,) = client.status()["losses"]
            assert loss["id"] == "1" and f"Slurm job {job['id']} CANCELLED" in loss["reason"]
    finally:
        assert driver.stop() == 0


def test_a_failing_job_is_reported_and_retried_with_backoff(slurm, tmp_path):
    driver = start_driver(slurm, tmp_path, "--initial-executors", "1", "--remote-python", "/nonexistent/python3")
    try:
        wait_for(lambda: "ended before registering: Slurm job" in driver.stdout_so_far(), 60,
                 message="the failed job reported")
        line = next(text for text in driver.stdout_so_far().splitlines() if "ended before registering" in text)
        assert "FAILED" in line and "exit code 127:0" in line and "next start in 0.5 s" in line
    finally:
        assert driver.stop() == 0


def test_executors_sharing_a_job(slurm, tmp_path):
    driver = start_driver(slurm, tmp_path, "--initial-executors", "2", "--executors-per-job", "2")
    try:
        with zsched.Client(driver.url, secret_file=driver.secret_file) as client:
            wait_for(lambda: client.executor_ids() == ["1", "2"], 60, message="2 executors")
            assert len(our_jobs(slurm, driver)) == 1
            assert client.kill_executors(["1"]) == ["1"]   # stopped inside the job
            wait_for(lambda: client.executor_ids() == ["2"], 30, message="executor 1 gone")
            assert len(our_jobs(slurm, driver)) == 1
            assert client.submit(abs, -4).result(30) == 4
            assert client.kill_executors(["2"]) == ["2"], driver.stderr_so_far()[-3000:]  # the last one: the job is cancelled
            wait_for(lambda: not our_jobs(slurm, driver), 30, message="the job ended")
    finally:
        assert driver.stop() == 0


def test_dynamic_allocation_on_slurm(slurm, tmp_path):
    driver = start_driver(slurm, tmp_path, "--dynamic-allocation", "--min-executors", "0",
                          "--initial-executors", "0", "--max-executors", "2",
                          "--backlog-timeout", "0.2", "--executor-idle-timeout", "1")
    try:
        with zsched.Client(driver.url, secret_file=driver.secret_file) as client:
            assert client.executor_ids() == [] and our_jobs(slurm, driver) == []
            futures = [client.submit(pow, 2, i) for i in range(200)]
            assert [f.result(90) for f in futures] == [2 ** i for i in range(200)]
            assert client.status()["executors"], "grown from none"
            wait_for(lambda: client.executor_ids() == [] and not our_jobs(slurm, driver), 60,
                     message="shrunk to none when idle, jobs ended")
    finally:
        assert driver.stop() == 0


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_the_jobs_of_a_stopped_or_killed_driver_end(slurm, tmp_path, how):
    # two jobs run and one waits for room; a waiting job starts only after the driver is
    # gone, so its executor finds no driver: it gives up after the registration timeout
    driver = start_driver(slurm, tmp_path, "--initial-executors", "3",
                          env={"ZSCHED_REGISTRATION_TIMEOUT": "3"})
    with zsched.Client(driver.url, secret_file=driver.secret_file) as client:
        wait_for(lambda: len(client.executor_ids()) == 2, 60, message="2 executors")
        wait_for(lambda: len(our_jobs(slurm, driver)) == 3, 30, message="3 jobs")
        if how == "SIGKILL":
            driver.proc.send_signal(signal.SIGKILL)
        else:
            assert driver.stop() == 0
    wait_for(lambda: not our_jobs(slurm, driver), 90, message="every job of the driver ended")
    if how == "SIGKILL":
        driver.stop()
    def executors_left():
        return [p for p in psutil.process_iter(["cmdline"])
                if driver.app_id in " ".join(p.info["cmdline"] or [])
                and "zsched.executor" in " ".join(p.info["cmdline"] or [])]
    wait_for(lambda: not executors_left(), 15, message="the jobs' executors gone")  # ending


def test_python_api(slurm, tmp_path):
    with zsched.SlurmCluster(2, wait_for_executors=2, slurm_options=[f"--output={slurm.jobs_dir}/%j.out"]) as cluster:
        client = cluster.client()
        assert sum(client.map(abs, range(-10, 10))) == 100
        assert len(client.executor_ids()) == 2
        app_id = cluster.app_id
    wait_for(lambda: not [j for j in slurm.jobs() if j["name"] == f"zsched-{app_id}"], 30,
             message="the jobs ended")
    assert os.environ["SLURM_CONF"]


def test_a_partition_with_no_room_leaves_requests_pending_without_error(slurm, tmp_path):
    # "tiny" allows 1 CPU per node: a job for an executor of 2 cores waits forever
    start_timeout = 2
    driver = start_driver(slurm, tmp_path, "--partition", "tiny", "--cores-per-executor", "2",
                          "--initial-executors", "1", "--conf", f"executor_start_timeout={start_timeout}")
    try:
        with zsched.Client(driver.url, secret_file=driver.secret_file) as client:
            wait_for(lambda: [j["state"] for j in our_jobs(slurm, driver)] == ["PENDING"], 30,
                     message="the job pending")
            wait_for(lambda: client.status()["allocation"]["queued"] == 1, 10, message="1 queued")
            (job,) = our_jobs(slurm, driver)
            wait_for(lambda: slurm.job_state(job["id"])[1] == "PartitionConfig", 10,
                     message="Slurm's reason")
            # a check that nothing happens: past executor_start_timeout, a queued job is not
            # given up
            time.sleep(2.5 * start_timeout)
            assert [j["id"] for j in our_jobs(slurm, driver)] == [job["id"]]
            allocation = client.status()["allocation"]
            assert (allocation["target"], allocation["queued"], allocation["starting"]) == (1, 1, 1)
            assert client.executor_ids() == []
            assert "WARNING" not in driver.stderr_so_far() and "zsched:" not in driver.stdout_so_far()
    finally:
        assert driver.stop() == 0
    wait_for(lambda: not our_jobs(slurm, driver), 30, message="the waiting job cancelled at stop")


def hold_the_gil(seconds):
    """Sleep in C holding the GIL (PyDLL keeps it), SIGTERM blocked in this thread: the
    executor's Python handler of SIGTERM never runs meanwhile."""
    import ctypes
    import signal
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    ctypes.PyDLL(None).sleep(seconds)


def test_a_killed_executor_whose_task_holds_the_gil_is_gone_within_the_grace(slurm, tmp_path):
    """scancel's SIGTERM does not end it: the driver follows with SIGKILL once the job is
    still there after the grace, before Slurm's own KillWait."""
    from zsched.cluster_managers.base import KILL_GRACE
    driver = start_driver(slurm, tmp_path, "--initial-executors", "1")
    client = zsched.Client(driver.url, secret_file=driver.secret_file)
    try:
        wait_for(lambda: client.executor_ids() == ["1"], 60, message="executor 1")
        client.submit(hold_the_gil, 600)
        wait_for(lambda: client.status()["tasks"]["running"] == 1, 30, message="the task running")
        time.sleep(0.5)  # inside the C call by now
        [executor] = client.status()["executors"]
        process = psutil.Process(executor["pid"])
        killed_at = time.monotonic()
        assert client.kill_executors(["1"], force=True) == ["1"]
        process.wait(KILL_GRACE + 30)
        assert time.monotonic() - killed_at < KILL_GRACE + 5
        wait_for(lambda: f"still there {KILL_GRACE:g} s after scancel: SIGKILL" in driver.stderr_so_far(),
                 30, message="the SIGKILL logged")
    finally:
        client.shutdown(wait=False, cancel_futures=True)  # the task, requeued, never ends
        assert driver.stop() == 0
    wait_for(lambda: not our_jobs(slurm, driver), 30, message="the job ended")
