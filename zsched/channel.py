"""An in-process channel between a driver and the clients in its process, without a socket.

The driver makes one ``Channel`` and serves it from its loop's thread; a client connects an
``Endpoint`` to it. The client queues its messages (protocol message objects) and calls
``wake()``; the driver's loop then takes them with ``Endpoint.take()`` and hands its own
messages to ``Endpoint.deliver(msg)``, in the loop's thread. When the driver stops, each
endpoint's ``stopped()`` is called. Neither side touches the other's private state."""
import itertools
import threading
from collections import deque

from .wakeup import WakeupPipe


class Endpoint:
    """A client's end of a channel: ``take()`` returns the messages queued for the driver
    since the last call; ``deliver(msg)`` acts on a message from the driver; ``stopped()``
    says the driver is gone; ``dropped(reason)`` that the driver dropped this client. All
    are called in the driver loop's thread."""

    __slots__ = ("deliver", "dropped", "key", "stopped", "take")

    def __init__(self, take, deliver, stopped, dropped):
        self.take = take
        self.deliver = deliver
        self.stopped = stopped
        self.dropped = dropped
        self.key = None


class Channel:
    """The channel of a driver in this process. ``address`` names the driver in messages.

    Clients call ``connect``, ``wake``, ``is_open`` and ``in_driver_thread``; the driver
    calls ``serve_in_this_thread``, ``arrivals`` and ``close``. Safe from any thread."""

    def __init__(self, address=None):
        self.address = address
        # clients wake the driver's loop through this pipe, which it polls
        self.wakeup = WakeupPipe(keep_gil=True)
        self._arrivals = deque()
        self._keys = itertools.count(1)
        self._thread = None
        self._closed = False

    # ------------------------------------------------------------ the client's side

    def connect(self, endpoint):
        """Connect ``endpoint``; returns its key, which stands for a routing id at the
        driver. Its first message should be a ClientHello, answered by ClientWelcome."""
        # a routing id starts with a zero byte only when ZeroMQ makes it, and then it has
        # five bytes: no peer of the ROUTER has this one
        endpoint.key = b"\0local" + next(self._keys).to_bytes(4, "big")
        self._arrivals.append(endpoint)
        self.wakeup.wake()  # not once the driver has stopped: the pipe is closed then
        return endpoint.key

    def wake(self):
        """Tell the driver's loop that messages wait (no write while one is pending)."""
        self.wakeup.wake()

    def is_open(self):
        """Whether the driver's loop serves this channel."""
        thread = self._thread
        return not self._closed and thread is not None and thread.is_alive()

    def in_driver_thread(self):
        """Whether the caller is the driver loop's thread, which must never run user code."""
        return threading.current_thread() is self._thread

    # ------------------------------------------------------------ the driver's side

    def serve_in_this_thread(self):
        """The calling thread runs the driver's loop, which serves this channel."""
        self._thread = threading.current_thread()

    def arrivals(self):
        """The endpoints connected since the last call."""
        arrivals = self._arrivals
        return [arrivals.popleft() for _ in range(len(arrivals))]

    def close(self):
        """The driver stops: no wake-up is written any more; returns the endpoints that
        connected and were never taken (their ``stopped()`` is the caller's to call)."""
        self._closed = True
        self.wakeup.close()
        return self.arrivals()
