"""The driver's peers: one ``Peer`` interface for whatever carries a connection.

A peer of the ROUTER socket (``RouterPeer``), an executor or client over a pair of pipes
(``LinkPeer``) and a client in the driver's own process (``InProcessPeer``) are sent to with
the same call, ``send(msg)``, which never blocks and returns None when the peer took the
message, else what is wrong ("gone", "not reading (its queue is full)"). Each peer owns its
send queue (``queued()``), and carries its role, fixed for the life of the connection.

What peers send comes in as frames, whatever carried them, and goes one way in:
``take(rid, frame)``, which decodes and checks it. A peer with a transport of its own (a
link, a client in this process) is read with ``receive()``; the ROUTER's peers share one
socket, read once for all of them (``Peers.receive_router``)."""
import enum
import itertools
import logging
import os

import zmq

from .. import protocol as p
from ..pipe_link import PipeLink
from ..data_frames import part_size
from ..socket_options import send_frames, set_heartbeats
from ..socket_state import SocketState
from ..security import (ADMINISTRATOR_USER, CLIENT_USER, EXECUTOR_USER, ZapHandler,
                        make_server)
from .loop import POLLIN, POLLOUT

log = logging.getLogger("zsched.driver")

# send flags as plain ints: ``flags | SNDMORE`` on zmq's Flag makes an enum member per
# message
_NOBLOCK = int(zmq.NOBLOCK)
_NOBLOCK_SNDMORE = int(zmq.NOBLOCK) | int(zmq.SNDMORE)
_DATA_MESSAGES = frozenset(p.DATA_MESSAGES)
_LINK_QUEUE_LIMIT = 100_000  # frames queued for a piped peer not reading: the ROUTER's sndhwm
GONE = "gone"
NOT_READING = "not reading (its queue is full)"


class Role(enum.Enum):
    """What a connection may do, fixed for its life. A client or executor credential fixes
    it when the connection is made; a connection holding the cluster secret (or any, on
    an insecure bus) is UNDECIDED until its first message, which decides it once."""
    UNDECIDED = "undecided"
    EXECUTOR = "executor"
    CLIENT = "client"


def role_of_user(user_id):
    """The role and executor id (or None) that a ZAP User-Id gives a connection; None for
    a User-Id no credential gives."""
    if not user_id or user_id == ADMINISTRATOR_USER:  # the cluster secret, or insecure
        return Role.UNDECIDED, None
    if user_id == CLIENT_USER:
        return Role.CLIENT, None
    if user_id.startswith(EXECUTOR_USER):
        return Role.EXECUTOR, user_id[len(EXECUTOR_USER):].decode()
    return None


class Peer:
    """One connection to the driver. ``rid`` names it: a ROUTER routing id, or one made up
    for the other transports that no ROUTER peer can have (it starts with a zero byte and is
    not five bytes long). ``role`` says what it may send; ``executor_id`` is the executor
    its credential (or its pipes) belongs to, if any. ``counters`` are the driver's traffic
    counters."""

    __slots__ = ("counters", "executor_id", "rid", "role")

    def __init__(self, rid, counters, role=Role.UNDECIDED, executor_id=None):
        self.rid = rid
        self.role = role
        self.executor_id = executor_id
        self.counters = counters

    def send(self, msg):
        """Send ``msg`` without blocking: None when the peer took it, else the problem."""
        raise NotImplementedError

    def receive(self):
        """The frames this peer sent that wait on this side, oldest first (a peer with a
        transport of its own; the ROUTER's peers are read through their shared socket)."""
        raise NotImplementedError

    def queued(self):
        """Messages sent to this peer and not yet taken by it (held by this side)."""
        return 0

    def close(self):
        """Stop talking to the peer; nothing more is sent or received."""


class RouterPeer(Peer):
    """A peer of the ROUTER socket: its queue is the socket's, bounded by its sndhwm."""

    __slots__ = ("router",)

    def __init__(self, rid, counters, router, role=Role.UNDECIDED, executor_id=None):
        super().__init__(rid, counters, role, executor_id)
        self.router = router

    def send(self, msg):
        data = type(msg) in _DATA_MESSAGES  # its head, then its parts, large ones not copied
        frame = p.encode_parts(msg) if data else p.encode(msg)
        rid = self.rid
        try:
            router = self.router
            if data:
                send_frames(router, [rid, *frame], _NOBLOCK)
            else:
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
        counters["bytes_out"] += len(rid) + (sum(map(part_size, frame)) if data else len(frame))
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

    def __init__(self, rid, counters, link, loop, on_readable, on_writable, role, executor_id):
        super().__init__(rid, counters, role, executor_id)
        self.link = link
        self.loop = loop
        self.writing = False
        loop.watch(link.read_fd, on_readable, POLLIN)
        self._on_writable = on_writable

    def send(self, msg):
        link = self.link
        data = type(msg) in _DATA_MESSAGES
        frame = p.encode_parts(msg) if data else p.encode(msg)
        try:
            link.send_parts(frame) if data else link.send(frame)
        except BrokenPipeError:
            return GONE
        if link.queued_frames > _LINK_QUEUE_LIMIT:
            return NOT_READING
        if link.wants_write and not self.writing:
            self.writing = True  # polled until written
            self.loop.watch(link.write_fd, self._on_writable, POLLOUT)
        counters = self.counters
        counters["messages_out"] += 1
        counters["bytes_out"] += sum(map(part_size, frame)) if data else len(frame)
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
    """A client in the driver's process (a ``channel.Endpoint``): what is sent to it is
    handed to its ``deliver`` in the loop's thread, no frame made, nothing queued on this
    side. What it queued for the driver is read as frames, checked like any peer's; after
    its goodbye it sends nothing (``said_goodbye``). ``close()`` tells it the driver stopped."""

    __slots__ = ("endpoint", "said_goodbye")

    def __init__(self, rid, counters, endpoint):
        super().__init__(rid, counters, Role.CLIENT)
        self.endpoint = endpoint
        self.said_goodbye = False

    def send(self, msg):
        self.counters["messages_out"] += 1
        try:
            self.endpoint.deliver(msg)
        except Exception as exc:
            log.exception("error handing %s to client %s", type(msg).__name__, self.rid.hex())
            return f"handing it {type(msg).__name__} failed ({exc!r})"
        return None

    def receive(self):
        frames = []
        if self.said_goodbye:
            return frames
        for msg in self.endpoint.take():
            try:
                if not isinstance(msg, p.Message):
                    raise TypeError(f"{type(msg).__name__} is not a message")
                frames.append(tuple(p.encode_parts(msg)) if type(msg) in _DATA_MESSAGES
                              else p.encode(msg))
            except (TypeError, ValueError, OverflowError) as exc:  # a frame is checked later
                log.warning("client %s queued what cannot be sent: %s", self.rid.hex(), exc)
                continue
            if type(msg) is p.ClientGoodbye:  # it sends nothing after its goodbye
                self.said_goodbye = True
                break
        counters = self.counters
        counters["messages_in"] += len(frames)
        counters["bytes_in"] += sum(map(len, frames))  # a data message: its head
        return frames

    def close(self, reason=None):
        """Tell the client that the driver stopped, or dropped it for ``reason``."""
        try:
            if reason is None:
                self.endpoint.stopped()
            else:
                self.endpoint.dropped(reason)
        except Exception:
            log.exception("error telling a client in this process that the driver stopped")


def open_router(context, config, keys, executor_keys, host, port, extra_urls=(), pings=True):
    """The driver's ROUTER socket, bound at ``host``:``port`` (0: a free one) and at
    ``extra_urls``, with the ZAP handler of ``keys`` and ``executor_keys`` (None: insecure)
    and a monitor of lost connections: (router, its SocketState, zap handler or None,
    monitor, port). With ``pings`` it sends ZMTP pings; it answers its peers' pings
    either way."""
    router = context.socket(zmq.ROUTER)
    router.router_mandatory = 1
    router.linger = 1000
    router.sndhwm = 100_000
    router.rcvhwm = 100_000
    router.maxmsgsize = p.frame_limit(config.max_message_size)
    router.backlog = 4096  # executors started together connect together (the kernel's limit applies)
    if pings:
        set_heartbeats(router, config)
    zap = None
    if keys is not None:
        zap = ZapHandler(context, keys, executor_keys)
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


class Peers:
    """Every peer of the driver by routing id, whatever carries it, with one way to send to
    any of them (``send``) and one way in for what they send.

    A ROUTER peer is kept from its first message, with the role its credential gives, until
    its connection is gone; piped peers and those in this process from the start. Every
    frame that arrives goes to ``take(rid, frame)``; ``warn(rid, what)`` reports malformed
    input, ``lost(rid, problem, msg)`` a peer that is gone or not reading, ``broke(rid,
    error)`` one that broke its link."""

    def __init__(self, router, router_state, counters, loop, channel, max_frame, *, take,
                 warn, lost, broke):
        self.router = router
        self._router_state = router_state
        self.counters = counters
        self.loop = loop
        self.channel = channel
        self.max_frame = max_frame
        self._take, self._warn = take, warn
        self._lost, self._broke = lost, broke
        self._peers = {}
        self._in_process = {}     # key (their routing id here) -> InProcessPeer
        self._link_keys = itertools.count(1)

    def get(self, rid):
        return self._peers.get(rid)

    def in_process(self, rid):
        return rid in self._in_process

    def forget(self, rid, reason=None):
        """Forget peer ``rid`` (an executor removed, a client gone): a link is closed, a
        client in this process told why (``reason``, if the driver drops it). A ROUTER
        peer's connection keeps its role until it is gone (``probe``)."""
        peer = self._peers.get(rid)
        if peer is not None and type(peer) is not RouterPeer:
            del self._peers[rid]
            if self._in_process.pop(rid, None) is not None:
                peer.close(reason)
            else:
                peer.close()

    def _router_peer(self, rid, frame):
        """The ROUTER peer of a connection heard from for the first time, its role given by
        the credential it presented (the User-Id of ``frame``); None if it has none."""
        try:
            user_id = frame.get("User-Id").encode()
        except zmq.ZMQError:  # no ZAP: an insecure bus
            user_id = b""
        role = role_of_user(user_id)
        if role is None:
            return None
        peer = self._peers[rid] = RouterPeer(rid, self.counters, self.router, *role)
        return peer

    # ------------------------------------------------------------ sending

    def send(self, rid, msg, quiet=False):
        """Send without blocking; a peer that is gone or not reading is reported to ``lost``
        (unless ``quiet``: its end of file, or its exit, will tell). True if it took it."""
        peer = self._peers.get(rid)
        if peer is None:  # a ROUTER peer whose connection is gone
            peer = RouterPeer(rid, self.counters, self.router)
        problem = peer.send(msg)
        if problem is None:
            return True
        if not quiet:
            self.link_lost(rid, problem, msg)
        return False

    def probe(self):
        """Probe the ROUTER's peers; those gone are reported to ``lost``. Piped peers need
        no probe: a pipe's end of file says at once that one is gone."""
        for peer in [peer for peer in self._peers.values() if type(peer) is RouterPeer]:
            if not peer.probe():
                self._lost(peer.rid, "connection lost", None)
                self._peers.pop(peer.rid, None)  # its role goes with its connection

    # ------------------------------------------------------------ receiving

    def receive_router(self, limit):
        """Take up to ``limit`` waiting messages of the ROUTER; True if more may wait."""
        router = self.router
        state = self._router_state
        take = self._take
        counters = self.counters
        known = self._peers
        for _ in range(limit):
            try:
                rid = router.recv(_NOBLOCK)
            except zmq.Again:
                return False
            # a message arrives whole: once its first frame is here, the others are
            frames = [rid]
            peer = True
            if rid not in known and state.more():  # a new connection: whose credential?
                frame = router.recv(_NOBLOCK, copy=False)
                frames.append(frame.bytes)
                peer = self._router_peer(rid, frame)
            while state.more():
                frames.append(router.recv(_NOBLOCK, copy=False).buffer if len(frames) >= 2
                              else router.recv(_NOBLOCK))
            counters["messages_in"] += 1
            counters["bytes_in"] += sum(map(len, frames))
            if len(frames) > 2 and peer is not None:  # a data message: its head, then its parts
                take(rid, tuple(frames[1:]))
            elif len(frames) != 2:
                self._warn(rid, f"message of {len(frames) - 1} frames, expected 1")
            elif peer is None:
                self._warn(rid, "its credential gives it no role")
            else:
                take(rid, frames[1])
            # whether more waits, read without a recv that would raise zmq.Again
            if not state.events() & POLLIN:
                return False
        return True  # more may wait

    def receive_in_process(self):
        """Take what the clients in this process queued (see ``channel``)."""
        for end in self.channel.arrivals():
            self._in_process[end.key] = self._peers[end.key] = InProcessPeer(
                end.key, self.counters, end)
        for key, peer in list(self._in_process.items()):
            try:
                frames = peer.receive()
            except Exception:
                log.exception("error taking the messages of client %s", key.hex())
                continue
            self._take_frames(key, frames)
            if peer.said_goodbye:
                self._in_process.pop(key, None)
                self._peers.pop(key, None)

    def _take_frames(self, rid, frames):
        take = self._take
        for frame in frames:
            take(rid, frame)

    # ------------------------------------------------------------ links

    def adopt_link(self, description, read_fd, write_fd, role, executor_id=None):
        """Talk to a peer (``description``, for the log) over this driver's end of a pipe
        pair, ``read_fd`` and ``write_fd``, as to a peer of the ROUTER. The pipes are its
        credential: they give it ``role`` (and ``executor_id``, an executor's)."""
        # a routing id that starts with a zero byte and is not five bytes long: no ROUTER
        # peer has it, nor a client in this process (see zsched.channel)
        rid = b"\0pipe" + next(self._link_keys).to_bytes(4, "big")
        for fd in (read_fd, write_fd):
            os.set_inheritable(fd, False)  # no process this driver starts holds them
        link = PipeLink(read_fd, write_fd, self.max_frame)
        self._peers[rid] = LinkPeer(rid, self.counters, link, self.loop,
                                    lambda: self._on_link_readable(rid),
                                    lambda: self._on_link_writable(rid), role, executor_id)
        log.debug("%s talks to this driver over pipes (peer %s)", description, rid.hex())

    def _on_link_readable(self, rid):
        peer = self._peers.get(rid)
        if type(peer) is not LinkPeer:
            return
        self._take_frames(rid, peer.receive())
        if self._peers.get(rid) is not peer:  # a handler closed it
            return
        error = peer.link.error
        if error is not None:  # cut off by this driver: that is why it goes
            self._warn(rid, error)
            self.close_link(rid)
            self._broke(rid, error)
        elif peer.link.closed_by_peer:
            self.link_lost(rid, GONE)

    def _on_link_writable(self, rid):
        peer = self._peers.get(rid)
        if type(peer) is LinkPeer:
            try:
                peer.flush()
            except BrokenPipeError:
                self.link_lost(rid, GONE)

    def link_lost(self, rid, problem, msg=None):
        """Peer ``rid`` is gone (or broke its link): its link closed, then ``lost``, as for
        a lost connection of the ROUTER."""
        self.close_link(rid)
        self._lost(rid, problem, msg)

    def close_link(self, rid):
        if type(self._peers.get(rid)) is LinkPeer:
            self._peers.pop(rid).close()

    # ------------------------------------------------------------ stopping

    def flush_links(self, seconds, clock):
        """Write what the links still hold (Shutdown), ``seconds`` at most in all."""
        deadline = clock() + seconds
        for peer in [peer for peer in self._peers.values() if type(peer) is LinkPeer]:
            if peer.writing:
                try:
                    peer.flush(max(0.0, deadline - clock()))
                except BrokenPipeError:
                    self.link_lost(peer.rid, GONE)

    def close_links(self):
        for rid in list(self._peers):
            self.close_link(rid)

    def stop_in_process(self):
        """Tell the clients in this process that the driver is gone; none connects later."""
        never_taken = self.channel.close()  # their wake-ups write no more
        peers = list(self._in_process.values())
        self._in_process.clear()
        peers += [InProcessPeer(end.key, self.counters, end) for end in never_taken]
        for peer in peers:
            peer.close()
