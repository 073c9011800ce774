"""The wire protocol: every message round-trips; anything malformed is a ProtocolError."""
import msgpack
import pytest

from zsched import protocol as p
from zsched.errors import ProtocolError

pytestmark = pytest.mark.unit

SAMPLES = [
    p.RegisterExecutor("1", "host-a", 4, "app-1", 1234),
    p.StatusUpdates(99, 0.5, [[1, 1, p.TaskState.FINISHED, b"x"], [2, 3, p.TaskState.FAILED, b""]]),
    p.Heartbeat(99, "1", {"rss": 1000, "cpu": 12.5, "running": 2}),
    p.RemoveExecutor("3", "exited with code 1", True),
    p.AttachRelief(1 << 62, "3", 4242, b"t" * 16),
    p.ExecutorHello(4242),
    p.RegisteredExecutor(99, {"max_failures": 4, "revive_interval": 1.0}, b"t" * 16),
    p.RegisterExecutorFailed("Duplicate executor ID: 1"),
    p.LaunchTasks({b"d" * 16: b"fn"}, [[1, 1, b"d" * 16, b"args"]]),
    p.KillTask(5, 2, "cancelled"),
    p.StopExecutor("bye"),
    p.Shutdown(),
    p.HeartbeatAck(99),
    p.DecommissionExecutor("idle"),
    p.Probe(),
    p.ReturnTasks(3),
    p.ForgetFunctions([b"d" * 16, b"e" * 16]),
    p.ClientHello(42),
    p.SubmitTasks({b"k": b"fn"}, [[1, b"k", b"a", 0], [2, b"k", b"b", 3]]),
    p.TaskPlacement([[1, ["node1", "node2"], True], [2, [], False]]),
    p.CancelTasks([1, 2, 3]),
    p.CancelQueuedTasks(13),
    p.ResultsTaken(512, 70_000),
    p.AdminPing(1),
    p.AdminExecutorIds(2),
    p.AdminTotalCores(3),
    p.AdminStatus(4),
    p.AdminIsExecutorActive(5, "1"),
    p.AdminDecommissionExecutors(6, ["1", "2"]),
    p.AdminDecommissionExecutorsOnHost(7, "host-a"),
    p.AdminRequestTotalExecutors(8, 3, 0, None),
    p.AdminRequestTotalExecutors(9, 3, 2, {"host-a": 2}),
    p.AdminRequestExecutors(10, 1),
    p.AdminKillExecutors(11, ["1"], False, True),
    p.AdminKillExecutorsOnHost(12, "host-a"),
    p.StopExecutors(),
    p.ClientGoodbye(),
    p.ClientWelcome(99, "app", {"max_message_size": 10}),
    p.TaskResults([[1, p.TaskState.FINISHED, b"r"]]),
    p.AdminReply(1, True, ["1", "2"]),
    p.PutData(b"k" * 16, 3, [b"pickle", b"x" * 70_000, b""]),
    p.PutData(b"k" * 16, -1, []),
    p.DataStored(b"k" * 16, -1, ""),
    p.ForgetData([b"k" * 16]),
    p.GetData([b"k" * 16, b"l" * 16]),
    p.Data(b"k" * 16, "", [b"pickle", b"y" * 10]),
    p.Data(b"k" * 16, "gone", []),
    p.ResultData(7, 1, b"k" * 16, 3, [b"abc"]),
    p.TaskData(7, b"k" * 16, [b"abc"]),
]


def test_every_message_type_has_a_sample():
    assert {type(m).TYPE for m in SAMPLES} == set(p.MsgType)


def test_every_admin_operation_has_its_own_message_type():
    assert set(p.ADMIN_MESSAGES) == set(p.AdminOp)
    for op, cls in p.ADMIN_MESSAGES.items():
        assert cls.TYPE == op == cls.OP and cls.FIELDS[0] == "request_id"


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(msg):
    frame = p.encode(msg)
    assert frame[0] == p.VERSION and frame[1] == msg.TYPE
    assert p.decode(frame) == msg


def _frame(msg_type, body):
    return bytes((p.VERSION, msg_type)) + msgpack.packb(body, use_bin_type=True)


@pytest.mark.parametrize("frame, words", [
    (b"", "too short"),
    (b"\x01", "too short"),
    (bytes((99, p.MsgType.SHUTDOWN)) + msgpack.packb([]), "version"),
    (bytes((p.VERSION, 250)) + msgpack.packb([]), "unknown message type"),
    (bytes((p.VERSION, p.MsgType.HEARTBEAT)) + b"\xc1\xc1\xc1", "undecodable"),
    (_frame(p.MsgType.HEARTBEAT, {"a": 1}), "fields"),
    (_frame(p.MsgType.HEARTBEAT, [1, "x"]), "fields"),
    (_frame(p.MsgType.REGISTER_EXECUTOR, ["1", "h", "four", "app", 1]), "cores"),
    (_frame(p.MsgType.REGISTER_EXECUTOR, ["1", "h", True, "app", 1]), "cores"),
    (_frame(p.MsgType.STATUS_UPDATES, [1, 0.0, [[1, 1, 1]]]), "updates"),
    (_frame(p.MsgType.STATUS_UPDATES, [1, 0.0, [[1, 1, 1, "text not bytes"]]]), "updates"),
    (_frame(p.MsgType.STATUS_UPDATES, [1, "0", []]), "busy"),
    (_frame(p.MsgType.STATUS_UPDATES, [1, 0.0, [[True, 1, 1, b"x"]]]), "updates"),
    (_frame(p.MsgType.STATUS_UPDATES, [1, 0.0, [[1, 1, 1, b"x"], [1, 1, 1]]]), "updates"),
    (_frame(p.MsgType.STATUS_UPDATES, [1, 0.0, [[1, 1, 1, b"x", 1, 1, 1, b"x"]]]), "updates"),
    (_frame(p.MsgType.STATUS_UPDATES, [1, 0.0, [[1, 1, 1, b"x"], "row"]]), "updates"),
    (_frame(p.MsgType.TASK_RESULTS, [[[1, 1.5, b"x"]]]), "results"),
    (_frame(p.MsgType.SUBMIT_TASKS, [{}, "nope"]), "tasks"),
    (_frame(p.MsgType.SUBMIT_TASKS, [{"str": b"x"}, []]), "functions"),
    (_frame(p.MsgType.LAUNCH_TASKS, [{}, [[1, 1, b"d"]]]), "tasks"),
])
def test_malformed_frames_raise_protocol_error(frame, words):
    with pytest.raises(ProtocolError, match=words):
        p.decode(frame)


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_check_accepts_what_decode_accepts(msg):
    # check: for a client's message handed over in the driver's process, without a frame
    p.check(p.decode(p.encode(msg)))
    if type(msg).TYPE in (p.MsgType.CLIENT_HELLO, p.MsgType.SUBMIT_TASKS, p.MsgType.CANCEL_TASKS,
                          p.MsgType.CLIENT_GOODBYE, *p.AdminOp):
        p.check(msg)


@pytest.mark.parametrize("msg, words", [
    (p.SubmitTasks({}, [(1, b"d", b"a", 0)]), "tasks"),           # a row must be a list
    (p.SubmitTasks({}, [[1, b"d", b"a", True]]), "tasks"),        # retries: a bool is no int
    (p.SubmitTasks({}, [[1, b"d", b"a", 0], [2, b"d", b"a"]]), "tasks"),
    (p.SubmitTasks({"f": b"x"}, []), "functions"),
    (p.CancelTasks([1, "2"]), "task_ids"),
    (p.TaskPlacement([[1, ["node1"], 1]]), "tasks"),
    (p.TaskPlacement([[1, "node1", True]]), "tasks"),
    (p.TaskPlacement([[1, [""], True]]), "tasks"),
    (p.TaskPlacement([[1, ["n"] * 257, True]]), "tasks"),
    (p.AdminIsExecutorActive(1, 2), "executor_id"),
    (p.AdminDecommissionExecutors(1, "1"), "executor_ids"),   # a list, not a string
    (p.AdminDecommissionExecutors(1, [1]), "executor_ids"),
    (p.AdminRequestExecutors(1, True), "n"),                    # a bool is no int
    (p.AdminRequestExecutors(1, 1.0), "n"),
    (p.AdminRequestTotalExecutors(1, 1, 0, {"h": "2"}), "host_to_local_task_count"),
    (p.AdminKillExecutors(1, ["1"], 1, False), "replace"),
    (p.AdminKillExecutorsOnHost(1, None), "host"),
    (p.AdminStatus("1"), "request_id"),
])
def test_check_refuses_what_decode_refuses(msg, words):
    with pytest.raises(ProtocolError, match=words):
        p.check(msg)


def test_size_limit_is_checked():
    frame = p.encode(p.StopExecutor("x" * 100))
    with pytest.raises(ProtocolError, match="exceeds the limit"):
        p.decode(frame, max_size=50)
    assert p.decode(frame, max_size=len(frame)).reason == "x" * 100


def test_random_junk_never_raises_anything_but_protocol_error():
    import random
    rng = random.Random(7)
    for _ in range(5000):
        frame = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
        if rng.random() < 0.5 and len(frame) > 2:
            frame = bytes((p.VERSION, rng.choice(list(p.MsgType)))) + frame[2:]
        try:
            p.decode(frame)
        except ProtocolError:
            pass


def test_batch_rows_respects_the_limit():
    rows = [[i, b"x" * size] for i, size in enumerate([5, 5, 5, 10, 1, 9, 10])]
    batches = list(p.batch_rows(rows, 1, 10))
    assert [row for batch in batches for row in batch] == rows
    assert all(sum(len(r[1]) for r in batch) <= 10 for batch in batches)
    assert [len(b) for b in batches] == [2, 1, 1, 2, 1]
    assert list(p.batch_rows([], 1, 10)) == []


def test_batch_tasks_ships_each_function_once_and_within_the_limit():
    functions = {b"f": b"F" * 6, b"g": b"G" * 3}
    rows = [[1, b"f", b"a" * 4], [2, b"f", b"a" * 4], [3, b"g", b"a" * 2], [4, b"f", b"a" * 9],
            [5, b"g", b"a" * 7]]
    known = set()
    batches = list(p.batch_tasks(rows, 1, 2, functions, known, 10))
    assert [row for _, batch in batches for row in batch] == rows
    shipped = [d for needed, _ in batches for d in needed]
    assert sorted(shipped) == [b"f", b"g"]  # once each
    seen = set()
    for needed, batch in batches:
        seen |= set(needed)
        assert all(row[1] in seen for row in batch)  # never used before it was shipped
        size = sum(len(b) for b in needed.values()) + sum(len(row[2]) for row in batch)
        assert size <= 10 or len(batch) == 1
    assert known == {b"f", b"g"}
    # a receiver that already holds them gets none
    assert all(not needed for needed, _ in p.batch_tasks(rows, 1, 2, functions, known, 10))


def test_socket_monitor_events_are_parsed_as_pyzmq_does():
    import struct

    import zmq

    from zsched.socket_events import parse_event
    frames = [struct.pack("=hi", zmq.EVENT_DISCONNECTED, 7), b"tcp://127.0.0.1:5555"]
    assert parse_event(frames) == (zmq.EVENT_DISCONNECTED, 7, b"tcp://127.0.0.1:5555")
    with pytest.raises(ValueError):
        parse_event([b"short", b""])


@pytest.mark.parametrize("module, unwanted", [
    ("zsched.driver", "'asyncio', 'cloudpickle', 'tqdm', 'zsched.client'"),
    ("zsched.executor", "'asyncio', 'tqdm', 'zsched.client'"),
])
def test_drivers_and_executors_start_without_the_client_side_imports(module, unwanted):
    # each process of a local cluster pays for its imports at start-up
    import subprocess
    import sys
    code = f"import sys, {module}; print(sorted(m for m in ({unwanted}) if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- the messages as records

@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_a_message_is_a_frozen_record_equal_to_its_copy(msg):
    import copy
    import dataclasses
    import pickle
    values = [getattr(msg, name) for name in msg.FIELDS]
    assert msg.FIELDS == tuple(f.name for f in dataclasses.fields(msg))
    assert type(msg)(*values) == msg == type(msg)(**dict(zip(msg.FIELDS, values)))
    assert pickle.loads(pickle.dumps(msg)) == msg and copy.copy(msg) == msg
    assert repr(msg) == f"{type(msg).__name__}(" + ", ".join(
        f"{name}={value!r}" for name, value in zip(msg.FIELDS, values)) + ")"
    assert (msg != p.Probe()) == (type(msg) is not p.Probe)
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.some_field = 1
    if msg.FIELDS:
        with pytest.raises(dataclasses.FrozenInstanceError):
            delattr(msg, msg.FIELDS[0])
        assert dataclasses.replace(msg, **{msg.FIELDS[0]: values[0]}) == msg


def test_hash_and_calls_with_the_wrong_arguments_are_as_a_dataclass_s():
    a, b = p.RegisterExecutor("1", "h", 1, "app", 2), p.RegisterExecutor("1", "h", 1, "app", 2)
    assert hash(a) == hash(b) and len({a, b, p.RegisterExecutor("2", "h", 1, "app", 2)}) == 2
    for call in (lambda: p.RegisterExecutor("1"), lambda: p.Probe(1),
                 lambda: p.RegisterExecutor("1", "h", 1, "app", pid=2, port=3),
                 lambda: p.RegisterExecutor("1", "h", 1, "app", 2, pid=2)):
        with pytest.raises(TypeError):
            call()


def test_message_types_share_their_methods_and_compile_init_at_first_use():
    # a dataclass compiles six methods per class: most of what importing the protocol cost
    from zsched.message_base import Message, record

    @record
    class Sample(Message):
        first: int
        second: str

    assert Sample.__init__ is Message.__init__  # none compiled yet
    assert Sample(1, second="a") == Sample(first=1, second="a")
    assert Sample.__init__ is not Message.__init__  # its own, from the first message on
    with pytest.raises(TypeError, match="second"):
        Sample(1)
    for cls in {type(msg) for msg in SAMPLES} | {Sample}:
        for name in ("__eq__", "__hash__", "__repr__", "__setattr__", "__getstate__"):
            assert getattr(cls, name) is getattr(Message, name), (cls, name)


def test_a_record_s_default_fills_a_field_left_out():
    from zsched.message_base import Message, record

    @record
    class WithDefault(Message):
        first: int
        later: float = 0.5

    assert WithDefault(1) == WithDefault(1, 0.5) == WithDefault(first=1, later=0.5)
    assert WithDefault(1, later=2.0).later == 2.0
    assert p.HeartbeatAck(7).next_in == 0.0
    assert p.decode(p.encode(p.HeartbeatAck(7, 1.25))) == p.HeartbeatAck(7, 1.25)
