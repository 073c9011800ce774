"""The frames of the data messages: large arguments, results and broadcast values, whose
bytes travel apart from the msgpack body, so that nobody copies them on the way.

A data message's last field is ``parts``: a list of buffers (``bytes``, ``bytearray``,
``memoryview``, ``pickle.PickleBuffer``). On the wire the message is its head, then the
parts' bytes, raw:

- the head is ``[version][type][msgpack body]``, the body holding the other fields and,
  in place of ``parts``, the list of their sizes;
- over ZeroMQ the head and each part are frames of one multipart message (sent without
  copying when large);
- over a pipe they are written as one link frame, head then parts (``PipeLink.send_parts``),
  and read back as views of that frame.

The receiver's parts are views of the frames it received: nothing is copied after the
read. ``protocol`` declares the data messages; this module reads and writes their frames.

A task's row then holds a reference to its data (``reference``): ``REF``, then the
msgpack of ``[key, broadcasts, pickle]``, which the driver reads to push the data along
with the task's launch, and never more.
"""
import msgpack

from .errors import ProtocolError

REF = 0x5A  # the first byte of a task row's payload that refers to data ("Z"); a pickle's is 0x80
REF_BYTE = bytes((REF,))  # the same, as a payload's first byte read as bytes

# Most parts a data message may have: a pickle's out-of-band buffers, and its in-band part.
MAX_PARTS = 64


def is_parts(value):
    """Whether ``value`` is a list of at most MAX_PARTS buffers (the parts of a message
    handed over in this process, not read from a frame)."""
    if type(value) is not list or len(value) > MAX_PARTS:
        return False
    try:
        for part in value:
            memoryview(part).release()
    except TypeError:
        return False
    return True


def part_size(part):
    """The bytes in ``part``."""
    return part.nbytes if type(part) is memoryview else memoryview(part).nbytes


def encode_head(header, fields, parts, packer):
    """The head frame: ``header`` (version and type bytes), then the msgpack body of
    ``fields`` with the parts' sizes in place of the parts."""
    return header + packer.pack([*fields, [part_size(part) for part in parts]])


def read(cls, frame, check_fields):
    """The data message of type ``cls`` in ``frame``: one frame holding head and parts
    (from a pipe, or a whole frame made by ``protocol.encode``), or a tuple, the head and
    each part as frames of their own (from ZeroMQ, or a client in the driver's process).
    The parts are views of the frames. ``check_fields(cls, values)`` checks the others."""
    if type(frame) is tuple:
        head, parts = frame[0], [memoryview(part).cast("B") for part in frame[1:]]
        values, end = _read_head(cls, head)
        if end != len(head):
            raise ProtocolError(f"{cls.__name__}: bytes after the head")
        sizes = values[-1]
        if sizes != [part.nbytes for part in parts]:
            raise ProtocolError(f"{cls.__name__}: the parts are not the sizes the head says")
    else:
        values, end = _read_head(cls, frame)
        sizes = values[-1]
        if sum(sizes) != len(frame) - end:
            raise ProtocolError(f"{cls.__name__}: the parts are not the sizes the head says")
        view = memoryview(frame)
        parts = []
        for size in sizes:
            parts.append(view[end:end + size])
            end += size
    values[-1] = parts
    check_fields(cls, values)
    return cls(*values)


def _read_head(cls, frame):
    """The body's values and where the body ends, the sizes of the parts checked."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    try:
        unpacker.feed(memoryview(frame)[2:2 + min(len(frame) - 2, 1 << 16)])
        values = unpacker.unpack()
    except Exception as exc:  # msgpack raises several unrelated types on junk
        raise ProtocolError(f"{cls.__name__}: undecodable head ({exc})") from None
    if type(values) is not list or len(values) != len(cls.CHECKS):
        raise ProtocolError(f"{cls.__name__}: expected {len(cls.CHECKS)} fields")
    sizes = values[-1]
    if (type(sizes) is not list or len(sizes) > MAX_PARTS
            or not all(type(size) is int and size >= 0 for size in sizes)):
        raise ProtocolError(f"{cls.__name__}: field parts has the wrong type")
    return values, 2 + unpacker.tell()


def reference(key, broadcasts, data):
    """The row payload that refers to data under ``key`` (or carries the pickle ``data``
    itself, when ``key`` is None) and to these broadcast values."""
    return REF_BYTE + msgpack.packb([key, broadcasts, data], use_bin_type=True)


def is_reference(payload):
    return len(payload) > 0 and payload[0] == REF


def read_reference(payload):
    """``(key, broadcasts, pickle)`` of a reference row payload; ValueError if malformed."""
    try:
        key, broadcasts, data = msgpack.unpackb(memoryview(payload)[1:], raw=False)
    except Exception as exc:
        raise ValueError(f"a malformed data reference ({exc})") from None
    if not (key is None or type(key) is bytes) or type(broadcasts) is not list:
        raise ValueError("a malformed data reference")
    return key, broadcasts, data
