"""Task arguments and results as they travel: a pickle, with its large buffers apart.

A small value travels as its pickle, in the task's row (``pickle`` protocol 5; cloudpickle
for lambdas and the like). A value that holds DATA_PART_MIN bytes or more (a numpy array,
a ``bytearray``, ``bytes``, a ``memoryview``) is pickled with those buffers out of band:
they are never copied into the pickle. Such a payload travels as parts of a data message
(``protocol.PutData``, ``ResultData``): the in-band pickle first, then the buffers. The
row then holds a reference instead, ``REF`` then the msgpack of ``[key, broadcasts,
pickle]``: the data's key (or None), the keys of the broadcast values the value uses
(``broadcast.Broadcast``), and the in-band pickle when it is not in the data.

The receiver unpickles from the parts it received (``loads``): numpy arrays are views of
them, writable, as the stdlib pools give them.
"""
import io
import os
import pickle
import threading
from itertools import count

import cloudpickle
import msgpack

from .data_frames import REF, REF_BYTE, is_reference, read_reference, reference  # noqa: F401 (the reference's)

# A buffer of this size or more travels as a part of its own.
DATA_PART_MIN = 64 * 1024
_PROTOCOL = 5

_collecting = threading.local()  # the broadcast keys met while pickling, per thread


class _GoesApart(Exception):
    """A buffer large enough to travel apart."""


def small_buffers_in_band(buffer):
    """``pickle.dumps``'s ``buffer_callback`` for a value's row: a small buffer stays in
    band, a large one stops the pickling (``quick_pickle``)."""
    if buffer.raw().nbytes >= DATA_PART_MIN:
        raise _GoesApart
    return True  # in band


def quick_pickle(value, _dumps=pickle.dumps):
    """The plain pickle of ``value`` when small, else None: ``dumps`` must take it (it holds
    a large buffer, is large, or needs cloudpickle). This is the path of tiny tasks: one
    ``pickle.dumps``, which gives up at the first large buffer, before any copy of it."""
    try:
        data = _dumps(value, _PROTOCOL, buffer_callback=small_buffers_in_band)
    except Exception:
        return None
    return data if len(data) < DATA_PART_MIN else None


def note_broadcast(key):
    """Called by a Broadcast handle being pickled: the value refers to ``key``."""
    keys = getattr(_collecting, "keys", None)
    if keys is not None and key not in keys:
        keys.append(key)


class DataKeys:
    """Keys for the data of one client or executor: 8 random bytes, then a count."""

    def __init__(self):
        self._prefix = os.urandom(8)
        self._count = count(1)

    def __call__(self):
        return self._prefix + next(self._count).to_bytes(8, "big")


def dumps(value):
    """``(pickle, buffers, broadcasts)``: the in-band pickle of ``value``, its buffers of
    DATA_PART_MIN bytes or more (out of band, not copied), and the keys of the broadcast
    values it refers to."""
    _collecting.keys = broadcasts = []
    buffers = []
    try:
        try:
            data = pickle.dumps(value, _PROTOCOL, buffer_callback=large_buffers_apart(buffers))
        except Exception:  # a lambda, a memoryview: plain pickle cannot, ours can
            data = None
        if data is None or len(data) >= DATA_PART_MIN:
            wrapped = _wrap_large(value, 2)
            if data is None or wrapped is not value:
                del buffers[:], broadcasts[:]
                out = io.BytesIO()
                _OutOfBand(out, _PROTOCOL, buffer_callback=large_buffers_apart(buffers)).dump(wrapped)
                data = out.getvalue()
    finally:
        _collecting.keys = None
    return data, [buffer.raw() for buffer in buffers], broadcasts


def large_buffers_apart(buffers):
    """A pickle ``buffer_callback`` that keeps a small buffer in band and puts a large
    one in ``buffers``."""
    def take(buffer):
        if buffer.raw().nbytes < DATA_PART_MIN:
            return True  # in band
        buffers.append(buffer)
        return False
    return take


def _wrap_large(value, depth):
    """``value`` with its large ``bytes`` and ``bytearray`` (pickled in band by pickle
    itself), down to ``depth`` levels of tuples, lists and dicts, wrapped to go out of
    band; ``value`` itself if it holds none."""
    kind = type(value)
    if (kind is bytes or kind is bytearray) and len(value) >= DATA_PART_MIN:
        return _Large(value)
    if depth == 0 or kind not in (tuple, list, dict):
        return value
    if kind is dict:
        items = {key: _wrap_large(item, depth - 1) for key, item in value.items()}
        changed = any(items[key] is not item for key, item in value.items())
    else:
        items = kind(_wrap_large(item, depth - 1) for item in value)
        changed = any(new is not old for new, old in zip(items, value))
    return items if changed else value


class _Large:
    """A large ``bytes`` or ``bytearray``, pickled out of band."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __reduce__(self):
        rebuild = _bytes_from if type(self.value) is bytes else bytearray
        return rebuild, (pickle.PickleBuffer(self.value),)


class _OutOfBand(cloudpickle.Pickler):
    """cloudpickle, with large memoryviews out of band too."""

    def reducer_override(self, obj):
        if type(obj) is memoryview:
            if obj.nbytes >= DATA_PART_MIN and obj.c_contiguous:
                return _view_from, (pickle.PickleBuffer(obj), obj.format, obj.shape)
            data = obj.tobytes()  # read-only where the view was, as out of band
            return _view_from, (data if obj.readonly else bytearray(data), obj.format, obj.shape)
        return super().reducer_override(obj)


def _bytes_from(buffer):
    return bytes(buffer)


def _view_from(buffer, fmt, shape):
    view = memoryview(buffer).cast("B")
    return view.cast(fmt, shape) if fmt != "B" or len(shape) != 1 else view


def cut(buffer, chunk):
    """``buffer`` as views of at most ``chunk`` bytes each."""
    view = memoryview(buffer).cast("B")
    return [view[start:start + chunk] for start in range(0, max(len(view), 1), chunk)]


def manifest(chunk_keys, counts):
    """The first part of a broadcast's root: the keys of its chunks, and how many chunks
    each of its buffers was cut into (both empty: its buffers are in the root)."""
    return msgpack.packb([chunk_keys, counts], use_bin_type=True)


def read_manifest(part):
    """``(chunk keys, counts)`` of a broadcast's manifest; ValueError if malformed."""
    try:
        chunk_keys, counts = msgpack.unpackb(part, raw=False)
    except Exception as exc:
        raise ValueError(f"a malformed broadcast manifest ({exc})") from None
    if type(chunk_keys) is not list or type(counts) is not list or sum(counts) != len(chunk_keys):
        raise ValueError("a malformed broadcast manifest")
    return chunk_keys, counts


def joined(chunks, counts):
    """The buffers that ``chunks`` were cut from, by ``counts`` (one copy per buffer of
    several chunks, writable)."""
    buffers, start = [], 0
    for n in counts:
        pieces = chunks[start:start + n]
        buffers.append(pieces[0] if n == 1 else bytearray().join(pieces))
        start += n
    return buffers


def loads(data, parts=()):
    """The value of the pickle ``data``, its out-of-band buffers taken from ``parts``."""
    return pickle.loads(data, buffers=parts)
