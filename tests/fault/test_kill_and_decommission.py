"""Cancelling and killing tasks, the task reaper, decommissioning, retries and tasks that
raise SystemExit or MemoryError: real drivers and executor processes on loopback.

Nothing here asserts on timings: waits are generous ``wait_for`` on an outcome (the only
fixed pauses let a KillTask cross the loopback, and give the driver time to replace an
executor it must not replace).
Tasks tell the test what they did through files in ``tmp_path`` (executors run on this
host), so a test sees whether a task ran, where (its executor's pid) and how often.
"""
import concurrent.futures
import itertools
import os
import sys
import time

import psutil
import pytest

import zsched
from zsched.config import Config
from zsched.errors import RemoteTraceback

from conftest import wait_for


# ---------------------------------------------------------------- tasks (shipped by value)

def append_line(path, text=""):
    with open(path, "a") as f:
        f.write(f"{text}\n")


def read_lines(path):
    try:
        with open(path) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def gate(started, release, value):
    """Say it started (with this executor's pid), then wait in Python for ``release``."""
    append_line(started, os.getpid())
    deadline = time.monotonic() + 90
    while not os.path.exists(release):
        if time.monotonic() > deadline:
            raise RuntimeError("gate never released")
        time.sleep(0.01)
    return value, os.getpid()


def side_effect(path, value):
    append_line(path, os.getpid())
    return value


def busy_loop(started):
    """Spin in pure Python, checking nothing: only an interrupt stops it."""
    append_line(started, os.getpid())
    x = 0
    while True:
        x += 1


def blocked_sleep(started, seconds):
    """Block in C (time.sleep): an async exception cannot reach it."""
    append_line(started, os.getpid())
    time.sleep(seconds)
    return "slept"


def square(i):
    return i * i


def square_and_pid(i):
    return i * i, os.getpid()


def load_task(i, gate_index, started, release):
    """The decommission load: short tasks of 2-5 ms, a 1 s task every 250, and at
    ``gate_index`` one that holds its executor until ``release`` exists."""
    if i == gate_index:
        gate(started, release, None)
    elif i % 250 == 3:
        time.sleep(1.0)
    else:
        time.sleep(0.002 + (i % 4) * 0.001)
    return i * i, os.getpid()


def flaky(path, failures):
    """Raise ValueError on the first ``failures`` attempts (counted in ``path``)."""
    attempt = len(read_lines(path)) + 1
    append_line(path, os.getpid())
    if attempt <= failures:
        raise ValueError(f"attempt {attempt} failed")
    return "ok", attempt


def raise_system_exit(code):
    raise SystemExit(code)


def call_sys_exit():
    sys.exit(f"sys.exit from pid {os.getpid()}")


def raise_memory_error():
    raise MemoryError(f"out of memory in pid {os.getpid()}")


def allocate_too_much():
    return len(bytearray(1 << 62))  # the allocator refuses: a real MemoryError


def rendezvous(directory, n):
    """Finish only when ``n`` of these run at the same time (each on its own core)."""
    append_line(os.path.join(directory, str(os.getpid())), os.getpid())
    deadline = time.monotonic() + 60
    while len(os.listdir(directory)) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(os.listdir(directory))} of {n} ran at once")
        time.sleep(0.01)
    return os.getpid()


# ---------------------------------------------------------------- helpers

def process_gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# how a decommissioned executor's loss reads: its own reason, or its exit status when the
# driver saw the process end first
DECOMMISSIONED = ("decommissioned", "exited with code 0")


def executors_by_id(client):
    return {e["id"]: e for e in client.status()["executors"]}


# ---------------------------------------------------------------- 1. cancel a queued task

def test_cancel_of_a_queued_task_removes_it(tmp_path):
    """Cancelled while queued in the driver, and while queued on the executor (prefetched
    behind a running task): the future is cancelled, the task never runs."""
    with zsched.LocalCluster(n_executors=1) as cluster:
        client = cluster.client()

        # a) queued in the driver: before its first task has ended an executor holds only
        #    as many tasks as it has cores, so everything behind the gate waits there
        blocker = client.submit(gate, tmp_path / "started-a", tmp_path / "release-a", "a")
        wait_for(lambda: read_lines(tmp_path / "started-a"), timeout=30, message="gate a running")
        victim = client.submit(side_effect, tmp_path / "ran-a", "victim a")
        later = client.submit(side_effect, tmp_path / "later-a", "later a")
        wait_for(lambda: client.status()["tasks"]["queued"] == 2, timeout=30,
                 message="two tasks queued in the driver")
        assert victim.cancel()
        assert victim.cancelled() and victim.done()
        wait_for(lambda: client.status()["tasks"]["queued"] == 1, timeout=30,
                 message="the cancelled task leaves the driver's queue")
        (tmp_path / "release-a").touch()
        assert blocker.result(60)[0] == "a"
        assert later.result(60) == "later a"  # the queue moved past the cancelled task

        # b) queued on the executor: now that its task length is known it holds at least
        #    one task beyond the one it runs, so the victim is launched behind the gate
        blocker = client.submit(gate, tmp_path / "started-b", tmp_path / "release-b", "b")
        wait_for(lambda: read_lines(tmp_path / "started-b"), timeout=30, message="gate b running")
        victim_b = client.submit(side_effect, tmp_path / "ran-b", "victim b")
        wait_for(lambda: client.status()["tasks"]["running"] == 2, timeout=30,
                 message="the victim launched onto the executor behind the gate")
        assert victim_b.cancel()
        assert victim_b.cancelled()
        # cancel() is asynchronous: a prefetched task that starts before the KillTask reaches
        # its executor may run. The driver has sent the KillTask once it counts the cancel;
        # the grace lets it cross the loopback before the gate opens (its arrival shows
        # nowhere: a queued task's kill is noted, and reported once a thread takes it)
        wait_for(lambda: client.status()["tasks"]["cancelled"] == 2, timeout=30,
                 message="the driver processed the cancel")
        time.sleep(0.5)
        later_b = client.submit(side_effect, tmp_path / "later-b", "later b")
        (tmp_path / "release-b").touch()
        assert blocker.result(60)[0] == "b"
        assert later_b.result(60) == "later b"

        for future in (victim, victim_b):
            assert future.cancelled()
            with pytest.raises(concurrent.futures.CancelledError):
                future.result(0)
        assert not (tmp_path / "ran-a").exists(), "a task cancelled while queued ran"
        assert not (tmp_path / "ran-b").exists(), "a task cancelled while queued ran"
        wait_for(lambda: client.status()["tasks"]["running"] == 0, timeout=30,
                 message="the executor reported every task")
        status = client.status()
        tasks = status["tasks"]
        assert tasks["cancelled"] == 2
        assert tasks["submitted"] == 6
        assert tasks["finished"] == 4
        assert tasks["failed"] == 0
        assert tasks["queued"] == 0
        assert status["losses"] == []
        client.shutdown()


def test_status_running_of_an_executor_counts_the_tasks_it_holds(tmp_path):
    """An executor's "running" in status() is the driver's own count of the tasks it holds
    (so the executors' counts add up to tasks["running"]); an executor's heartbeat,
    seconds old, must not replace it."""
    heartbeat = 0.2
    with zsched.LocalCluster(n_executors=1, executor_heartbeat_interval=heartbeat) as cluster:
        client = cluster.client()
        client.submit(square, 2).result(30)  # task length known: one task queued behind
        blocker = client.submit(gate, tmp_path / "started", tmp_path / "release", "x")
        wait_for(lambda: read_lines(tmp_path / "started"), timeout=30, message="gate running")
        queued = client.submit(square, 3)
        wait_for(lambda: client.status()["tasks"]["running"] == 2, timeout=30,
                 message="a task launched behind the gate")
        seen = []
        for _ in range(10):  # a look at every heartbeat: none replaces the driver's count
            status = client.status()
            seen.append((status["tasks"]["running"], status["executors"][0]["running"]))
            time.sleep(heartbeat)
        (tmp_path / "release").touch()
        assert blocker.result(60)[0] == "x" and queued.result(60) == 9
        assert all(total == mine for total, mine in seen), (
            f"(tasks running, the executor's running) over time: {seen}")
        client.shutdown()


# ---------------------------------------------------------------- 2. kill a running Python task

def test_cancel_of_a_running_python_loop_interrupts_it_on_the_same_executor(tmp_path):
    with zsched.LocalCluster(n_executors=1, cores_per_executor=1) as cluster:
        client = cluster.client()
        [before] = client.status()["executors"]
        started = tmp_path / "started"
        future = client.submit(busy_loop, started)
        wait_for(lambda: read_lines(started), timeout=30, message="the busy loop running")
        assert read_lines(started) == [str(before["pid"])]
        assert future.cancel()
        assert future.cancelled()
        # one core and a window of one: the next task runs only once the executor has
        # interrupted the loop (its one task thread is free) and reported it
        assert client.submit(os.getpid).result(45) == before["pid"]
        wait_for(lambda: client.status()["tasks"]["running"] == 0, timeout=30,
                 message="nothing left running")
        status = client.status()
        [after] = status["executors"]
        assert (after["id"], after["pid"], after["state"]) == (before["id"], before["pid"], "active")
        assert status["losses"] == []
        assert status["tasks"]["cancelled"] == 1
        assert status["tasks"]["failed"] == 0
        assert status["tasks"]["finished"] == 1
        assert read_lines(started) == [str(before["pid"])]  # not run again
        assert future.cancelled()
        client.shutdown()


# ---------------------------------------------------------------- 3. the task reaper

def test_task_blocked_in_c_is_reaped_and_its_executor_replaced(tmp_path):
    """task_kill_timeout=1: a cancelled task stuck in time.sleep takes its executor down;
    a loss names the reason, a replacement registers, and the tasks that were running or
    queued on the reaped executor complete elsewhere with their right values."""
    with zsched.LocalCluster(n_executors=1, cores_per_executor=2, task_kill_timeout=1) as cluster:
        client = cluster.client()
        [old] = client.status()["executors"]
        # tiny tasks first, one call each: with their length known the executor queues tasks
        # behind the ones it runs (chunks of calls would measure longer, and queue fewer)
        assert list(client.map(square, range(50), chunksize=1)) == [i * i for i in range(50)]

        sleeper = client.submit(blocked_sleep, tmp_path / "sleeper", 120)
        wait_for(lambda: read_lines(tmp_path / "sleeper"), timeout=30, message="sleeper running")
        survivor = client.submit(gate, tmp_path / "survivor", tmp_path / "release", "survivor")
        wait_for(lambda: read_lines(tmp_path / "survivor"), timeout=30, message="survivor running")
        queued = [client.submit(square_and_pid, i) for i in range(10)]
        wait_for(lambda: client.status()["tasks"]["running"] == 12, timeout=30,
                 message="both cores busy and ten tasks queued on the executor")

        assert sleeper.cancel()
        wait_for(lambda: process_gone(old["pid"]), timeout=45,
                 message="the executor of the unkillable task exits")
        losses = wait_for(lambda: client.status()["losses"], timeout=30, message="a loss reported")
        assert [loss["id"] for loss in losses] == [old["id"]]
        reaper_reason = losses[0]["reason"]  # checked last (see the end)
        new = wait_for(lambda: [e for e in client.status()["executors"] if e["id"] != old["id"]],
                       timeout=45, message="a replacement executor registers")[0]
        assert new["pid"] != old["pid"] and not process_gone(new["pid"])
        assert client.executor_ids() == [new["id"]]

        # what was queued on the reaped executor runs on the replacement
        assert [f.result(60) for f in queued] == [(i * i, new["pid"]) for i in range(10)]
        # what was running beside the stuck task ran again on the replacement
        wait_for(lambda: len(read_lines(tmp_path / "survivor")) == 2, timeout=45,
                 message="the survivor running again on the replacement")
        (tmp_path / "release").touch()
        assert survivor.result(60) == ("survivor", new["pid"])
        assert read_lines(tmp_path / "survivor") == [str(old["pid"]), str(new["pid"])]
        # new tasks succeed
        assert client.submit(os.getpid).result(60) == new["pid"]
        assert list(client.map(square, range(100))) == [i * i for i in range(100)]

        assert sleeper.cancelled()
        assert read_lines(tmp_path / "sleeper") == [str(old["pid"])], "a cancelled task ran again"
        status = client.status()
        assert status["tasks"]["cancelled"] == 1
        assert status["tasks"]["failed"] == 0
        assert [loss["id"] for loss in status["losses"]] == [old["id"]]
        assert [e["id"] for e in status["executors"]] == [new["id"]]
        client.shutdown()
        # the loss says why the executor left: its task reaper, not just its exit status
        assert "task_kill_timeout" in reaper_reason and "task" in reaper_reason, reaper_reason


# ---------------------------------------------------------------- 4. decommission under load

def test_decommission_under_load(tmp_path):
    n = 3000
    gate_index = n // 4
    started, release = tmp_path / "gate-started", tmp_path / "gate-release"
    with zsched.LocalCluster(n_executors=3) as cluster:
        client = cluster.client()
        before = executors_by_id(client)
        assert len(before) == 3
        results = client.map(load_task, range(n), itertools.repeat(gate_index),
                             itertools.repeat(started), itertools.repeat(release), timeout=120,
                             chunksize=1)  # a task per call: the gated one alone

        # mid-way, the executor running the gated task is decommissioned
        gated_pid = int(wait_for(lambda: read_lines(started), timeout=45,
                                 message="the gated task running")[0])
        [victim] = [i for i, e in before.items() if e["pid"] == gated_pid]
        others = sorted(set(before) - {victim})
        assert client.decommission_executors([victim, "no-such-executor"]) == [victim]
        assert client.decommission_executors([victim]) == []  # acknowledged once
        assert client.decommission_executors(["no-such-executor"]) == []
        assert not client.is_executor_active(victim)
        assert all(client.is_executor_active(i) for i in others)
        # it holds the gated task, so it is still there, decommissioning
        state = executors_by_id(client)
        assert state[victim]["state"] == "decommissioning"
        assert all(state[i]["state"] == "active" for i in others)
        # its unstarted tasks come back and run elsewhere: while its one core is held by
        # the gated task, every other task of the map finishes
        wait_for(lambda: client.status()["tasks"]["finished"] == n - 1, timeout=90,
                 message="every task but the gated one finishes")
        state = executors_by_id(client)
        assert state[victim]["state"] == "decommissioning"
        assert client.status()["tasks"]["running"] == 1
        done_on_victim = state[victim]["tasks_done"]
        assert done_on_victim > 0
        release.touch()

        values = list(results)
        assert [v for v, _ in values] == [i * i for i in range(n)]
        pids = [pid for _, pid in values]
        assert pids.count(gated_pid) >= done_on_victim
        assert set(pids) <= {e["pid"] for e in before.values()}

        wait_for(lambda: process_gone(gated_pid), timeout=45,
                 message="the decommissioned executor exits")
        wait_for(lambda: client.executor_ids() == others, timeout=30,
                 message="the cluster shrinks to two executors")
        status = client.status()
        [loss] = status["losses"]
        assert loss["id"] == victim
        # it left by the decommission path with exit status 0, not as a crash or a kill
        assert loss["reason"] in DECOMMISSIONED, loss["reason"]
        tasks = status["tasks"]
        assert tasks["submitted"] == n
        assert tasks["finished"] == n
        assert tasks["failed"] == 0
        assert tasks["cancelled"] == 0
        assert tasks["queued"] == 0 and tasks["running"] == 0
        retried = tasks["retried"]

        # a check that nothing happens: not replaced, still two after two of the
        # allocator's rounds (allocation_batch_delay, the default here)
        time.sleep(2 * Config().allocation_batch_delay)
        after = executors_by_id(client)
        assert sorted(after) == others
        assert all(after[i]["pid"] == before[i]["pid"] and after[i]["state"] == "active"
                   for i in others)
        assert [loss["id"] for loss in client.status()["losses"]] == [victim]
        assert list(client.map(square, range(200))) == [i * i for i in range(200)]
        client.shutdown()
        # the task it was running when decommissioned finished there, once, and its
        # result reached the caller: nothing was run again
        assert (values[gate_index][1], read_lines(started), retried) == \
            (gated_pid, [str(gated_pid)], 0)


def test_decommissioned_executor_delivers_the_result_of_its_running_task(tmp_path):
    """The task an executor is running when it is decommissioned finishes there: its result
    (not a second run elsewhere) reaches the caller, and nothing is retried. Three rounds,
    each on the executor that runs the task."""
    with zsched.LocalCluster(n_executors=4) as cluster:
        client = cluster.client()
        by_pid = {e["pid"]: e["id"] for e in client.status()["executors"]}
        for round_ in range(3):
            started, release = tmp_path / f"started-{round_}", tmp_path / f"release-{round_}"
            future = client.submit(gate, started, release, round_)
            victim_pid = int(wait_for(lambda: read_lines(started), timeout=30,
                                      message="the task running")[0])
            victim = by_pid[victim_pid]
            assert client.decommission_executors([victim]) == [victim]
            release.touch()
            assert future.result(60) == (round_, victim_pid), (
                f"round {round_}: the result came from another run; runs: {read_lines(started)}")
            assert read_lines(started) == [str(victim_pid)]
            wait_for(lambda: victim not in client.executor_ids(), timeout=30,
                     message="the decommissioned executor leaves")
            wait_for(lambda: process_gone(victim_pid), timeout=30, message="its process exits")
            status = client.status()
            assert status["tasks"]["retried"] == 0
            assert status["tasks"]["failed"] == 0
            assert status["losses"][-1]["id"] == victim
            assert status["losses"][-1]["reason"] in DECOMMISSIONED, status["losses"][-1]
        assert len(client.executor_ids()) == 1
        client.shutdown()


def test_decommission_executors_on_host(tmp_path):
    with zsched.LocalCluster(n_executors=2) as cluster:
        client = cluster.client()
        before = executors_by_id(client)
        [host] = {e["host"] for e in before.values()}
        assert client.decommission_executors_on_host("no-such-host.invalid") is False
        assert sorted(executors_by_id(client)) == sorted(before)
        assert all(client.is_executor_active(i) for i in before)
        assert list(client.map(square, range(50))) == [i * i for i in range(50)]

        assert client.decommission_executors_on_host(host) is True
        assert not any(client.is_executor_active(i) for i in before)
        wait_for(lambda: client.executor_ids() == [], timeout=45,
                 message="every executor on the host leaves")
        wait_for(lambda: all(process_gone(e["pid"]) for e in before.values()), timeout=45,
                 message="their processes exit")
        status = client.status()
        assert sorted(loss["id"] for loss in status["losses"]) == sorted(before)
        assert all(loss["reason"] in DECOMMISSIONED for loss in status["losses"]), status["losses"]
        assert status["tasks"]["failed"] == 0
        # a check that nothing happens: not replaced after two of the allocator's rounds
        time.sleep(2 * Config().allocation_batch_delay)
        assert client.executor_ids() == []
        client.shutdown()


# ---------------------------------------------------------------- 5. retries

def test_retries_of_a_task_that_raises(tmp_path):
    with zsched.LocalCluster(n_executors=1) as cluster:
        client = cluster.client()

        # two failures, two retries: the third attempt succeeds
        path = tmp_path / "retries-2"
        assert client.options(retries=2).submit(flaky, path, 2).result(60) == ("ok", 3)
        assert len(read_lines(path)) == 3

        # default: no retry, the task's ValueError at once
        path = tmp_path / "retries-0"
        with pytest.raises(ValueError, match="^attempt 1 failed$") as info:
            client.submit(flaky, path, 2).result(60)
        assert isinstance(info.value.__cause__, RemoteTraceback)
        assert client.submit(square, 3).result(60) == 9  # ran after any retry would have
        assert len(read_lines(path)) == 1

        # one retry: fails with the second attempt's ValueError
        path = tmp_path / "retries-1"
        with pytest.raises(ValueError, match="^attempt 2 failed$"):
            client.options(retries=1).submit(flaky, path, 2).result(60)
        assert client.submit(square, 4).result(60) == 16
        assert len(read_lines(path)) == 2

        tasks = client.status()["tasks"]
        assert tasks["retried"] == 3
        assert tasks["failed"] == 2
        assert tasks["finished"] == 3
        assert client.status()["losses"] == []

        # a client's default retries apply to map; options override it
        retrying = cluster.client(retries=2)
        paths = [tmp_path / f"map-{i}" for i in range(8)]
        assert list(retrying.map(flaky, paths, [2] * 8)) == [("ok", 3)] * 8
        assert all(len(read_lines(p)) == 3 for p in paths)
        paths = [tmp_path / f"map-once-{i}" for i in range(3)]
        futures = [retrying.options(retries=0).submit(flaky, p, 1) for p in paths]
        for future in futures:
            with pytest.raises(ValueError, match="^attempt 1 failed$"):
                future.result(60)
        with pytest.raises(ValueError, match="^attempt 2 failed$"):
            list(retrying.options(retries=1).map(flaky, [tmp_path / "map-short"], [5]))
        assert retrying.submit(square, 5).result(60) == 25
        assert all(len(read_lines(p)) == 1 for p in paths)
        assert len(read_lines(tmp_path / "map-short")) == 2
        retrying.shutdown()
        client.shutdown()


# ---------------------------------------------------------------- 6. SystemExit and MemoryError

def test_system_exit_and_memory_error_fail_only_their_task(tmp_path):
    with zsched.LocalCluster(n_executors=2) as cluster:
        client = cluster.client()
        before = executors_by_id(client)
        pids = {e["pid"] for e in before.values()}

        exits = [client.submit(raise_system_exit, 3) for _ in range(4)]
        sys_exits = [client.submit(call_sys_exit) for _ in range(4)]
        memory = [client.submit(raise_memory_error) for _ in range(4)]
        real_memory = [client.submit(allocate_too_much) for _ in range(4)]
        fine = [client.submit(square, i) for i in range(20)]

        for future in exits:
            with pytest.raises(SystemExit) as info:
                future.result(60)
            assert info.value.code == 3
            assert isinstance(info.value.__cause__, RemoteTraceback)
        raised_in = set()
        for future in sys_exits:
            with pytest.raises(SystemExit, match=r"^sys\.exit from pid \d+$") as info:
                future.result(60)
            raised_in.add(int(str(info.value.code).rsplit(" ", 1)[1]))
        for future in memory:
            with pytest.raises(MemoryError, match=r"^out of memory in pid \d+$") as info:
                future.result(60)
            raised_in.add(int(str(info.value).rsplit(" ", 1)[1]))
        for future in real_memory:
            with pytest.raises(MemoryError):
                future.result(60)
        assert [f.result(60) for f in fine] == [i * i for i in range(20)]
        assert raised_in <= pids

        # the executors survive: same processes, no losses, both run tasks at once
        wait_for(lambda: client.status()["tasks"]["running"] == 0, timeout=30,
                 message="every task reported")
        meeting = tmp_path / "meeting"
        meeting.mkdir()
        together = [client.submit(rendezvous, meeting, 2) for _ in range(2)]
        assert {f.result(90) for f in together} == pids
        status = client.status()
        after = {e["id"]: e for e in status["executors"]}
        assert sorted(after) == sorted(before)
        assert all(after[i]["pid"] == before[i]["pid"] and after[i]["state"] == "active"
                   for i in before)
        assert all(not process_gone(pid) for pid in pids)
        assert status["losses"] == []
        assert status["tasks"]["failed"] == 16
        assert status["tasks"]["finished"] == 22
        assert sum(e["tasks_failed"] for e in after.values()) == 16
        client.shutdown()


def hold_the_gil(seconds):
    """Sleep in C holding the GIL (PyDLL keeps it), SIGTERM blocked in this thread so that
    it does not cut the sleep short: no Python signal handler runs meanwhile."""
    import ctypes
    import signal
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    ctypes.PyDLL(None).sleep(seconds)


def test_a_killed_executor_whose_task_holds_the_gil_is_gone_within_the_grace():
    """SIGTERM cannot stop an executor whose task holds the GIL in C: the driver follows it
    with SIGKILL after the grace, so the process never outlives the kill by much more."""
    from zsched.cluster_managers.local import KILL_GRACE
    with zsched.LocalCluster(n_executors=1) as cluster:
        client = cluster.client()
        future = client.submit(hold_the_gil, 120)
        wait_for(lambda: client.status()["tasks"]["running"] == 1, timeout=30,
                 message="the task running")
        time.sleep(0.5)  # inside the C call by now
        [executor] = client.status()["executors"]
        process = psutil.Process(executor["pid"])
        killed_at = time.monotonic()
        assert client.kill_executors([executor["id"]], force=True) == [executor["id"]]
        process.wait(KILL_GRACE + 10)
        assert time.monotonic() - killed_at < KILL_GRACE + 5
        future.cancel()
        client.shutdown(cancel_futures=True)
