"""Arguments and results as pickles with their large buffers apart (``payload``), and the
frames of the data messages (``data_frames``)."""
import array
import pickle

import numpy
import pytest

from zsched import payload as pl
from zsched import protocol as p
from zsched.broadcast import Broadcast
from zsched.errors import ProtocolError

pytestmark = pytest.mark.unit

BIG = pl.DATA_PART_MIN


def round_trip(value):
    data, buffers, broadcasts = pl.dumps(value)
    parts = [bytearray(buffer) for buffer in buffers]  # as a receiver gets them
    return pl.loads(data, parts), data, buffers, broadcasts


@pytest.mark.parametrize("value", [
    numpy.arange(BIG // 8, dtype=numpy.float64), bytes(BIG), bytearray(BIG + 1),
    memoryview(bytes(BIG)), memoryview(array.array("d", range(BIG // 8))),
    {"k": [bytes(BIG), bytearray(BIG)]}, (bytes(BIG), bytes(BIG)),
], ids=["ndarray", "bytes", "bytearray", "memoryview", "memoryview d", "nested", "two"])
def test_large_buffers_travel_apart_and_come_back_equal(value):
    loaded, data, buffers, _ = round_trip(value)
    assert len(data) < 1024 and buffers
    assert sum(buffer.nbytes for buffer in buffers) >= BIG
    assert pickle.dumps(loaded) == pickle.dumps(value) if not isinstance(value, memoryview) \
        else (loaded.tobytes(), loaded.format, loaded.shape) == (value.tobytes(), value.format, value.shape)


@pytest.mark.parametrize("value", [0, "x", b"", bytes(BIG - 100), numpy.zeros(10), (lambda: 1)])
def test_small_values_stay_in_band(value):
    data, buffers, _ = pl.dumps(value)
    assert buffers == []


def test_quick_pickle_gives_up_at_a_large_buffer_and_at_a_large_pickle():
    assert pickle.loads(pl.quick_pickle((1, 2))) == (1, 2)
    assert pl.quick_pickle(numpy.zeros(BIG // 8)) is None
    assert pl.quick_pickle(bytes(BIG)) is None
    assert pl.quick_pickle(lambda: 1) is None  # cloudpickle's
    assert pl.quick_pickle(numpy.zeros(10)) is not None


def test_an_array_comes_back_writable_over_the_received_buffer():
    loaded, _, _, _ = round_trip(numpy.ones(BIG // 8))
    assert loaded.flags.writeable
    loaded[0] = 5.0


def test_references_name_the_data_and_the_broadcasts():
    handle = Broadcast(b"b" * 16)
    data, buffers, broadcasts = pl.dumps((handle, numpy.ones(BIG // 8)))
    assert broadcasts == [b"b" * 16] and len(buffers) == 1
    payload = pl.reference(b"k" * 16, broadcasts, None)
    assert pl.is_reference(payload) and not pl.is_reference(pickle.dumps(1))
    assert pl.read_reference(payload) == (b"k" * 16, [b"b" * 16], None)
    with pytest.raises(ValueError, match="malformed"):
        pl.read_reference(bytes((pl.REF,)) + b"\xc1")


def test_keys_are_sixteen_bytes_and_never_repeat():
    keys = pl.DataKeys()
    made = {keys() for _ in range(1000)}
    assert len(made) == 1000 and {len(key) for key in made} == {16}


def head(msg_type, body):
    import msgpack
    return bytes((p.VERSION, msg_type)) + msgpack.packb(body, use_bin_type=True)


@pytest.mark.parametrize("frame, words", [
    (head(p.MsgType.PUT_DATA, [b"k" * 16, 1, [5]]) + b"abc", "sizes"),
    (head(p.MsgType.PUT_DATA, [b"k" * 16, 1, [-1]]), "parts has the wrong type"),
    (head(p.MsgType.PUT_DATA, [b"k" * 16, 1, "x"]), "parts has the wrong type"),
    (head(p.MsgType.PUT_DATA, [b"k" * 16, 1, [0] * 65]), "parts has the wrong type"),
    (head(p.MsgType.PUT_DATA, [b"k" * 15, 1, []]), "field key"),
    (head(p.MsgType.PUT_DATA, [b"k" * 16, []]), "fields"),
    (bytes((p.VERSION, p.MsgType.DATA)) + b"\xc1", "undecodable"),
    ((head(p.MsgType.PUT_DATA, [b"k" * 16, 1, [3]]), b"abcd"), "sizes"),
    ((head(p.MsgType.PUT_DATA, [b"k" * 16, 1, [3]]) + b"x", b"abc"), "after the head"),
    ((head(p.MsgType.SHUTDOWN, []), b"abc"), "frames"),
    ((b"\x09\x1d", b"abc"), "bad head"),
])
def test_malformed_data_messages_are_protocol_errors(frame, words):
    with pytest.raises(ProtocolError, match=words):
        p.decode(frame)


def test_a_data_message_is_the_same_in_one_frame_or_several():
    msg = p.PutData(b"k" * 16, 7, [b"pickle", memoryview(numpy.arange(4.0)), b""])
    frames = p.encode_parts(msg)
    assert frames[1] is msg.parts[0]  # not copied
    one = p.decode(b"".join(bytes(frame) for frame in frames))
    several = p.decode(tuple(bytes(frame) if i == 0 else frame for i, frame in enumerate(frames)))
    for got in (one, several):
        assert (got.key, got.task_id) == (msg.key, 7)
        assert [bytes(part) for part in got.parts] == [bytes(part) for part in msg.parts]


def test_the_pipe_link_reads_every_data_message_into_a_writable_buffer():
    from zsched.pipe_link import WRITABLE_TYPES
    assert WRITABLE_TYPES == {cls.TYPE for cls in p.DATA_MESSAGES}
