"""Large arguments and results (their buffers apart, as frames of their own) and broadcast
values, through real clusters: over pipes, with the driver in this process, and over TCP
with CURVE."""
import os
import signal
import zlib

import numpy
import pytest

import zsched
from zsched import Broadcast, DataRefused, MessageTooLarge
from zsched.errors import TaskFailed

from conftest import wait_for

KIB, MIB = 1 << 10, 1 << 20


@pytest.fixture(scope="module", params=["pipes", "driver thread", "tcp"])
def cluster(request):
    """Two one-core executors; the client over pipes, in the driver's process, or over
    TCP with CURVE (executors too)."""
    settings = ({"local_executor_link": "socket"} if request.param == "tcp"
                else {"in_process": request.param == "driver thread"})
    with zsched.LocalCluster(2, 1, wait=True, **settings) as cluster:
        cluster.over_tcp = request.param == "tcp"
        yield cluster


@pytest.fixture
def client(cluster):
    if cluster.over_tcp:
        client = zsched.Client(cluster.address, secret_file=cluster.secret_file)
    else:
        client = cluster.client()
    yield client
    client.shutdown(cancel_futures=True)


def same(value):
    return value


def describe(value):
    """What a task saw: its argument's type, size and content, and whether it may write."""
    if isinstance(value, numpy.ndarray):
        return "ndarray", value.nbytes, float(value.sum()), value.flags.writeable
    view = memoryview(value)
    return type(value).__name__, view.nbytes, zlib.crc32(view), not view.readonly


def make(kind, size):
    if kind == "ndarray":
        return numpy.arange(size // 8, dtype=numpy.float64)
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    return {"bytes": data, "bytearray": bytearray(data), "memoryview": memoryview(data)}[kind]


def equal(a, b):
    if isinstance(a, numpy.ndarray):
        return isinstance(b, numpy.ndarray) and a.dtype == b.dtype and numpy.array_equal(a, b)
    return type(a) is type(b) and bytes(a) == bytes(b)


KINDS = ["ndarray", "bytes", "bytearray", "memoryview"]


@pytest.mark.parametrize("kind", KINDS)
def test_arguments_and_results_of_every_size_come_back_right_and_in_order(cluster, client, kind):
    # 64 MiB over pipes and in the driver's process; over TCP CURVE takes seconds for it
    sizes = (0, KIB, MIB, MIB + 3) if cluster.over_tcp else (0, KIB, MIB, 64 * MIB, MIB + 3)
    values = [make(kind, size) for size in sizes]
    futures = [client.submit(same, value) for value in values]
    results = [future.result(120) for future in futures]
    assert all(equal(a, b) for a, b in zip(values, results))
    seen = list(client.map(describe, values, timeout=120))
    # as writable as they were: a view of bytes is not
    assert seen == [describe(value)[:3] + (kind in ("ndarray", "bytearray"),) for value in values]


def test_many_large_arguments_in_a_map_and_a_flood(client):
    arrays = [numpy.full(MIB // 8, i, dtype=numpy.float64) for i in range(40)]
    assert list(client.map(numpy.sum, arrays, timeout=120)) == [i * MIB // 8 for i in range(40)]
    futures = [client.submit(numpy.sum, array) for array in arrays]
    assert [f.result(120) for f in futures] == [i * MIB // 8 for i in range(40)]
    # the driver forgets each task's data once its task ended
    wait_for(lambda: client.status()["data"]["entries"] == 0, message="the data forgotten")


def test_the_driver_holds_data_for_tasks_and_counts_it(client):
    status = client.status()["data"]
    assert status["limit"] == 4 << 30 and status["bytes"] == 0


def broadcast_size(handle):
    return len(handle.value)


def test_a_broadcast_is_sent_to_each_executor_once(client):
    value = numpy.arange(2 * MIB // 8, dtype=numpy.float64)
    before = client.status()["data"]["bytes_sent"]
    handle = client.broadcast(value)
    assert isinstance(handle, Broadcast) and handle.value is value
    futures = [client.submit(broadcast_size, handle) for _ in range(200)]
    assert [f.result(60) for f in futures] == [len(value)] * 200
    closure = lambda i: float(handle.value[i])  # noqa: E731 (a broadcast in a closure)
    assert list(client.map(closure, range(100), timeout=60)) == [float(i) for i in range(100)]
    sent = client.status()["data"]["bytes_sent"] - before
    assert value.nbytes <= sent <= 2 * (value.nbytes + 1024)  # two executors, once each
    handle.destroy()


def test_a_destroyed_broadcast_is_a_clear_error(client):
    handle = client.broadcast(b"v" * (100 * KIB))
    assert client.submit(broadcast_size, handle).result(30) == 100 * KIB
    handle.destroy()
    with pytest.raises(ValueError, match="destroyed"):
        _ = handle.value
    with pytest.raises(ValueError, match="destroyed"):
        client.submit(broadcast_size, handle)
    wait_for(lambda: client.status()["data"]["broadcasts"] == 0, message="the broadcast dropped")
    key = handle.key

    def use_by_key():
        return len(Broadcast(key).value)

    # executors dropped it too: a task that still names it fails, saying why
    with pytest.raises(TaskFailed, match="no such data"):
        wait_for(lambda: client.submit(use_by_key).result(30) is None, timeout=10)


@pytest.mark.parametrize("link", ["pipes", "driver thread", "tcp"])
def test_large_arguments_and_broadcasts_survive_the_loss_of_an_executor(link):
    settings = ({"local_executor_link": "socket"} if link == "tcp"
                else {"in_process": link == "driver thread"})
    with zsched.LocalCluster(2, 1, wait=True, **settings) as cluster:
        client = (zsched.Client(cluster.address, secret_file=cluster.secret_file)
                  if link == "tcp" else cluster.client())
        handle = client.broadcast(numpy.ones(MIB // 8))
        assert list(client.map(broadcast_size, [handle] * 10, timeout=60)) == [MIB // 8] * 10
        arrays = [numpy.full(MIB // 8, i, dtype=numpy.float64) for i in range(30)]

        def slow_sum(array, handle):
            import time
            time.sleep(0.02)
            return float(array.sum()) + len(handle.value)

        futures = [client.submit(slow_sum, array, handle) for array in arrays]
        victim = client.status()["executors"][0]
        os.kill(victim["pid"], signal.SIGKILL)
        # the tasks it held run elsewhere; the data stayed with the driver
        expected = [float(i * MIB // 8) + MIB // 8 for i in range(30)]
        assert [f.result(120) for f in futures] == expected
        # its replacement fetches the broadcast value itself
        wait_for(lambda: victim["id"] not in client.executor_ids()
                 and len(client.executor_ids()) == 2, timeout=60, message="the replacement")
        assert list(client.map(broadcast_size, [handle] * 20, timeout=60)) == [MIB // 8] * 20
        handle.destroy()
        client.close()


def test_limits_are_clear_errors():
    with zsched.LocalCluster(1, 1, max_message_size=MIB, driver_data_limit=11 * MIB // 4,
                             wait=True) as cluster, cluster.client() as client:
        with pytest.raises(MessageTooLarge):
            client.submit(same, numpy.ones(MIB // 4)).result(30)
        error = client.submit(numpy.ones, MIB // 4).exception(30)
        assert isinstance(error, TaskFailed) and "max_message_size" in str(error)
        # a broadcast larger than a message travels in chunks
        value = numpy.arange(2 * MIB // 8 + 1000, dtype=numpy.float64)
        handle = client.broadcast(value)
        assert client.submit(lambda h: float(h.value.sum()), handle).result(30) == float(value.sum())
        with pytest.raises(DataRefused, match="driver_data_limit"):
            client.broadcast(bytes(MIB))
        with pytest.raises(DataRefused, match="driver_data_limit"):
            client.submit(same, bytes(MIB - 4096)).result(30)
        handle.destroy()
        wait_for(lambda: client.status()["data"]["bytes"] == 0, message="the data dropped")
        assert len(client.submit(same, bytes(MIB - 4096)).result(30)) == MIB - 4096
