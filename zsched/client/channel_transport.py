"""A driver in this process (``zsched.channel``): no socket and no I/O thread. The
driver's thread takes the outbox and completes the futures, whose done-callbacks run in a
thread of the client's (``FutureTable``)."""
import os
import threading
import time

from .. import protocol as p
from ..channel import Endpoint
from ..errors import DriverConnectionError
from ..protocol import MsgType
from .transport import lose, lost_connection


class ChannelTransport:
    """The client's end of ``channel``, the in-process channel of a driver in this process.
    Its methods ``_take``, ``_deliver`` and ``_driver_stopped`` run in the driver's thread."""

    kind = "in-process"

    def __init__(self, channel, timeout, outbox, futures):
        self.channel = channel
        self.address = channel.address
        self.timeout = timeout
        # the driver's loop polls this pipe: writing it wakes the driver itself
        self.wakeup = channel.wakeup
        self._outbox = outbox
        self._futures = futures
        self._hello = [p.ClientHello(os.getpid())]  # the first message taken
        self._welcome = None
        self._welcomed = threading.Event()
        self._done = threading.Event()  # set once nothing leaves for the driver any more

    def connect(self):
        """Connect through the channel and wait for the driver's ClientWelcome."""
        self.channel.connect(Endpoint(self._take, self._deliver, self._driver_stopped,
                                      self._dropped))
        deadline = time.monotonic() + self.timeout
        while not self._welcomed.wait(0.05):
            if self._futures.lost is not None:
                raise self._futures.lost
            if not self.channel.is_open():
                raise DriverConnectionError(f"cannot connect to driver {self.address}: "
                                            "it is not running")
            if time.monotonic() > deadline:
                raise DriverConnectionError(f"cannot connect to driver {self.address}: "
                                            f"no answer within {self.timeout:g} s")
        return self._welcome

    def welcomed(self, config):
        """Nothing to set from the driver's settings."""

    def start(self):
        """Nothing to start: the driver's thread already serves the channel."""

    def in_driver_thread(self):
        return self.channel.in_driver_thread()

    def wait_stopped(self, timeout):
        # not waited for in the driver's thread itself: a done-callback that shuts down
        if not self.in_driver_thread():
            self._done.wait(timeout)

    def close(self):
        """Nothing to release: the wake-up pipe is the channel's."""

    def _take(self):
        """The messages for the driver (in the driver's thread); after a ClientGoodbye,
        nothing leaves any more."""
        messages = self._outbox.messages_for_driver()
        if self._hello:
            messages, self._hello = [*self._hello, *messages], None
        if messages and messages[-1].TYPE == MsgType.CLIENT_GOODBYE:
            self._stopped()
        return messages

    def _deliver(self, msg):
        if msg.TYPE == MsgType.CLIENT_WELCOME:
            self._welcome = msg
            self._welcomed.set()
        else:
            self._futures.from_driver(msg)

    def _driver_stopped(self):
        """The driver in this process stopped (its thread says so as it ends): what is
        pending fails, as when a remote driver's connection is lost."""
        self._stopped()
        if self._futures.lost is None:
            lose(self._outbox, self._futures, lost_connection(self.address), log_it=True)

    def _dropped(self, reason):
        """The driver dropped this client (it could not hand it its messages): what is
        pending fails with the reason."""
        self._stopped()
        if self._futures.lost is None:
            lose(self._outbox, self._futures, DriverConnectionError(
                f"driver {self.address} dropped this client: {reason}"), log_it=True)

    def _stopped(self):
        self._outbox.stopped = True
        self._done.set()
