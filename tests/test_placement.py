"""Speculation, exclusion of failing executors and locality, with real drivers and
executors on loopback (the decisions alone: tests/test_placement_decisions.py)."""

import pytest

import zsched
from conftest import start_executor, wait_for

pytestmark = pytest.mark.integration


def first_attempt_sleeps(i, slow, folder, seconds):
    """Call ``slow`` sleeps ``seconds`` on its first attempt only (a marker file says which
    attempt this is); every call returns who ran it and how."""
    import os
    import time
    marker = os.path.join(folder, f"started-{i}")
    if i == slow and not os.path.exists(marker):
        open(marker, "w").close()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:  # short sleeps: a kill lands between two
            time.sleep(0.01)
        return i, "first attempt", os.getpid()
    time.sleep(0.02)
    return i, "quick", os.getpid()


@pytest.mark.parametrize("in_process", [False, True], ids=["driver process", "driver thread"])
def test_a_straggler_is_speculated_and_its_copy_wins(tmp_path, in_process):
    with zsched.LocalCluster(2, 2, in_process=in_process, speculation=True) as cluster:
        client = cluster.client()
        results = list(client.map(first_attempt_sleeps, range(40), [7] * 40, [str(tmp_path)] * 40,
                                  [60] * 40))
        assert [r[0] for r in results] == list(range(40))
        assert results[7][1] == "quick"  # the copy's result: the first attempt still sleeps
        tasks = client.status()["tasks"]
        assert tasks["speculated"] >= 1 and tasks["speculation_won"] >= 1
        assert tasks["finished"] == 40 and tasks["failed"] == 0
        # the first attempt is killed: its core comes back, and its result never arrives
        wait_for(lambda: client.status()["tasks"]["running"] == 0, 30, message="the loser killed")
        assert client.submit(sum, [1, 2]).result(30) == 3
        client.shutdown()


def test_without_speculation_the_straggler_holds_the_map(tmp_path):
    with zsched.LocalCluster(2, 2) as cluster:
        client = cluster.client()
        results = list(client.map(first_attempt_sleeps, range(20), [3] * 20, [str(tmp_path)] * 20,
                                  [1.5] * 20))
        assert results[3][1] == "first attempt"
        assert client.status()["tasks"]["speculated"] == 0


def test_a_task_that_opted_out_is_never_copied(tmp_path):
    with zsched.LocalCluster(2, 2, speculation=True) as cluster:
        client = cluster.client()
        quiet = client.options(speculative=False)
        results = list(quiet.map(first_attempt_sleeps, range(20), [3] * 20, [str(tmp_path)] * 20,
                                 [1.5] * 20))
        assert results[3][1] == "first attempt"
        assert client.status()["tasks"]["speculated"] == 0
        future = quiet.submit(first_attempt_sleeps, 0, 0, str(tmp_path), 1.0)
        assert future.result(30)[1] == "first attempt"


def every_attempt_sleeps(seconds):
    """Sleep ``seconds`` on every attempt, in short sleeps: a kill lands between two."""
    import time
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_speculated_task_cancelled_kills_both_attempts():
    with zsched.LocalCluster(2, 2, speculation=True, speculation_min_runtime=0.2) as cluster:
        client = cluster.client()
        list(client.map(every_attempt_sleeps, [0.02] * 8))
        slow = client.submit(every_attempt_sleeps, 60)  # its copy sleeps too: both run
        wait_for(lambda: client.status()["tasks"]["speculated"] >= 1, 30, message="a copy")
        assert slow.cancel()
        wait_for(lambda: client.status()["tasks"]["running"] == 0, 30, message="both killed")


def fails_on(i, bad_pid):
    import os
    import time
    if os.getpid() == bad_pid:
        raise RuntimeError(f"call {i}: this executor is broken")
    time.sleep(0.05)  # the broken executor, quick to fail, is offered task after task
    return os.getpid()


def _executor_pids(client):
    return {e["pid"]: e["id"] for e in client.status()["executors"]}


def test_a_failing_executor_is_excluded_and_the_map_completes_elsewhere():
    with zsched.LocalCluster(2, 1, exclude_on_failure=True) as cluster:
        client = cluster.client()
        wait_for(lambda: len(_executor_pids(client)) == 2, 30, message="two executors")
        pids = _executor_pids(client)
        bad = min(pids)
        results = list(client.options(retries=2).map(fails_on, range(30), [bad] * 30))
        assert bad not in results and len(results) == 30
        excluded = client.status()["excluded"]
        assert [e["executor_id"] for e in excluded["executors"]] == [pids[bad]]
        assert "failed task attempts" in excluded["executors"][0]["reason"]
        states = {e["id"]: e["state"] for e in client.status()["executors"]}
        assert states[pids[bad]] == "excluded"
        # no task goes there any more
        assert bad not in client.map(fails_on, range(20), [bad] * 20)


def test_a_retried_task_keeps_off_the_executor_where_it_raised():
    # exclusion on, but no executor is ever excluded: each task may fail once only
    with zsched.LocalCluster(2, 1, exclude_on_failure=True,
                             max_failed_tasks_per_executor=1000) as cluster:
        client = cluster.client()
        wait_for(lambda: len(_executor_pids(client)) == 2, 30, message="two executors")
        bad = min(_executor_pids(client))
        results = list(client.options(retries=1).map(fails_on, range(40), [bad] * 40))
        assert bad not in results
        assert client.status()["excluded"]["executors"] == []


def test_exclude_kill_replaces_the_failing_executor():
    with zsched.LocalCluster(2, 1, exclude_on_failure=True, exclude_kill=True) as cluster:
        client = cluster.client()
        wait_for(lambda: len(_executor_pids(client)) == 2, 30, message="two executors")
        pids = _executor_pids(client)
        bad = min(pids)
        results = list(client.options(retries=3).map(fails_on, range(30), [bad] * 30))
        assert bad not in results
        status = client.status()
        assert any(loss["id"] == pids[bad] and "excluded" in loss["reason"]
                   for loss in status["losses"])
        wait_for(lambda: len(_executor_pids(client)) == 2 and bad not in _executor_pids(client),
                 60, message="a replacement")


def test_every_executor_failing_excludes_none():
    # excluding the last executors would stall the job for exclude_timeout: not applied
    with zsched.LocalCluster(1, 1, exclude_on_failure=True) as cluster:
        client = cluster.client()
        wait_for(lambda: len(_executor_pids(client)) == 1, 30, message="one executor")
        bad = min(_executor_pids(client))
        futures = [client.options(retries=1).submit(fails_on, i, bad) for i in range(4)]
        for future in futures:
            with pytest.raises(RuntimeError, match="broken"):
                future.result(30)
        excluded = client.status()["excluded"]
        assert excluded["suspended"] and len(excluded["executors"]) == 1
        assert client.submit(sum, [2, 3]).result(30) == 5


def pid_after(seconds):
    import os
    import time
    time.sleep(seconds)
    return os.getpid()


def _two_hosts(driver_factory, *conf):
    """A driver with one single-core executor registered as host "alpha" and one as
    "beta": ``(driver, client, executors, {host: pid})``."""
    args = ["--insecure", "--app-id", "hosts-app"]
    for setting in conf:
        args += ["--conf", setting]
    driver = driver_factory(*args)
    executors = [start_executor("--driver-url", driver.url, "--executor-id", name,
                                "--hostname", name, "--cores", "1", "--app-id", "hosts-app",
                                "--insecure") for name in ("alpha", "beta")]
    client = zsched.Client(driver.url, insecure=True)
    wait_for(lambda: len(client.status()["executors"]) == 2, 30, message="two executors")
    pid_of = {e["host"]: e["pid"] for e in client.status()["executors"]}
    return driver, client, executors, pid_of


def _stop(client, executors):
    client.shutdown()
    for proc in executors:
        proc.terminate()
        proc.wait(30)
        proc.stdout.close()
        proc.stderr.close()


def test_tasks_that_prefer_a_host_run_there_while_it_has_cores(driver_factory):
    driver, client, executors, pid_of = _two_hosts(driver_factory, "locality_wait=60s")
    try:
        pids = list(client.options(hosts=["beta"]).map(pid_after, [0.05] * 12))
        assert set(pids) == {pid_of["beta"]}
        assert client.status()["tasks"]["waiting_for_hosts"] == 0
        # the other host's core took none of them, yet it runs tasks with no preference
        assert pid_of["alpha"] in set(client.map(pid_after, [0.2] * 6))
    finally:
        _stop(client, executors)


def test_after_locality_wait_tasks_run_anywhere(driver_factory):
    driver, client, executors, pid_of = _two_hosts(driver_factory, "locality_wait=200ms")
    try:
        pids = list(client.options(hosts=["beta"]).map(pid_after, [1.0] * 4))
        assert pid_of["alpha"] in pids and pid_of["beta"] in pids
    finally:
        _stop(client, executors)


def test_tasks_that_prefer_a_host_with_no_executor_do_not_wait(driver_factory):
    driver, client, executors, pid_of = _two_hosts(driver_factory, "locality_wait=1h")
    try:
        pids = list(client.options(hosts=["gamma"]).map(pid_after, [0.01] * 6))
        assert set(pids) <= set(pid_of.values())
    finally:
        _stop(client, executors)


@pytest.mark.parametrize("hosts, error", [("beta", TypeError), ([""], ValueError), ([7], ValueError),
                                          (["x" * 256], ValueError),
                                          ([str(i) for i in range(257)], ValueError)])
def test_bad_preferred_hosts_are_refused_at_the_call(hosts, error):
    with zsched.LocalCluster(1, 1) as cluster:
        client = cluster.client()
        with pytest.raises(error):
            client.options(hosts=hosts)
        with pytest.raises(TypeError):
            client.options(speculative="no")
        assert client.submit(sum, [1]).result(30) == 1


def test_options_travel_with_their_tasks_among_others(driver_factory):
    # tasks with and without options, interleaved in the same frames
    driver, client, executors, pid_of = _two_hosts(driver_factory, "locality_wait=60s")
    try:
        beta = client.options(hosts=["beta"])
        futures = [(beta if i % 2 else client).submit(pid_after, 0.01) for i in range(40)]
        pids = [future.result(60) for future in futures]
        assert {pids[i] for i in range(1, 40, 2)} == {pid_of["beta"]}
    finally:
        _stop(client, executors)


def fails_first_time(i, folder, every):
    import os
    marker = os.path.join(folder, f"ran-{i}")
    if i % every == 0 and not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError(f"call {i}: first run")
    return i


def test_a_chunk_with_retries_runs_again_whole(tmp_path):
    with zsched.LocalCluster(2, 1) as cluster:
        client = cluster.client()
        folder = [str(tmp_path)] * 60
        assert list(client.options(retries=1).map(fails_first_time, range(60), folder, [6] * 60,
                                                  chunksize=6)) == list(range(60))
        assert client.status()["tasks"]["retried"] == 10
        with pytest.raises(RuntimeError, match="call 60: first run"):
            list(client.map(fails_first_time, range(60, 66), folder[:6], [1] * 6, chunksize=3))


def large_after_first_attempt(i, slow, folder, seconds, data):
    """``first_attempt_sleeps`` with large data both ways: the argument back, doubled."""
    kind = first_attempt_sleeps(i, slow, folder, seconds)[1]
    return kind, data * 2


def test_a_speculated_task_with_large_data_both_ways(tmp_path):
    numpy = pytest.importorskip("numpy")
    data = numpy.arange(1 << 17, dtype=numpy.float64)  # 1 MiB: it travels apart
    with zsched.LocalCluster(2, 2, speculation=True) as cluster:
        client = cluster.client()
        n = 12
        results = list(client.map(large_after_first_attempt, range(n), [5] * n, [str(tmp_path)] * n,
                                  [60] * n, [data] * n))
        assert [kind for kind, _ in results].count("quick") == n
        assert all(numpy.array_equal(array, data * 2) for _, array in results)
        assert client.status()["tasks"]["speculation_won"] == 1
        wait_for(lambda: client.status()["tasks"]["running"] == 0, 30, message="the loser killed")
