"""Completing the client's futures: wait, as_completed and done-callbacks, results
unpickled by the thread that asks for them, futures and the GC, and results that piled up
in the driver (zsched/client/future_table.py, zsched/client/future.py)."""
import collections
import concurrent.futures
import gc
import os
import signal
import threading
import time
import weakref

import psutil
import pytest

import zsched
from zsched.client.future import TaskFuture
from zsched.protocol import MsgType

from conftest import wait_for

FLOOD = 20_000


def identity(x):
    return x


def gated_noted(x, gate, path):
    """``x``, once the file ``gate`` exists, with a byte appended to the file ``path``."""
    while not os.path.exists(gate):
        time.sleep(0.001)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, b".")
    finally:
        os.close(fd)
    return x


def sleep_then(seconds, value):
    time.sleep(seconds)
    return value


def test_wait_and_as_completed_count_a_cancelled_future_as_done(client):
    blocker = client.submit(sleep_then, 0.5, "blocker")
    queued = [client.submit(identity, i) for i in range(3)]
    assert queued[1].cancel()
    done, not_done = concurrent.futures.wait(queued + [blocker], timeout=30)
    assert not not_done and queued[1] in done
    assert set(concurrent.futures.as_completed(queued, timeout=30)) == set(queued)
    assert queued[1].cancel() and queued[1].cancelled()  # cancelling twice is fine


def test_waiting_on_one_future_is_not_ended_by_others_completing(client):
    slow = client.submit(sleep_then, 1.0, "slow")
    outcome = {}

    def wait_for_slow():
        try:
            slow.exception(timeout=0.3)
        except concurrent.futures.TimeoutError:
            outcome["timed out"] = True
        outcome["result"] = slow.result()

    waiter = threading.Thread(target=wait_for_slow)
    waiter.start()
    # results of other futures notify the condition they share with the slow one
    fast = [client.submit(identity, i) for i in range(5_000)]
    assert [f.result(60) for f in fast] == list(range(5_000))
    waiter.join(60)
    assert outcome == {"timed out": True, "result": "slow"}


def test_wait_as_completed_and_callbacks_see_each_future_once(client):
    calls = []
    early = client.submit(identity, "early")
    early.add_done_callback(lambda f: calls.append(("early", f.result())))
    futures = [client.submit(identity, i) for i in range(1_000)]
    for future in futures[:10]:
        future.add_done_callback(lambda f: calls.append(f.result()))
    seen = [f.result() for f in concurrent.futures.as_completed(futures, timeout=60)]
    assert sorted(seen) == list(range(1_000))
    done, not_done = concurrent.futures.wait(futures + [early], timeout=60)
    assert not not_done
    wait_for(lambda: len(calls) == 11, message="callbacks")
    early.add_done_callback(lambda f: calls.append("late"))  # runs at once, when done
    assert sorted(map(str, calls)) == sorted(map(str, [("early", "early"), *range(10), "late"]))


def test_a_done_callback_may_submit_and_a_task_may_follow_in_the_caller(client):
    """Callbacks run in the thread that completes futures (the client's I/O thread, or the
    driver's thread for a client in its process): one that submits must not stall it."""
    chained = []
    done = threading.Event()

    def then(future):
        follow = client.submit(identity, future.result() + 1)
        follow.add_done_callback(lambda f: (chained.append(f.result()), done.set()))

    client.submit(identity, 41).add_done_callback(then)
    assert done.wait(30) and chained == [42]
    assert client.submit(identity, "after").result(30) == "after"


def test_the_driver_thread_never_runs_a_done_callback(cluster):
    """With the driver in this process, done-callbacks run in a thread of the client's:
    one that waits for another task of the same client stalls neither the driver nor that
    task, every callback runs, and the thread ends with its client."""
    if cluster.channel is None:
        pytest.skip("the client's I/O thread runs the callbacks of a remote client")
    client = cluster.client()
    try:
        seen = []
        waited = []

        def wait_for_another(future):
            seen.append((threading.current_thread().name, future.result()))
            waited.append(client.submit(sleep_then, 0.2, "other").result(30))

        client.submit(identity, 1).add_done_callback(wait_for_another)
        wait_for(lambda: waited == ["other"], 30, message="the callback's own task")
        assert seen == [("zsched-client-callbacks", 1)]
        order = []
        futures = [client.submit(identity, i) for i in range(50)]
        for future in futures:
            future.add_done_callback(lambda f: order.append(f.result()))
        wait_for(lambda: len(order) == 50, 30, message="every callback")
        assert sorted(order) == list(range(50))
    finally:
        client.shutdown(cancel_futures=True)
    wait_for(lambda: not [t for t in threading.enumerate() if t.name == "zsched-client-callbacks"],
             10, message="the callback thread to end with its client")


class KnowsWhereItWasUnpickled:
    def __init__(self, value):
        self.value = value

    def __setstate__(self, state):
        self.__dict__.update(state, unpickled_in=threading.current_thread().name)


class FailsToUnpickle:
    def __reduce__(self):
        return (_refuse, ())


def _refuse():  # called only to unpickle: never on the executor, which only pickles
    raise ValueError("refused on purpose")


def make_known(value):
    return KnowsWhereItWasUnpickled(value)


def make_refused():
    return FailsToUnpickle()


def test_results_are_unpickled_by_the_thread_that_asks_for_them(client):
    """Not by the thread completing futures (for a client in the driver's process, the
    driver's own); a result that cannot be unpickled fails its future there, once."""
    futures = [client.submit(make_known, i) for i in range(20)]
    concurrent.futures.wait(futures, 60)
    here = threading.current_thread().name
    assert [(f.result().value, f.result().unpickled_in) for f in futures] == [(i, here) for i in range(20)]
    assert all(f.result() is f.result() for f in futures)
    asked = []
    client.submit(make_known, "cb").add_done_callback(
        lambda f: asked.append((f.result().unpickled_in, threading.current_thread().name)))
    wait_for(lambda: asked, 30, message="the callback")
    assert asked[0][0] == asked[0][1] != "zsched-driver"
    refused = client.submit(make_refused)
    with pytest.raises(zsched.TaskFailed, match="cannot be unpickled here.*refused on purpose"):
        refused.result(30)
    assert isinstance(refused.exception(), zsched.TaskFailed)


def test_a_pending_future_is_no_object_for_the_gc():
    condition = threading.Condition()
    gc.collect()
    before = len(gc.get_objects())
    futures = [TaskFuture(None, i, condition) for i in range(10_000)]
    added = len(gc.get_objects()) - before
    assert added < 100, f"{added} GC-tracked objects for 10,000 futures"
    assert futures[0].cancel() and futures[0].cancelled()
    assert not futures[1].done()
    assert not gc.is_tracked(futures[0]) and not gc.is_tracked(futures[1])


def fail(value):
    raise ValueError(value)


def make_lock():
    return threading.Lock()


def collected_once_dropped(make):
    """Whether the future ``make()`` returns is freed by a collection once dropped (it may
    be in a reference cycle), and its object was in the GC's lists."""
    future = make()
    tracked = gc.is_tracked(future)
    ref = weakref.ref(future)
    del future
    deadline = time.monotonic() + 10  # a thread of the client's may still hold it a moment
    while gc.collect() >= 0 and ref() is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    return tracked and ref() is None


def test_futures_stay_out_of_the_gc_until_they_may_be_in_a_cycle(client):
    """A flood of futures alive made the GC's full collections traverse them all, again and
    again; so a future stays out of the GC's lists, and goes back in before it can be in a
    reference cycle, which must still be collected."""
    queued_tracked = []

    class Outbox(collections.deque):  # what submit and map queue for the driver
        def append(self, row):
            queued_tracked.append(gc.is_tracked(row))
            super().append(row)

        def extend(self, rows):
            rows = list(rows)
            queued_tracked.extend(map(gc.is_tracked, rows))
            super().extend(rows)

    client._outbox.rows = Outbox(client._outbox.rows)
    futures = [client.submit(identity, i) for i in range(100)]
    assert list(client.map(identity, range(100, 200), chunksize=1)) == list(range(100, 200))
    assert [f.result(30) for f in futures] == list(range(100))
    assert not any(gc.is_tracked(f) for f in futures)
    assert queued_tracked == [False] * 200

    def caught(future):  # the exception's traceback holds this frame, which holds the future
        try:
            future.result(30)
        except Exception:
            pass
        return future

    assert collected_once_dropped(lambda: caught(client.submit(fail, 1)))  # raised in the task
    assert collected_once_dropped(lambda: caught(client.submit(make_lock)))  # its result unpicklable
    assert collected_once_dropped(lambda: caught(client.submit(make_refused)))  # not unpicklable here

    def failed_by_the_client():  # as when too large, or the driver is lost
        future = TaskFuture(client, 0, threading.Condition())
        future.set_exception(ValueError("failed by the client"))
        return caught(future)

    assert collected_once_dropped(failed_by_the_client)

    def with_callback():  # the callback refers to its own future
        future = client.submit(identity, 1)
        ran = threading.Event()
        future.add_done_callback(lambda _: ran.set() or future)
        ran.wait(30)  # (in the client's callback thread, for a client in the driver's process)
        return future

    assert collected_once_dropped(with_callback)
    assert client.submit(identity, 2).result(30) == 2


class LeftWaiter:
    """A waiter as ``concurrent.futures.wait`` puts in a future's list, left there as by a
    ``wait`` interrupted (KeyboardInterrupt) before it took it out."""

    def __init__(self):
        self.told = []

    def add_result(self, future):
        self.told.append(future)

    add_exception = add_cancelled = add_result


def freed_without_a_collection(make):
    """Whether the future ``make()`` returns is out of the GC's lists, and freed once
    dropped with the collector off: in no reference cycle."""
    gc.disable()
    try:
        future = make()
        untracked = not gc.is_tracked(future)
        ref = weakref.ref(future)
        del future
        deadline = time.monotonic() + 10  # a thread of the client's may still hold it a moment
        while ref() is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        return untracked and ref() is None
    finally:
        gc.enable()


def test_futures_waited_for_stay_out_of_the_gc_in_no_cycle(client):
    """A waiter keeps the futures it is told of; a future empties its list of waiters once
    it has told them, so the two are in no cycle, and a future waited for stays out of the
    GC's lists (with 100,000 futures waited for, the collector took 8% of a flood)."""
    def waited_for(return_when):
        future = client.submit(identity, 1)
        concurrent.futures.wait([future], 30, return_when=return_when)
        assert future.done()
        return future

    def waited_for_when_done():
        future = client.submit(identity, 1)
        future.result(30)
        assert concurrent.futures.wait([future], 30).done == {future}
        return future

    def as_completed():
        future = client.submit(identity, 1)
        assert list(concurrent.futures.as_completed([future], 30)) == [future]
        return future

    def with_a_left_waiter(fn, *args):
        def make():
            future = client.submit(fn, *args)
            waiter = LeftWaiter()
            with future._condition:
                future._waiters.append(waiter)
            concurrent.futures.wait([future], 30)
            assert waiter.told == [future] and not future._waiter_list
            return future
        return make

    for return_when in (concurrent.futures.ALL_COMPLETED, concurrent.futures.FIRST_COMPLETED):
        assert freed_without_a_collection(lambda: waited_for(return_when))
    assert freed_without_a_collection(waited_for_when_done)
    assert freed_without_a_collection(as_completed)
    assert freed_without_a_collection(with_a_left_waiter(identity, 1))
    # a failed task's future is in the GC's lists (its exception), and still told once
    assert collected_once_dropped(with_a_left_waiter(fail, 1))


def test_a_cancelled_future_tells_its_waiters_once(client):
    blocker = client.submit(time.sleep, 0.5)  # 2 executors of 1 core: these queue behind
    blockers = [client.submit(time.sleep, 0.5) for _ in range(3)]
    future = client.submit(identity, 1)
    waiter = LeftWaiter()
    with future._condition:
        future._waiters.append(waiter)
    done, not_done = concurrent.futures.wait([future], 0)
    assert not done
    assert future.cancel()
    assert waiter.told == [future] and not future._waiter_list
    assert concurrent.futures.wait([future], 5).done == {future}
    concurrent.futures.wait([blocker, *blockers], 30)


def test_a_flood_leaves_the_gc_settings_as_they_were(client):
    settings = (gc.isenabled(), gc.get_threshold(), gc.get_freeze_count())
    futures = [client.submit(identity, i) for i in range(FLOOD)]
    assert (gc.isenabled(), gc.get_threshold()) == settings[:2]
    assert [f.result(120) for f in futures] == list(range(FLOOD))
    assert (gc.isenabled(), gc.get_threshold(), gc.get_freeze_count()) == settings


@pytest.mark.parametrize("connection", ["pipes", "tcp"])
def test_results_piled_up_in_the_driver_reach_the_client_in_frames_of_512_rows_at_most(connection,
                                                                                     tmp_path):
    # The driver is stopped while its executors finish what their windows hold (4 cores
    # each, 256 tasks a core for tasks this short): when it runs again, one wake-up takes
    # all their reports, thousands of results for this client. Frames of 512 rows at most
    # keep the client's GC from promoting a frame's rows (see zsched/driver/clients.py).
    gate, ran = tmp_path / "gate", tmp_path / "ran"  # ran: a byte per task run

    def runs():
        return ran.stat().st_size if ran.exists() else 0

    def held_in_full_windows():
        """The tasks the executors hold, once every window is full and more wait."""
        status = client.status()
        full = status["tasks"]["queued"] > 0 and all(e["free_slots"] == 0 for e in status["executors"])
        return full and sum(e["running"] for e in status["executors"])

    with zsched.LocalCluster(n_executors=2, cores_per_executor=4) as cluster:
        if connection == "pipes":
            client = cluster.client()
        else:  # the driver's ROUTER
            client = zsched.Client(cluster.address, secret_file=cluster.secret_file)
        sizes = []
        from_driver = client._futures.from_driver

        def recording(msg):  # in the client's I/O thread
            if msg.TYPE == MsgType.TASK_RESULTS:
                sizes.append(len(msg.results))
            from_driver(msg)

        client._futures.from_driver = recording
        # windows open: each executor has measured its tasks
        assert [f.result(60) for f in [client.submit(identity, i) for i in range(FLOOD)]] == list(range(FLOOD))
        # tasks as short, held at a gate until the driver is stopped: no launch after it
        futures = [client.submit(gated_noted, i, gate, ran) for i in range(FLOOD)]
        held = wait_for(held_in_full_windows, timeout=60, message="the executors' windows full")
        os.kill(cluster.driver_pid, signal.SIGSTOP)
        try:
            wait_for(lambda: psutil.Process(cluster.driver_pid).status() == psutil.STATUS_STOPPED,
                     timeout=30, message="the driver stopped")
            gate.touch()
            wait_for(lambda: runs() == held, timeout=60,
                     message=f"the executors to run the {held} tasks they hold")
        finally:
            os.kill(cluster.driver_pid, signal.SIGCONT)
        assert [f.result(60) for f in futures] == list(range(FLOOD))
        client.shutdown()
    assert sum(sizes) == 2 * FLOOD
    assert max(sizes) == 512  # results did pile up, and left in frames of 512


# ---------------------------------------------------------------- ZMTP heartbeats
