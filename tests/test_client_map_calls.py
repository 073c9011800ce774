"""How ``Client.map`` groups calls into tasks (``zsched/client/map_calls.py``), without a cluster."""
import pytest

from zsched.client.map_calls import auto_chunk_size, chunks

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
