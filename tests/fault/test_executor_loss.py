"""Executors lost for real: processes SIGKILLed, SIGSTOPped (then SIGCONTinued), tasks that
end their own executor (``os._exit``, a segfault), a chaos run, and how each loss is told.

Every test kills real processes of a ``zsched.LocalCluster`` with ``os.kill`` and checks
only what the public API shows: futures, ``Client.map``, ``client.status()`` and
``client.executor_ids()``. No assertion is on a duration (the machine is shared and
noisy); waits are generous.
"""
import collections
import concurrent.futures
import json
import os
import random
import re
import signal
import threading
import time

import psutil
import pytest

import zsched
from conftest import wait_for


# ---------------------------------------------------------------- tasks (shipped by value)

def append_line(path, line):
    """One line appended with O_APPEND: lines from concurrent processes never interleave."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def gated_square(x, gate, hold_from):
    """x*x+1; from ``hold_from`` on, only once the gate file exists (tasks stay in flight)."""
    if x >= hold_from:
        while not os.path.exists(gate):
            time.sleep(0.002)
    return x * x + 1


def sleepy_record(x, log):
    """Records (value, pid) when it starts, sleeps 0.2 s, returns (value, pid)."""
    append_line(log, f"{x} {os.getpid()}\n")
    time.sleep(0.2)
    return x, os.getpid()


def slow_double(x):
    time.sleep(0.01)
    return 2 * x


def exit_with_3(log):
    append_line(log, f"{os.getpid()}\n")
    os._exit(3)


def segfault(log):
    import ctypes
    append_line(log, f"{os.getpid()}\n")
    ctypes.string_at(0)
    return "not reached"


CHAOS_SPIN = 2000  # about 0.1 ms of work per task: the run lasts long enough for many kills


def chaos_square(x):
    """A pure function: x*x+1 after a little work."""
    s = 0
    for i in range(CHAOS_SPIN):
        s += i
    return x * x + 1 + (s - CHAOS_SPIN * (CHAOS_SPIN - 1) // 2)


# ---------------------------------------------------------------- helpers

def executors(client):
    return client.status()["executors"]


def losses_of(client, executor_id):
    return [loss for loss in client.status()["losses"] if loss["id"] == executor_id]


def pid_gone(pid):
    """True once the process has ended and been reaped (its pid no longer exists)."""
    try:
        psutil.Process(pid)
    except psutil.NoSuchProcess:
        return True
    return False


def is_stopped(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except psutil.NoSuchProcess:
        return False


def attempts_of(message):
    """[(attempt, executor id, reason)] named in a TaskFailed message."""
    _, _, listing = message.partition("): ")
    return [tuple(m.groups()) for m in
            re.finditer(r"attempt (\d+) on executor (\S+): ([^;]+)(?:; |$)", listing)]


def fastpath():
    """Which fast path the cluster's driver uses (it inherits this environment)."""
    return "python" if os.environ.get("ZSCHED_PUREPYTHON", "") not in ("", "0") else "compiled"


def write_report(env_var, figures):
    path = os.environ.get(env_var)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(figures) + "\n")


def ids_are_new(new_ids, earlier_ids):
    """Executor ids are never reused: every new id is unseen and above every earlier one."""
    top = max(int(i) for i in earlier_ids)
    return all(i not in earlier_ids and int(i) > top for i in new_ids)


# ---------------------------------------------------------------- 1. SIGKILL during a map


def completion_counter():
    """(Counter of completions per key, ``completed(key)`` making a done-callback for it)."""
    completions = collections.Counter()
    lock = threading.Lock()

    def completed(key):
        def callback(_future):
            with lock:
                completions[key] += 1
        return callback
    return completions, completed


def test_sigkill_during_map_results_right_and_executor_replaced(tmp_path):
    n, hold_from = 10_000, 3_000
    gate = str(tmp_path / "gate")
    with zsched.LocalCluster(3) as cluster:
        client = cluster.client()
        before = executors(client)
        assert len(before) == 3
        earlier_ids = {e["id"] for e in before}
        victim = before[1]
        results = client.map(gated_square, range(n), [gate] * n, [hold_from] * n, timeout=60,
                             chunksize=1)  # a task per call: counted in status()

        def victim_holds_gated_tasks():
            # every task before hold_from has finished and the rest cannot until the gate
            # opens: what the victim holds now is surely in flight when it is killed
            status = client.status()
            running = {e["id"]: e["running"] for e in status["executors"]}
            return running.get(victim["id"], 0) > 0 and status["tasks"]["finished"] >= hold_from

        wait_for(victim_holds_gated_tasks, timeout=60,
                 message="the victim executor holding tasks of the map")
        os.kill(victim["pid"], signal.SIGKILL)
        wait_for(lambda: losses_of(client, victim["id"]), timeout=60,
                 message="the SIGKILLed executor in status()['losses']")
        open(gate, "w").close()  # the held tasks may finish now

        assert list(results) == [x * x + 1 for x in range(n)]

        status = client.status()
        assert [(loss["id"], loss["reason"]) for loss in status["losses"]] == \
            [(victim["id"], "killed by signal SIGKILL")]
        tasks = status["tasks"]
        assert tasks["finished"] == n and tasks["failed"] == 0, tasks
        assert tasks["retried"] >= 1, tasks  # the kill hit tasks in flight
        wait_for(lambda: len(client.executor_ids()) == 3, timeout=60,
                 message="3 registered executors again")
        after = set(client.executor_ids())
        assert victim["id"] not in after
        new_ids = after - earlier_ids
        assert len(new_ids) == 1, (after, earlier_ids)
        assert ids_are_new(new_ids, earlier_ids), (new_ids, earlier_ids)
        assert victim["pid"] not in {e["pid"] for e in executors(client)}
        # the replacement serves
        assert client.submit(gated_square, 7, gate, 0).result(30) == 50
        client.shutdown()


# ---------------------------------------------------------------- 2. SIGSTOP, then SIGCONT

# Two ways a silent executor is found: the ZMTP heartbeats of its connection (the ROUTER
# drops it: "disconnected (...)"), or, with those slower or with no socket between them
# (the cluster's executors talk to the driver over pipes by default), the executor's own
# heartbeats ("heartbeat timeout (...)").
SILENCE_DETECTION = {
    "zmtp-heartbeat": (dict(zmq_heartbeat_interval=0.5, zmq_heartbeat_timeout=2,
                            executor_heartbeat_interval=1, executor_heartbeat_timeout=6,
                            local_executor_link="socket"),
                       r"disconnected \(.+\)"),
    "executor-heartbeat": (dict(zmq_heartbeat_timeout=60, local_executor_link="socket",
                                executor_heartbeat_interval=0.5, executor_heartbeat_timeout=3),
                           r"heartbeat timeout \(no message for 3 s\)"),
    "executor-heartbeat-over-pipes": (dict(executor_heartbeat_interval=0.5,
                                           executor_heartbeat_timeout=3),
                                      r"heartbeat timeout \(no message for 3 s\)"),
}


@pytest.mark.parametrize("detection", list(SILENCE_DETECTION))
def test_sigstopped_executor_tasks_rerun_and_late_results_ignored(tmp_path, detection):
    n = 60
    log = str(tmp_path / "starts")
    settings, expected_reason = SILENCE_DETECTION[detection]
    with zsched.LocalCluster(3, **settings) as cluster:
        client = cluster.client()
        before = executors(client)
        earlier_ids = {e["id"] for e in before}
        victim = before[0]
        pid = victim["pid"]

        completions, completed = completion_counter()

        futures = []
        for i in range(n):
            future = client.submit(sleepy_record, i, log)
            future.add_done_callback(completed(i))
            futures.append(future)

        def started_on_victim():
            if not os.path.exists(log):
                return []
            with open(log) as f:
                return [int(line.split()[0]) for line in f if line.split()[1] == str(pid)]

        # stop it right after it started a task, so that a task is surely caught mid-run
        seen = len(wait_for(started_on_victim, timeout=60, message="a task started on the victim"))
        wait_for(lambda: len(started_on_victim()) > seen, timeout=60, interval=0.005,
                 message="another task started on the victim")
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_for(lambda: is_stopped(pid), timeout=10, message="the victim stopped")
            stopped_with = started_on_victim()  # what it had started before it stopped

            lost = wait_for(lambda: losses_of(client, victim["id"]), timeout=60,
                            message="the stopped executor declared lost")
            # every result the victim sent before it stopped has reached us by now (the
            # driver forwards results before it answers a later request): from here on a
            # result from the victim would be a late one
            done_at_loss = {i for i, f in enumerate(futures) if f.done()}
            assert [loss["id"] for loss in lost] == [victim["id"]]
            assert re.fullmatch(expected_reason, lost[0]["reason"]), lost[0]["reason"]
            assert victim["id"] not in client.executor_ids()

            done, not_done = concurrent.futures.wait(futures, timeout=90)
            assert not not_done, f"{len(not_done)} futures did not complete"
            values = [f.result() for f in futures]
            assert [v[0] for v in values] == list(range(n))
            # tasks the victim had started and not reported ran again elsewhere
            rerun = [x for x in stopped_with if values[x][1] != pid]
            assert rerun, f"no task of the stopped executor was rerun: {stopped_with}"
            from_victim = {i for i, (_, by) in enumerate(values) if by == pid}
            assert from_victim <= done_at_loss, "a late result of the stopped executor was used"
            assert client.status()["tasks"]["retried"] >= 1
        finally:
            os.kill(pid, signal.SIGCONT)

        # woken, it has nothing to say that counts, and it leaves
        wait_for(lambda: pid_gone(pid), timeout=60, message="the woken executor to exit")
        # a check that nothing happens: for a heartbeat interval after it left, anything it
        # sent on the way out reaches the driver and us, and changes no result
        time.sleep(settings["executor_heartbeat_interval"])
        assert dict(completions) == {i: 1 for i in range(n)}
        assert [f.result() for f in futures] == values  # nothing changed since
        status = client.status()
        assert status["tasks"]["finished"] == n
        assert status["tasks"]["failed"] == 0
        assert [loss["id"] for loss in status["losses"]] == [victim["id"]]
        wait_for(lambda: len(client.executor_ids()) == 3, timeout=60,
                 message="3 registered executors again")
        assert ids_are_new(set(client.executor_ids()) - earlier_ids, earlier_ids)
        client.shutdown()


# ---------------------------------------------------------------- 3. a task that exits

def test_task_exiting_its_executor_fails_after_max_failures(tmp_path):
    log = str(tmp_path / "attempts")
    with zsched.LocalCluster(3, max_failures=4) as cluster:
        client = cluster.client()
        earlier_ids = set(client.executor_ids())
        good = [client.submit(slow_double, i) for i in range(40)]
        bad = client.submit(exit_with_3, log)
        good += [client.submit(slow_double, i) for i in range(40, 80)]

        with pytest.raises(zsched.TaskFailed) as info:
            bad.result(90)
        message = str(info.value)
        assert re.match(r"task \d+ failed 4 times \(max_failures=4\): ", message), message
        attempts = attempts_of(message)
        assert len(attempts) == 4, message
        assert all(reason == "exited with code 3" for _, _, reason in attempts), message
        assert len({eid for _, eid, _ in attempts}) == 4, message  # each on its own executor

        with open(log) as f:
            pids = f.read().split()
        assert len(pids) == 4  # ran exactly max_failures times
        assert len(set(pids)) == 4

        assert [f.result(60) for f in good] == [2 * i for i in range(80)]
        status = client.status()
        assert sorted((loss["id"], loss["reason"]) for loss in status["losses"]) == \
            sorted((eid, "exited with code 3") for _, eid, _ in attempts)
        assert status["tasks"]["failed"] == 1
        assert status["tasks"]["finished"] == 80

        # the cluster keeps serving, with its executors replaced under new ids
        assert client.submit(slow_double, 21).result(60) == 42
        wait_for(lambda: len(client.executor_ids()) == 3, timeout=60,
                 message="3 registered executors again")
        assert ids_are_new(set(client.executor_ids()) - earlier_ids, earlier_ids)
        client.shutdown()


def sleepy_double(x):
    time.sleep(0.5)
    return 2 * x


def test_task_exiting_a_multicore_executor_takes_no_neighbour_down(tmp_path):
    """Promise 3 with 2 cores per executor: a task that ran beside a crasher once is charged
    that loss, but it must not be made to run beside it again until it fails too."""
    log = str(tmp_path / "attempts")
    with zsched.LocalCluster(1, cores_per_executor=2, max_failures=4) as cluster:
        client = cluster.client()
        innocent = client.submit(sleepy_double, 21)  # running when the crasher ends its executor
        bad = client.submit(exit_with_3, log)

        with pytest.raises(zsched.TaskFailed, match=r"failed 4 times \(max_failures=4\)"):
            bad.result(90)
        with open(log) as f:
            assert len(f.read().split()) == 4
        assert client.submit(slow_double, 5).result(60) == 10  # the cluster serves

        error = innocent.exception(90)
        assert error is None, f"the innocent task failed with the crasher: {error}"
        assert innocent.result() == 42
        client.shutdown()


# ---------------------------------------------------------------- 4. a task that segfaults

def test_segfaulting_task_fails_naming_sigsegv(tmp_path):
    log = str(tmp_path / "attempts")
    with zsched.LocalCluster(2, max_failures=2) as cluster:
        client = cluster.client()
        good = [client.submit(slow_double, i) for i in range(30)]
        bad = client.submit(segfault, log)

        with pytest.raises(zsched.TaskFailed) as info:
            bad.result(90)
        message = str(info.value)
        assert re.match(r"task \d+ failed 2 times \(max_failures=2\): ", message), message
        attempts = attempts_of(message)
        assert [reason for _, _, reason in attempts] == ["killed by signal SIGSEGV"] * 2, message
        with open(log) as f:
            assert len(f.read().split()) == 2

        assert [f.result(60) for f in good] == [2 * i for i in range(30)]
        assert client.submit(slow_double, 5).result(60) == 10
        wait_for(lambda: len(client.executor_ids()) == 2, timeout=60,
                 message="2 registered executors again")
        reasons = [loss["reason"] for loss in client.status()["losses"]]
        assert reasons == ["killed by signal SIGSEGV"] * 2
        client.shutdown()


# ---------------------------------------------------------------- 5. chaos

def test_chaos_random_sigkills_lose_and_duplicate_nothing():
    n_map, n_submit = 50_000, 12_000
    total = n_map + n_submit
    with zsched.LocalCluster(4) as cluster:
        client = cluster.client()
        killer_client = cluster.client()
        done = threading.Event()
        kills = []            # (executor id, pid)
        killer_errors = []

        def killer():
            rng = random.Random()
            try:
                while not done.wait(1.0):
                    killed = {eid for eid, _ in kills}
                    candidates = [e for e in killer_client.status()["executors"]
                                  if e["state"] == "active" and e["id"] not in killed]
                    if not candidates or done.is_set():
                        continue
                    victim = rng.choice(candidates)
                    try:
                        os.kill(victim["pid"], signal.SIGKILL)
                    except ProcessLookupError:
                        continue
                    kills.append((victim["id"], victim["pid"]))
            except Exception as exc:  # reported by the test, not lost in a thread
                killer_errors.append(repr(exc))

        completions, completed = completion_counter()

        started = time.monotonic()
        thread = threading.Thread(target=killer, name="chaos-killer", daemon=True)
        thread.start()
        try:
            futures = []
            for i in range(n_submit // 2):
                future = client.submit(chaos_square, n_map + i)
                future.add_done_callback(completed(n_map + i))
                futures.append(future)
            got = []
            deadline = time.monotonic() + 75  # a run that loses tasks fails in bounded time
            try:
                for value in client.map(chaos_square, range(n_map), timeout=60, chunksize=1):
                    got.append(value)
            except concurrent.futures.TimeoutError:
                pass
            for i in range(n_submit // 2, n_submit):
                future = client.submit(chaos_square, n_map + i)
                future.add_done_callback(completed(n_map + i))
                futures.append(future)
            concurrent.futures.wait(futures, timeout=max(5.0, deadline - time.monotonic()))
        finally:
            done.set()
            thread.join(30)
        seconds = time.monotonic() - started

        lost_map = sum(1 for x, value in enumerate(got) if value != x * x + 1) + (n_map - len(got))
        lost_submit = 0
        for i, future in enumerate(futures):
            if not future.done() or future.cancelled() or future.exception() is not None \
                    or future.result() != (n_map + i) ** 2 + 1:
                lost_submit += 1
        status = client.status()
        duplicated = sum(c - 1 for c in completions.values() if c > 1) + \
            max(0, status["tasks"]["finished"] - total)
        lost = lost_map + lost_submit
        figures = {"test": "chaos", "tasks": total, "kills": len(kills), "lost": lost,
                   "duplicated": duplicated, "seconds": round(seconds, 2),
                   "retried": status["tasks"]["retried"], "failed": status["tasks"]["failed"],
                   "losses": len(status["losses"]),
                   "fastpath": fastpath()}
        print(f"\nchaos: {json.dumps(figures)}")
        write_report("ZSCHED_CHAOS_REPORT", figures)
        failures = [f.exception() for f in futures if f.done() and not f.cancelled()
                    and f.exception() is not None]

        assert not killer_errors, killer_errors
        assert kills, "the killer never killed"
        assert lost == 0, f"{lost} lost; first failures: {[str(e) for e in failures[:3]]}"
        assert duplicated == 0
        assert set(completions) == set(range(n_map, total))
        assert status["tasks"]["finished"] == total and status["tasks"]["failed"] == 0
        killed_ids = {eid for eid, _ in kills}
        # A kill in the run's last moment may be seen just after it ends.
        settle = time.monotonic() + 10
        while not killed_ids <= {loss["id"] for loss in status["losses"]} \
                and time.monotonic() < settle:
            time.sleep(0.05)
            status = client.status()
        loss_reasons = {loss["id"]: loss["reason"] for loss in status["losses"]}
        assert killed_ids <= set(loss_reasons)
        wrong = {eid: r for eid, r in loss_reasons.items() if r != "killed by signal SIGKILL"}
        assert not wrong, wrong
        wait_for(lambda: len(client.executor_ids()) == 4, timeout=60,
                 message="4 registered executors again")
        killer_client.shutdown()
        client.shutdown()


# ---------------------------------------------------------------- 6. how a loss is told

def test_sigkill_and_sigstop_are_reported_with_their_reasons():
    """A SIGKILLed executor is reported killed; a SIGSTOPped one is found by heartbeats and,
    once woken, exits. (How long each takes: bench/throughput.py --detection.)"""
    # heartbeats every second, lost after 5 s: the default 30 s would only make it slower
    with zsched.LocalCluster(2, executor_heartbeat_interval="1s",
                             executor_heartbeat_timeout="5s") as cluster:
        client = cluster.client()
        first, second = executors(client)
        os.kill(first["pid"], signal.SIGKILL)
        (killed,) = wait_for(lambda: losses_of(client, first["id"]), timeout=60,
                             message="the SIGKILLed executor reported lost")
        assert killed["reason"] == "killed by signal SIGKILL"
        os.kill(second["pid"], signal.SIGSTOP)
        try:
            (stopped,) = wait_for(lambda: losses_of(client, second["id"]), timeout=90,
                                  message="the SIGSTOPped executor reported lost")
            assert stopped["reason"].startswith(("disconnected", "heartbeat timeout")), \
                stopped["reason"]
        finally:
            os.kill(second["pid"], signal.SIGCONT)
        wait_for(lambda: pid_gone(second["pid"]), timeout=60, message="the woken executor to exit")
        client.shutdown()
