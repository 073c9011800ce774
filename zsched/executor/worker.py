"""The watch of ``--worker-url``: the executor shares the fate of the process that
started it, as Spark's WorkerWatcher."""
import logging

import zmq

from ..socket_events import recv_event
from ..socket_options import set_heartbeats

log = logging.getLogger("zsched.executor")


class WorkerWatch:
    """A connection to ``url`` made only to notice its loss. ``monitor`` is the socket
    to poll; ``event`` and ``check`` return why the executor must exit, or None."""

    def __init__(self, context, url, config, deadline, clock):
        self.url = url
        self._clock = clock
        self._deadline = deadline  # to connect by; None once connected
        self._socket = context.socket(zmq.DEALER)
        self._socket.linger = 0
        set_heartbeats(self._socket, config)
        self.monitor = self._socket.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        self._socket.connect(url)

    def event(self):
        """Take the monitor's next event: why to exit if the connection was lost."""
        event, _, _ = recv_event(self.monitor)
        if event == zmq.EVENT_CONNECTED:
            self._deadline = None
            log.info("watching worker %s", self.url)
        elif event == zmq.EVENT_DISCONNECTED:
            return f"lost the connection to worker {self.url}"
        return None

    def check(self):
        """Why to exit if the connection was not made in time."""
        if self._deadline is not None and self._clock() > self._deadline:
            return f"cannot connect to worker {self.url}"
        return None

    def close(self):
        self._socket.close(linger=0)
        self.monitor.close(linger=0)
