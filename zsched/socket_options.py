"""The ZMTP heartbeat options of every zsched connection, in one place; and how a data
message's frames are sent on a socket."""
import zmq

from .data_frames import part_size

# A part smaller than this is copied into its frame: below it, zmq's copy is cheaper
# than tracking a buffer that zmq releases later.
_COPY_BELOW = 64 * 1024


def heartbeat_options(config):
    """The socket options for ``config``'s ``zmq_heartbeat_*``: ping every interval, drop a
    silent peer after the timeout, and ask the peer to drop this side after as long."""
    timeout_ms = int(config.zmq_heartbeat_timeout * 1000)
    return {zmq.HEARTBEAT_IVL: int(config.zmq_heartbeat_interval * 1000),
            zmq.HEARTBEAT_TIMEOUT: timeout_ms,
            zmq.HEARTBEAT_TTL: timeout_ms}


def set_heartbeats(sock, config):
    """Give ``sock`` the heartbeats of ``config``, for the connections it makes from now."""
    for option, value in heartbeat_options(config).items():
        sock.set(option, value)


def send_frames(sock, frames, flags=0):
    """Send ``frames`` as one multipart message; large ones without copying (zmq holds a
    reference until it has sent them). zmq.Again as a send does, before any frame left."""
    last = len(frames) - 1
    more = flags | zmq.SNDMORE
    for index, frame in enumerate(frames):
        sock.send(frame, more if index < last else flags, copy=part_size(frame) < _COPY_BELOW)


def recv_parts(sock):
    """The frames left of the message being received, as writable views of zmq's buffers
    (not copied)."""
    parts = [sock.recv(copy=False).buffer]
    while sock.rcvmore:
        parts.append(sock.recv(copy=False).buffer)
    return parts
