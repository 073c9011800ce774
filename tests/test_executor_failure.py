"""A task's exception too large for a message (``zsched.executor.failure``): cut to fit,
of its own type where that type can be rebuilt, it fails its own future at once; the
executor stays registered and goes on running tasks. Alone (unit) and on a real cluster
whose ``max_message_size`` is 1 MiB, over pipes and over sockets."""
import pickle

import pytest

import zsched
from zsched.errors import ExceptionTooLarge, RemoteTraceback, load_exception
from zsched.executor.failure import KEEP, cut_payload, failure_payload

pytestmark = pytest.mark.timeout(180)

LIMIT = 1 << 20
BIG = 3 << 20


class HeavyError(Exception):
    """An exception whose pickle is large because of an attribute."""

    def __init__(self, message, blob=b""):
        super().__init__(message)
        self.blob = blob


class StubbornError(Exception):
    """An exception that cannot be made from a message alone."""

    def __init__(self, code, blob):
        super().__init__(code, blob)
        self.code = code


def raise_value_error():
    raise ValueError("x" * BIG)


def raise_heavy():
    raise HeavyError("heavy load", blob=b"\0" * BIG)


def raise_stubborn():
    raise StubbornError(7, b"\0" * BIG)


def square(x):
    return x * x


def raised(function):
    try:
        function()
    except BaseException as exc:
        return exc


def assert_cut(exc, start, cls):
    assert type(exc) is cls, exc
    text = str(exc)
    assert text.startswith(start), text[:200]
    assert "[cut to fit a message: this exception and its traceback were " in text
    assert f"over max_message_size ({LIMIT} bytes)]" in text
    assert len(text) < 2 * KEEP


# ---------------------------------------------------------------- alone

@pytest.mark.unit
def test_an_exception_that_fits_travels_whole():
    exc = raised(lambda: square(None))
    payload = failure_payload(exc, LIMIT)
    loaded = load_exception(payload)
    assert type(loaded) is TypeError and "unsupported operand" in str(loaded)
    assert "cut to fit" not in str(loaded) and "in square" in loaded.__cause__.text


@pytest.mark.unit
def test_a_message_too_large_is_cut_to_fit_keeping_the_type_and_the_traceback_s_frames():
    payload = failure_payload(raised(raise_value_error), LIMIT)
    assert len(payload) <= LIMIT
    loaded = load_exception(payload)
    assert_cut(loaded, "x" * 1000, ValueError)
    assert f"... [{BIG - KEEP} more characters]" in str(loaded)
    trace = loaded.__cause__
    assert isinstance(trace, RemoteTraceback)
    assert "in raise_value_error" in trace.text and "ValueError: xxx" in trace.text
    assert len(trace.text) < 8 * KEEP


@pytest.mark.unit
def test_an_exception_large_by_an_attribute_is_rebuilt_without_it():
    payload = failure_payload(raised(raise_heavy), LIMIT)
    assert len(payload) <= LIMIT
    loaded = load_exception(payload)
    assert_cut(loaded, "heavy load\n", HeavyError)
    assert loaded.blob == b""


@pytest.mark.unit
def test_an_exception_that_cannot_be_rebuilt_becomes_a_zsched_error_naming_its_type():
    payload = failure_payload(raised(raise_stubborn), LIMIT)
    assert len(payload) <= LIMIT
    loaded = load_exception(payload)
    assert_cut(loaded, f"{__name__}.StubbornError: (7, b'", ExceptionTooLarge)
    assert loaded.type_name == f"{__name__}.StubbornError"


@pytest.mark.unit
def test_a_long_traceback_keeps_its_end_from_a_whole_line():
    exc = ValueError("short")
    text = "".join(f"  line {i}\n" for i in range(100_000)) + "ValueError: short\n"
    payload = cut_payload(exc, text, 10 << 20, LIMIT)
    loaded, trace = pickle.loads(payload)
    assert_cut(loaded, "short\n", ValueError)
    first, second = trace.split("\n")[:2]
    assert first.startswith("[the first ") and first.endswith(" characters of this traceback cut]")
    assert second.startswith("  line ") and trace.endswith("  line 99999\nValueError: short")


@pytest.mark.unit
@pytest.mark.parametrize("limit", [4096, 300, 1])
def test_a_small_limit_cuts_further_down_to_the_least_there_is_to_say(limit):
    payload = failure_payload(raised(raise_value_error), limit)
    loaded, _ = pickle.loads(payload)
    assert type(loaded) in (ValueError, ExceptionTooLarge)
    assert "cut to fit a message" in str(loaded)
    if limit >= 300:
        assert len(payload) <= limit


# ---------------------------------------------------------------- on a cluster

@pytest.fixture(scope="module", params=["pipe", "socket"])
def small_cluster(request):
    with zsched.LocalCluster(n_executors=2, cores_per_executor=1, max_message_size=LIMIT,
                             local_executor_link=request.param) as cluster:
        yield cluster


@pytest.fixture
def client(small_cluster):
    client = small_cluster.client()
    yield client
    client.shutdown(cancel_futures=True)


def executors(client):
    return sorted((e["id"], e["pid"]) for e in client.status()["executors"])


@pytest.mark.parametrize("function, start, cls", [
    (raise_value_error, "x" * 1000, ValueError),
    (raise_heavy, "heavy load\n", HeavyError),
    (raise_stubborn, f"{__name__}.StubbornError: (7, b'", ExceptionTooLarge),
])
def test_a_task_raising_an_exception_too_large_fails_with_it_cut_and_its_executor_stays(
        client, function, start, cls):
    before = executors(client)
    assert len(before) == 2
    future = client.submit(function)
    with pytest.raises(cls) as info:
        future.result(timeout=60)
    assert_cut(info.value, start, cls)
    assert list(client.map(square, range(20))) == [x * x for x in range(20)]
    assert executors(client) == before
    status = client.status()
    assert status["losses"] == [] and status["counters"]["executors_lost"] == 0
