"""How a client reaches its driver: one interface, three implementations.

- ``SocketTransport`` (``socket_transport.py``): a DEALER socket to a driver in another
  process, owned by the client's I/O thread.
- ``PipeTransport`` (``pipe_transport.py``): a pair of pipes to the driver of a
  ``LocalCluster`` (``Client.over_pipes``), owned by the I/O thread too.
- ``ChannelTransport`` (``channel_transport.py``): a driver in this process
  (``zsched.channel``); the driver's own thread takes the outbox and completes futures.

Each is given the client's ``Outbox`` (what to send) and ``FutureTable`` (what the
driver's messages complete). The interface:

- ``kind``: "socket", "pipes" or "in-process"; ``wakeup``: the ``WakeupPipe`` that wakes
  the thread that sends.
- ``connect()``: say hello and wait for the driver's ClientWelcome, which it returns.
- ``welcomed(config)``: the driver's settings, from that welcome.
- ``start()``: begin sending and receiving.
- ``in_driver_thread()``: whether the caller is the thread of a driver in this process.
- ``wait_stopped(timeout)``: after a ClientGoodbye was queued, wait until it left or the
  connection ended.
- ``close()``: release the socket or pipes, once stopped.
"""
import logging
import threading
import time

from .. import protocol as p
from ..data_frames import part_size
from ..errors import DriverConnectionError
from ..liveness import DRIVER, HeartbeatMonitor
from ..protocol import MsgType, ProtocolError, decode, encode
from ..wakeup import WakeupPipe

log = logging.getLogger(__package__)  # zsched.client, for every module of the client

# What a client sends a quiet driver while it waits on it: a request with no future (ids
# of requests start at 1), which the driver's loop answers.
_PING = encode(p.AdminPing(0))
_TASK_RESULTS = MsgType.TASK_RESULTS
_ADMIN_REPLY = MsgType.ADMIN_REPLY


class IOThreadTransport:
    """What the socket and the pipes share: the I/O thread, which alone uses the
    connection, and the wake-up pipe through which calling threads wake it; the check
    that the driver still answers; the count of results taken, told to the driver.

    Subclasses give ``kind``, ``serve()`` (the thread's loop over the connection),
    ``_send_frame(frame)`` and ``_send_parts(frames)`` (a data message's), which never
    wait, and ``_output_waits()``: whether frames wait for the driver to read them."""

    kind = None

    def __init__(self, address, timeout, outbox, futures):
        self.address = address
        self.timeout = timeout
        self.wakeup = WakeupPipe(keep_gil=True)
        self._outbox = outbox
        self._futures = futures
        self._thread = None
        self._done = threading.Event()  # set once nothing leaves for the driver any more
        self._heartbeats = None  # a HeartbeatMonitor of the driver, from its settings
        self._taken = None       # TakenResults, from the driver's settings
        self._forgotten = False  # the driver answered a ping: it does not know this client

    def start(self):
        self._thread = threading.Thread(target=self._run, name="zsched-client-io", daemon=True)
        self._thread.start()

    def welcomed(self, config):
        """The driver's settings (a ``Config``): its heartbeats and its results window."""
        self._heartbeats = HeartbeatMonitor(
            config.executor_heartbeat_interval, config.executor_heartbeat_timeout,
            send_when_quiet=True, clock=time.monotonic)
        self._heartbeats.heard(DRIVER)
        self._taken = TakenResults(p.RESULTS_WINDOW_ROWS, config.client_results_window)

    def in_driver_thread(self):
        return False

    def wait_stopped(self, timeout):
        self._done.wait(timeout)
        if self._thread is not None:
            self._thread.join(timeout)

    def stopped_in_time(self):
        """False when the I/O thread still runs after ``wait_stopped``: it keeps the
        connection, which must not be closed under it."""
        if self._thread is not None and self._thread.is_alive():
            log.warning("the client's I/O thread did not stop within %s s", self.timeout)
            return False
        return True

    def _run(self):
        try:
            self.serve()
            log.debug("client I/O thread ended: %s", self._futures.lost or "shutdown")
        except Exception as exc:
            log.exception("client I/O thread ended by an error")
            self._lose(DriverConnectionError(f"the client's connection failed: {exc!r}"))
        finally:
            self._outbox.stopped = True
            self._done.set()

    def _poll(self, poller, idle_ms=1000):
        """Wait for something to do (``idle_ms`` at most when nothing is queued): what poll
        returned.

        Calling threads write the wake-up pipe only while ``pending`` is False, that is while
        this thread sleeps in poll with nothing queued: during a flood they make no system
        call (which would also hand this thread the GIL for a turn that takes one row), and
        each turn takes all the rows queued meanwhile."""
        wakeup = self.wakeup
        outbox = self._outbox
        if outbox.rows or outbox.cancels or self._taken.due:
            events = dict(poller.poll(0))
        else:
            wakeup.pending = False
            idle = not (outbox.rows or outbox.cancels)  # after pending: none is missed
            events = dict(poller.poll(idle_ms if idle else 0))
            wakeup.pending = True
        if wakeup.fd in events:
            wakeup.drain()
        return events

    def _idle_ms(self):
        """How long the loop may sleep: until the next ping is due, a second at most."""
        return max(1, int(min(self._heartbeats.until_send(), 1.0) * 1000))

    def _send_outbox(self):
        """Send a ResultsTaken when one is due, then what the calling threads queued since
        the last turn; True when a ClientGoodbye was among them."""
        send = self._send_frame
        if self._taken.due:
            send(encode(self._taken.message()))
        goodbye = False
        for msg in self._outbox.messages_for_driver():
            if type(msg) is p.PutData:  # its parts leave as they are
                self._send_parts(p.encode_parts(msg))
                continue
            send(encode(msg))
            goodbye = msg.TYPE == MsgType.CLIENT_GOODBYE
        return goodbye

    def _deliver_frame(self, frame):
        try:
            msg = decode(frame)
        except ProtocolError as exc:
            log.warning("ignored a malformed message from the driver: %s", exc)
            return
        self._futures.from_driver(msg)
        if msg.TYPE == _TASK_RESULTS:  # taken, its callbacks run: the driver may send more
            self._taken.took(len(msg.results), len(frame))
        elif msg.TYPE == MsgType.TASK_DATA:  # a large result's parts count in the window too
            self._taken.took(0, sum(map(part_size, msg.parts)))
        elif msg.TYPE == _ADMIN_REPLY and msg.request_id == 0 and msg.value == p.UNKNOWN_CLIENT:
            self._forgotten = True
            self._lose(DriverConnectionError(
                f"driver {self.address} no longer knows this client (it dropped it, or "
                "restarted); its pending tasks cannot complete"), log_it=True)

    def _check_driver(self, heard):
        """Ping a quiet driver, or find it silent: True when it is lost.

        A driver that is stopped (SIGSTOP) or whose loop is stuck may still answer ZMTP
        heartbeats from libzmq's thread, and keeps its end of the pipes open. So while
        tasks or requests wait, or frames wait for it to read them, a driver silent for
        ``executor_heartbeat_interval`` is pinged (an AdminPing its loop answers), and one
        silent for longer than ``executor_heartbeat_timeout`` is lost, as its executors
        judge it: every pending future fails. Called after the turn's frames were handed
        over, so time spent in done-callbacks is not taken for the driver's silence."""
        if self._forgotten:
            return True
        monitor = self._heartbeats
        now = monitor.clock()
        if heard or not (self._futures.waiting() or self._output_waits()):
            monitor.heard(DRIVER, now)  # silence counts only while something waits
        elif monitor.is_silent(DRIVER, now):
            self._lose(DriverConnectionError(
                f"driver {self.address} answered nothing for {monitor.timeout:g} s "
                "(executor_heartbeat_timeout) while tasks waited: it is stopped or hung; its "
                "pending tasks fail"), log_it=True)
            return True
        elif monitor.due_to_send(now):
            self._send_frame(_PING)
        return False

    def _driver_lost(self):
        lose(self._outbox, self._futures, lost_connection(self.address), log_it=True)

    def _lose(self, error, log_it=False):
        lose(self._outbox, self._futures, error, log_it)

    def close(self):
        self.wakeup.close()


class TakenResults:
    """The results the I/O thread has taken off its connection since it last told the
    driver (``ResultsTaken``). The driver sends a client at most a window of results it
    has not taken (``RESULTS_WINDOW_ROWS`` rows, ``client_results_window`` bytes); the
    client tells it once it has taken a quarter of either, so the window never runs dry
    while the client reads."""

    __slots__ = ("rows", "size", "due", "_rows_due", "_size_due")

    def __init__(self, window_rows, window_size):
        self.rows = self.size = 0
        self.due = False  # a ResultsTaken is to be sent
        self._rows_due = max(1, window_rows // 4)
        self._size_due = max(1, window_size // 4)

    def took(self, rows, size):
        """A TaskResults frame of ``size`` bytes with ``rows`` rows was handed over."""
        self.rows += rows
        self.size += size
        if self.rows >= self._rows_due or self.size >= self._size_due:
            self.due = True

    def message(self):
        """The ResultsTaken of what was taken; the count starts again from nothing."""
        msg = p.ResultsTaken(self.rows, self.size)
        self.rows = self.size = 0
        self.due = False
        return msg


def lost_connection(address):
    """The error of a connection to the driver at ``address`` gone: the driver stopped or
    died, or became unreachable. It has forgotten this client, so every pending future
    fails now rather than wait forever."""
    return DriverConnectionError(
        f"lost the connection to driver {address} (it stopped, died or became "
        "unreachable); its pending tasks cannot complete")


def lose(outbox, futures, error, log_it=False):
    """Fail every pending future and request with ``error``; later calls raise it. Under
    the outbox's lock, so no future is registered after the sweep."""
    if log_it:
        log.error("%s", error)
    with outbox.lock:
        futures.lose(error)

