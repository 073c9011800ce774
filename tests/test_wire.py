"""The wire's compiled frame readers and writers and their pure-Python twin read and
write the same frames."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zsched import _wire, _wire_py, fastpath, wire
from zsched import protocol as p

pytestmark = pytest.mark.unit

IMPLEMENTATIONS = [_wire_py, _wire]
RESULTS_HEADER = p.frame_header(p.TaskResults)
LAUNCH_HEADER = p.frame_header(p.LaunchTasks)


def test_both_export_the_same_names():
    for name in wire.__all__:
        assert hasattr(_wire, name) and hasattr(_wire_py, name)


def test_compiled_is_used_unless_asked_otherwise():
    if fastpath.COMPILED:
        assert wire.ResultRows is _wire.ResultRows and "compiled" in fastpath.IMPLEMENTATION
    else:
        assert wire.ResultRows is _wire_py.ResultRows and "reference" in fastpath.IMPLEMENTATION


def _updates(impl, rows):
    """``rows`` as ``impl`` reads StatusUpdates rows: from a frame."""
    return impl.read_status_updates(p.encode(p.StatusUpdates(1, 0.0, rows)), 2)[2]


class IntSubclass(int):
    pass


ITEMS = st.one_of(st.integers(min_value=-2**70, max_value=2**70), st.booleans(), st.none(),
                  st.binary(max_size=3), st.text(max_size=2), st.floats(allow_nan=False),
                  st.builds(bytearray, st.binary(max_size=2)), st.builds(IntSubclass, st.integers()))
ROW = st.one_of(st.lists(ITEMS, max_size=5), st.tuples(ITEMS, ITEMS, ITEMS), ITEMS)
ROW_TYPES = st.lists(st.sampled_from([int, bytes, str, float]), min_size=1, max_size=4).map(tuple)


@st.composite
def rows_and_types(draw):
    """Rows that mostly have the types, with a fault here and there."""
    types = draw(ROW_TYPES)
    samples = {int: st.integers(min_value=-2**64, max_value=2**64), bytes: st.binary(max_size=3),
               str: st.text(max_size=2), float: st.floats(allow_nan=False)}
    good = st.tuples(*(samples[t] for t in types)).map(list)
    rows = draw(st.lists(st.one_of(good, good, good, ROW), max_size=6))
    return draw(st.one_of(st.just(rows), ITEMS, st.just(tuple(rows)))), types


@settings(max_examples=500, deadline=None)
@given(rows_and_types())
def test_row_checks_agree(case):
    value, types = case
    assert _wire.rows_have_types(value, types) == _wire_py.rows_have_types(value, types)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_row_checks(impl):
    types = (int, int, int, bytes)
    check = impl.rows_have_types
    assert check([], types)
    assert check([[1, 2, 3, b"x"]], types)
    assert check([[1, 2, 3, b"x"]] * 1000, types)
    assert check([[2**80, -1, 0, b""], [1, 2, 3, b"x"]], types)
    for bad in ([[1, 2, 3]], [[1, 2, 3, b"x", 5]], [[1, 2, 3, "x"]], [[True, 2, 3, b"x"]],
                [[1, 2, 3, bytearray(b"x")]], [[IntSubclass(1), 2, 3, b"x"]], [(1, 2, 3, b"x")],
                ([1, 2, 3, b"x"],), [[1, 2, 3, b"x"], [1, 2, 3, None]], [[1, 2, 3, b"x"], 7],
                None, 5, b"rows", {}):
        assert not check(bad, types), bad


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_results_go_out_in_frames_cut_at_the_size_limit_and_the_row_count(impl):
    results = impl.ResultRows()
    assert not results and results.take_frames(RESULTS_HEADER, 10, 2) == [] and results.take_rows() == []
    rows = [[1, 1, b"aaaa"], [-1, 3, b""], [2 ** 63, 4, b"b" * 20], [-2 ** 63, 1, b"cc"],
            [2 ** 64 - 1, 1, b"dd"], [300, 2, b"e" * 70_000], [7, 1, b"f"]]
    for row in rows:
        results.add(*row)
    assert len(results) == 7
    assert results.payload_size() == 4 + 20 + 2 + 2 + 70_000 + 1
    frames = results.take_frames(RESULTS_HEADER, 10, 2)
    assert not results and results.payload_size() == 0
    batches = [p.decode(frame).results for frame in frames]
    # 4 + 0; 20 alone (over the limit); 2 + 2 (the row count); 70,000 alone; 1
    assert batches == [rows[0:2], rows[2:3], rows[3:5], rows[5:6], rows[6:7]]
    assert all(p.encode(p.TaskResults(batch)) == frame for batch, frame in zip(batches, frames))
    results.add(9, 1, b"again")
    assert results.take_rows() == [[9, 1, b"again"]] and not results
    with pytest.raises(ValueError):
        results.take_frames(RESULTS_HEADER, 10, 0)


def test_a_result_that_cannot_be_packed_leaves_the_rows_before_it_whole():
    results = _wire.ResultRows()
    results.add(1, 1, b"x")
    with pytest.raises(OverflowError):
        results.add(2 ** 64, 1, b"y")
    with pytest.raises(TypeError):
        results.add("id", 1, b"y")
    with pytest.raises(TypeError):
        results.add(2, 1, "not bytes")
    results.add(3, 1, b"z")
    assert results.take_rows() == [[1, 1, b"x"], [3, 1, b"z"]]


@given(st.lists(st.tuples(st.integers(-2 ** 63, 2 ** 64 - 1), st.integers(0, 200), st.binary(max_size=40)),
                max_size=60),
       st.integers(0, 100), st.integers(1, 9))
@settings(max_examples=200, deadline=None)
def test_result_frames_agree_byte_for_byte(rows, limit, max_rows):
    frames = []
    for impl in IMPLEMENTATIONS:
        results = impl.ResultRows()
        for row in rows:
            results.add(*row)
        frames.append(results.take_frames(RESULTS_HEADER, limit, max_rows))
    assert frames[0] == frames[1]
    assert [row for frame in frames[0] for row in p.decode(frame).results] == [list(row) for row in rows]


STATUS_ROWS = st.lists(st.tuples(st.integers(-2 ** 63, 2 ** 64 - 1), st.integers(-2 ** 63, 2 ** 64 - 1),
                                 st.integers(-2 ** 63, 2 ** 64 - 1), st.binary(max_size=300)).map(list),
                       max_size=20)


def _read_alike(frame):
    """Both implementations' ``read_status_updates`` of ``frame``: the same fields, or both
    a ValueError."""
    read = []
    for impl in IMPLEMENTATIONS:
        try:
            incarnation, busy, rows = impl.read_status_updates(frame, 2)
        except ValueError:
            read.append("refused")
        else:
            assert len(rows) == len(list(rows))
            # a changed byte can make busy a NaN, which equals nothing
            read.append((incarnation, busy if busy == busy else "nan", list(rows)))
    assert read[0] == read[1]
    return read[0]


@given(st.integers(-2 ** 63, 2 ** 64 - 1), st.one_of(st.floats(allow_nan=False), st.integers(0, 10)),
       STATUS_ROWS, st.integers(0, 10 ** 6), st.integers(0, 255))
@settings(max_examples=300, deadline=None)
def test_status_updates_are_read_alike_whole_cut_or_with_a_byte_changed(incarnation, busy, rows, at, byte):
    frame = p.encode(p.StatusUpdates(incarnation, busy, rows))
    assert _read_alike(frame) == (incarnation, busy, rows)
    _read_alike(frame[:2 + at % (len(frame) - 1)])  # cut short
    changed = bytearray(frame)
    changed[2 + at % (len(frame) - 2)] = byte
    _read_alike(bytes(changed))
    _read_alike(frame + bytes([byte]))  # a byte after the body


@pytest.mark.parametrize("body", [
    [1, 0.0, [[1, 1, 1]]], [1, 0.0, [[1, 1, 1, "text"]]], [1, "0", []], [1, True, []],
    [True, 0.0, []], [1, 0.0, [[True, 1, 1, b"x"]]], [1, 0.0, [[1, 1, 1, b"x"], "row"]],
    [1, 0.0, [[1, 1.5, 1, b"x"]]], [1, 0.0, {}], [1, 0.0], [1, 0.0, [], None], {"a": 1}, None,
])
def test_status_updates_of_the_wrong_shape_are_refused_alike(body):
    import msgpack
    assert _read_alike(b"\x01\x02" + msgpack.packb(body)) == "refused"


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_status_rows_read_as_a_list_of_rows(impl):
    rows = [[1, 2, 3, b"x"], [2 ** 64 - 1, -1, 0, b""]]
    updates = _updates(impl, rows)
    assert len(updates) == 2 and list(updates) == rows and updates == rows
    assert updates[1] == rows[1]
    if impl.StatusRows is wire.StatusRows:  # the one protocol packs as rows
        assert p.encode(p.StatusUpdates(1, 0.0, updates)) == p.encode(p.StatusUpdates(1, 0.0, rows))


SUBMIT_ROWS = st.lists(st.tuples(st.integers(-2 ** 63, 2 ** 64 - 1), st.binary(max_size=20),
                                 st.binary(max_size=300), st.integers(-2 ** 63, 2 ** 64 - 1)).map(list),
                       max_size=20)


def _read_submit_alike(frame):
    """Both implementations' ``read_submit_tasks`` of ``frame``: the same fields, or both a
    ValueError."""
    read = []
    for impl in IMPLEMENTATIONS:
        try:
            functions, rows = impl.read_submit_tasks(frame, 2)
        except ValueError:
            read.append("refused")
        else:
            assert len(rows) == len(list(rows))
            read.append((functions, list(rows)))
    assert read[0] == read[1]
    return read[0]


@given(st.dictionaries(st.binary(max_size=20), st.binary(max_size=40), max_size=3), SUBMIT_ROWS,
       st.integers(0, 10 ** 6), st.integers(0, 255))
@settings(max_examples=300, deadline=None)
def test_submit_tasks_are_read_alike_whole_cut_or_with_a_byte_changed(functions, rows, at, byte):
    frame = p.encode(p.SubmitTasks(functions, rows))
    assert _read_submit_alike(frame) == (functions, rows)
    _read_submit_alike(frame[:2 + at % (len(frame) - 1)])  # cut short
    changed = bytearray(frame)
    changed[2 + at % (len(frame) - 2)] = byte
    _read_submit_alike(bytes(changed))
    _read_submit_alike(frame + bytes([byte]))  # a byte after the body


@pytest.mark.parametrize("body", [
    [{}, [[1, b"d", b"a"]]], [{}, [[1, b"d", "text", 0]]], [{}, [[1, b"d", b"a", True]]],
    [{"str": b"x"}, []], [{b"k": "str"}, []], [[], []], [{}, "nope"], [{}, [[1, b"d", b"a", 0], "row"]],
    [{}, [[1.5, b"d", b"a", 0]]], [{}], [{}, [], None], None,
])
def test_submit_tasks_of_the_wrong_shape_are_refused_alike(body):
    import msgpack
    assert _read_submit_alike(b"\x01\x15" + msgpack.packb(body, use_bin_type=True)) == "refused"


# a digest is mostly one object for a run of rows of one function, but equal ones may be others
DIGESTS = st.sampled_from([b"f", b"g", b"h"]) | st.sampled_from([b"f", b"g", b"h"]).map(bytearray).map(bytes)


@given(st.lists(st.tuples(st.integers(0, 2 ** 64 - 1), st.integers(0, 2 ** 32), DIGESTS,
                          st.binary(max_size=40)).map(list), max_size=60),
       st.integers(0, 120))
@settings(max_examples=200, deadline=None)
def test_launch_frames_are_what_encode_makes(rows, limit):
    """The LaunchTasks writers: the compiled one (which the scheduling core's fused launch
    feeds too) writes the twin's frames byte for byte."""
    functions = {b"f": b"F" * 30, b"g": p.FunctionBlob(b"G" * 5), b"h": b"H"}
    known = {b"h"}
    compiled_known = {b"h"}
    frames = _wire_py.launch_frames(LAUNCH_HEADER, rows, functions, known, limit)
    assert _wire.launch_frames(LAUNCH_HEADER, rows, functions, compiled_known, limit) == frames
    assert compiled_known == known
    decoded = [p.decode(frame) for frame in frames]
    assert all(p.encode(msg) == frame for msg, frame in zip(decoded, frames))
    assert [row for msg in decoded for row in msg.tasks] == rows
    shipped = [digest for msg in decoded for digest in msg.functions]
    assert len(shipped) == len(set(shipped)) and b"h" not in shipped  # each function once, none held
    assert known == {b"h"} | set(shipped)
    for msg in decoded[:-1]:  # a frame is cut only where the next row would pass the limit
        size = sum(len(row[3]) for row in msg.tasks) + sum(len(f) for f in msg.functions.values())
        assert size <= limit or len(msg.tasks) == 1


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_launch_frames_look_up_only_the_functions_that_travel(impl):
    rows = [[1, 1, b"held", b"x"], [2, 1, b"new", b"y"]]
    frames = impl.launch_frames(LAUNCH_HEADER, rows, {b"new": b"N"}, {b"held"}, 100)
    assert frames == [p.encode(p.LaunchTasks({b"new": b"N"}, rows))]
    with pytest.raises(KeyError):
        impl.launch_frames(LAUNCH_HEADER, rows, {b"held": b"H"}, set(), 100)
    assert impl.launch_frames(LAUNCH_HEADER, [], {}, set(), 100) == []
