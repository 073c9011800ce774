"""``zsched.liveness.HeartbeatMonitor`` alone, with a fake clock: when heartbeats are due,
when a peer is late (reported once) and when it is silent (lost). The end-to-end behaviour
of drivers, executors and clients is in test_driver_liveness.py."""
import pytest

from zsched.liveness import HeartbeatMonitor

pytestmark = pytest.mark.unit

T0 = 1000.0


class FakeClock:
    def __init__(self, now=T0):
        self.now = now

    def __call__(self):
        return self.now


def test_a_heartbeat_is_due_at_once_then_every_interval():
    m = HeartbeatMonitor(5, 30)
    assert m.until_send(T0) == 0.0
    assert m.due_to_send(T0)
    assert not m.due_to_send(T0)
    assert m.until_send(T0 + 1) == 4
    assert not m.due_to_send(T0 + 4.99)
    assert m.due_to_send(T0 + 5)
    assert m.until_send(T0 + 5) == 5
    # late: the next is due an interval after this one was sent
    assert m.due_to_send(T0 + 17)
    assert not m.due_to_send(T0 + 21.9)
    assert m.due_to_send(T0 + 22)


def test_hearing_a_peer_does_not_delay_heartbeats_by_default():
    m = HeartbeatMonitor(5, 30)
    assert m.due_to_send(T0)
    m.heard("driver", T0 + 4)
    assert m.due_to_send(T0 + 5)


def test_a_ping_to_a_quiet_peer_is_due_an_interval_after_it_was_last_heard_or_pinged():
    m = HeartbeatMonitor(1, 10, send_when_quiet=True)
    m.heard("driver", T0)
    assert not m.due_to_send(T0 + 0.5)
    m.heard("driver", T0 + 0.9)
    assert not m.due_to_send(T0 + 1.5)
    assert m.due_to_send(T0 + 1.9)             # pinged
    assert not m.due_to_send(T0 + 2.5)
    assert m.due_to_send(T0 + 2.9)             # still quiet: pinged again
    assert m.until_send(T0 + 3.4) == pytest.approx(0.5)


def test_a_peer_is_silent_only_past_the_timeout():
    m = HeartbeatMonitor(5, 30)
    m.heard("x1", T0)
    m.heard("x2", T0 + 10)
    assert m.silent(T0 + 30) == []             # exactly the timeout: not yet
    assert not m.is_silent("x1", T0 + 30)
    assert m.silent(T0 + 30.25) == ["x1"]
    assert m.is_silent("x1", T0 + 30.25)
    assert m.silence("x2", T0 + 30.25) == pytest.approx(20.25)
    m.heard("x1", T0 + 30.5)
    assert m.silent(T0 + 31) == []


def test_a_late_peer_is_reported_once_until_heard_again():
    m = HeartbeatMonitor(5, 30)                # late after max(30 / 3, 2 * 5) = 10 s
    assert m.late_after == 10
    m.heard("x1", T0)
    assert m.late(T0 + 10) == []
    assert m.late(T0 + 10.5) == ["x1"]
    assert m.is_late("x1")
    assert m.late(T0 + 20) == []               # once only
    assert m.heard("x1", T0 + 21) is True      # it had been late
    assert not m.is_late("x1")
    assert m.heard("x1", T0 + 22) is False
    assert m.late(T0 + 32.5) == ["x1"]         # late again


def test_late_after_is_at_least_two_intervals():
    assert HeartbeatMonitor(0.5, 6).late_after == 2
    assert HeartbeatMonitor(4, 9).late_after == 8
    assert HeartbeatMonitor(1, 10, late_after=7).late_after == 7


def test_a_silent_peer_is_not_also_reported_late():
    m = HeartbeatMonitor(5, 30)
    m.heard("x1", T0)
    assert m.late(T0 + 31) == []
    assert m.silent(T0 + 31) == ["x1"]


def test_a_forgotten_peer_is_no_longer_watched():
    m = HeartbeatMonitor(5, 30)
    m.heard("x1", T0)
    assert m.late(T0 + 11) == ["x1"]
    m.forget("x1")
    assert not m.is_late("x1")
    assert m.silent(T0 + 100) == [] and m.late(T0 + 100) == []
    m.forget("x1")                             # forgetting twice is harmless


def test_now_defaults_to_the_clock():
    clock = FakeClock()
    m = HeartbeatMonitor(5, 30, clock=clock)
    assert m.due_to_send()
    m.heard("driver")
    clock.now = T0 + 4
    assert not m.due_to_send() and m.until_send() == 1
    clock.now = T0 + 31
    assert m.is_silent("driver") and m.silent() == ["driver"]
    assert m.silence("driver") == 31


@pytest.mark.parametrize("interval, timeout", [(5, 5), (5, 4), (0, 1), (-1, 1)])
def test_a_timeout_not_longer_than_a_positive_interval_is_refused(interval, timeout):
    with pytest.raises(ValueError, match="longer than its interval"):
        HeartbeatMonitor(interval, timeout)


def test_a_paced_monitor_sends_its_next_heartbeat_at_the_new_interval():
    m = HeartbeatMonitor(5, 30)
    assert m.due_to_send(T0)
    m.pace(12)
    assert not m.due_to_send(T0 + 11.9)
    assert m.due_to_send(T0 + 12)
    assert m.until_send(T0 + 12) == 12


def test_a_paced_monitor_reports_late_later_but_before_the_timeout():
    m = HeartbeatMonitor(5, 30)
    assert m.late_after == 10
    m.pace(15)
    assert m.late_after == 22.5            # (15 + 30) / 2: not 2 * 15, the timeout itself
    m.heard("x1", T0)
    assert m.late(T0 + 22) == []
    assert m.late(T0 + 23) == ["x1"]
    m.pace(5)
    assert m.late_after == 10              # the first interval again: as first set
    given = HeartbeatMonitor(5, 30, late_after=7)
    given.pace(15)
    assert given.late_after == 7


@pytest.mark.parametrize("interval", [0, -1, 30, 31])
def test_a_pace_not_shorter_than_the_timeout_is_refused(interval):
    with pytest.raises(ValueError, match="heartbeat interval"):
        HeartbeatMonitor(5, 30).pace(interval)


def test_the_next_heartbeat_is_due_when_told():
    m = HeartbeatMonitor(5, 30)
    assert m.due_to_send(T0)
    m.send_in(9.75, T0 + 1)
    assert not m.due_to_send(T0 + 10.7)
    assert m.due_to_send(T0 + 10.75)
    assert not m.due_to_send(T0 + 15.7)    # then at its own interval again
    assert m.due_to_send(T0 + 15.75)
    m.send_in(0, T0 + 16)                  # no word: nothing changes
    m.send_in(100, T0 + 16)                # never later than two thirds of the timeout
    assert m.until_send(T0 + 16) == pytest.approx(20)


def test_overdue_is_silent_and_late_in_one_look():
    m = HeartbeatMonitor(5, 30)
    m.heard("quiet", T0)
    m.heard("slow", T0 + 15)
    m.heard("fresh", T0 + 28)
    silent, late = m.overdue(T0 + 31)
    assert silent == ["quiet"] and late == ["slow"]
    assert m.overdue(T0 + 31) == (["quiet"], [])  # a late peer is reported once
    assert m.is_late("slow") and not m.is_late("fresh")
