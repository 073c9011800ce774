"""``zsched.driver.heartbeats``: the interval each executor is given by how many the
driver knows, the ZMTP heartbeats of their connections, the driver's own pings, and the
slots paced heartbeats are sent in; with a fake clock, no socket. A stopped executor
still lost within the timeout, with paced heartbeats, is in test_driver_liveness.py."""
import pytest

from zsched.config import Config
from zsched.driver.heartbeats import (HELLO_WINDOW, QUIET_ZMTP, SLOT, ZMTP_PEERS, HeartbeatPace,
                                      driver_pings)
from zsched.dynamic_allocation import DynamicAllocationPolicy
from zsched.liveness import paced_interval

from conftest import FakeClock

pytestmark = pytest.mark.unit

T0 = 1000.0


@pytest.mark.parametrize("peers, expected", [
    (0, 5.0), (1, 5.0), (500, 5.0),   # few: the interval set
    (1000, 10.0), (1200, 12.0),       # more: together at most 100 a second
    (1500, 15.0), (2000, 20.0),
    (10_000, 20.0),                   # never longer than two thirds of the timeout
])
def test_the_interval_grows_with_the_peers_up_to_two_thirds_of_the_timeout(peers, expected):
    assert paced_interval(5.0, 30.0, peers, 100.0) == pytest.approx(expected)


def test_an_interval_set_longer_than_two_thirds_of_the_timeout_is_kept():
    assert paced_interval(25.0, 30.0, 10_000, 100.0) == 25.0


def test_registration_settings_pace_the_heartbeats_and_keep_the_timeout():
    pace = HeartbeatPace(Config(executor_heartbeat_rate=100), FakeClock())
    assert pace.registration(1)["executor_heartbeat_interval"] == 5.0
    settings = pace.registration(1200)
    assert settings["executor_heartbeat_interval"] == pytest.approx(12.0)
    assert settings["executor_heartbeat_timeout"] == 30.0
    assert pace.interval == pytest.approx(12.0)
    pace.registration(3)             # fewer executors now: a short interval again ...
    assert pace.interval == pytest.approx(12.0)  # ... and the longest given is remembered


def test_executors_beyond_the_first_ones_get_the_quiet_zmtp_heartbeats():
    config = Config(zmq_heartbeat_interval=0.5, zmq_heartbeat_timeout=2)
    pace = HeartbeatPace(config, FakeClock())
    few = pace.registration(ZMTP_PEERS)
    assert (few["zmq_heartbeat_interval"], few["zmq_heartbeat_timeout"]) == (0.5, 2.0)
    many = pace.registration(ZMTP_PEERS + 1)
    assert {k: many[k] for k in QUIET_ZMTP} == QUIET_ZMTP
    Config.from_driver(many)         # settings an executor accepts


def test_executors_asking_for_their_settings_count_until_the_window_passes():
    clock = FakeClock()
    pace = HeartbeatPace(Config(), clock)
    answers = [pace.welcome(0) for _ in range(ZMTP_PEERS + 1)]
    assert answers[ZMTP_PEERS - 1]["zmq_heartbeat_interval"] == 1.0
    assert answers[ZMTP_PEERS]["zmq_heartbeat_interval"] == QUIET_ZMTP["zmq_heartbeat_interval"]
    # they registered: counted as registered, no longer as asking, once the window passed
    assert pace.registration(1)["zmq_heartbeat_interval"] == QUIET_ZMTP["zmq_heartbeat_interval"]
    clock.now += HELLO_WINDOW + 0.1
    assert pace.welcome(1)["zmq_heartbeat_interval"] == 1.0
    assert pace.registration(2)["zmq_heartbeat_interval"] == 1.0


def test_no_pace_while_the_interval_set_is_enough():
    pace = HeartbeatPace(Config(executor_heartbeat_rate=100), FakeClock())
    assert pace.next_in(500, T0 + 0.1) == 0.0


@pytest.mark.parametrize("now", [T0, T0 + 0.01, T0 + 0.2499, T0 + 7.3])
def test_a_paced_heartbeat_is_sent_at_the_slot_before_its_interval_ends(now):
    pace = HeartbeatPace(Config(executor_heartbeat_rate=100), FakeClock())
    interval = pace.paced(1000)
    assert interval == pytest.approx(10.0)
    next_in = pace.next_in(1000, now)
    assert interval - SLOT < next_in <= interval
    assert (now + next_in) / SLOT == pytest.approx(round((now + next_in) / SLOT))


def test_the_driver_pings_only_a_cluster_its_manager_keeps_small():
    manager = object()
    assert not driver_pings(None, 0, None)   # executors come by themselves: how many?
    assert driver_pings(manager, 3, None)
    assert driver_pings(manager, ZMTP_PEERS, None)
    assert not driver_pings(manager, ZMTP_PEERS + 1, None)
    assert driver_pings(manager, 2, DynamicAllocationPolicy(max_executors=ZMTP_PEERS))
    assert not driver_pings(manager, 2, DynamicAllocationPolicy())  # no maximum
