"""The compiled fast path and its pure-Python reference make the same decisions."""
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zsched import _fastpath, _fastpath_py, fastpath

IMPLEMENTATIONS = [_fastpath_py, _fastpath]


def test_both_export_the_same_names():
    for name in fastpath.NAMES:
        assert hasattr(_fastpath, name) and hasattr(_fastpath_py, name)


def test_compiled_is_used_unless_asked_otherwise():
    import os
    if os.environ.get("ZSCHED_PUREPYTHON", "") not in ("", "0"):
        assert fastpath.SlotTable is _fastpath_py.SlotTable
        assert "reference" in fastpath.IMPLEMENTATION
    else:
        assert fastpath.SlotTable is _fastpath.SlotTable
        assert "compiled" in fastpath.IMPLEMENTATION


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_offers_spread_round_robin(impl):
    table = impl.SlotTable()
    a, b, c = table.add(1, 2), table.add(1, 2), table.add(1, 1)
    assert table.offer(3) == [(a, 1), (b, 1), (c, 1)]
    assert table.offer(10) == [(a, 1), (b, 1)]
    assert table.offer(1) == []
    table.release(b, 2)
    assert table.free(b) == 2
    assert table.offer(5) == [(b, 2)]
    assert table.total_free() == 0


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_idle_cores_are_offered_before_queue_room(impl):
    table = impl.SlotTable()
    busy, idle = table.add(1, 3), table.add(1, 3)
    assert table.offer(1) == [(busy, 1)]          # a long task starts on "busy"
    assert table.offer(1) == [(idle, 1)]          # the next goes to the idle core, not behind it
    assert table.offer(4) == [(busy, 2), (idle, 2)]
    table.release(idle, 3)
    assert table.offer(1) == [(idle, 1)]
    two = table.add(2, 4)
    assert table.offer(3) == [(two, 2), (idle, 1)]  # idle cores first, then window room


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_resize_grows_at_once_and_shrinks_as_tasks_end(impl):
    table = impl.SlotTable()
    a = table.add(1, 2)
    assert table.offer(10) == [(a, 2)]
    table.resize(a, 5)
    assert table.offer(10) == [(a, 3)]
    table.resize(a, 2)            # 5 tasks hold slots: 3 too many
    assert table.free(a) == -3 and table.offer(10) == []
    table.release(a, 4)
    assert table.free(a) == 1 and table.offer(10) == [(a, 1)]
    table.resize(a, 0)            # closed: offered nothing, whatever it holds
    table.release(a, 2)
    assert table.free(a) == 0 and table.offer(10) == []
    table.resize(a, 1)
    assert table.offer(10) == [(a, 1)]
    with pytest.raises(ValueError):
        table.resize(a, -1)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_errors(impl):
    table = impl.SlotTable()
    with pytest.raises(ValueError):
        table.add(1, 0)
    with pytest.raises(ValueError):
        table.add(0, 1)
    index = table.add(1, 1)
    with pytest.raises(ValueError):
        table.release(index, 1)  # it holds no task
    table.remove(index)
    with pytest.raises(KeyError):
        table.release(index, 1)
    with pytest.raises(KeyError):
        table.free(12345)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_removed_executor_gets_no_offers_and_index_is_reused(impl):
    table = impl.SlotTable()
    a, b = table.add(1, 1), table.add(1, 1)
    table.remove(a)
    assert table.offer(5) == [(b, 1)]
    c = table.add(1, 3)
    assert c == a
    assert table.offer(5) == [(c, 3)]


def _run(impl, ops):
    """Apply ``ops`` to a fresh table; the list of every observable outcome."""
    table = impl.SlotTable()
    live = {}  # index -> slots in use
    out = []
    for op, value in ops:
        try:
            if op == "add":
                index = table.add(1 + value % 3, value)
                live[index] = 0
                out.append(("add", index))
            elif op == "remove" and live:
                index = sorted(live)[value % len(live)]
                table.remove(index)
                del live[index]
                out.append(("remove", index))
            elif op == "release" and live:
                index = sorted(live)[value % len(live)]
                n = min(live[index], 1 + value % 3)
                table.release(index, n)
                live[index] -= n
                out.append(("release", index, n))
            elif op == "resize" and live:
                index = sorted(live)[value % len(live)]
                table.resize(index, value % 7)
                out.append(("resize", index, table.free(index), table.total(index)))
            elif op == "offer":
                result = table.offer(value)
                for index, count in result:
                    live[index] += count
                out.append(("offer", result))
        except (KeyError, ValueError) as exc:
            out.append(("error", type(exc).__name__))
    out.append(("free", table.total_free()))
    return out


OPS = st.lists(st.tuples(st.sampled_from(["add", "remove", "release", "resize", "offer"]),
                         st.integers(min_value=0, max_value=40)), max_size=200)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_compiled_agrees_with_reference(ops):
    ops = [(op, max(1, v) if op == "add" else v) for op, v in ops]
    assert _run(_fastpath, ops) == _run(_fastpath_py, ops)


def test_agreement_at_scale():
    rng = random.Random(3)
    ops = [("add", rng.randint(1, 16)) for _ in range(3000)]
    for _ in range(20000):
        ops.append((rng.choice(["offer", "release", "release", "remove", "add", "resize"]),
                    rng.randint(1, 64)))
    assert _run(_fastpath, ops) == _run(_fastpath_py, ops)
