"""Application heartbeats: when to send one, and which peers have gone quiet.

One ``HeartbeatMonitor`` serves each side of a connection: the driver watches its
executors, an executor and a client each watch their driver. It does no I/O and reads
no clock of its own unless asked: every method takes ``now`` (defaulting to its
``clock``), so it is tested with a fake clock. ZMTP heartbeats catch a stopped or
partitioned peer; these catch a process whose Python is stuck (see docs/failures.md).
"""
import time

DRIVER = "driver"  # the one peer an executor's or a client's monitor watches

# the longest paced interval, as a share of the timeout: a heartbeat may be a third late
PACED_SHARE = 2 / 3


def paced_interval(interval, timeout, peers, rate):
    """The heartbeat interval of each of ``peers`` peers watched together: ``interval``, or
    longer so that together they send at most ``rate`` heartbeats a second, but never
    longer than two thirds of the ``timeout``: a heartbeat that comes a third of the
    timeout late is still in time."""
    return max(interval, min(peers / rate, timeout * PACED_SHARE))


def _late_after(interval, timeout):
    return max(timeout / 3, 2 * interval)


class HeartbeatMonitor:
    """Heartbeats to send every ``interval`` seconds, and peers watched for silence.

    A watched peer is *silent* once not heard from for longer than ``timeout``, and *late*
    (reported, not yet lost) once not heard from for longer than ``late_after``, by default
    a third of the timeout or two intervals, whichever is longer (``pace`` changes the
    interval). With ``send_when_quiet`` a heartbeat is due only ``interval`` after the last
    one sent *or* the last word heard (a ping to a quiet peer); otherwise one is due every
    ``interval``, starting at once.
    """

    def __init__(self, interval, timeout, *, late_after=None, send_when_quiet=False,
                 clock=time.monotonic):
        if not 0 < interval < timeout:
            raise ValueError(f"heartbeat timeout ({timeout!r} s) must be longer than its "
                             f"interval ({interval!r} s), which must be positive")
        self.interval = interval
        self.timeout = timeout
        self._first_interval = interval
        self._late_given = late_after is not None
        self.late_after = _late_after(interval, timeout) if late_after is None else late_after
        self.clock = clock
        self._send_when_quiet = send_when_quiet
        self._next_send = None   # when the next heartbeat is due; None: at once
        self._heard = {}         # peer -> when it was last heard from
        self._late = set()       # peers reported late and not heard from since

    # ------------------------------------------------------------ sending

    def due_to_send(self, now=None):
        """Whether a heartbeat is due at ``now``; if so, the next is due an interval later."""
        now = self.clock() if now is None else now
        if self._next_send is not None and now < self._next_send:
            return False
        self._next_send = now + self.interval
        return True

    def pace(self, interval):
        """Heartbeats every ``interval`` seconds from now on (a driver's pace): the next is
        due ``interval`` after the last one sent. Unless ``late_after`` was given, a peer is
        late later too, but before the timeout."""
        if not 0 < interval < self.timeout:
            raise ValueError(f"heartbeat interval {interval!r} s: not positive, or not shorter "
                             f"than the timeout ({self.timeout!r} s)")
        if self._next_send is not None:
            self._next_send += interval - self.interval
        self.interval = interval
        if not self._late_given:
            late_after = _late_after(interval, self.timeout)
            if interval > self._first_interval:
                late_after = min(late_after, (interval + self.timeout) / 2)
            self.late_after = late_after

    def send_in(self, seconds, now=None):
        """The next heartbeat is due ``seconds`` after ``now`` (the driver's word), but
        within two thirds of the timeout; 0 changes nothing."""
        if seconds > 0:
            self._next_send = (self.clock() if now is None else now) + min(seconds, self.timeout * PACED_SHARE)

    def until_send(self, now=None):
        """Seconds from ``now`` until the next heartbeat is due (0 when it is due)."""
        if self._next_send is None:
            return 0.0
        now = self.clock() if now is None else now
        return max(0.0, self._next_send - now)

    # ------------------------------------------------------------ hearing

    def heard(self, peer, now=None):
        """``peer`` spoke at ``now`` (also starts watching it); True if it had been late."""
        now = self.clock() if now is None else now
        self._heard[peer] = now
        if self._send_when_quiet:
            self._next_send = now + self.interval
        if peer in self._late:
            self._late.discard(peer)
            return True
        return False

    def forget(self, peer):
        """Stop watching ``peer``."""
        self._heard.pop(peer, None)
        self._late.discard(peer)

    def silence(self, peer, now=None):
        """Seconds ``peer`` has been silent at ``now``."""
        return (self.clock() if now is None else now) - self._heard[peer]

    def is_silent(self, peer, now=None):
        """Whether ``peer`` has been silent for longer than the timeout at ``now``."""
        return self.silence(peer, now) > self.timeout

    def silent(self, now=None):
        """The peers silent for longer than the timeout at ``now``: lost."""
        now = self.clock() if now is None else now
        return [peer for peer, heard in self._heard.items() if now - heard > self.timeout]

    def overdue(self, now=None):
        """``(silent, late)`` at ``now``: what ``silent`` and ``late`` return, from one look
        at each peer."""
        now = self.clock() if now is None else now
        timeout, late_after, reported = self.timeout, self.late_after, self._late
        silent, late = [], []
        for peer, heard in self._heard.items():
            quiet = now - heard
            if quiet > late_after:
                if quiet > timeout:
                    silent.append(peer)
                elif peer not in reported:
                    late.append(peer)
        reported.update(late)
        return silent, late

    def late(self, now=None):
        """The peers that became late by ``now`` (silent past ``late_after``, not past the
        timeout): each is returned once, until it is heard from again."""
        return self.overdue(now)[1]

    def is_late(self, peer):
        """Whether ``peer`` was reported late and has not been heard from since."""
        return peer in self._late
