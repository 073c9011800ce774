"""The compiled scheduling core and its pure-Python twin make the same decisions."""
import random
import types
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zsched import (
    _fastpath,
    _fastpath_py,
    _slot_table,
    _wire,
    _wire_py,
    fastpath,
    scheduling,
    wire,
)
from zsched import protocol as p
from zsched._fastpath_py import NO_TASK_STATE
from zsched.driver.records import ClientData, ExecutorData
from zsched.task_state import TaskState

pytestmark = pytest.mark.unit


def _implementation(*modules):
    """The public names of ``modules`` (the scheduling core's and the wire's), each from the
    first that has it."""
    names = {}
    for module in reversed(modules):
        names.update((name, value) for name, value in vars(module).items() if not name.startswith("_"))
    assert set(scheduling.__all__ + wire.__all__) <= set(names)
    return types.SimpleNamespace(**names)


REFERENCE = _implementation(_fastpath_py, _wire_py)
COMPILED = _implementation(_fastpath, _slot_table, _wire)
IMPLEMENTATIONS = [REFERENCE, COMPILED]


def test_both_export_the_same_names():
    for name in scheduling.__all__:
        assert (hasattr(_fastpath, name) or hasattr(_slot_table, name)) and hasattr(_fastpath_py, name)


def test_compiled_is_used_unless_asked_otherwise():
    import os
    if os.environ.get("ZSCHED_PUREPYTHON", "") not in ("", "0"):
        assert scheduling.SlotTable is _fastpath_py.SlotTable
        assert "reference" in fastpath.IMPLEMENTATION
    else:
        assert scheduling.SlotTable is _slot_table.SlotTable
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
def test_a_few_tasks_are_shared_out_not_hoarded(impl):
    # deep windows, as after very short tasks: the next tasks may be long, so while fewer
    # wait than a batch, no executor takes more than an equal share, in one turn
    assert _fastpath_py.BATCH_FRACTION == 2  # the compiled module's too
    table = impl.SlotTable()
    a, b, c = table.add(1, 64), table.add(1, 64), table.add(2, 128)  # batches of 32, 32, 64
    assert table.offer(13) == [(a, 4), (b, 4), (c, 5)]  # idle cores 1+1+2, then 3 each
    assert table.offer(7) == [(a, 3), (b, 3), (c, 1)]
    assert table.offer(1000) == [(a, 57), (b, 57), (c, 122)]  # a long queue fills them


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_a_flood_goes_out_in_batches_to_deep_windows(impl):
    # offered at least a batch (half its window), an executor with a deep window takes an
    # equal share among as few executors as the offer fills with batches, idle or not
    table = impl.SlotTable()
    a, b, c = table.add(1, 64), table.add(1, 64), table.add(2, 128)  # batches of 32, 32, 64
    assert table.offer(40) == [(a, 20), (b, 20)]        # two batches' worth: not one per core
    assert table.offer(100) == [(c, 64), (a, 18), (b, 18)]  # the idle one first, then room
    assert table.offer(1000) == [(c, 64), (a, 26), (b, 26)]
    many = impl.SlotTable()
    for _ in range(1000):
        many.add(1, 256)
    launches = many.offer(10_000)  # 79 launches of about a batch, not 1,000 of 10
    assert len(launches) == 79 and {count for _, count in launches} == {127, 94}
    assert sum(count for _, count in launches) == 10_000
    two = impl.SlotTable()  # two deep windows offered less than two batches: halves, as ever
    d, e = two.add(1, 256), two.add(1, 256)
    assert two.offer(200) == [(d, 100), (e, 100)]
    shallow = impl.SlotTable()  # windows of long tasks: one per idle core first, as ever
    d, e = shallow.add(1, 2), shallow.add(2, 4)
    assert shallow.offer(100) == [(d, 2), (e, 4)]
    shallow.release(d, 2)
    shallow.release(e, 3)
    assert shallow.offer(2) == [(d, 1), (e, 1)]


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
    assert _run(COMPILED, ops) == _run(REFERENCE, ops)


def test_agreement_at_scale():
    rng = random.Random(3)
    ops = [("add", rng.randint(1, 16)) for _ in range(3000)]
    for _ in range(20000):
        ops.append((rng.choice(["offer", "release", "release", "remove", "add", "resize"]),
                    rng.randint(1, 64)))
    assert _run(COMPILED, ops) == _run(REFERENCE, ops)


# ---------------------------------------------------------------- tasks: queue, launch, status

LAUNCH_HEADER = p.frame_header(p.LaunchTasks)
RESULTS_HEADER = p.frame_header(p.TaskResults)


def results_of(client):
    """The results waiting for ``client``, as rows; they stay waiting."""
    rows = client.results.take_rows()
    for row in rows:
        client.results.add(*row)
    return rows


def _decoded(frames):
    """LaunchTasks frames as ``[(functions, rows), ...]``, each checked to be byte for byte
    the frame ``protocol.encode`` makes of its message."""
    batches = []
    for frame in frames:
        msg = p.decode(frame)
        assert type(msg) is p.LaunchTasks and p.encode(msg) == frame
        batches.append((msg.functions, msg.tasks))
    return batches


def _rows(impl, rows):
    """``rows`` as ``impl`` takes SubmitTasks rows: read from a frame."""
    return impl.read_submit_tasks(p.encode(p.SubmitTasks({}, rows)), 2)[1]


def _queue(impl, client, rows, next_id, now, pending, functions):
    """``queue_tasks`` of the SubmitTasks rows ``rows``: the next free id."""
    next_id, missing = impl.queue_tasks(client, _rows(impl, rows), next_id, now, pending, functions)
    return next_id


def _updates(impl, rows):
    """``rows`` as ``impl`` takes StatusUpdates rows: read from a frame."""
    return impl.read_status_updates(p.encode(p.StatusUpdates(1, 0.0, rows)), 2)[2]


def _apply(impl, executor, rows, pending, now, counts):
    """``apply_status_updates`` of the StatusUpdates rows ``rows``."""
    return impl.apply_status_updates(executor, _updates(impl, rows), pending, now, counts)


def _launch_frames(impl, tasks, count, executor, limit, latency, now):
    """``launch_tasks``, its decisions written by the wire (``launch_frames``): ``(frames,
    launched)``. The frames carry the rows decided, and the functions among those the
    decisions name that the executor did not hold."""
    known = set(executor.functions)
    rows, functions, launched = impl.launch_tasks(tasks, count, executor, latency, now)
    assert len(rows) == launched and set(functions) == {row[2] for row in rows}
    frames = impl.launch_frames(LAUNCH_HEADER, rows, functions, executor.functions, limit)
    batches = _decoded(frames)
    assert [row for _, batch in batches for row in batch] == rows
    assert {digest: blob for needed, _ in batches for digest, blob in needed.items()} == {
        digest: getattr(blob, "data", blob) for digest, blob in functions.items() if digest not in known}
    return frames, launched


def _launch(impl, tasks, count, executor, limit, latency, now):
    """``_launch_frames``, its frames decoded (``_decoded``)."""
    frames, launched = _launch_frames(impl, tasks, count, executor, limit, latency, now)
    return _decoded(frames), launched


def _executor(impl, index, cores=1):
    executor = ExecutorData(str(index), b"r%d" % index, "host", cores, 100 + index, index, cores, 0.0)
    executor.running = impl.RunningTasks()  # ExecutorData makes the one zsched.fastpath picked
    return executor


def _client(impl, routing_id=b"c", pid=1):
    client = ClientData(routing_id, pid)
    client.tasks = impl.ClientTasks()
    client.results = impl.ResultRows()
    return client


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_submitted_rows_become_launch_rows_and_results_reach_the_client(impl):
    client, pending, latency = _client(impl), deque(), impl.LatencyHistogram()
    f = b"digest of f"
    rows = [[7, f, b"a1", 0], [8, bytes(bytearray(f)), b"a2", 0], [9, b"g", b"a3", 0]]
    assert impl.queue_tasks(client, _rows(impl, rows), 100, 1.0, pending, {f: b"F", b"g": b"G"}) == (103, 0)
    assert [t.task_id for t in pending] == [100, 101, 102] and set(client.tasks) == {7, 8, 9}
    assert pending[1].function is pending[0].function  # one digest object for a run of one function
    assert [t.args for t in pending] == [b"a1", b"a2", b"a3"]
    executor = _executor(impl, 0)
    batches, launched = _launch(impl, pending, 2, executor, 1 << 20, latency, 1.0003)
    assert launched == 2 and len(pending) == 1
    assert batches == [({f: b"F"}, [[100, 1, f, b"a1"], [101, 1, f, b"a2"]])]
    assert executor.functions == {f} and list(executor.running) == [100, 101]
    assert latency.count == 2 and latency.counts[1] == 2  # 300 us: in the 500 us bucket
    counts = {"finished": 0, "failed": 0, "retried": 0}
    stale, freed, ran, retried, returned = _apply(impl,
        executor, [[100, 1, 1, b"r1"], [101, 2, 1, b"old"], [555, 1, 1, b"?"]], pending, 2.0, counts)
    assert (stale, freed, ran, retried, returned) == (2, 1, 1, 0, [])
    assert results_of(client) == [[7, 1, b"r1"]] and set(client.tasks) == {8, 9}
    assert counts == {"finished": 1, "failed": 0, "retried": 0} and executor.tasks_done == 1


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_client_task_ids_of_every_size_msgpack_packs_come_back_as_sent(impl):
    """The compiled task keeps its client's id as a C int64, or as the bits of a uint64
    past 2**63 - 1: each id comes back in its result, in ``client.tasks`` and in ``Task``."""
    ids = [-2 ** 63, -2 ** 31 - 1, -33, -1, 0, 127, 2 ** 32, 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1]
    client, pending = _client(impl), deque()
    _queue(impl, client, [[ctid, b"f", b"x", 0] for ctid in ids], 1, 0.0, pending, {b"f": b"F"})
    assert [t.client_task_id for t in pending] == ids and sorted(client.tasks) == sorted(ids)
    assert all(client.tasks[ctid] is task for ctid, task in zip(ids, pending))
    _queue(impl, client, [[ids[0], b"g", b"y", 0]], 99, 0.0, deque(), {})  # no function: an error
    executor = _executor(impl, 0, cores=len(ids))
    _launch(impl, pending, len(ids), executor, 1 << 20, impl.LatencyHistogram(), 0.0)
    counts = {"finished": 0, "failed": 0, "retried": 0}
    _apply(impl, executor, [[task_id, 1, 1, b"r%d" % i] for i, task_id in enumerate(executor.running)],
           deque(), 0.0, counts)
    assert results_of(client) == ([[ids[0], p.TaskState.ERROR, impl.NO_FUNCTION]]
                                  + [[ctid, 1, b"r%d" % i] for i, ctid in enumerate(ids)])
    assert len(client.tasks) == 0


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_launches_split_at_the_size_limit_and_ship_each_function_once(impl):
    client, pending = _client(impl), deque()
    _queue(impl, client, [[i, b"f" if i < 3 else b"g", b"x" * 10, 0] for i in range(6)],
                     1, 0.0, pending, {b"f": b"F" * 15, b"g": b"G" * 5})
    executor = _executor(impl, 0)
    batches, launched = _launch(impl, pending, 6, executor, 30, impl.LatencyHistogram(), 0.0)
    assert launched == 6
    # f (15) + 10 = 25; +10 > 30: split; 10 + 10 + g (5) + 10 = 35 > 30: split after 2
    assert [(sorted(needed), [row[0] for row in rows]) for needed, rows in batches] == [
        ([b"f"], [1]), ([], [2, 3]), ([b"g"], [4, 5]), ([], [6])]
    batches, _ = _launch(impl, deque(), 1, executor, 30, impl.LatencyHistogram(), 0.0)
    assert batches == []


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_a_queued_task_keeps_its_function_when_the_driver_drops_it(impl):
    """A client releases a function it no longer uses (the driver's table drops it); its
    tasks still queued launch with the blob they hold."""
    client, pending, functions = _client(impl), deque(), {b"f": b"F" * 4}
    _queue(impl, client, [[1, b"f", b"x", 0], [2, b"f", b"y", 0]], 1, 0.0, pending, functions)
    functions.clear()
    executor = _executor(impl, 0, cores=2)
    batches, launched = _launch(impl, pending, 2, executor, 1 << 20, impl.LatencyHistogram(), 0.0)
    assert launched == 2 and batches == [({b"f": b"F" * 4}, [[1, 1, b"f", b"x"], [2, 1, b"f", b"y"]])]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_status_updates_retry_return_and_cancel(impl):
    client, pending = _client(impl), deque()
    _queue(impl, client, [[i, b"f", b"x", 1 if i == 1 else 0] for i in range(1, 5)], 1, 0.0, pending,
                     {b"f": b"F"})
    executor = _executor(impl, 0, cores=4)
    _launch(impl, pending, 4, executor, 1 << 20, impl.LatencyHistogram(), 0.0)
    executor.running[4].cancelled = True
    counts = {"finished": 0, "failed": 0, "retried": 0}
    updates = [[1, 1, 2, b"raised"], [2, 1, 5, b""], [3, 1, 4, b"error"], [4, 1, 1, b"late"]]
    stale, freed, ran, retried, returned = _apply(impl, executor, updates, pending, 5.0, counts)
    assert (stale, freed, ran, retried) == (0, 4, 3, 1)
    assert [t.task_id for t in returned] == [2] and [t.task_id for t in pending] == [1]
    assert pending[0].retries == 0 and pending[0].queued_at == 5.0
    assert results_of(client) == [[3, 4, b"error"]]
    assert counts == {"finished": 0, "failed": 1, "retried": 1}
    assert (executor.tasks_done, executor.tasks_failed) == (1, 2) and not executor.running


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_huge_attempt_or_state_numbers_are_stale_or_errors_not_crashes(impl):
    client, pending = _client(impl), deque()
    _queue(impl, client, [[1, b"f", b"x", 0]], 1, 0.0, pending, {b"f": b"F"})
    executor = _executor(impl, 0)
    _launch(impl, pending, 1, executor, 1 << 20, impl.LatencyHistogram(), 0.0)
    counts = {"finished": 0, "failed": 0, "retried": 0}
    assert _apply(impl, executor, [[1, 2 ** 64 - 1, 1, b""]], pending, 0.0, counts)[0] == 1
    _apply(impl, executor, [[1, 1, 2 ** 64 - 1, b"?"]], pending, 0.0, counts)
    assert results_of(client) == [[1, TaskState.ERROR, NO_TASK_STATE]] and counts["failed"] == 1


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_a_second_task_under_an_id_in_flight_is_refused_until_the_first_ends(impl):
    client, pending = _client(impl), deque()
    # increasing ids but one repeated at once (the array of the compiled path)
    assert _queue(impl, client, [[10, b"f", b"a", 0], [11, b"f", b"b", 0], [11, b"f", b"c", 0]],
                            1, 0.0, pending, {b"f": b"F"}) == 3
    assert [t.args for t in pending] == [b"a", b"b"] and list(client.tasks) == [10, 11]
    executor = _executor(impl, 0, cores=2)
    _launch(impl, pending, 2, executor, 1 << 20, impl.LatencyHistogram(), 0.0)
    assert _queue(impl, client, [[11, b"f", b"d", 0]], 3, 0.0, pending, {b"f": b"F"}) == 3
    counts = {"finished": 0, "failed": 0, "retried": 0}
    _apply(impl, executor, [[2, 1, 1, b"r"]], pending, 0.0, counts)
    assert results_of(client) == [[11, 1, b"r"]] and list(client.tasks) == [10]
    # ended: the id may be used again
    assert _queue(impl, client, [[11, b"f", b"e", 0]], 3, 0.0, pending, {b"f": b"F"}) == 4
    assert [t.args for t in pending] == [b"e"] and client.tasks[11].task_id == 3


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_a_state_that_is_no_task_state_ends_the_task_as_an_error(impl):
    client, pending = _client(impl), deque()
    _queue(impl, client, [[1, b"f", b"x", 3], [2, b"f", b"y", 3]], 1, 0.0, pending, {b"f": b"F"})
    executor = _executor(impl, 0, cores=2)
    _launch(impl, pending, 2, executor, 1 << 20, impl.LatencyHistogram(), 0.0)
    counts = {"finished": 0, "failed": 0, "retried": 0}
    _apply(impl, executor, [[1, 1, 0, b"?"], [2, 1, 99, b"?"]], pending, 0.0, counts)
    assert results_of(client) == [[1, TaskState.ERROR, NO_TASK_STATE], [2, TaskState.ERROR, NO_TASK_STATE]]
    assert counts == {"finished": 0, "failed": 2, "retried": 0} and not pending  # no retry


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_latency_histogram(impl):
    histogram = impl.LatencyHistogram((0.001, 0.01))
    for seconds in (0.0005, 0.001, 0.002, 5.0):
        histogram.observe(seconds)
    assert histogram.counts == [2, 1, 1]
    assert histogram.snapshot() == {"buckets": [[0.001, 2], [0.01, 3], ["+Inf", 4]],
                                    "sum": pytest.approx(5.0035), "count": 4}


def _simulate(impl, ops):
    """Drive queue/launch/status with ``ops`` on 3 executors; every observable outcome."""
    clients = [_client(impl), _client(impl, b"d", 2)]
    functions = {b"f": b"F" * 12, b"g": b"G" * 3, b"h": b"H" * 40}
    executors = [_executor(impl, i, cores=1 + i) for i in range(3)]
    pending, latency = deque(), impl.LatencyHistogram()
    counts = {"finished": 0, "failed": 0, "retried": 0}
    next_id, client_task_id, now, out = 1, 1, 0.0, []
    for op, a, b in ops:
        now += 0.0002 * (1 + b % 7)
        if op == "submit":
            rows = []
            for i in range(1 + a % 5):
                # now and then an id not above the last one (a repeat, even): what a client
                # numbering its tasks otherwise would send
                ctid = client_task_id - (b % 4) if a % 13 == 0 and i == 0 else client_task_id
                rows.append([ctid, sorted(functions)[(a + i) % 3], b"x" * ((b + i) % 23),
                             (a + i) % 3 - 1 if (a + i) % 3 else 0])
                client_task_id += 1
            next_id = _queue(impl, clients[b % 2], rows, next_id, now, pending, functions)
        elif op == "launch":
            executor = executors[a % 3]
            frames, launched = _launch_frames(impl, pending, b % 9, executor, 16 + a % 40, latency, now)
            out.append(("launch", executor.executor_id, launched, frames))  # byte for byte
        elif op == "update":
            executor = executors[a % 3]
            updates = []
            # a few rows, now and then all the tasks held (more than a group the compiled
            # path reads ahead), a row twice, a task that is not running
            n_rows = 1 + b % 4 if a % 7 else 100
            for j, (task_id, task) in enumerate(list(executor.running.items())[:n_rows]):
                kind = (a + j) % 7
                attempt = task.attempt + (1 if kind == 6 else 0)
                updates.append([task_id, attempt, 1 + kind % 5, b"p%d" % task_id])
            if updates and b % 7 == 1:
                updates.insert(b % len(updates), list(updates[(a + b) % len(updates)]))
            if b % 5 == 0:
                updates.append([10 ** 6 + b, 1, 1, b"unknown"])
            stale, freed, ran, retried, returned = _apply(impl,
                executor, updates, pending, now, counts)
            out.append(("update", stale, freed, ran, retried, [t.task_id for t in returned],
                        [c.results.take_frames(RESULTS_HEADER, 40, 3) for c in clients],  # byte for byte
                        executor.tasks_done, executor.tasks_failed))
            for task in reversed(returned):
                pending.appendleft(task)
        elif op == "cancel" and pending:
            pending[a % len(pending)].cancelled = True
        elif op == "cancel_id":  # as the scheduler cancels a client's task by its id
            client = clients[b % 2]
            task = client.tasks.pop(a % (client_task_id + 1), None)
            out.append(("cancel_id", None if task is None else task.task_id, len(client.tasks),
                        a % (client_task_id + 1) in client.tasks))
            if task is not None:
                task.cancelled = True
        elif op == "charge" and pending:  # as after a loss: a suspect of loss 1 or 2
            task = pending[a % len(pending)]
            task.failures += ((task.attempt, "9", "lost"),)
            task.loss = 1 + b % 2
    out.append(("end", counts, latency.counts, round(latency.sum, 9), latency.count,
                [(t.task_id, t.attempt, t.retries, t.cancelled) for t in pending],
                [(list(e.running), len(e.running), e.suspect_losses, sorted(e.functions))
                 for e in executors],
                [(list(c.tasks), len(c.tasks), [t.task_id for t in c.tasks.values()]) for c in clients]))
    for client in clients:
        client.tasks.clear()
        assert len(client.tasks) == 0 and list(client.tasks) == []
    for executor in executors:
        executor.running.clear()
        assert len(executor.running) == 0 and list(executor.running) == []
    return out


def operations(*names):
    """Lists of up to 120 ``(name, a, b)``: a name among ``names``, two ints of 0 to 100."""
    return st.lists(st.tuples(st.sampled_from(names), st.integers(min_value=0, max_value=100),
                              st.integers(min_value=0, max_value=100)), max_size=120)


def random_operations(seed, names, n=20000):
    rng = random.Random(seed)
    return [(rng.choice(names), rng.randint(0, 100), rng.randint(0, 100)) for _ in range(n)]


TASK_OPS = operations("submit", "launch", "update", "update", "cancel", "charge", "cancel_id")


@settings(max_examples=300, deadline=None)
@given(TASK_OPS)
def test_task_path_compiled_agrees_with_reference(ops):
    assert _simulate(COMPILED, ops) == _simulate(REFERENCE, ops)


def test_task_path_agreement_at_scale():
    ops = random_operations(5, ["submit", "submit", "launch", "launch", "update", "update", "update",
                                "cancel", "charge", "cancel_id"])
    assert _simulate(COMPILED, ops) == _simulate(REFERENCE, ops)


def test_the_compiled_path_calls_the_queue_s_methods_in_c():
    # deque's append takes one argument and its popleft none, as the compiled module
    # expects of them on the CPython versions zsched supports; were it otherwise, it would
    # call them as methods (the next test)
    assert _fastpath.DEQUE_METHODS_IN_C


class QueueOfTasks(deque):
    """Not a deque by type: the compiled path uses it through its methods."""


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_a_queue_that_is_not_a_deque_is_used_through_its_methods(impl):
    def run(queue_type):
        client, pending = _client(impl), queue_type()
        executor = _executor(impl, 0, cores=4)
        _queue(impl, client, [[i, b"f", b"x%d" % i, 1] for i in range(6)], 1, 0.0, pending, {b"f": b"F"})
        launched = _launch(impl, pending, 4, executor, 1 << 20, impl.LatencyHistogram(), 0.0)
        counts = {"finished": 0, "failed": 0, "retried": 0}
        updates = [[1, 1, 1, b"r"], [2, 1, 2, b"e"]]  # FINISHED; FAILED with a retry left
        outcome = _apply(impl, executor, updates, pending, 0.0, counts)
        return (launched[1], [(needed, [list(row) for row in rows]) for needed, rows in launched[0]],
                outcome[:4], [t.task_id for t in pending], counts, client.results.take_rows())

    assert run(QueueOfTasks) == run(deque)
    assert run(deque)[3] == [2, 5, 6]  # the retried task first


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_running_and_client_tasks_read_like_dicts(impl):
    client, pending = _client(impl), deque()
    _queue(impl, client, [[i, b"f", b"x", 0] for i in (5, 9, 12, 40)], 1, 0.0, pending, {b"f": b"F"})
    executor = _executor(impl, 0, cores=8)
    _launch(impl, pending, 3, executor, 1 << 20, impl.LatencyHistogram(), 0.0)
    running = executor.running
    assert list(running) == list(running.keys()) == [1, 2, 3] and len(running) == 3
    assert [t.task_id for t in running.values()] == [1, 2, 3]
    assert [(i, t.task_id) for i, t in running.items()] == [(1, 1), (2, 2), (3, 3)]
    assert 2 in running and 4 not in running and "2" not in running and (1 << 80) not in running
    assert running[2].client_task_id == 9 and running.get(4) is None and running.get(4, 0) == 0
    with pytest.raises(KeyError):
        running[4]
    tasks = client.tasks
    assert list(tasks) == [5, 9, 12, 40] and len(tasks) == 4 and 12 in tasks and 13 not in tasks
    assert tasks[40].task_id == 4 and tasks.get(41) is None and tasks.pop(41, None) is None
    assert tasks.pop(12).task_id == 3 and list(tasks) == [5, 9, 40]
    with pytest.raises(KeyError):
        tasks.pop(12)
    # 7 is not above 40; 9 is in flight: refused, given no id (a second task of one id
    # could be neither cancelled nor found when its client leaves)
    assert _queue(impl, client, [[7, b"f", b"x", 0], [9, b"f", b"y", 0], [8, b"f", b"z", 0],
                                     [8, b"f", b"w", 0]], 5, 0.0, pending, {b"f": b"F"}) == 7
    assert list(tasks) == [5, 9, 40, 7, 8] and len(tasks) == 5
    assert (tasks[9].task_id, tasks[7].task_id, tasks[8].task_id) == (2, 5, 6)
    assert [t.task_id for t in pending][-2:] == [5, 6] and tasks[8].args == b"z"
    tasks.clear()
    running.clear()
    assert not tasks and not running and list(tasks) == list(running) == []


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_many_tasks_in_and_out_of_the_tables(impl):
    # enough to grow, compact and rebuild the compiled tables many times over
    client, pending, latency = _client(impl), deque(), impl.LatencyHistogram()
    executors = [_executor(impl, i, cores=64) for i in range(3)]
    counts = {"finished": 0, "failed": 0, "retried": 0}
    _queue(impl, client, [[i, b"f", b"x", 0] for i in range(20000)], 1, 0.0, pending, {b"f": b"F"})
    submitted, next_id = 20000, 20001
    rng = random.Random(7)
    while pending or any(e.running for e in executors):
        if submitted < 40000 and rng.random() < 0.2:  # more tasks join a table with gaps
            rows = [[i, b"f", b"x", 0] for i in range(submitted, submitted + rng.randint(1, 500))]
            next_id = _queue(impl, client, rows, next_id, 0.0, pending, {b"f": b"F"})
            submitted += len(rows)
        executor = rng.choice(executors)
        _launch(impl, pending, rng.randint(0, 300), executor, 1 << 20, latency, 0.0)
        held = list(executor.running)
        rng.shuffle(held)
        updates = [[task_id, 1, 1, b"r"] for task_id in held[:rng.randint(0, len(held))]]
        _apply(impl, executor, updates, pending, 0.0, counts)
        assert len(client.tasks) == submitted - counts["finished"]
        if rng.random() < 0.05:  # every task still found under its id, in submission order
            in_flight = list(client.tasks)
            assert in_flight == sorted(in_flight)
            assert all(client.tasks[i].client_task_id == i for i in in_flight[::97])
    assert counts["finished"] == submitted and not client.tasks
    assert sorted(row[0] for row in results_of(client)) == list(range(submitted))


# -- the protocol's row checks


@settings(max_examples=500, deadline=None)
@given(st.floats(min_value=0.0, allow_nan=False), st.floats(min_value=0.0, max_value=1e6),
       st.integers(min_value=1, max_value=1 << 20))
def test_window_sizes_agree(task_seconds, prefetch_seconds, tasks_per_core):
    expected = REFERENCE.slots_per_core(task_seconds, prefetch_seconds, tasks_per_core)
    assert COMPILED.slots_per_core(task_seconds, prefetch_seconds, tasks_per_core) == expected
    assert 1 <= expected <= tasks_per_core


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_window_of_an_executor(impl):
    executor = _executor(impl, 0, cores=4)
    assert impl.window(executor, False, 0.002, 256) == 4  # its task length is not known yet
    executor.task_seconds = 0.001
    assert impl.window(executor, False, 0.002, 256) == 4 * 3  # one running, two queued
    assert impl.window(executor, False, 0.002, 2) == 4 * 2
    assert impl.window(executor, False, 0.0, 256) == 4 * 2  # at least one queued
    executor.task_seconds = 1e-9
    assert impl.window(executor, False, 0.002, 256) == 4 * 256
    assert impl.window(executor, True, 0.002, 256) == 4  # clamped: suspects wait
    executor.suspect_losses[1] = 1
    assert impl.window(executor, False, 0.002, 256) == 4  # it runs a suspect
    executor.decommissioning = True
    assert impl.window(executor, False, 0.002, 256) == 0


def _simulate_offers(impl, ops):
    """Queue, cancel, deal-and-launch (``offer_and_launch``), finish and resize on 3
    executors of a SlotTable; every observable outcome."""
    client = _client(impl)
    functions = {b"f": b"F" * 12, b"g": b"G" * 3}
    slots = impl.SlotTable()
    executors = {}
    for i in range(3):
        executor = _executor(impl, i, cores=1 + i)
        executor.slot = slots.add(1 + i, (1 + i) * (1 + 2 * i))
        executors[executor.slot] = executor
    pending, latency = deque(), impl.LatencyHistogram()
    counts = {"finished": 0, "failed": 0, "retried": 0}
    next_id, client_task_id, now, n_pending, out = 1, 1, 0.0, 0, []
    for op, a, b in ops:
        now += 0.0001 * (1 + b % 5)
        if op == "submit":
            rows = [[client_task_id + i, (b"f", b"g")[(a + i) % 2], b"x" * ((b + i) % 9), 0]
                    for i in range(1 + a % 7)]
            client_task_id += len(rows)
            next_id = _queue(impl, client, rows, next_id, now, pending, functions)
            n_pending += len(rows)
        elif op == "cancel" and pending:
            task = pending[a % len(pending)]
            if not task.cancelled:
                task.cancelled = True
                n_pending -= 1
        elif op == "offer":  # now and then more than are queued: the slots left are released
            launches, launched = impl.offer_and_launch(slots, executors, pending, n_pending + b % 3,
                                                       8 + a % 30, latency, now, LAUNCH_HEADER)
            n_pending -= launched
            for _, frames in launches:
                _decoded(frames)
            out.append(("offer", launched, [(executor.executor_id, frames)  # byte for byte
                                            for executor, frames in launches]))
        elif op == "finish":
            executor = executors[a % 3]
            done = list(executor.running.items())[:1 + b % 4]
            stale, freed, *_ = _apply(impl,
                executor, [[task_id, task.attempt, 1, b""] for task_id, task in done], pending, now, counts)
            if freed:
                slots.release(executor.slot, freed)
        elif op == "resize":
            slots.resize(executors[a % 3].slot, b % 6)
    out.append(("end", [slots.free(slot) for slot in executors], latency.counts, len(pending),
                n_pending, [len(e.running) for e in executors.values()], counts))
    client.tasks.clear()
    for executor in executors.values():
        executor.running.clear()
    return out


OFFER_OPS = operations("submit", "cancel", "offer", "offer", "finish", "finish", "resize")


@settings(max_examples=300, deadline=None)
@given(OFFER_OPS)
def test_offer_and_launch_agree(ops):
    assert _simulate_offers(COMPILED, ops) == _simulate_offers(REFERENCE, ops)


def test_offer_and_launch_agree_at_scale():
    ops = random_operations(7, ["submit", "submit", "cancel", "offer", "offer", "finish", "finish",
                                "finish", "resize"])
    outcome = _simulate_offers(COMPILED, ops)
    assert outcome == _simulate_offers(REFERENCE, ops)
    assert sum(launched for kind, launched, *_ in outcome[:-1]) > 1000  # it did launch


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_launch_frames_are_what_encode_makes_whatever_the_sizes(impl):
    """Every msgpack form a LaunchTasks frame can need: task ids past 2**32, arguments of
    0, 200, 70,000 bytes (bin 8, 16 and 32), more than 15 and more than 65,535 rows (array
    16 and 32), functions held as ``protocol.FunctionBlob``, 16 functions (map 16)."""
    client, pending = _client(impl), deque()
    functions = {b"d%02d" % i: p.FunctionBlob(b"F" * i) for i in range(16)}
    sizes = (0, 200, 70_000)
    rows = [[i, b"d%02d" % (i % 16), b"a" * sizes[i % 3] if i < 30 else b"x", 0] for i in range(70_000)]
    _queue(impl, client, rows, 2 ** 32 - 5, 0.0, pending, functions)
    executor = _executor(impl, 0, cores=8)
    frames, launched = _launch_frames(impl, pending, 70_000, executor, 1 << 30, impl.LatencyHistogram(),
                                      0.0)
    assert launched == 70_000 and len(frames) == 1
    (needed, launched_rows), = _decoded(frames)
    assert needed == {digest: blob.data for digest, blob in functions.items()}
    assert [row[0] for row in launched_rows] == list(range(2 ** 32 - 5, 2 ** 32 - 5 + 70_000))
    assert [len(row[3]) for row in launched_rows[:4]] == [0, 200, 70_000, 0]


def test_launch_frames_agree_byte_for_byte():
    def run(impl):
        client, pending = _client(impl), deque()
        rows = [[i, b"f" if i % 7 else b"g", b"x" * (i % 300), i % 2] for i in range(3000)]
        _queue(impl, client, rows, 1, 0.0, pending, {b"f": b"F" * 100, b"g": p.FunctionBlob(b"G")})
        executor = _executor(impl, 0, cores=4)
        return [_launch_frames(impl, pending, n, executor, 5000, impl.LatencyHistogram(), 0.0)
                for n in (1, 10, 500, 3000)]
    assert run(COMPILED) == run(REFERENCE)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=["reference", "compiled"])
def test_a_task_of_a_function_the_driver_does_not_hold_ends_at_once(impl):
    client, pending = _client(impl), deque()
    rows = [[1, b"f", b"a", 0], [2, b"nope", b"b", 0], [3, b"nope", b"c", 0], [4, b"f", b"d", 0],
            [1, b"f", b"again", 0]]  # the last one: an id in flight, refused
    assert impl.queue_tasks(client, _rows(impl, rows), 10, 0.0, pending, {b"f": b"F"}) == (12, 2)
    assert [(t.task_id, t.client_task_id, t.args) for t in pending] == [(10, 1, b"a"), (11, 4, b"d")]
    assert results_of(client) == [[2, TaskState.ERROR, _fastpath_py.NO_FUNCTION],
                                  [3, TaskState.ERROR, _fastpath_py.NO_FUNCTION]]
    assert set(client.tasks) == {1, 4}


def test_queued_tasks_agree_on_random_submissions():
    rng = random.Random(5)
    for _ in range(50):
        rows = [[rng.randrange(-5, 40), rng.choice([b"f", b"g", b"h"]), bytes(rng.randrange(30)),
                 rng.randrange(-3, 3)] for _ in range(rng.randrange(60))]
        outcome = []
        for impl in IMPLEMENTATIONS:
            client, pending = _client(impl), deque()
            ids = impl.queue_tasks(client, _rows(impl, rows), 1, 0.0, pending, {b"f": b"F", b"g": b"G"})
            queued = [(t.task_id, t.client_task_id, t.function, t.args, t.retries, t.function_blob)
                      for t in pending]
            outcome.append((ids, queued, results_of(client), list(client.tasks)))
        assert outcome[0] == outcome[1]
