"""A map's automatic chunks (``zsched/client/map_tasks.py``), which shrink as the map nears
its end: results and exceptions in call order, with retries, against a real local cluster."""
import os

import pytest

from test_client_map_calls import planned_sizes


def square(x):
    return x * x


def add(a, b):
    return a + b


def fails_at(bad, x):
    if x == bad:
        raise ValueError(f"no {x}")
    return x


def fails_first_time(folder, x):
    marker = os.path.join(folder, f"ran-{x}")
    if x % 50 == 49 and not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError(f"call {x}: first run")
    return x


def _submitted(client):
    return client.status()["tasks"]["submitted"]


def _cores(client):
    return sum(e["cores"] for e in client.status()["executors"])


@pytest.mark.parametrize("n", [16, 17, 200, 1001, 20_000])
def test_a_map_without_chunksize_runs_its_planned_tasks_in_call_order(client, n):
    before = _submitted(client)
    assert list(client.map(square, range(n))) == [x * x for x in range(n)]
    assert _submitted(client) - before == len(planned_sizes(n, _cores(client)))
    as_list = [-x for x in range(n)]
    assert list(client.map(square, as_list)) == [x * x for x in range(n)]
    assert list(client.map(square, (x for x in range(n)))) == [x * x for x in range(n)]
    # several iterables, to the shortest
    assert list(client.map(add, range(n), range(n + 5))) == [2 * x for x in range(n)]
    assert list(client.map(add, iter(range(n + 3)), tuple(range(n)))) == [2 * x for x in range(n)]


def test_a_given_chunksize_is_kept_for_every_task(client):
    before = _submitted(client)
    assert list(client.map(square, range(200), chunksize=7)) == [x * x for x in range(200)]
    assert _submitted(client) - before == -(-200 // 7)


@pytest.mark.parametrize("bad", [0, 11, 150, 196, 199])
def test_a_calls_exception_is_raised_at_its_place_in_any_chunk(client, bad):
    # 200 calls on 2 cores: tasks of 12 calls first, of one call at the end
    got = []
    with pytest.raises(ValueError, match=f"^no {bad}$"):
        for value in client.map(fails_at, [bad] * 200, range(200)):
            got.append(value)
    assert got == list(range(bad))


def test_chunks_with_retries_run_again_whole_and_keep_the_order(client, tmp_path):
    before = client.status()["tasks"]["retried"]
    folder = [str(tmp_path)] * 200
    assert list(client.options(retries=1).map(fails_first_time, folder, range(200))) == \
        list(range(200))
    assert client.status()["tasks"]["retried"] - before == 4  # calls 49, 99, 149 and 199
    with pytest.raises(RuntimeError, match="call 249: first run"):
        list(client.map(fails_first_time, folder, range(200, 400)))
