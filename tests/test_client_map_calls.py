"""How ``Client.map`` groups calls into tasks (``zsched/client/map_calls.py``), without a cluster."""
import itertools

import pytest

from zsched.client.map_calls import MAX_AUTO_CHUNK, auto_chunk_size, chunks, guided_sizes

pytestmark = pytest.mark.unit


def _calls(groups):
    """Each group's calls, as argument tuples, and the counts the groups state."""
    groups = list(groups)
    return [list(zip(*columns)) for columns, _ in groups], [calls for _, calls in groups]


@pytest.mark.parametrize("make", [range, lambda n: list(range(n)), lambda n: tuple(range(n)),
                                  lambda n: iter(range(n)),
                                  lambda n: (x for x in range(n))])
@pytest.mark.parametrize("n, size", [(0, 3), (1, 3), (10, 3), (12, 4), (5, 100)])
def test_chunks_make_the_same_calls_whatever_the_iterable(make, n, size):
    calls, counts = _calls(chunks([make(n)], size))
    assert sum(calls, []) == [(x,) for x in range(n)]
    assert counts == [len(c) for c in calls] and all(0 < c <= size for c in counts)


def test_a_range_is_chunked_into_ranges_and_a_list_into_slices():
    assert [columns for columns, _ in chunks([range(10)], 4)] == [
        (range(0, 4),), (range(4, 8),), (range(8, 10),)]
    assert [columns for columns, _ in chunks([list(range(5))], 2)] == [
        ([0, 1],), ([2, 3],), ([4],)]


def test_several_iterables_are_chunked_as_columns_to_the_shortest():
    calls, counts = _calls(chunks([range(5), "abcdefg"], 2))
    assert sum(calls, []) == list(zip(range(5), "abcdefg")) and counts == [2, 2, 1]


def test_automatic_chunks_aim_at_tasks_per_core_within_bounds():
    assert auto_chunk_size(10**5, 2) == 4096  # capped
    assert auto_chunk_size(1600, 2) == 100
    assert auto_chunk_size(10, 0) == 1


def planned_sizes(calls, cores):
    """The sizes ``guided_sizes`` plans for ``calls`` calls: those up to the last call."""
    sizes, done = [], 0
    for size in guided_sizes(calls, cores):
        if done >= calls:
            return sizes
        sizes.append(size)
        done += size


@pytest.mark.parametrize("calls", [16, 17, 100, 200, 1000, 20_000, 10**5, 10**6, 3 * 10**6])
@pytest.mark.parametrize("cores", [1, 2, 3, 8, 64])
def test_guided_sizes_sum_to_the_calls_and_shrink_to_a_floor(calls, cores):
    sizes = planned_sizes(calls, cores)
    largest = auto_chunk_size(calls, cores)
    floor = max(1, min(largest, calls // (64 * cores)))
    assert sum(sizes) == calls and sizes[0] == largest
    assert all(a >= b for a, b in zip(sizes, sizes[1:]))  # never grows
    assert all(size >= floor for size in sizes[:-1]) and sizes[-1] <= floor
    # at the end each task holds about the calls left / (2 x cores), until the floor
    left = calls
    for size in sizes:
        assert size == min(largest, max(floor, -(-left // (2 * cores))), left)
        left -= size


def test_guided_sizes_end_in_single_calls_for_a_small_map_and_cost_few_tasks():
    assert planned_sizes(200, 2) == [12] * 13 + [11, 9, 6, 5, 4, 3, 2, 1, 1, 1, 1]
    for calls, cores in [(10**5, 2), (10**6, 2), (10**6, 64), (5000, 8)]:
        fixed = -(-calls // auto_chunk_size(calls, cores))
        assert len(planned_sizes(calls, cores)) <= fixed + 8 * cores


def test_a_map_large_enough_keeps_every_task_at_the_cap():
    assert planned_sizes(2 * 64 * MAX_AUTO_CHUNK, 2) == [MAX_AUTO_CHUNK] * (2 * 64)


def test_guided_sizes_go_on_with_the_floor_after_the_calls():
    sizes = guided_sizes(1000, 2)
    planned = planned_sizes(1000, 2)
    assert list(itertools.islice(sizes, len(planned) + 3)) == planned + [7, 7, 7]


@pytest.mark.parametrize("make", [range, lambda n: list(range(n)), lambda n: iter(range(n))])
@pytest.mark.parametrize("n", [0, 1, 17, 200, 5000])
def test_chunks_of_guided_sizes_make_the_same_calls_in_order(make, n):
    calls, counts = _calls(chunks([make(n)], guided_sizes(n, 2)))
    assert sum(calls, []) == [(x,) for x in range(n)]
    assert counts == [len(c) for c in calls] == (planned_sizes(n, 2) if n else [])
    calls, counts = _calls(chunks([make(n), "ab" * n], guided_sizes(n, 3)))
    assert sum(calls, []) == list(zip(range(n), "ab" * n))


def test_chunks_of_sizes_read_past_a_short_length():
    class Short(list):  # says it is shorter than it is: every item still runs
        def __len__(self):
            return 3
    calls, _ = _calls(chunks([Short(range(10))], guided_sizes(3, 1)))
    assert sum(calls, []) == [(x,) for x in range(10)]
