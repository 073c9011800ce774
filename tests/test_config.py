"""Settings: typed, validated at start-up, errors that name the setting, the value and the
bounds."""
import math
import os
import re
import tempfile
from dataclasses import fields

import pytest

from zsched.clusters.local import LocalCluster
from zsched.config import Config, check_name, check_url, name_problem
from zsched.dynamic_allocation import DynamicAllocationPolicy
from zsched.errors import ConfigError

from conftest import REPO


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


@pytest.mark.parametrize("text, value", [("true", True), ("Yes", True), ("on", True), ("1", True),
                                         ("false", False), ("NO", False), ("off", False), ("0", False)])
def test_a_switch_takes_the_usual_words(text, value):
    assert Config.from_conf_pairs([f"speculation={text}"]).speculation is value


def test_bool_is_not_an_int():
    with pytest.raises(ConfigError):
        Config(max_failures=True)


@pytest.mark.parametrize("interval, timeout", [("executor_heartbeat_interval", "executor_heartbeat_timeout"),
                                               ("zmq_heartbeat_interval", "zmq_heartbeat_timeout")])
def test_a_heartbeat_timeout_must_exceed_its_interval(interval, timeout):
    with pytest.raises(ConfigError, match=f"{timeout}.*{interval}"):
        Config(**{interval: 5, timeout: 5})


# The bounds of every setting, as its error message gives them.
BOUNDS = {
    "max_message_size": (1, 2 << 30),
    "revive_interval": (0.001, 3600.0),
    "min_registered_ratio": (0.0, 1.0),
    "max_registered_waiting_time": (0.0, 86400.0),
    "registration_timeout": (0.001, 86400.0),
    "executor_heartbeat_interval": (0.001, 3600.0),
    "executor_heartbeat_timeout": (0.01, 86400.0),
    "executor_heartbeat_rate": (0.01, 1_000_000),
    "zmq_heartbeat_interval": (0.001, 600.0),
    "zmq_heartbeat_timeout": (0.01, 3600.0),
    "tasks_per_core": (1, 1 << 20),
    "prefetch_seconds": (0.0, 3600.0),
    "max_failures": (1, 1_000_000),
    "task_kill_timeout": (0.001, 86400.0),
    "shutdown_timeout": (0.0, 86400.0),
    "allocation_batch_delay": (0.001, 3600.0),
    "allocation_batch_size": (1, 100_000),
    "executor_start_timeout": (0.001, 86400.0),
    "local_executor_link": ("pipe", "socket"),
    "driver_memory_cache": (0, 1 << 40),
    "client_results_window": (1 << 16, 1 << 40),
    "client_results_backlog": (1 << 16, 1 << 40),
    "driver_data_limit": (0, 1 << 44),
    "speculation": (False, True),
    "speculation_interval": (0.01, 3600.0),
    "speculation_multiplier": (1.0, 1000.0),
    "speculation_quantile": (0.0, 1.0),
    "speculation_min_runtime": (0.0, 604800.0),
    "exclude_on_failure": (False, True),
    "max_failed_tasks_per_executor": (1, 1_000_000),
    "max_failed_executors_per_host": (1, 1_000_000),
    "exclude_timeout": (0.001, 604800.0),
    "exclude_kill": (False, True),
    "locality_wait": (0.0, 86400.0),
}
HEARTBEATS = {"executor_heartbeat_interval": "executor_heartbeat_timeout",
              "zmq_heartbeat_interval": "zmq_heartbeat_timeout"}
SETTINGS = [f.name for f in fields(Config)]
BAD_VALUES = ["12 parsecs", "", "nan", "inf", "-inf", "1e400", "-1", "1e30",
              math.nan, math.inf, -math.inf, -1, -0.5, 10 ** 30, 1e30, 10 ** 400, None, True]


def test_every_setting_has_its_bounds_listed_here():
    assert sorted(BOUNDS) == sorted(SETTINGS)


@pytest.mark.parametrize("value", BAD_VALUES, ids=repr)
@pytest.mark.parametrize("name", SETTINGS)
def test_every_setting_refuses_bad_infinite_negative_and_huge_values(name, value):
    if value is True and BOUNDS[name] == (False, True):
        return  # a switch takes True
    with pytest.raises(ConfigError, match=rf"^invalid value for setting {name}: .*\(expected .+\)$"):
        Config(**{name: value})
    with pytest.raises(ConfigError, match=f"setting {name}: "):
        Config.from_conf_pairs([f"{name}={value}"])


def companions(name, value):
    """Settings that let ``name`` take ``value``: a heartbeat timeout above its interval."""
    if name in HEARTBEATS:
        return {HEARTBEATS[name]: BOUNDS[HEARTBEATS[name]][1]}
    if name in HEARTBEATS.values():
        interval = next(i for i, t in HEARTBEATS.items() if t == name)
        return {interval: BOUNDS[interval][0]}
    return {}


@pytest.mark.parametrize("name", SETTINGS)
def test_every_setting_takes_its_bounds_and_refuses_beyond(name):
    low, high = BOUNDS[name]
    for value in (low, high):
        assert getattr(Config(**{name: value}, **companions(name, value)), name) == value
        pairs = [f"{key}={text}" for key, text in {name: value, **companions(name, value)}.items()]
        assert getattr(Config.from_conf_pairs(pairs), name) == value
    if isinstance(low, (str, bool)):
        return
    expected = rf"\(expected .* {high if isinstance(high, int) else f'{high:g}'}"
    beyond = [high + 1, high * 1.01] + ([low - 1] if isinstance(low, int) else [low / 2] if low else [])
    for value in beyond:
        with pytest.raises(ConfigError, match=rf"setting {name}: .*{expected}"):
            Config(**{name: value}, **companions(name, low))


@pytest.mark.parametrize("pair, message", [
    ("zmq_heartbeat_timeout=1e400",
     "invalid value for setting zmq_heartbeat_timeout: '1e400' "
     "(expected a duration from 0.01 s to 3600 s)"),
    ("max_message_size=1e30",
     "invalid value for setting max_message_size: '1e30' "
     "(expected a size from 1 to 2147483648 bytes (2 GiB))"),
    ("revive_interval=0.5ms",
     "invalid value for setting revive_interval: '0.5ms' "
     "(expected a duration from 0.001 s to 3600 s)"),
])
def test_the_error_gives_the_value_and_the_bounds(pair, message):
    with pytest.raises(ConfigError) as raised:
        Config.from_conf_pairs([pair])
    assert str(raised.value) == message


def test_the_defaults_are_within_the_bounds():
    for name in SETTINGS:
        low, high = BOUNDS[name]
        value = getattr(Config(), name)
        assert value in (low, high) if isinstance(low, str) else low <= value <= high


@pytest.mark.parametrize("kwargs, named", [
    (dict(n_executors=-1), "n_executors must be from 0 to 8192, got -1"),
    (dict(n_executors=10 ** 9), "n_executors"),
    (dict(n_executors=1.5), "n_executors must be an integer"),
    (dict(port=70000), "port must be from 0 to 65535"),
    (dict(max_message_size=1e30), "setting max_message_size"),
    (dict(zmq_heartbeat_timeout=math.inf), "setting zmq_heartbeat_timeout"),
    (dict(conf={"zmq_heartbeat_interval": "1e400"}), "setting zmq_heartbeat_interval"),
    (dict(dynamic_allocation=True, min_executors=3, max_executors=2),
     "min_executors 3 is above max_executors 2"),
    (dict(dynamic_allocation=True, initial_executors=-1), "initial_executors"),
    (dict(dynamic_allocation=True, max_executors=1, initial_executors=2),
     "initial executors must be from 0 to 1, within the dynamic allocation's bounds, got 2"),
    (dict(dynamic_allocation=True, backlog_timeout=math.nan), "backlog_timeout"),
    (dict(dynamic_allocation=True, executor_idle_timeout=1e400), "executor_idle_timeout"),
    (dict(app_id="a\nb"), "app_id"),
    (dict(app_id="$(reboot)"), "app_id"),
])
@pytest.mark.parametrize("in_process", [False, True], ids=["process", "in_process"])
def test_a_local_cluster_refuses_bad_arguments_before_it_starts(kwargs, named, in_process,
                                                                 monkeypatch):
    monkeypatch.setattr(tempfile, "mkdtemp", lambda **_: pytest.fail("the cluster started"))
    with pytest.raises(ConfigError, match=re.escape(named)):
        LocalCluster(**kwargs, in_process=in_process)


@pytest.mark.parametrize("kwargs, named", [
    (dict(min_executors=-1), "min_executors"),
    (dict(min_executors=3, max_executors=2), "min_executors 3 is above max_executors 2"),
    (dict(max_executors=10 ** 30), "max_executors"),
    (dict(backlog_timeout=math.inf), "backlog_timeout"),
    (dict(idle_timeout=math.nan), "idle_timeout"),
    (dict(idle_timeout=-1), "idle_timeout"),
])
def test_the_dynamic_allocation_policy_refuses_bad_bounds_naming_them(kwargs, named):
    with pytest.raises(ConfigError, match=re.escape(named)):
        DynamicAllocationPolicy(**kwargs)


def test_the_settings_page_lists_every_setting():
    with open(os.path.join(REPO, "docs", "settings.md")) as page:
        text = page.read()
    missing = [f.name for f in fields(Config) if f"| `{f.name}` |" not in text]
    assert not missing, f"docs/settings.md does not list {missing}"


@pytest.mark.parametrize("url", ["tcp://127.0.0.1:1", "tcp://node-1.example:65535",
                                 "tcp://[::1]:7077", "ipc:///tmp/x.sock", "inproc://driver"])
def test_check_url_takes_what_zeromq_connects_to(url):
    assert check_url("--driver-url", url) == url


@pytest.mark.parametrize("url", ["bogus", "", "http://x:1", "tcp://", "tcp://host",
                                 "tcp://:7077", "tcp://host:port", "tcp://host:0",
                                 "tcp://host:65536", "ipc://", "inproc://", None, 7077])
def test_check_url_refuses_anything_else_naming_the_option(url):
    with pytest.raises(ConfigError, match=r"^address must be tcp://HOST:PORT \(PORT from 1 to 65535\)"):
        check_url("address", url)


@pytest.mark.parametrize("value, problem", [
    ("", "empty"), ("\u00b2", "ASCII"), ("\u2460", "ASCII"), ("9" * 5000, "5000 characters"),
    ("a/b", "ASCII letters"), ("a\nb", "ASCII letters"), ("a\n", "ASCII letters"),
    ("-x", "beginning with"), ("x" * 65, "more than 64"), (7, "empty"),
])
def test_an_odd_app_or_executor_id_is_refused_saying_why(value, problem):
    assert problem in name_problem(value)
    with pytest.raises(ConfigError, match="executor id"):
        check_name("executor id", value)


@pytest.mark.parametrize("value", ["1", "12345", "exec-a", "app-20261128101607-d8b9f8", "A.b_c-9",
                                   "x" * 64])
def test_plain_ids_are_taken(value):
    assert name_problem(value) is None and check_name("executor id", value) == value
