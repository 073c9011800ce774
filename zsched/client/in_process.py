"""The client's side of a driver in this process (``zsched.channel``): no socket and no I/O
thread; the driver's thread takes the queue and completes the futures, whose done-callbacks
run in a thread of the client's."""
import os
import queue
import threading
import time

from ..channel import Endpoint
from ..errors import DriverConnectionError


class InProcess:
    """The part of ``Client`` that connects through a channel to a driver in this process."""

    def _connect_local(self, channel):
        """Connect through ``channel`` to the driver in this process, without a socket: its
        thread takes this client's messages and hands back its own (see zsched.channel)."""
        self._welcome = None
        self._welcome_event = threading.Event()
        self._outbox.append(("hello", os.getpid()))
        channel.connect(Endpoint(self._messages_for_driver, self._from_driver,
                                 self._driver_stopped))
        deadline = time.monotonic() + self.timeout
        while not self._welcome_event.wait(0.05):
            if self._lost is not None:
                raise self._lost
            if not channel.is_open():
                raise DriverConnectionError(f"cannot connect to driver {self.address}: "
                                            "it is not running")
            if time.monotonic() > deadline:
                raise DriverConnectionError(f"cannot connect to driver {self.address}: "
                                            f"no answer within {self.timeout:g} s")
        self._welcomed(self._welcome)

    def _in_driver_thread(self):
        """Whether the caller is the thread of a driver in this process, which must never
        run the user's code: it completes this client's futures."""
        return self._channel is not None and self._channel.in_driver_thread()

    def _run_callbacks_later(self, future):
        """Run ``future``'s done-callbacks in the client's callback thread, in order."""
        with self._callback_lock:
            if self._callback_queue is None:
                self._callback_queue = queue.SimpleQueue()
                threading.Thread(target=self._callback_loop, args=(self._callback_queue,),
                                 name="zsched-client-callbacks", daemon=True).start()
            self._callback_queue.put(future)

    @staticmethod
    def _callback_loop(futures):
        while True:
            future = futures.get()
            if future is None:
                return
            future._invoke_callbacks_now()  # logs and goes on when a callback raises
            del future  # nor held, with its result, until the next one comes

    def _driver_stopped(self):
        """The driver in this process stopped (its thread says so as it ends): what is
        pending fails, as when a remote driver's connection is lost."""
        self._io_stopped = True
        self._io_done.set()
        if self._lost is None:
            self._driver_lost()
