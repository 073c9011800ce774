"""Settings: typed, validated at start-up, errors that name the setting and the value."""
import pytest

from zsched.config import Config
from zsched.errors import ConfigError


def test_defaults():
    config = Config()
    assert config.max_message_size == 128 << 20
    assert config.revive_interval == 1.0
    assert config.max_failures == 4
    assert config.executor_heartbeat_timeout == 30.0


def test_units_are_parsed():
    config = Config.from_conf_pairs(["max_message_size=1MiB", "revive_interval=500ms",
                                     "task_kill_timeout=2m", "max_failures=7",
                                     "min_registered_ratio=0.5"])
    assert config.max_message_size == 1 << 20
    assert config.revive_interval == 0.5
    assert config.task_kill_timeout == 120.0
    assert config.max_failures == 7
    assert config.min_registered_ratio == 0.5


@pytest.mark.parametrize("pair, words", [
    ("max_failures=abc", "max_failures: 'abc'"),
    ("max_failures=0", "max_failures: '0'"),
    ("min_registered_ratio=1.5", "min_registered_ratio"),
    ("max_message_size=-3", "max_message_size"),
    ("max_message_size=12 parsecs", "max_message_size"),
    ("revive_interval=0", "revive_interval"),
    ("tasks_per_core=0", "tasks_per_core"),
    ("tasks_per_core=1048577", "an integer from 1 to 1048576"),
    ("no_such_setting=1", "unknown setting 'no_such_setting'"),
    ("novalue", "KEY=VALUE"),
])
def test_bad_values_name_the_setting(pair, words):
    with pytest.raises(ConfigError, match=words):
        Config.from_conf_pairs([pair])


def test_settings_round_trip_for_the_wire():
    config = Config(max_failures=9, revive_interval=0.25)
    assert Config.from_mapping(config.to_settings()) == config


def test_bool_is_not_an_int():
    with pytest.raises(ConfigError):
        Config(max_failures=True)


@pytest.mark.parametrize("interval, timeout", [("executor_heartbeat_interval", "executor_heartbeat_timeout"),
                                               ("zmq_heartbeat_interval", "zmq_heartbeat_timeout")])
def test_a_heartbeat_timeout_must_exceed_its_interval(interval, timeout):
    with pytest.raises(ConfigError, match=f"{timeout}.*{interval}"):
        Config(**{interval: 5, timeout: 5})
