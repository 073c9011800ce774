"""Submitting to the client: floods of tasks from one thread or many, control messages
that keep their place among them, cancelling and shutting down during a flood, and the
functions the driver holds for a client (zsched/client/client.py, zsched/client/outbox.py)."""
import concurrent.futures
import functools
import os
import threading
import time

import pytest

import zsched

from conftest import wait_for

FLOOD = 20_000


def identity(x):
    return x


def add(a, b=0):
    return a + b


def sleep_then(seconds, value):
    time.sleep(seconds)
    return value


def test_a_flood_completes_and_a_lone_submit_after_it_still_leaves(client):
    futures = [client.submit(identity, i) for i in range(FLOOD)]
    assert [f.result(120) for f in futures] == list(range(FLOOD))
    # once the I/O thread has taken every wake-up and gone back to sleep, a single task
    # must wake it
    wait_for(lambda: not client._wakeup.pending, timeout=30,
             message="the I/O thread to take its last wake-up")
    assert client.submit(identity, "alone").result(30) == "alone"
    # and again right after a flood whose results are still arriving
    futures = [client.submit(identity, i) for i in range(FLOOD)]
    assert client.submit(identity, "right after").result(120) == "right after"
    assert [f.result(120) for f in futures] == list(range(FLOOD))


def test_submissions_from_many_threads_all_complete(client):
    results = {}

    def flood(start):
        futures = [client.submit(identity, start + i) for i in range(2_000)]
        results[start] = [f.result(120) for f in futures]

    threads = [threading.Thread(target=flood, args=(k * 10_000,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    assert {k: v for k, v in results.items()} == {
        k * 10_000: list(range(k * 10_000, k * 10_000 + 2_000)) for k in range(4)}


@pytest.mark.parametrize("in_process", [False, True], ids=["driver process", "driver thread"])
def test_control_messages_keep_their_place_among_submissions(in_process):
    # no executor: every task the driver received stays queued, so its counts show what
    # arrived before each admin request
    with zsched.LocalCluster(n_executors=0, in_process=in_process) as cluster:
        client = cluster.client()
        futures = [client.submit(identity, i) for i in range(FLOOD)]
        tasks = client.status()["tasks"]
        assert tasks["submitted"] == FLOOD and tasks["queued"] == FLOOD
        for future in futures[::2]:
            assert future.cancel()
        tasks = client.status()["tasks"]  # queued after the cancels: answered after them
        assert tasks["queued"] == FLOOD // 2 and tasks["cancelled"] == FLOOD // 2
        # a task cancelled at once never needs to reach the driver, and none is counted twice
        for i in range(100):
            assert client.submit(identity, i).cancel()
        more = [client.submit(identity, i) for i in range(10)]
        tasks = client.status()["tasks"]
        assert tasks["queued"] == FLOOD // 2 + 10
        assert tasks["submitted"] - tasks["cancelled"] == tasks["queued"]
        client.shutdown(cancel_futures=True)
        assert all(f.cancelled() for f in futures + more)


def test_shutdown_with_cancel_during_a_flood_leaves_no_future_pending(cluster):
    client = cluster.client()
    submitted = []
    started = threading.Event()
    refused = []

    def flood():
        try:
            for i in range(10 * FLOOD):
                submitted.append(client.submit(sleep_then, 0.001, i))
                if i == 1_000:
                    started.set()
        except RuntimeError as exc:  # the client was shut down meanwhile
            refused.append(exc)
        finally:
            started.set()

    thread = threading.Thread(target=flood)
    thread.start()
    started.wait(60)
    client.shutdown(wait=True, cancel_futures=True)
    thread.join(120)
    assert refused, "the flood ended before the shutdown: make it longer"
    assert "after shutdown" in str(refused[0])
    assert all(f.done() for f in submitted)
    cancelled = sum(f.cancelled() for f in submitted)
    finished = [f.result() for f in submitted if not f.cancelled()]
    assert cancelled > 0 and cancelled + len(finished) == len(submitted)


def held_until(path, x):
    """``x``, once the file ``path`` exists."""
    while not os.path.exists(path):
        time.sleep(0.001)
    return x


def test_cancelling_during_a_flood_loses_no_future(client, tmp_path):
    # every core holds a task until the cancels are made: none of the flood has finished
    gate = str(tmp_path / "open")
    cores = sum(executor["cores"] for executor in client.status()["executors"])
    held = [client.submit(held_until, gate, -1) for _ in range(cores)]
    futures = [client.submit(identity, i) for i in range(FLOOD)]
    cancelled = {i for i, f in enumerate(futures) if i % 3 == 0 and f.cancel()}
    open(gate, "w").close()
    assert cancelled
    assert [f.result(60) for f in held] == [-1] * cores
    done, not_done = concurrent.futures.wait(futures, timeout=60)
    assert not not_done  # cancelled futures count as done, at once
    for i, future in enumerate(futures):
        assert future.done()
        if i in cancelled:
            assert future.cancelled()
        elif not future.cancelled():
            assert future.result() == i
    assert client.submit(identity, "after").result(30) == "after"


def slow_scaled(data, x):
    time.sleep(0.003)
    return len(data) * x


@pytest.mark.parametrize("in_process", [False, True], ids=["driver process", "driver thread"])
def test_a_client_making_a_function_per_task_keeps_few_held(in_process, monkeypatch):
    """A new function per task (a partial around each task's data): past a limit the client
    releases the least recently used ones, and the driver and executors drop them, while
    tasks queued with them still run; a released function is sent again when needed."""
    from zsched.client import held_functions
    monkeypatch.setattr(held_functions, "MAX_COUNT", 20)

    def held(client):
        status = client.status()
        return status["functions"], max(e.get("functions", -1) for e in status["executors"])

    with zsched.LocalCluster(n_executors=2, executor_heartbeat_interval="100ms",
                             in_process=in_process) as cluster:
        client = cluster.client()
        assert client.submit(add, 1, 2).result() == 3  # a plain function: kept throughout
        partials = [functools.partial(slow_scaled, bytes(i)) for i in range(300)]
        futures = [client.submit(fn, 2) for fn in partials]  # most are released while queued
        assert [f.result(60) for f in futures] == [2 * i for i in range(300)]
        assert client.submit(add, 3, 4).result() == 7
        wait_for(lambda: max(held(client)) <= 21, message="at most 20 functions and add held")
        assert client.submit(partials[0], 5).result() == 0  # released: sent again
        assert client.submit(partials[7], 5).result() == 35
        client.shutdown()


def test_a_released_function_travels_once_per_executor_while_its_tasks_wait(monkeypatch):
    """A function larger than the client's limit is released once another is used, while
    its tasks still wait: the driver keeps it for them and the executors keep theirs
    while tasks of it remain, so it is not sent again with each launch; then they drop
    it. A map's function is not released before its last group has left, whatever other
    threads submit meanwhile."""
    from zsched.client import held_functions
    monkeypatch.setattr(held_functions, "MAX_BYTES", 2000)
    with zsched.LocalCluster(n_executors=2, executor_heartbeat_interval="100ms",
                             in_process=True) as cluster:
        client = cluster.client()
        big = functools.partial(slow_scaled, bytes(20_000))
        sent_before = client.status()["counters"]["bytes_out"]
        futures = [client.submit(big, i) for i in range(300)]
        other = client.submit(add, 1, 2)  # big is no longer the latest used: released
        wait_for(lambda: client.status()["functions"] == 1, message="big released by the client")
        assert not futures[-1].done()  # ... while its tasks wait
        assert [f.result(60) for f in futures] == [20_000 * i for i in range(300)]
        assert other.result(10) == 3
        # once per executor is 40 kB; with each of the ~150 launches, 3 MB
        assert client.status()["counters"]["bytes_out"] - sent_before < 200_000
        wait_for(lambda: all(e.get("functions", 9) <= 1 for e in client.status()["executors"]),
                 message="the executors dropped it once its tasks were done")

        fast = functools.partial(scaled, bytes(20_000))
        done = threading.Event()

        def submit_others():
            while not done.is_set():
                client.submit(add, 1, 1).result(10)

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            others = pool.submit(submit_others)
            try:
                assert list(client.map(fast, range(20_000), chunksize=1)) == \
                    [20_000 * i for i in range(20_000)]
            finally:
                done.set()
            others.result(30)
        client.shutdown()


@pytest.mark.parametrize("in_process", [False, True], ids=["driver process", "driver thread"])
def test_a_function_released_at_every_turn_still_reaches_every_task(in_process, monkeypatch):
    """Several threads submit tasks of one function larger than the client's limit: it is
    released at the end of nearly every turn, while more tasks of it are being submitted;
    each of those is sent with it again, and none fails."""
    from zsched.client import held_functions
    monkeypatch.setattr(held_functions, "MAX_BYTES", 2000)
    with zsched.LocalCluster(n_executors=2, in_process=in_process) as cluster:
        client = cluster.client()
        big = functools.partial(scaled, bytes(5000))

        def submit_many(start):
            return [client.submit(big, i) for i in range(start, start + 300)]

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            batches = list(pool.map(submit_many, range(0, 1200, 300)))
        assert [f.result(60) for batch in batches for f in batch] == [5000 * i for i in range(1200)]
        client.shutdown()


@pytest.mark.parametrize("in_process", [False, True], ids=["driver process", "driver thread"])
def test_a_function_released_while_a_task_of_it_is_being_submitted_is_sent_again(in_process,
                                                                                monkeypatch):
    """The submit of a second task pickles its arguments slowly; meanwhile the first task
    leaves with the function, which is over the client's limit: it is not released before
    the second task is queued, and both run."""
    from zsched.client import client as client_module
    from zsched.client import held_functions
    monkeypatch.setattr(held_functions, "MAX_BYTES", 2000)
    dumps = client_module._dumps
    missed = []  # submit would take a failed wait here for a value pickle refused

    def slow_dumps(value, protocol, **kwargs):
        if value == ((-1,), {}):
            try:  # meanwhile the I/O thread's turn takes the first task, with the function
                wait_for(lambda: len(client._outbox.held_functions) == 1, timeout=30,
                         message="the first task to leave with its function")
            except AssertionError as exc:
                missed.append(exc)
        return dumps(value, protocol, **kwargs)

    monkeypatch.setattr(client_module, "_dumps", slow_dumps)
    with zsched.LocalCluster(n_executors=1, in_process=in_process) as cluster:
        client = cluster.client()
        big = functools.partial(scaled, bytes(5000))
        first, second = client.submit(big, 1), client.submit(big, -1)
        assert not missed, missed
        assert (first.result(30), second.result(30)) == (5000, -5000)
        client.shutdown()


def scaled(data, x):
    return len(data) * x


@pytest.mark.parametrize("in_process", [False, True], ids=["driver process", "driver thread"])
def test_functions_of_a_client_that_left_are_dropped_by_the_driver_and_its_executors(in_process):
    """Each distinct function (here a partial holding its own data) is cached by the driver
    and by each executor it reached; once no connected client sent it, both drop it, and a
    later client that needs it again brings it again."""
    def held(client):
        """Functions held by the driver, and the most any executor holds (its heartbeat)."""
        status = client.status()
        return status["functions"], max(e.get("functions", -1) for e in status["executors"])

    with zsched.LocalCluster(n_executors=2, executor_heartbeat_interval="100ms",
                             in_process=in_process) as cluster:
        first, second = cluster.client(), cluster.client()
        partials = [functools.partial(scaled, bytes(1000 + i)) for i in range(6)]
        assert [f.result() for f in [first.submit(fn, 2) for fn in partials]] == \
            [2 * (1000 + i) for i in range(6)]
        assert first.submit(add, 1, 2).result() == 3   # add: sent by both clients
        assert second.submit(add, 3, 4).result() == 7
        wait_for(lambda: held(second)[0] == 7 and held(second)[1] >= 4,
                 message="7 functions held by the driver, several by an executor")

        first.shutdown()
        # add stays (the second client sent it too); the partials go, on every executor
        wait_for(lambda: held(second) in ((1, 0), (1, 1)),
                 message="only add held, by the driver and by the executors")
        assert second.submit(add, 5, 6).result() == 11
        # a function dropped everywhere comes back with the next client that needs it
        again = functools.partial(scaled, bytes(1000))
        assert [f.result() for f in [second.submit(again, 3) for _ in range(4)]] == [3000] * 4
        assert held(second)[0] == 2
        second.shutdown()

        third = cluster.client()
        wait_for(lambda: held(third) == (0, 0), message="nothing held once every client left")
        assert third.submit(add, 1, 1).result() == 2
        third.shutdown()
