"""An executor's registration with its driver, over a DEALER socket or over its pipes.

Over a socket, the driver's settings come first over a connection of their own, as a
client asks for them: ZeroMQ applies heartbeat options to connections made after they
are set, so the connection that stays must be made with the driver's zmq_heartbeat_*
settings (Spark's executors fetch SparkAppConfig the same way before they register).
"""
import logging
import os
import select

import zmq

from .. import protocol as p
from ..config import Config
from ..security import HandshakeWatch, make_client
from ..socket_options import set_heartbeats

log = logging.getLogger("zsched.executor")
# messages a DEALER queues each way (ZMQ_SNDHWM, ZMQ_RCVHWM): a full send queue means
# the driver is not reading, and what does not fit waits in ``DriverConnection``
QUEUE_HWM = 100_000


class RegistrationError(Exception):
    """Registration failed; the message says why, as the executor prints it."""


def executor_socket(context, config, keys):
    """An executor's DEALER to its driver, not connected yet: ``config``'s ZMTP
    heartbeats, and CURVE with ``keys`` (None: insecure)."""
    sock = context.socket(zmq.DEALER)
    sock.linger = 2000
    sock.sndhwm = QUEUE_HWM
    sock.rcvhwm = QUEUE_HWM
    set_heartbeats(sock, config)
    if keys is not None:
        make_client(sock, keys)
    return sock


def connect(context, driver_url, config, keys):
    """An executor's DEALER connected to the driver, and the watch of its security
    handshake."""
    sock = executor_socket(context, config, keys)
    watch = HandshakeWatch(sock, has_secret=keys is not None)
    sock.connect(driver_url)
    return sock, watch


class Registration:
    """One attempt to register: ``request`` (a RegisterExecutor) sent to ``driver_url``
    and its answer awaited until ``deadline`` (of ``clock``). ``abandoned()`` returns why
    to give up early (a stop was requested), or None; ``wakeup_fd`` wakes the wait then."""

    def __init__(self, driver_url, request, deadline, *, clock, wakeup_fd, abandoned):
        self.driver_url = driver_url
        self.request = request
        self.deadline = deadline
        self.clock = clock
        self.wakeup_fd = wakeup_fd
        self.abandoned = abandoned

    def over_socket(self, context, keys):
        """Register over a new DEALER: (the socket, the driver's RegisteredExecutor)."""
        sock, watch = connect(context, self.driver_url, Config(), keys)
        try:
            welcome = self._exchange(sock, watch, p.ExecutorHello(os.getpid()))
        finally:
            watch.close()
            sock.close(linger=200)
        sock, watch = connect(context, self.driver_url, Config.from_driver(welcome.settings), keys)
        try:
            registered = self._exchange(sock, watch, self.request)
        except BaseException:
            watch.close()
            sock.close(linger=0)
            raise
        watch.close()
        return sock, registered

    def _exchange(self, sock, watch, request):
        """Send ``request`` and wait for the driver's answer to it (ClientWelcome or
        RegisteredExecutor)."""
        sock.send(p.encode(request))
        expected = p.ClientWelcome if isinstance(request, p.ExecutorHello) else p.RegisteredExecutor
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(watch.socket, zmq.POLLIN)
        poller.register(self.wakeup_fd, zmq.POLLIN)
        while True:
            self._check_abandoned()
            failure = watch.check()
            if failure:
                raise RegistrationError(f"Cannot register with driver: {self.driver_url} "
                                        f"(authentication failed: {failure})")
            events = dict(poller.poll(self._remaining() * 1000))
            if sock not in events:
                continue
            msg = self._answer_in(sock.recv(), expected)
            if msg is not None:
                return msg

    def over_link(self, link):
        """Register over the pipes: (RegisteredExecutor, the frames that came after it)."""
        try:
            link.send(p.encode(self.request))
        except BrokenPipeError:
            raise RegistrationError(f"Cannot register with driver {self.driver_url}: "
                                    "its pipe is closed") from None
        while True:
            self._check_abandoned()
            wanted = [link.write_fd] if link.wants_write else []
            select.select([link.read_fd, self.wakeup_fd], wanted, [], self._remaining())
            try:
                link.flush()
            except BrokenPipeError:
                raise RegistrationError(f"Cannot register with driver {self.driver_url}: "
                                        "its pipe is closed") from None
            frames = link.receive()
            for i, frame in enumerate(frames):
                msg = self._answer_in(frame, p.RegisteredExecutor)
                if msg is not None:  # what came with the answer (tasks, at once) is the loop's
                    return msg, frames[i + 1:]
            if link.error is not None:
                raise RegistrationError(f"Cannot register with driver {self.driver_url}: "
                                        f"it broke the link: {link.error}")
            if link.closed_by_peer:
                raise RegistrationError(f"Cannot register with driver {self.driver_url}: "
                                        "it closed its pipe")

    def _check_abandoned(self):
        reason = self.abandoned()
        if reason is not None:
            raise RegistrationError(f"Registration with driver {self.driver_url} abandoned: "
                                    f"{reason}")

    def _remaining(self):
        """Seconds left until the deadline; RegistrationError once it has passed."""
        remaining = self.deadline - self.clock()
        if remaining <= 0:
            raise RegistrationError(f"Cannot register with driver: {self.driver_url}")
        return remaining

    def _answer_in(self, frame, expected):
        """The driver's answer to a registration step if ``frame`` holds it (``expected``,
        a message class), else None; RegistrationError if the driver refused."""
        try:
            msg = p.decode(frame)
        except p.ProtocolError as exc:
            log.warning("ignored a malformed message from the driver: %s", exc)
            return None
        if isinstance(msg, p.RegisterExecutorFailed):
            raise RegistrationError(f"Registration refused by driver {self.driver_url}: "
                                    f"{msg.reason}")
        if isinstance(msg, expected):
            return msg
        log.warning("ignored %s before registration", type(msg).__name__)
        return None
