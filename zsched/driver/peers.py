"""The driver's peers: one ``Peer`` interface for whatever carries a connection.

A peer of the ROUTER socket (``RouterPeer``), an executor or client over a pair of pipes
(``LinkPeer``) and a client in the driver's own process (``InProcessPeer``) are sent to with
the same call, ``send(msg)``, which never blocks and returns None when the peer took the
message, else what is wrong ("gone", "not reading (its queue is full)"). Each peer owns its
send queue (``queued()``), and carries its role, set when it registers or says hello."""
import enum
import logging

import zmq

from .. import protocol as p
from ..socket_state import SocketState
from ..security import ZapHandler, make_server
from .loop import POLLIN, POLLOUT

log = logging.getLogger("zsched.driver")

# send flags as plain ints: send_multipart's ``flags | SNDMORE`` on zmq's Flag makes an
# enum member per message (about a microsecond)
_NOBLOCK = int(zmq.NOBLOCK)
_NOBLOCK_SNDMORE = int(zmq.NOBLOCK) | int(zmq.SNDMORE)
_LINK_QUEUE_LIMIT = 100_000  # frames queued for a piped peer not reading: the ROUTER's sndhwm
GONE = "gone"
NOT_READING = "not reading (its queue is full)"


class Role(enum.Enum):
    """What a peer is to the driver: known once it registers or says hello."""
    UNKNOWN = "unknown"
    EXECUTOR = "executor"
    CLIENT = "client"
    ADMINISTRATOR = "administrator"


class Peer:
    """One connection to the driver. ``rid`` names it: a ROUTER routing id, or one made up
    for the other transports that no ROUTER peer can have (it starts with a zero byte and is
    not five bytes long). ``counters`` are the driver's traffic counters."""

    __slots__ = ("counters", "rid", "role")

    def __init__(self, rid, counters):
        self.rid = rid
        self.role = Role.UNKNOWN
        self.counters = counters

    def send(self, msg):
        """Send ``msg`` without blocking: None when the peer took it, else the problem."""
        raise NotImplementedError

    def queued(self):
        """Messages sent to this peer and not yet taken by it (held by this side)."""
        return 0

    def close(self):
        """Stop talking to the peer; nothing more is sent or received."""


class RouterPeer(Peer):
    """A peer of the ROUTER socket: its queue is the socket's, bounded by its sndhwm."""

    __slots__ = ("router",)

    def __init__(self, rid, counters, router):
        super().__init__(rid, counters)
        self.router = router

    def send(self, msg):
        frame = p.encode(msg)
        rid = self.rid
        try:
            router = self.router
            # ROUTER: the routing id frame alone decides whether the peer takes the message
            router.send(rid, _NOBLOCK_SNDMORE)
            router.send(frame, _NOBLOCK)
        except zmq.Again:
            return NOT_READING
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                raise
            return GONE
        counters = self.counters
        counters["messages_out"] += 1
        counters["bytes_out"] += len(rid) + len(frame)
        return None

    def probe(self):
        """Send a Probe: False if the peer is gone (a busy one is not)."""
        try:
            self.router.send_multipart((self.rid, _PROBE), _NOBLOCK)
        except zmq.Again:
            return True
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                raise
            return False
        return True


_PROBE = p.encode(p.Probe())


class LinkPeer(Peer):
    """A peer over a pair of pipes (a ``PipeLink``): its end of file says it is gone. Its
    queue is the link's, polled for room by ``loop`` while output waits."""

    __slots__ = ("_on_writable", "link", "loop", "writing")

    def __init__(self, rid, counters, link, loop, on_readable, on_writable):
        super().__init__(rid, counters)
        self.link = link
        self.loop = loop
        self.writing = False
        loop.watch(link.read_fd, on_readable, POLLIN)
        self._on_writable = on_writable

    def send(self, msg):
        frame = p.encode(msg)
        link = self.link
        try:
            link.send(frame)
        except BrokenPipeError:
            return GONE
        if link.queued_frames > _LINK_QUEUE_LIMIT:
            return NOT_READING
        if link.wants_write and not self.writing:
            self.writing = True  # polled until written
            self.loop.watch(link.write_fd, self._on_writable, POLLOUT)
        counters = self.counters
        counters["messages_out"] += 1
        counters["bytes_out"] += len(frame)
        return None

    def queued(self):
        return self.link.queued_frames

    def receive(self):
        """The frames the link holds now."""
        frames = self.link.receive()
        counters = self.counters
        counters["messages_in"] += len(frames)
        counters["bytes_in"] += sum(map(len, frames))
        return frames

    def flush(self, seconds=None):
        """Write what is queued (for ``seconds`` at most, else what fits now);
        BrokenPipeError when the peer is gone."""
        if seconds is not None:
            self.link.flush_within(seconds)
            return
        if self.link.flush() and self.writing:
            self.writing = False
            self.loop.unwatch(self.link.write_fd)

    def close(self):
        link = self.link
        self.loop.unwatch(link.read_fd)
        if self.writing:
            self.writing = False
            self.loop.unwatch(link.write_fd)
        link.close()


class InProcessPeer(Peer):
    """A client in the driver's process: what is sent to it is handed to ``deliver`` in the
    loop's thread, no frame made; it queues nothing on this side. ``receive()`` returns the
    messages (objects, not frames) it queued for the driver; ``close()`` calls ``stopped``.""" 

    __slots__ = ("deliver", "receive", "stopped")

    def __init__(self, rid, counters, deliver, receive, stopped):
        super().__init__(rid, counters)
        self.deliver = deliver
        self.receive = receive
        self.stopped = stopped

    def send(self, msg):
        self.counters["messages_out"] += 1
        try:
            self.deliver(msg)
        except Exception:
            log.exception("error handing %s to client %s", type(msg).__name__, self.rid.hex())

    def close(self):
        """Tell the client that the driver stopped."""
        try:
            self.stopped()
        except Exception:
            log.exception("error telling a client in this process that the driver stopped")


def open_router(context, config, keys, host, port, extra_urls=()):
    """The driver's ROUTER socket, bound at ``host``:``port`` (0: a free one) and at
    ``extra_urls``, with the ZAP handler of ``keys`` (None: insecure) and a monitor of lost
    connections: (router, its SocketState, zap handler or None, monitor, port)."""
    router = context.socket(zmq.ROUTER)
    router.router_mandatory = 1
    router.linger = 1000
    router.sndhwm = 100_000
    router.rcvhwm = 100_000
    router.maxmsgsize = p.frame_limit(config.max_message_size)
    router.heartbeat_ivl = int(config.zmq_heartbeat_interval * 1000)
    router.heartbeat_timeout = int(config.zmq_heartbeat_timeout * 1000)
    router.heartbeat_ttl = int(config.zmq_heartbeat_timeout * 1000)
    zap = None
    if keys is not None:
        zap = ZapHandler(context, keys)
        make_server(router, keys)
    else:
        log.warning("the bus is NOT authenticated or encrypted (insecure mode): "
                    "anyone who can reach the port can run code on the executors")
    if port == 0:
        port = router.bind_to_random_port(f"tcp://{host}")
    else:
        router.bind(f"tcp://{host}:{port}")
    for url in extra_urls:
        router.bind(url)
    # a lost connection (peer process gone, or silent past the ZMTP heartbeat timeout)
    # is an event here; which peer it was is found by probing
    monitor = router.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    # SocketState: its ZMQ_EVENTS and ZMQ_RCVMORE, read cheaply
    return router, SocketState(router), zap, monitor, port
