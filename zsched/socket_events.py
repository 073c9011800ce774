"""Events of ZeroMQ's socket monitor, read here rather than with ``zmq.utils.monitor``,
which imports asyncio: about 50 ms off the start of every driver, executor and client."""
import struct

_EVENT = struct.Struct("=hi")  # the first frame: 16-bit event id, 32-bit value, no padding


def parse_event(frames):
    """``(event id, value, endpoint)`` of a monitor message (two frames)."""
    if len(frames) != 2 or len(frames[0]) != _EVENT.size:
        raise ValueError(f"not a socket monitor event: {frames!r}")
    event, value = _EVENT.unpack(frames[0])
    return event, value, frames[1]


def recv_event(monitor, flags=0):
    """Receive and parse the next event on ``monitor`` (from ``get_monitor_socket``)."""
    return parse_event(monitor.recv_multipart(flags))
