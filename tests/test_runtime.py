"""The compiled runtime helpers and their pure-Python twin behave alike."""
import pytest

from zsched import _runtime, _runtime_py, runtime

pytestmark = pytest.mark.unit

IMPLEMENTATIONS = [_runtime_py, _runtime]


def test_both_export_the_same_names():
    for name in runtime.__all__:
        assert hasattr(_runtime, name) and hasattr(_runtime_py, name)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_objects_leave_the_cyclic_gc_and_come_back(impl):
    import gc
    row = [1, b"digest", b"args", 0]
    impl.gc_untrack(row)
    impl.gc_untrack(row)  # once out, out
    assert not gc.is_tracked(row)
    impl.gc_track(row)
    impl.gc_track(row)  # once in, in: not linked twice
    assert gc.is_tracked(row)
    impl.gc_track(1)  # not a container: nothing to do
    impl.gc_track(int)
    impl.gc_untrack("text")
    assert not gc.is_tracked(1) and not gc.is_tracked(int)
    cycle = [row]
    row.append(cycle)
    impl.gc_untrack(cycle)
    impl.gc_track(cycle)
    del cycle, row
    gc.collect()  # the lists' links are whole: a collection walks them
