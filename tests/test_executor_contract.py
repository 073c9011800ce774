"""zsched.Client against the whole ``concurrent.futures.Executor`` contract.

Every test runs twice: with a client of a LocalCluster whose driver is a process of its
own (the module's cluster, two executors of one core), and with an embedded
``zsched.Client()`` (its driver is a thread of this process, which completes the futures
itself; a new one per test). Tasks that must stay running until the test says so wait for
a gate: a file the test creates in a directory of its own (``Gate``). Nothing here asserts
how fast anything is; the timeouts below are those of the features under test, or bounds
so that a failure never hangs.
"""
import concurrent.futures
import functools
import gc
import itertools
import os
import threading
import time
import weakref

import pytest

import zsched

from conftest import wait_for

WAIT = 30  # seconds: the bound of every wait for something that must happen


# ------------------------------------------------------------------ what the tasks run
# (shipped by value: conftest registers test modules with cloudpickle)

def add(a, b=0):
    return a + b


def square(x):
    return x * x


def echo(*args, **kwargs):
    return args, kwargs


def make_adder(n):
    def adder(x):
        return x + n
    return adder


class Blob:
    """A result that supports weak references."""

    def __init__(self, value):
        self.value = value


def make_blob(x):
    return Blob(x)


class CustomError(Exception):
    def __init__(self, code, text):
        super().__init__(code, text)
        self.code = code


def raise_value_error(x):
    raise ValueError(f"bad value {x}")


def raise_custom(code):
    raise CustomError(code, f"custom failure {code}")


def fail_at(bad, x):
    if x == bad:
        raise ValueError(f"call {x} fails")
    return x


class Falsy(Exception):
    """An exception that is false as a truth value."""

    def __bool__(self):
        return False


def falsy_at(bad, x):
    if x == bad:
        raise Falsy(f"quiet {x}")
    return x


def held(gate, key, value=None):
    """Say it started (a file ``started-<key>``), then wait until the gate opens (60 s at
    most, so that a test that fails never leaves it behind)."""
    open(os.path.join(gate, f"started-{key}"), "w").close()
    end = time.monotonic() + 60
    while not os.path.exists(os.path.join(gate, "open")):
        if time.monotonic() > end:
            raise TimeoutError("the gate never opened")
        time.sleep(0.005)
    return key if value is None else value


def quick_then_held(gate, quick, x):
    """``x`` at once for the first ``quick`` calls, else once the gate opens."""
    if x < quick:
        return x
    return held(gate, x)


def nap(seconds, value):
    time.sleep(seconds)
    return value


# ------------------------------------------------------------------ fixtures and helpers

class _ClientsOfACluster:
    name = "LocalCluster, driver process"

    def __init__(self, cluster):
        self.cluster = cluster

    def new_client(self):
        return self.cluster.client()


class _EmbeddedClients:
    name = "embedded Client()"

    @staticmethod
    def new_client():
        return zsched.Client()  # a driver thread and executors of its own, stopped at shutdown


@pytest.fixture(scope="module", params=["cluster", "embedded"])
def backend(request):
    if request.param == "cluster":
        with zsched.LocalCluster(n_executors=2, cores_per_executor=1) as cluster:
            yield _ClientsOfACluster(cluster)
    else:
        yield _EmbeddedClients()


@pytest.fixture
def new_client(backend):
    """Make clients of the backend; each is shut down (cancelling what is left) at the end."""
    made = []

    def make():
        client = backend.new_client()
        made.append(client)
        return client

    yield make
    for client in made:
        client.shutdown(wait=True, cancel_futures=True)


@pytest.fixture
def client(new_client):
    return new_client()


class Gate:
    """Tasks of ``held`` run until the test opens the gate."""

    def __init__(self, directory):
        self.path = str(directory)

    def open(self):
        open(os.path.join(self.path, "open"), "w").close()

    def started(self):
        return {name[len("started-"):] for name in os.listdir(self.path)
                if name.startswith("started-")}

    def wait_started(self, n):
        wait_for(lambda: len(self.started()) >= n, timeout=WAIT,
                 message=f"{n} held tasks running")


@pytest.fixture
def gate(tmp_path):
    g = Gate(tmp_path)
    yield g
    g.open()  # what a failed test left waiting ends


def slots(client):
    """How many tasks the client's cluster runs at once."""
    return sum(executor["cores"] for executor in client.status()["executors"])


def occupy_every_slot(client, gate):
    """Futures of held tasks, one running on each slot of the cluster."""
    n = slots(client)
    futures = [client.submit(held, gate.path, i) for i in range(n)]
    gate.wait_started(n)
    return futures


def remote_trace(exc):
    """The executor's traceback attached to ``exc``: its ``__cause__`` or its notes."""
    parts = [str(exc.__cause__)] if exc.__cause__ is not None else []
    parts += getattr(exc, "__notes__", [])
    return "\n".join(parts)


class CountingInput:
    """An iterator over ``source`` that counts how often it was asked for an item, and
    raises once asked for more than ``limit`` (an infinite input, for a test that must not
    hang when map reads it all)."""

    def __init__(self, source, limit=None):
        self.source = iter(source)
        self.asked = 0
        self.limit = limit

    def __iter__(self):
        return self

    def __next__(self):
        self.asked += 1
        if self.limit is not None and self.asked > self.limit:
            raise RuntimeError(f"map read more than {self.limit} items of its input ahead")
        return next(self.source)


# ------------------------------------------------------------------ submit

def test_submit_returns_a_future_with_the_result(client):
    future = client.submit(add, 2, 3)
    assert isinstance(future, concurrent.futures.Future)
    assert future.result(WAIT) == 5
    assert future.done() and not future.cancelled() and not future.running()
    assert future.exception(WAIT) is None
    assert future.result(0) == 5  # asked again: the same answer, no waiting


def test_submit_passes_args_and_kwargs(client):
    assert client.submit(echo).result(WAIT) == ((), {})
    assert client.submit(echo, 1, "two", [3]).result(WAIT) == ((1, "two", [3]), {})
    assert client.submit(echo, 1, b=2, c=None).result(WAIT) == ((1,), {"b": 2, "c": None})
    assert client.submit(add, b=10, a=1).result(WAIT) == 11
    assert client.submit(dict, a=1).result(WAIT) == {"a": 1}
    # fn (and self) are positional-only: keywords of those names are the task's
    assert client.submit(echo, 1, fn="mine", self=2).result(WAIT) == \
        ((1,), {"fn": "mine", "self": 2})
    with pytest.raises(TypeError):
        client.submit(fn=echo, arg=1)


def test_submit_lambdas_closures_and_builtins(client):
    offset = 40
    assert client.submit(lambda x, y=1: x * y, 6, y=7).result(WAIT) == 42
    assert client.submit(lambda: offset + 2).result(WAIT) == 42
    assert client.submit(make_adder(100), 5).result(WAIT) == 105
    assert client.submit(functools.partial(add, 1), 2).result(WAIT) == 3
    assert client.submit(sorted, [3, 1, 2], reverse=True).result(WAIT) == [3, 2, 1]
    assert client.submit(os.getpid).result(WAIT) != os.getpid()  # it ran elsewhere


def test_a_task_exception_keeps_its_type_message_and_remote_traceback(client):
    future = client.submit(raise_value_error, 3)
    with pytest.raises(ValueError) as raised:
        future.result(WAIT)
    exc = raised.value
    assert type(exc) is ValueError and str(exc) == "bad value 3"
    assert "raise_value_error" in remote_trace(exc)
    # result() raises the exception object that exception() returns, every time
    assert future.exception(WAIT) is exc
    with pytest.raises(ValueError) as again:
        future.result(0)
    assert again.value is exc
    assert future.done() and not future.cancelled()

    custom = client.submit(raise_custom, 7).exception(WAIT)
    assert type(custom) is CustomError
    assert custom.code == 7 and custom.args == (7, "custom failure 7")
    assert "raise_custom" in remote_trace(custom)


def test_an_exception_that_is_false_is_still_raised(client):
    future = client.submit(falsy_at, 0, 0)
    exc = future.exception(WAIT)
    assert type(exc) is Falsy and str(exc) == "quiet 0"  # not None: it did fail
    with pytest.raises(Falsy, match="^quiet 0$"):
        future.result(WAIT)


# without chunksize, a small map makes a task per call and a large one groups calls itself
@pytest.mark.parametrize("n, chunksize", [(20, None), (2000, None), (100, 10)],
                         ids=["20 calls", "2000 calls", "chunksize=10"])
def test_map_raises_an_exception_that_is_false(client, n, chunksize):
    bad = n // 2 + 3
    got = []
    with pytest.raises(Falsy, match=f"^quiet {bad}$"):
        for value in client.map(functools.partial(falsy_at, bad), range(n), chunksize=chunksize):
            got.append(value)
    assert got == list(range(bad))


# ------------------------------------------------------------------ map

def test_map_yields_results_in_order(client):
    # calls of unequal length, so that they finish out of order
    xs = list(range(60))
    assert list(client.map(nap, [(x % 4) * 0.005 for x in xs], xs)) == xs
    assert list(client.map(square, range(500))) == [x * x for x in range(500)]
    assert list(client.map(square, range(500), chunksize=7)) == [x * x for x in range(500)]
    assert list(client.map(square, range(3000))) == [x * x for x in range(3000)]  # calls grouped
    assert list(client.map(lambda x: -x, iter(range(10)))) == [-x for x in range(10)]


@pytest.mark.parametrize("chunksize", [None, 1, 3])
def test_map_stops_at_the_shortest_iterable(client, chunksize):
    assert list(client.map(add, range(10), range(5), chunksize=chunksize)) == [0, 2, 4, 6, 8]
    assert list(client.map(add, range(5), range(100, 110), chunksize=chunksize)) == \
        [100, 102, 104, 106, 108]
    # an infinite iterable beside a finite one
    assert list(client.map(add, range(4), itertools.count(10), chunksize=chunksize)) == \
        [10, 12, 14, 16]
    assert list(client.map(echo, "ab", [1, 2, 3], (None,) * 9, chunksize=chunksize)) == \
        [(("a", 1, None), {}), (("b", 2, None), {})]


@pytest.mark.parametrize("chunksize", [None, 1, 4])
def test_map_of_empty_iterables(client, chunksize):
    assert list(client.map(square, [], chunksize=chunksize)) == []
    assert list(client.map(add, [], range(10), chunksize=chunksize)) == []
    assert list(client.map(add, iter(()), iter(()), chunksize=chunksize)) == []
    assert list(client.map(square, chunksize=chunksize)) == []  # no iterable at all


def test_map_timeout_raises_when_a_result_is_late(client, gate):
    # the first two calls return at once; the others wait for a gate that never opens here
    timeout = 1.0
    started = time.monotonic()
    results = client.map(functools.partial(quick_then_held, gate.path, 2), range(6), timeout=timeout)
    got = []
    with pytest.raises(concurrent.futures.TimeoutError):
        for value in results:
            got.append(value)
    assert time.monotonic() - started >= timeout  # not before the timeout
    assert got == [0, 1][:len(got)]           # what came before was in order
    assert next(results, "ended") == "ended"  # the iterator is over
    assert concurrent.futures.TimeoutError is TimeoutError


def test_map_timeout_is_not_raised_when_results_are_in_time(client):
    assert list(client.map(square, range(50), timeout=WAIT)) == [x * x for x in range(50)]
    assert list(client.map(square, range(50), timeout=WAIT, chunksize=5)) == \
        [x * x for x in range(50)]


@pytest.mark.parametrize("n, bad, chunksize", [(2000, 1234, None), (100, 37, 10), (100, 37, 1),
                                               (20, 13, None)],
                         ids=["2000 calls", "chunksize=10", "chunksize=1", "20 calls"])
def test_map_raises_each_calls_exception_at_its_place(client, n, bad, chunksize):
    results = client.map(functools.partial(fail_at, bad), range(n), chunksize=chunksize)
    got = []
    with pytest.raises(ValueError) as raised:
        for value in results:
            got.append(value)
    assert got == list(range(bad))  # every result before the failing call, and no other
    assert type(raised.value) is ValueError and str(raised.value) == f"call {bad} fails"
    assert "fail_at" in remote_trace(raised.value)


@pytest.mark.parametrize("n, chunksize", [(20, None), (2000, None), (20, 1), (20, 5)],
                         ids=["20 calls", "2000 calls", "chunksize=1", "chunksize=5"])
def test_map_keeps_no_reference_to_a_result_it_yielded(client, n, chunksize):
    results = client.map(make_blob, range(n), chunksize=chunksize)
    for index in range(n):
        blob = next(results)
        value = blob.value
        assert value == index
        ref = weakref.ref(blob)
        del blob
        if index in (0, 1, n // 2):  # the first of a chunk, the next one, one in the middle
            gc.collect()
            assert ref() is None, f"map still holds result {index} after yielding it"
    assert next(results, "ended") == "ended"


@pytest.mark.parametrize("how", ["close", "drop"])
def test_map_stopped_early_cancels_what_it_did_not_hand_out(client, gate, how):
    # map's iterator is a generator in every Python version: close() ends it, and so
    # does dropping it; the calls whose results were not handed out are cancelled
    results = client.map(functools.partial(quick_then_held, gate.path, 1), range(8))
    assert next(results) == 0
    if how == "close":
        results.close()
        assert next(results, "ended") == "ended"
        assert next(results, "ended") == "ended"
    else:
        del results
    # without the gate opening, nothing of the map stays queued or running
    wait_for(lambda: not any(client.status()["tasks"][state] for state in ("queued", "running")),
             timeout=WAIT, message="the map's held calls cancelled")


# ------------------------------------------------------------------ map(buffersize=...)

@pytest.mark.parametrize("chunksize", [None, 1, 5])
def test_map_accepts_buffersize(client, chunksize):
    expected = [x * x for x in range(40)]
    assert list(client.map(square, range(40), buffersize=3, chunksize=chunksize)) == expected
    assert list(client.map(square, range(40), buffersize=1000, chunksize=chunksize)) == expected
    assert list(client.map(square, range(40), buffersize=None, chunksize=chunksize)) == expected
    assert list(client.map(add, range(40), range(7), buffersize=2, chunksize=chunksize)) == \
        [2 * x for x in range(7)]
    assert list(client.map(square, [], buffersize=4, chunksize=chunksize)) == []


def test_map_buffersize_is_checked_as_python_3_14_does(client):
    # Python 3.14: an int >= 1 or None; checked when map is called, not when iterated
    for bad in (0, -1):
        with pytest.raises(ValueError, match="buffersize"):
            client.map(square, range(4), buffersize=bad)
    for bad in (2.0, "4"):
        with pytest.raises(TypeError, match="buffersize"):
            client.map(square, range(4), buffersize=bad)


def test_map_with_buffersize_takes_from_an_infinite_iterator(client):
    # guarded first: an input that ends the test with an error, rather than a hang, if map
    # reads it all; then the plain itertools.count()
    guarded = CountingInput(itertools.count(), limit=10_000)
    results = client.map(square, guarded, buffersize=4)
    assert list(itertools.islice(results, 10)) == [x * x for x in range(10)]
    del results  # dropped early: what it had not handed out is cancelled
    results = client.map(square, itertools.count(), buffersize=4)
    assert list(itertools.islice(results, 10)) == [x * x for x in range(10)]
    del results  # dropped early: what it had not handed out is cancelled
    assert client.submit(add, 1, 1).result(WAIT) == 2  # what the closed maps left is no obstacle


@pytest.mark.parametrize("buffersize, chunksize", [(4, None), (1, None), (64, None), (2, 3)])
def test_map_buffersize_bounds_the_calls_submitted_ahead(client, buffersize, chunksize):
    # Python 3.14's meaning: at most `buffersize` tasks whose results were not yielded yet.
    # A task is one call without chunksize: after k results, at most k + buffersize items
    # were read. zsched may group the calls of a large buffer into tasks of its own: one
    # such task of slack, a quarter of the buffer at most (none for buffers under 8). With
    # chunksize c a task is c calls (Python's ProcessPoolExecutor counts buffersize in
    # chunks): the chunk being yielded is read whole, so at most k + (buffersize + 1) * c.
    if chunksize is None:
        slack = buffersize // 4 if buffersize >= 8 else 0

        def bound(k):
            return k + buffersize + slack
    else:
        def bound(k):
            return k + (buffersize + 1) * chunksize
    source = CountingInput(itertools.count(), limit=100_000)
    results = client.map(square, source, buffersize=buffersize, chunksize=chunksize)
    assert source.asked <= bound(0)
    for k in range(1, 25):
        assert next(results) == (k - 1) ** 2
        assert source.asked <= bound(k), f"after {k} results map read {source.asked} items"
    del results


# ------------------------------------------------------------------ timeouts

def test_result_and_exception_time_out_on_a_slow_task(client, gate):
    future = client.submit(held, gate.path, "slow", 42)
    with pytest.raises(concurrent.futures.TimeoutError):
        future.result(timeout=0.01)
    with pytest.raises(TimeoutError):
        future.exception(timeout=0.01)
    assert not future.done()
    gate.open()
    assert future.result(WAIT) == 42  # it still completes
    assert future.done()


# ------------------------------------------------------------------ shutdown

def test_shutdown_wait_true_waits_for_running_and_queued_tasks(new_client, gate):
    client = new_client()
    running = occupy_every_slot(client, gate)
    queued = [client.submit(add, i, 1) for i in range(10)]
    closing = threading.Thread(target=client.shutdown, kwargs={"wait": True})
    closing.start()
    closing.join(0.5)
    assert closing.is_alive(), "shutdown(wait=True) returned while tasks were running"
    with pytest.raises(RuntimeError):
        client.submit(add, 1)  # shutting down: no new futures
    gate.open()
    closing.join(WAIT)
    assert not closing.is_alive()
    # by the time shutdown returned, everything had completed
    assert all(f.done() and not f.cancelled() for f in running + queued)
    assert [f.result(0) for f in running] == list(range(len(running)))
    assert [f.result(0) for f in queued] == list(range(1, 11))


def test_shutdown_wait_false_returns_at_once_and_pending_futures_complete(new_client, gate):
    # zsched's promise (Client.shutdown): without cancel_futures, every pending future
    # still completes with its result; the client closes its connection after the last one
    client = new_client()
    running = occupy_every_slot(client, gate)
    queued = [client.submit(add, i, 1) for i in range(10)]
    client.shutdown(wait=False)
    # it returned with the tasks still held: it waited for none of them
    assert not any(f.done() for f in running)
    with pytest.raises(RuntimeError):
        client.submit(add, 1)
    gate.open()
    done, not_done = concurrent.futures.wait(running + queued, timeout=WAIT)
    assert not not_done
    assert [f.result(0) for f in running] == list(range(len(running)))
    assert [f.result(0) for f in queued] == list(range(1, 11))


@pytest.mark.parametrize("wait", [True, False])
def test_shutdown_cancel_futures_cancels_queued_futures_and_running_ones_finish(
        new_client, gate, wait):
    client = new_client()
    running = occupy_every_slot(client, gate)
    # more than the executors may hold ahead of what they run (tasks_per_core a core)
    held_ahead = slots(client) * client.config.tasks_per_core
    queued = [client.submit(add, i, 1) for i in range(held_ahead + 500)]
    if wait:  # shutdown waits for the running tasks: the gate opens once it cancelled
        opener = threading.Thread(target=lambda: (wait_for(
            lambda: any(f.cancelled() for f in queued), timeout=WAIT,
            message="queued futures cancelled"), gate.open()))
        opener.start()
    client.shutdown(wait=wait, cancel_futures=True)
    # what no executor holds ends cancelled as shutdown returns; what an executor holds
    # runs, as ProcessPoolExecutor runs the calls it moved to its call queue
    cancelled = [f for f in queued if f.cancelled()]
    assert len(cancelled) >= len(queued) - held_ahead
    for future in cancelled:
        with pytest.raises(concurrent.futures.CancelledError):
            future.result(0)
    if wait:
        opener.join()
        assert all(f.done() for f in running + queued)
    else:
        assert not any(f.done() for f in running)
        gate.open()
    # the running ones are not cancelled: they finish with their results, as the rest do
    done, not_done = concurrent.futures.wait(running + queued, timeout=WAIT)
    assert not not_done
    assert [f.result(0) for f in running] == list(range(len(running)))
    assert all(f.result(0) == i + 1 for i, f in enumerate(queued) if not f.cancelled())
    with pytest.raises(RuntimeError):
        client.submit(add, 1)


def test_submit_and_map_after_shutdown_raise_runtime_error(new_client):
    client = new_client()
    assert client.submit(add, 1, 2).result(WAIT) == 3
    client.shutdown()
    with pytest.raises(RuntimeError, match="shutdown"):
        client.submit(add, 1)
    with pytest.raises(RuntimeError):
        client.map(add, [1, 2])
    client.shutdown()  # again: nothing happens
    client.shutdown(wait=False, cancel_futures=True)


def test_with_block_shuts_down_when_it_ends(new_client):
    with new_client() as client:
        slow = client.submit(nap, 0.3, "slept")
        futures = [client.submit(square, i) for i in range(20)]
    # leaving the block waited for every future (shutdown(wait=True))
    assert slow.done() and slow.result(0) == "slept"
    assert [f.result(0) for f in futures] == [i * i for i in range(20)]
    with pytest.raises(RuntimeError):
        client.submit(add, 1)


def test_with_block_shuts_down_when_it_raises(new_client):
    with pytest.raises(KeyError, match="inside"):
        with new_client() as client:
            future = client.submit(add, 2, 2)
            raise KeyError("inside")
    assert future.result(0) == 4  # the block's exception propagated after shutdown waited
    with pytest.raises(RuntimeError):
        client.submit(add, 1)


# ------------------------------------------------------------------ as_completed and wait

def test_as_completed_yields_each_future_once(client):
    futures = [client.submit(nap, (i % 5) * 0.01, i) for i in range(40)]
    futures.append(client.submit(raise_value_error, 0))
    seen = list(concurrent.futures.as_completed(futures + futures[:10], timeout=WAIT))
    assert len(seen) == len(futures) and set(seen) == set(futures)  # duplicates once
    assert sorted(f.result() for f in seen if f.exception() is None) == list(range(40))
    # futures done before it was called are yielded too
    assert set(concurrent.futures.as_completed(futures, timeout=WAIT)) == set(futures)


def test_as_completed_timeout(client, gate):
    quick = [client.submit(add, i, 1) for i in range(5)]
    concurrent.futures.wait(quick, timeout=WAIT)
    slow = client.submit(held, gate.path, "slow")
    got = []
    with pytest.raises(concurrent.futures.TimeoutError):
        for future in concurrent.futures.as_completed(quick + [slow], timeout=0.5):
            got.append(future)
    assert set(got) == set(quick)  # those done were yielded before the timeout
    gate.open()
    assert list(concurrent.futures.as_completed([slow], timeout=WAIT)) == [slow]


def test_wait_all_completed(client):
    futures = [client.submit(nap, (i % 3) * 0.01, i) for i in range(30)]
    futures.append(client.submit(raise_value_error, 1))
    done, not_done = concurrent.futures.wait(futures, timeout=WAIT)
    assert done == set(futures) and not not_done
    done, not_done = concurrent.futures.wait(futures, timeout=WAIT,
                                             return_when=concurrent.futures.ALL_COMPLETED)
    assert done == set(futures) and not not_done


def test_wait_first_completed(client, gate):
    quick = client.submit(add, 1, 1)  # first: it does not queue behind the held ones
    slow = [client.submit(held, gate.path, i) for i in range(2)]
    done, not_done = concurrent.futures.wait([*slow, quick], timeout=WAIT,
                                             return_when=concurrent.futures.FIRST_COMPLETED)
    assert done == {quick} and not_done == set(slow)
    # with nothing done, it returns at its timeout
    done, not_done = concurrent.futures.wait(slow, timeout=0.2,
                                             return_when=concurrent.futures.FIRST_COMPLETED)
    assert not done and not_done == set(slow)
    gate.open()
    done, not_done = concurrent.futures.wait(slow, timeout=WAIT,
                                             return_when=concurrent.futures.FIRST_COMPLETED)
    assert done and done <= set(slow)


def test_wait_first_exception(client, gate):
    failing = client.submit(raise_value_error, 2)
    slow = [client.submit(held, gate.path, i) for i in range(2)]
    done, not_done = concurrent.futures.wait([*slow, failing], timeout=WAIT,
                                             return_when=concurrent.futures.FIRST_EXCEPTION)
    assert done == {failing} and not_done == set(slow)
    gate.open()
    # without an exception it waits for them all, as ALL_COMPLETED
    fine = [client.submit(nap, 0.01 * i, i) for i in range(5)]
    done, not_done = concurrent.futures.wait(fine + slow, timeout=WAIT,
                                             return_when=concurrent.futures.FIRST_EXCEPTION)
    assert done == set(fine + slow) and not not_done


def test_wait_timeout_returns_what_is_done(client, gate):
    quick = [client.submit(add, i, 1) for i in range(5)]
    concurrent.futures.wait(quick, timeout=WAIT)
    slow = client.submit(held, gate.path, "slow")
    done, not_done = concurrent.futures.wait(quick + [slow], timeout=0.3)
    assert done == set(quick) and not_done == {slow}
    gate.open()
    assert slow.result(WAIT) == "slow"


# ------------------------------------------------------------------ weak references

def test_a_future_supports_weak_references_and_is_freed_once_dropped(client, gate):
    future = client.submit(add, 1, 2)
    ref = weakref.ref(future)
    assert ref() is future
    assert future.result(WAIT) == 3
    del future
    gc.collect()
    assert ref() is None, "a completed future outlived its caller's reference"

    failed = client.submit(raise_value_error, 5)
    assert isinstance(failed.exception(WAIT), ValueError)
    ref = weakref.ref(failed)
    del failed
    gc.collect()
    assert ref() is None, "a failed future outlived its caller's reference"

    # dropped while it runs: freed once it completes
    pending = client.submit(held, gate.path, "dropped")
    ref = weakref.ref(pending)
    del pending
    gate.open()
    wait_for(lambda: gc.collect() is not None and ref() is None, timeout=WAIT,
             message="the dropped future freed after its task completed")


def test_a_result_is_freed_once_the_future_and_the_result_are_dropped(client):
    future = client.submit(make_blob, 9)
    blob = future.result(WAIT)
    assert blob.value == 9
    ref = weakref.ref(blob)
    del blob
    gc.collect()
    assert ref() is not None and future.result(0) is ref()  # the future keeps its result
    del future
    gc.collect()
    assert ref() is None, "a result outlived its future and its caller's reference"


# ------------------------------------------------------------------ cancel and callbacks

def test_a_queued_future_cancels(client, gate):
    running = occupy_every_slot(client, gate)
    queued = client.submit(make_blob, 1)
    called = []
    queued.add_done_callback(called.append)
    assert queued.cancel()
    assert queued.cancelled() and queued.done() and not queued.running()
    assert queued.cancel()  # cancelling again: still cancelled
    with pytest.raises(concurrent.futures.CancelledError):
        queued.result(0)
    with pytest.raises(concurrent.futures.CancelledError):
        queued.exception(0)
    done, not_done = concurrent.futures.wait([queued], timeout=WAIT)
    assert done == {queued}
    wait_for(lambda: called, timeout=WAIT, message="the done-callback of the cancelled future")
    gate.open()
    assert [f.result(WAIT) for f in running] == list(range(len(running)))
    assert client.submit(add, 2, 3).result(WAIT) == 5  # a round trip more
    assert called == [queued]  # once
    assert queued.cancelled()


def test_a_done_future_cannot_be_cancelled(client):
    finished = client.submit(add, 1, 1)
    assert finished.result(WAIT) == 2
    assert not finished.cancel()
    assert not finished.cancelled() and finished.done() and finished.result(0) == 2
    failed = client.submit(raise_value_error, 1)
    assert isinstance(failed.exception(WAIT), ValueError)
    assert not failed.cancel()
    assert not failed.cancelled() and isinstance(failed.exception(0), ValueError)


def test_a_done_callback_runs_once(client, gate):
    future = client.submit(held, gate.path, "cb", 7)
    early = []
    future.add_done_callback(early.append)
    assert early == []  # not before the task ends
    gate.open()
    assert future.result(WAIT) == 7
    wait_for(lambda: early, timeout=WAIT, message="the done-callback")
    # added after completion: called at once, in the calling thread
    late = []
    future.add_done_callback(lambda f: late.append((f, threading.current_thread())))
    assert late == [(future, threading.current_thread())]
    assert client.submit(add, 1, 1).result(WAIT) == 2  # a round trip more
    assert early == [future] and len(late) == 1


def test_a_failing_done_callback_does_not_stop_the_others(client):
    future = client.submit(nap, 0.05, "ok")
    calls = []

    def broken(f):
        calls.append("broken")
        raise RuntimeError("callback fails")

    future.add_done_callback(broken)
    future.add_done_callback(lambda f: calls.append("next"))
    assert future.result(WAIT) == "ok"
    wait_for(lambda: len(calls) == 2, timeout=WAIT, message="both done-callbacks")
    assert calls == ["broken", "next"]
    assert client.submit(add, 1, 1).result(WAIT) == 2  # the client goes on
