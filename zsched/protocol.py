"""The zsched wire protocol: every message type, and the one encode/decode pair.

A frame (after the ROUTER identity) is ``[version byte][type byte][msgpack body]``.
The body is a msgpack array holding the message's fields in declaration order.
Task functions, arguments and results travel as opaque ``bytes`` (cloudpickle made by
clients and executors); the driver never unpickles them.

Nothing outside the wire packs or unpacks frames. The driver's per-task messages are read
and written by the wire's compiled part (``wire``: ``_wire``, or its twin ``_wire_py``),
with no Python object per task: its LaunchTasks writer (``launch_frames``, and the
compiled ``LaunchWriter`` behind it) and ``ResultRows`` write frames under
``frame_header``, byte for byte what ``encode`` makes of the same message (tests hold them
to it; the driver sends them as ``Encoded`` messages), and ``decode`` has it read
SubmitTasks and StatusUpdates (``read_submit_tasks``, ``read_status_updates``: the same
checks, the rows left in the frame, in a ``SubmitRows`` or a ``StatusRows``). A client in the driver's own process hands the driver message objects
instead of frames (``check`` applies decode's field checks to them).
"""
import hashlib

import msgpack

from .errors import ProtocolError
from .task_state import TaskState  # noqa: F401 (part of the protocol; the wire's compiled part uses it too)
from ._wire_py import batch_tasks  # noqa: F401 (one splitter for LaunchTasks and SubmitTasks)
from .data_frames import encode_head, is_parts, read as read_data
from .msg_types import AdminOp, MsgType
from .message_base import Message, record
from .field_checks import (DATA_KEY_SIZE, HEARTBEAT_METRICS,  # noqa: F401 (part of the protocol)
                           HOST_NAME_LIMIT, MAX_PREFERRED_HOSTS, dict_of, heartbeat_metrics,
                           is_bool, is_bytes, is_data_key, is_int, is_number, is_placement_row,
                           is_scalar, is_settings, is_str, is_type, list_of, optional, rows_of)
from .wire import StatusRows, SubmitRows, read_status_updates, read_submit_tasks

VERSION = 1

# Room for message headers and msgpack framing on top of the largest payload.
FRAME_OVERHEAD = 1 << 20

# The most cores an executor may register with (it runs a thread per core): the driver
# refuses more, and counts windows of up to MAX_CORES * tasks_per_core tasks in C integers.
MAX_CORES = 1 << 16


# Result rows the driver sends a client ahead of what it says it took (``ResultsTaken``):
# a frame holds one at least, so its queue stays under the ROUTER's high-water mark.
RESULTS_WINDOW_ROWS = 50_000


# The driver's answer to a client it does not know (a client of an earlier driver
# incarnation on the same port), as a task error and as an AdminReply error.
UNKNOWN_CLIENT = ("this driver does not know the client's connection (the driver restarted "
                  "since the client connected?): connect a new client")


def function_digest(blob):
    """The name of a pickled function on the wire: its 16-byte BLAKE2b. The driver refuses a
    function sent under any other name, so that no client can put its own code under the
    name of another client's function."""
    return hashlib.blake2b(blob, digest_size=16).digest()


def frame_limit(max_message_size):
    """Largest frame a receiver accepts when payloads are at most ``max_message_size``."""
    return max_message_size + FRAME_OVERHEAD


# ---------------------------------------------------------------- messages


def _message(msg_type, *checks):
    """A message type (a ``Message`` record) of ``msg_type``, its fields checked on decode
    by ``checks``, one per field."""
    def wrap(cls):
        cls = record(cls)
        cls.TYPE = msg_type
        cls.CHECKS = checks
        assert len(cls.FIELDS) == len(checks), cls
        _BY_TYPE[msg_type] = cls
        return cls
    return wrap


_BY_TYPE = {}


# -- executor -> driver

@_message(MsgType.REGISTER_EXECUTOR, is_str, is_str, is_int, is_str, is_int)
class RegisterExecutor(Message):
    executor_id: str
    hostname: str
    cores: int
    app_id: str
    pid: int


@_message(MsgType.STATUS_UPDATES, is_int, is_number, rows_of(int, int, int, bytes, read_as=StatusRows))
class StatusUpdates(Message):
    incarnation: int
    busy: float    # seconds the executor spent running the tasks reported here
    updates: list  # [[task_id, attempt, TaskState, payload], ...]


# its metrics: any dict, of which the driver keeps the known figures (heartbeat_metrics)
@_message(MsgType.HEARTBEAT, is_int, is_str, is_type(dict))
class Heartbeat(Message):
    incarnation: int
    executor_id: str
    metrics: dict  # HEARTBEAT_METRICS: rss (bytes), cpu (percent), busy threads, functions held


@_message(MsgType.REMOVE_EXECUTOR, is_str, is_str, lambda v: isinstance(v, bool))
class RemoveExecutor(Message):
    executor_id: str
    reason: str  # why the executor leaves
    charge_tasks: bool  # whether the tasks it held count this loss as one of their failures


@_message(MsgType.ATTACH_RELIEF, is_int, is_str, is_int, is_bytes)
class AttachRelief(Message):
    """The first message of an executor's second connection, its relief thread's own: the
    driver sends it copies of the kills and stops it sends the executor, and hears its
    heartbeats while the executor's loop thread runs a long task. ``token`` proves it: the
    driver gave it to that executor alone, in its RegisteredExecutor."""
    incarnation: int
    executor_id: str
    pid: int
    token: bytes


@_message(MsgType.EXECUTOR_HELLO, is_int)
class ExecutorHello(Message):
    """An executor asks the driver's settings before it registers (over a connection of
    its own, closed then); answered with a ClientWelcome."""
    pid: int


# -- driver -> executor

@_message(MsgType.REGISTERED_EXECUTOR, is_int, is_settings, is_bytes)
class RegisteredExecutor(Message):
    incarnation: int
    settings: dict
    relief_token: bytes  # what the executor's second connection proves itself with


@_message(MsgType.REGISTER_EXECUTOR_FAILED, is_str)
class RegisterExecutorFailed(Message):
    reason: str


@_message(MsgType.LAUNCH_TASKS, dict_of(is_bytes, is_bytes), rows_of(int, int, bytes, bytes))
class LaunchTasks(Message):
    functions: dict  # function digest -> cloudpickled function, for digests new to this executor
    tasks: list      # [[task_id, attempt, function digest, pickled (args, kwargs)], ...]


@_message(MsgType.KILL_TASK, is_int, is_int, is_str)
class KillTask(Message):
    task_id: int
    attempt: int
    reason: str


@_message(MsgType.STOP_EXECUTOR, is_str)
class StopExecutor(Message):
    reason: str


@_message(MsgType.SHUTDOWN)
class Shutdown(Message):
    pass


@_message(MsgType.HEARTBEAT_ACK, is_int, is_number)
class HeartbeatAck(Message):
    incarnation: int
    next_in: float = 0.0  # seconds until the executor's next heartbeat; 0: at its own interval


@_message(MsgType.DECOMMISSION_EXECUTOR, is_str)
class DecommissionExecutor(Message):
    """Take no new tasks, give back the unstarted ones (RETURNED), finish the running
    ones, then exit 0."""
    reason: str


@_message(MsgType.PROBE)
class Probe(Message):
    pass


@_message(MsgType.RETURN_TASKS, is_int)
class ReturnTasks(Message):
    """Give back up to ``count`` tasks not started yet (RETURNED), the newest first: they
    wait here behind a long task while cores elsewhere are idle."""
    count: int


@_message(MsgType.FORGET_FUNCTIONS, list_of(is_bytes))
class ForgetFunctions(Message):
    """From a client: it no longer needs these functions it sent (it sends one again with
    the next task that does). From the driver to an executor: drop them, no connected
    client needs them; a later LaunchTasks that needs one carries it again. Tasks already
    queued keep theirs."""
    digests: list


# -- client -> driver

@_message(MsgType.CLIENT_HELLO, is_int)
class ClientHello(Message):
    pid: int


@_message(MsgType.SUBMIT_TASKS, dict_of(is_bytes, is_bytes), rows_of(int, bytes, bytes, int, read_as=SubmitRows))
class SubmitTasks(Message):
    functions: dict  # digest -> cloudpickled function, for digests new to the driver
    tasks: list      # [[client task id, function digest, pickled (args, kwargs), retries], ...]
    # retries: how many times the task is run again after it raises (0: never)


@_message(MsgType.TASK_PLACEMENT, list_of(is_placement_row))
class TaskPlacement(Message):
    """The options of some tasks of the SubmitTasks that follows it: the driver keeps them
    for that message alone. A task absent here has none."""
    tasks: list  # [[client task id, [preferred host, ...], speculative], ...]


@_message(MsgType.CANCEL_TASKS, list_of(is_int))
class CancelTasks(Message):
    task_ids: list  # client task ids


@_message(MsgType.CANCEL_QUEUED_TASKS, is_int)
class CancelQueuedTasks(Message):
    """Cancel the client's tasks that no executor holds (``shutdown(cancel_futures=True)``).
    The driver sends their KILLED results, then an AdminReply with their number."""
    request_id: int


@_message(MsgType.RESULTS_TAKEN, is_int, is_int)
class ResultsTaken(Message):
    """The client has taken ``rows`` more results off its connection, in TaskResults
    frames of ``size`` bytes in all. The driver keeps at most ``RESULTS_WINDOW_ROWS`` rows
    and ``client_results_window`` bytes sent and not yet taken; a client says so once it
    has taken a quarter of either since it last said."""
    rows: int
    size: int


@_message(MsgType.STOP_EXECUTORS)
class StopExecutors(Message):
    pass


@_message(MsgType.CLIENT_GOODBYE)
class ClientGoodbye(Message):
    pass


# -- driver -> client

@_message(MsgType.CLIENT_WELCOME, is_int, is_str, is_settings)
class ClientWelcome(Message):
    incarnation: int
    app_id: str
    settings: dict


@_message(MsgType.TASK_RESULTS, rows_of(int, int, bytes))
class TaskResults(Message):
    results: list  # [[client task id, TaskState, payload], ...]


@_message(MsgType.ADMIN_REPLY, is_int, lambda v: isinstance(v, bool), lambda v: True)
class AdminReply(Message):
    request_id: int
    ok: bool
    value: object  # the result, or the error text when not ok


# -- client -> driver: an administrator's operations (``AdminOp``), each answered by an
# AdminReply with its request id; types are checked here, meanings by the driver

def _admin(op, *checks):
    """A message type for admin operation ``op``: a request id, then ``checks``."""
    def wrap(cls):
        cls = _message(MsgType(op), is_int, *checks)(cls)
        cls.OP = op
        ADMIN_MESSAGES[op] = cls
        return cls
    return wrap


ADMIN_MESSAGES = {}  # AdminOp -> its message type


class AdminMessage(Message):
    """Base of the admin operations' messages: ``args()`` are the operation's arguments."""

    # OP: its AdminOp, set by _admin

    def args(self):
        return [getattr(self, name) for name in self.FIELDS[1:]]


@_admin(AdminOp.PING)
class AdminPing(AdminMessage):
    request_id: int


@_admin(AdminOp.EXECUTOR_IDS)
class AdminExecutorIds(AdminMessage):
    request_id: int


@_admin(AdminOp.TOTAL_CORES)
class AdminTotalCores(AdminMessage):
    request_id: int


@_admin(AdminOp.STATUS)
class AdminStatus(AdminMessage):
    request_id: int


@_admin(AdminOp.IS_EXECUTOR_ACTIVE, is_str)
class AdminIsExecutorActive(AdminMessage):
    request_id: int
    executor_id: str


@_admin(AdminOp.DECOMMISSION_EXECUTORS, list_of(is_str))
class AdminDecommissionExecutors(AdminMessage):
    request_id: int
    executor_ids: list


@_admin(AdminOp.DECOMMISSION_EXECUTORS_ON_HOST, is_str)
class AdminDecommissionExecutorsOnHost(AdminMessage):
    request_id: int
    host: str


@_admin(AdminOp.REQUEST_TOTAL_EXECUTORS, is_int, is_int, optional(dict_of(is_str, is_int)))
class AdminRequestTotalExecutors(AdminMessage):
    request_id: int
    n: int
    locality_aware_tasks: int
    host_to_local_task_count: object  # {host: task count} or None


@_admin(AdminOp.REQUEST_EXECUTORS, is_int)
class AdminRequestExecutors(AdminMessage):
    request_id: int
    n: int


@_admin(AdminOp.KILL_EXECUTORS, list_of(is_str), is_bool, is_bool)
class AdminKillExecutors(AdminMessage):
    request_id: int
    executor_ids: list
    replace: bool
    force: bool


@_admin(AdminOp.KILL_EXECUTORS_ON_HOST, is_str)
class AdminKillExecutorsOnHost(AdminMessage):
    request_id: int
    host: str


# -- data: task arguments, results and broadcast values over DATA_PART_MIN bytes travel as
# parts of their own (``data_frames``), never copied into a body; the driver keeps and
# forwards them without reading them

def _data_message(msg_type, *checks):
    """A message type whose last field, ``parts``, is a list of buffers."""
    def wrap(cls):
        cls = _message(msg_type, *checks, is_parts)(cls)
        DATA_MESSAGES.add(cls)
        return cls
    return wrap


DATA_MESSAGES = set()


@_data_message(MsgType.PUT_DATA, is_data_key, is_int)
class PutData(Message):
    """Client -> driver: keep ``parts`` under ``key`` until a ForgetData. ``task_id`` is
    the client task whose arguments they are, or -1 for a broadcast value; a DataStored
    answers a broadcast, and a task's data only when it is refused."""
    key: bytes
    task_id: int
    parts: list


@_message(MsgType.DATA_STORED, is_data_key, is_int, is_str)
class DataStored(Message):
    """Driver -> client: what became of a PutData; ``error`` is empty when it is kept."""
    key: bytes
    task_id: int
    error: str


@_message(MsgType.FORGET_DATA, list_of(is_data_key))
class ForgetData(Message):
    """Client -> driver: drop this data of yours. Driver -> executor: drop these
    broadcast values, destroyed."""
    keys: list


@_message(MsgType.GET_DATA, list_of(is_data_key))
class GetData(Message):
    """Executor -> driver: send the data under these keys (a Data each)."""
    keys: list


@_data_message(MsgType.DATA, is_data_key, is_str)
class Data(Message):
    """Driver -> executor: the data under ``key``, or ``error`` (and no parts) if the
    driver holds none."""
    key: bytes
    error: str
    parts: list


@_data_message(MsgType.RESULT_DATA, is_int, is_int, is_data_key, is_int)
class ResultData(Message):
    """Executor -> driver: the parts of the result of this attempt, sent just before its
    status row; the driver passes them on to the task's client as a TaskData."""
    task_id: int
    attempt: int
    key: bytes
    size: int  # the bytes of the parts
    parts: list


@_data_message(MsgType.TASK_DATA, is_int, is_data_key)
class TaskData(Message):
    """Driver -> client: the parts of a result that follows, named by its key."""
    client_task_id: int
    key: bytes
    parts: list


# ---------------------------------------------------------------- batching
# no frame carries more than ``limit`` payload bytes (MAXMSGSIZE is ``frame_limit(limit)``)

def batch_rows(rows, payload_index, limit):
    """Split ``rows`` (lists) into lists whose payloads add up to at most ``limit``."""
    batch, size = [], 0
    for row in rows:
        row_size = len(row[payload_index])
        if batch and size + row_size > limit:
            yield batch
            batch, size = [], 0
        batch.append(row)
        size += row_size
    if batch:
        yield batch


# ---------------------------------------------------------------- encode / decode

class FunctionBlob:
    """A cloudpickled function as the driver holds it (``len`` is its size): packed as its
    bytes, and weakly referenceable, so that the driver learns when no task holds a
    function any more."""

    __slots__ = ("data", "__weakref__")

    def __init__(self, data):
        self.data = data

    def __len__(self):
        return len(self.data)


def _pack_other(obj):
    if type(obj) is FunctionBlob:
        return obj.data
    if type(obj) is StatusRows or type(obj) is SubmitRows:  # compiled (the reference's are lists)
        return obj.rows()
    raise TypeError(f"cannot pack {type(obj).__name__}")


_packer = msgpack.Packer(use_bin_type=True, default=_pack_other)


def frame_header(cls):
    """The bytes a frame of message type ``cls`` starts with: the version, then the type."""
    return bytes((VERSION, cls.TYPE))


class Encoded:
    """A message already encoded (``frame``, a frame of message type ``cls``)."""

    __slots__ = ("cls", "frame")

    def __init__(self, cls, frame):
        self.cls = cls
        self.frame = frame


def message_name(msg):
    """The name of ``msg``'s message type, for logs."""
    return (msg.cls if type(msg) is Encoded else type(msg)).__name__


def encode(msg):
    """The frame for ``msg``: header bytes followed by the msgpack body (for a data
    message, its parts after it: see ``encode_parts`` to send them without copying)."""
    if type(msg) is Encoded:
        return msg.frame
    if type(msg) in DATA_MESSAGES:
        return b"".join(encode_parts(msg))
    body = [getattr(msg, name) for name in msg.FIELDS]
    return bytes((VERSION, msg.TYPE)) + _packer.pack(body)


def encode_parts(msg):
    """A data message as frames: its head, then its parts, not copied."""
    values = [getattr(msg, name) for name in msg.FIELDS]
    return [encode_head(bytes((VERSION, msg.TYPE)), values[:-1], msg.parts, _packer),
            *msg.parts]


# The per-task messages the wire's readers read, their rows left in the frame.
_READ_BY_FAST_PATH = {StatusUpdates: read_status_updates, SubmitTasks: read_submit_tasks}


def decode(frame, max_size=None):
    """The message in ``frame``; ``ProtocolError`` says what is wrong with a bad one. A
    data message may also come as a tuple of frames: its head, then its parts."""
    if not isinstance(frame, (bytes, bytearray, memoryview)):
        if type(frame) is tuple and frame and isinstance(frame[0], bytes):
            return _decode_parts(frame, max_size)
        raise ProtocolError(f"frame of type {type(frame).__name__}")
    size = len(frame)
    if size < 3:
        raise ProtocolError(f"frame of {size} bytes is too short")
    if max_size is not None and size > max_size:
        raise ProtocolError(f"frame of {size} bytes exceeds the limit of {max_size} bytes")
    if frame[0] != VERSION:
        raise ProtocolError(f"protocol version {frame[0]}, expected {VERSION}")
    cls = _BY_TYPE.get(frame[1])
    if cls is None:
        raise ProtocolError(f"unknown message type {frame[1]}")
    if cls in DATA_MESSAGES:
        return read_data(cls, frame, _check_fields)
    read = _READ_BY_FAST_PATH.get(cls)
    if read is not None:  # the rows checked and left in the frame
        try:
            return cls(*read(frame if type(frame) is bytes else bytes(frame), 2))
        except ValueError as exc:
            raise ProtocolError(f"{cls.__name__}: {exc}") from None
    try:
        body = msgpack.unpackb(memoryview(frame)[2:], raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on junk
        raise ProtocolError(f"{cls.__name__}: undecodable body ({exc})") from None
    if not isinstance(body, list) or len(body) != len(cls.CHECKS):
        raise ProtocolError(f"{cls.__name__}: expected {len(cls.CHECKS)} fields")
    _check_fields(cls, body)
    return cls(*body)


def _decode_parts(frames, max_size):
    head = frames[0]
    if len(head) < 3 or head[0] != VERSION:
        raise ProtocolError("a message of several frames with a bad head")
    cls = _BY_TYPE.get(head[1])
    if cls not in DATA_MESSAGES:
        raise ProtocolError(f"a message of {len(frames)} frames, expected 1")
    if max_size is not None and any(len(part) > max_size for part in frames):
        raise ProtocolError(f"a frame over the limit of {max_size} bytes")
    return read_data(cls, frames, _check_fields)


def check(msg):
    """``ProtocolError`` unless ``msg``'s fields have the shapes ``decode`` accepts: the
    same checks for a message handed over in this process, without a frame."""
    _check_fields(type(msg), [getattr(msg, name) for name in msg.FIELDS])


def _check_fields(cls, values):
    for name, check_field, value in zip(cls.FIELDS, cls.CHECKS, values):
        if not check_field(value):
            raise ProtocolError(f"{cls.__name__}: field {name} has the wrong type")
