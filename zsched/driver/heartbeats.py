"""How often the driver's executors send heartbeats, so that an idle cluster costs the
driver little at any size.

- **Application heartbeats.** Each one costs the driver's loop a wake-up, a decode and an
  answer, and ZeroMQ's I/O thread a decryption and an encryption. An executor learns its
  interval when it registers (``executor_heartbeat_interval`` in its settings): the one
  set, or longer, so that all the executors registered together send at most
  ``executor_heartbeat_rate`` heartbeats a second. It never exceeds two thirds of
  ``executor_heartbeat_timeout``, which stays as set: a silent executor is lost as soon as
  before. The driver reports an executor late only past the longest interval it gave,
  plus a share of what is left of the timeout.
- **Heartbeats together.** A heartbeat that arrives alone wakes the driver's loop and
  ZeroMQ's I/O thread for itself. So while the intervals are paced, each answer
  (``HeartbeatAck.next_in``) tells its executor when to send the next one: at the
  interval for the executors registered now, rounded down to the driver's next multiple
  of ``SLOT`` seconds. Executors whose heartbeats fell in one slot stay in it, and the
  driver reads each slot's heartbeats in a few turns of its loop.
- **ZMTP heartbeats.** libzmq keeps a connection's heartbeat timers in one sorted map per
  I/O thread and cancels one, at nearly every message received, by a linear search of
  that map: the driver's own pings cost it the square of its connections. So its ROUTER
  pings only when its cluster manager keeps the cluster to ``ZMTP_PEERS`` executors or
  fewer (``driver_pings``). Executors ping with the ``zmq_heartbeat_*`` settings while the
  driver knows fewer than ``ZMTP_PEERS`` executors (registered, or asking for their
  settings); later ones hardly at all (``QUIET_ZMTP``). Without these, a dead process is
  still seen at once (its kernel closes the connection), and a stopped or cut-off one by
  the application heartbeats, within ``executor_heartbeat_timeout``.
"""
import collections

from ..liveness import paced_interval

# the most executors whose connections carry ZMTP heartbeats at the settings' pace
ZMTP_PEERS = 64

# the settings' longest ZMTP heartbeats: one ping in 10 minutes, answered within the hour
QUIET_ZMTP = {"zmq_heartbeat_interval": 600.0, "zmq_heartbeat_timeout": 3600.0}

# seconds an executor that asked for its settings counts as one about to register
HELLO_WINDOW = 10.0

# seconds between the instants at which paced heartbeats are sent (by the driver's clock)
SLOT = 0.25


def driver_pings(cluster_manager, initial_executors, dynamic_allocation):
    """Whether the driver's ROUTER sends ZMTP pings: only when its cluster manager keeps
    the cluster to ``ZMTP_PEERS`` executors (its initial target, or dynamic allocation's
    maximum). Its pings cannot change once it listens."""
    if cluster_manager is None:
        return False
    most = initial_executors
    if dynamic_allocation is not None:
        most = max(most, dynamic_allocation.max_executors)
    return most <= ZMTP_PEERS


class HeartbeatPace:
    """The settings the driver gives each executor, by how many executors it knows: the
    registered ones (given to each call) and those that asked for their settings in the
    last ``HELLO_WINDOW`` seconds of ``clock``. ``interval`` is the longest application
    heartbeat interval given so far."""

    def __init__(self, config, clock):
        self._config = config
        self._clock = clock
        self._settings = config.to_settings()
        self._hellos = collections.deque()  # when recent executors asked for their settings
        self.interval = config.executor_heartbeat_interval

    def welcome(self, registered):
        """The settings for an executor that asks for them (its connection to come)."""
        now = self._clock()
        hellos = self._hellos
        while hellos and hellos[0] < now - HELLO_WINDOW:
            hellos.popleft()
        hellos.append(now)
        return self._for(registered + len(hellos))

    def registration(self, registered):
        """The settings for an executor that registered, counted in ``registered``."""
        now = self._clock()
        recent = sum(1 for when in self._hellos if when >= now - HELLO_WINDOW)
        settings = self._for(registered + recent)
        settings["executor_heartbeat_interval"] = interval = self.paced(registered)
        self.interval = max(self.interval, interval)
        return settings

    def next_in(self, executors, now):
        """Seconds until the next heartbeat of an executor answered at ``now``, when
        ``executors`` are registered; 0 (at its own interval) while they need no pace."""
        interval = self.paced(executors)
        if interval <= self._config.executor_heartbeat_interval or interval < 2 * SLOT:
            return 0.0
        return interval - (now + interval) % SLOT

    def paced(self, executors):
        """The application heartbeat interval of each of ``executors`` executors."""
        config = self._config
        return paced_interval(config.executor_heartbeat_interval, config.executor_heartbeat_timeout,
                              executors, config.executor_heartbeat_rate)

    def _for(self, executors):
        if executors <= ZMTP_PEERS:
            return dict(self._settings)
        return {**self._settings, **QUIET_ZMTP}
