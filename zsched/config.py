"""Settings of a zsched cluster: one typed, frozen object, validated at start-up.

The driver is configured (``--conf KEY=VALUE`` or keyword arguments) and executors and
clients receive its settings when they register, so a cluster is configured once.
Durations are seconds (``30``, ``30s``, ``500ms``, ``2m``); sizes are bytes
(``134217728``, ``128MiB``, ``128m``, ``1g``). Every setting has finite bounds: a value
outside them is a ConfigError naming the setting, the value and the bounds.
"""
import math
import re
from dataclasses import asdict, dataclass, fields, replace

from .errors import ConfigError

_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
               "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
               "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}
_TIME_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3, "m": 60.0, "min": 60.0, "h": 3600.0}
_NUMBER_WITH_UNIT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def _split_unit(text):
    match = _NUMBER_WITH_UNIT.match(text)
    if not match:
        raise ValueError(text)
    return float(match.group(1)), match.group(2).lower()


def parse_size(value):
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int):
        return value
    number, unit = _split_unit(str(value))
    if unit not in _SIZE_UNITS:
        raise ValueError(value)
    return int(number * _SIZE_UNITS[unit])


def parse_duration(value):
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, (int, float)):
        return float(value)
    number, unit = _split_unit(str(value))
    if unit not in _TIME_UNITS:
        raise ValueError(value)
    return number * _TIME_UNITS[unit]


def parse_int(value):
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int):
        return value
    return int(str(value).strip())


def parse_bool(value):
    """A bool, or its text: true/false, yes/no, on/off, 1/0 (any case)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise ValueError(value)


def parse_float(value):
    if isinstance(value, bool):
        raise ValueError(value)
    return float(value)


# Bounds shared by the settings below, the driver's command line and LocalCluster.
HOUR, DAY, WEEK = 3600.0, 86400.0, 604800.0
# Shorter than a millisecond rounds to 0 ms in ZeroMQ's options and poll timeouts (0 is "off").
MIN_WAIT = 0.001
MAX_PORT = 65535
MAX_EXECUTORS = 100_000  # in one cluster
# executor processes on one host (--local N): each runs threads, and a host's thread ids
# often stop at 32768 (Linux's default pid_max)
MAX_EXECUTORS_PER_HOST = 8192


def _words(number, unit):
    return f"{number:g} {unit}" if unit else f"{number}"


def _size_words(size):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size and size % scale == 0:
            return f"{size} bytes ({size // scale} {unit})"
    return f"{size} bytes"


def _duration(low, high):
    return (parse_duration, lambda v: math.isfinite(v) and low <= v <= high,
            f"a duration from {low:g} s to {high:g} s")


def _size(low, high):
    return (parse_size, lambda v: low <= v <= high, f"a size from {low} to {_size_words(high)}")


def _integer(low, high):
    return (parse_int, lambda v: low <= v <= high, f"an integer from {low} to {high}")


def number_in(value, low, high, integer=False, unit=""):
    """``value`` (a number or its text) as an int or a finite float from ``low`` to ``high``.

    ValueError saying what is expected otherwise; callers add the name of the option."""
    try:
        number = parse_int(value) if integer else parse_float(value)
        ok = low <= number <= high  # False for nan; inf is above any high
    except (TypeError, ValueError, OverflowError):
        kind = "an integer" if integer else "a number"
        raise ValueError(f"must be {kind} from {_words(low, unit)} to {_words(high, unit)}, "
                         f"got {value!r}") from None
    if not ok:
        raise ValueError(f"must be from {_words(low, unit)} to {_words(high, unit)}, got {value!r}")
    return number


def check_number(name, value, low, high, integer=False, unit=""):
    """``number_in`` for keyword argument ``name``: ConfigError naming it otherwise."""
    try:
        return number_in(value, low, high, integer, unit)
    except ValueError as exc:
        raise ConfigError(f"{name} {exc}") from None


# name -> (parser, check on the parsed value, what a valid value is). Every bound is finite
# and within what the code reading the setting takes (noted where that binds).
def check_url(name, url):
    """An address as ZeroMQ connects to it: ``tcp://HOST:PORT`` (PORT from 1 to 65535),
    ``ipc://PATH`` or ``inproc://NAME``; ConfigError naming ``name`` otherwise."""
    scheme, sep, rest = str(url).partition("://")
    if sep and scheme in ("ipc", "inproc") and rest:
        return url
    if sep and scheme == "tcp":
        host, colon, port = rest.rpartition(":")
        if colon and host and port.isdigit() and 1 <= int(port) <= MAX_PORT:
            return url
    raise ConfigError(f"{name} must be tcp://HOST:PORT (PORT from 1 to {MAX_PORT}), ipc://PATH "
                      f"or inproc://NAME, got {url!r}")


NAME_LIMIT = 64  # characters of an app id or an executor id
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")


def name_problem(value):
    """What is wrong with ``value`` as an app id or an executor id, or None. Such an id goes
    into command lines, Slurm scripts, logs and sorts: 1 to 64 ASCII letters, digits, '.',
    '_' or '-', beginning with a letter or a digit."""
    if not isinstance(value, str) or not value:
        return "it is empty"
    if len(value) > NAME_LIMIT:
        return f"it has {len(value)} characters, more than {NAME_LIMIT}"
    if not (value.isascii() and _NAME.match(value)):
        return ("it may hold only ASCII letters, digits, '.', '_' and '-', beginning with a "
                "letter or a digit")
    return None


def check_name(name, value):
    """``value`` if it is a valid app id or executor id (``name_problem``); ConfigError
    naming ``name`` otherwise."""
    problem = name_problem(value)
    if problem is not None:
        raise ConfigError(f"{name} {value!r:.80}: {problem}")
    return value


_RULES = {
    # payloads are msgpack bins and frames are indexed with 32-bit offsets: under 4 GiB each
    "max_message_size": _size(1, 2 << 30),
    "revive_interval": _duration(MIN_WAIT, HOUR),
    "min_registered_ratio": (parse_float, lambda v: 0.0 <= v <= 1.0, "a number from 0 to 1"),
    "max_registered_waiting_time": _duration(0.0, DAY),
    # executors and clients poll for that long, in milliseconds as a C int (24 days at most)
    "registration_timeout": _duration(MIN_WAIT, DAY),
    # each timeout must also exceed its interval (checked below)
    "executor_heartbeat_interval": _duration(MIN_WAIT, HOUR),
    "executor_heartbeat_timeout": _duration(0.01, DAY),
    "executor_heartbeat_rate": (parse_float, lambda v: 0.01 <= v <= 1_000_000,
                                "a number from 0.01 to 1000000"),
    "zmq_heartbeat_interval": _duration(MIN_WAIT, 600.0),
    # ZMTP sends the timeout (ZMQ_HEARTBEAT_TTL) in deciseconds in 16 bits: 6553 s at most
    "zmq_heartbeat_timeout": _duration(0.01, HOUR),
    # the fast path counts windows of MAX_CORES * tasks_per_core tasks in C longs
    "tasks_per_core": _integer(1, 1 << 20),
    "prefetch_seconds": _duration(0.0, HOUR),
    "max_failures": _integer(1, 1_000_000),
    "task_kill_timeout": _duration(MIN_WAIT, DAY),
    "shutdown_timeout": _duration(0.0, DAY),
    "allocation_batch_delay": _duration(MIN_WAIT, HOUR),
    "allocation_batch_size": _integer(1, MAX_EXECUTORS),
    "executor_start_timeout": _duration(MIN_WAIT, DAY),
    "local_executor_link": (str, lambda v: v in ("pipe", "socket"), "'pipe' or 'socket'"),
    # a size_t for the allocator's cache; more than a host's memory means nothing
    "driver_memory_cache": _size(0, 1 << 40),
    # a frame of results goes alone past the window: any size works
    "client_results_window": _size(1 << 16, 1 << 40),
    "client_results_backlog": _size(1 << 16, 1 << 40),
    "driver_data_limit": _size(0, 1 << 44),
    # Spark's speculation, exclusion on failure and delay scheduling (see placement)
    "speculation": (parse_bool, lambda v: True, "true or false"),
    "speculation_interval": _duration(0.01, HOUR),
    "speculation_multiplier": (parse_float, lambda v: 1.0 <= v <= 1000.0, "a number from 1 to 1000"),
    "speculation_quantile": (parse_float, lambda v: 0.0 <= v <= 1.0, "a number from 0 to 1"),
    "speculation_min_runtime": _duration(0.0, WEEK),
    "exclude_on_failure": (parse_bool, lambda v: True, "true or false"),
    "max_failed_tasks_per_executor": _integer(1, 1_000_000),
    "max_failed_executors_per_host": _integer(1, 1_000_000),
    "exclude_timeout": _duration(MIN_WAIT, WEEK),
    "exclude_kill": (parse_bool, lambda v: True, "true or false"),
    "locality_wait": _duration(0.0, DAY),
}


@dataclass(frozen=True)
class Config:
    """Every setting of a cluster, with its default."""

    max_message_size: int = 128 << 20          # largest task or result, bytes
    revive_interval: float = 1.0               # resource offers at least this often
    min_registered_ratio: float = 0.0          # registered / expected cores before launching
    max_registered_waiting_time: float = 30.0  # ... or launch anyway after this long
    registration_timeout: float = 30.0         # executors and clients give up after this long
    executor_heartbeat_interval: float = 5.0   # executor -> driver application heartbeats
    executor_heartbeat_timeout: float = 30.0   # silence after which a peer is lost
    executor_heartbeat_rate: float = 100.0     # most heartbeats a second the driver asks for
    zmq_heartbeat_interval: float = 1.0        # ZMTP heartbeats on every connection
    zmq_heartbeat_timeout: float = 10.0
    tasks_per_core: int = 256                  # most tasks an executor holds per core (running + queued)
    prefetch_seconds: float = 0.002            # work queued on an executor beyond what it runs
    max_failures: int = 4                      # system failures a task may suffer
    task_kill_timeout: float = 30.0            # a killed task must stop within this
    shutdown_timeout: float = 10.0             # executors must exit within this at stop
    allocation_batch_delay: float = 1.0        # the allocator compares and acts this often
    allocation_batch_size: int = 5             # most executors started per allocation round
    executor_start_timeout: float = 60.0       # an executor not registered by then is killed
    local_executor_link: str = "pipe"          # executors a driver starts on its host reach it by
    driver_memory_cache: int = 1 << 30         # freed memory bin/driver and executors keep for reuse, bytes
    client_results_window: int = 64 << 20      # results sent to a client and not yet taken, bytes
    client_results_backlog: int = 256 << 20    # held for a client before its tasks wait, bytes
    driver_data_limit: int = 4 << 30           # large arguments and broadcasts the driver holds, bytes
    speculation: bool = False                  # a second attempt of a straggling task
    speculation_interval: float = 0.1          # stragglers are looked for this often
    speculation_multiplier: float = 1.5        # a straggler runs this many times its group's median
    speculation_quantile: float = 0.75         # of its group's tasks finished before any is speculated
    speculation_min_runtime: float = 0.1       # and runs at least this long
    exclude_on_failure: bool = False           # offer failing executors and hosts no tasks
    max_failed_tasks_per_executor: int = 2     # failed attempts that exclude an executor
    max_failed_executors_per_host: int = 2     # excluded executors that exclude their host
    exclude_timeout: float = 3600.0            # how long an exclusion (and a failure) counts
    exclude_kill: bool = False                 # kill an excluded executor; it is replaced
    locality_wait: float = 3.0                 # a task preferring hosts waits this long for them

    def __post_init__(self):
        for f in fields(self):
            name, value = f.name, getattr(self, f.name)
            parser, check, expected = _RULES[name]
            try:
                parsed = parser(value)
                ok = check(parsed)
            except (TypeError, ValueError, OverflowError):
                ok = False
            if not ok:
                raise ConfigError(f"invalid value for setting {name}: {value!r} (expected {expected})")
            object.__setattr__(self, name, parsed)
        for interval, timeout in (("executor_heartbeat_interval", "executor_heartbeat_timeout"),
                                  ("zmq_heartbeat_interval", "zmq_heartbeat_timeout")):
            if getattr(self, timeout) <= getattr(self, interval):
                raise ConfigError(f"invalid value for setting {timeout}: {getattr(self, timeout):g} s "
                                  f"(expected more than {interval}, {getattr(self, interval):g} s: "
                                  "a peer would be declared lost between two heartbeats)")

    @classmethod
    def from_mapping(cls, values):
        """A Config from ``{name: value}``; an unknown name is an error naming it."""
        known = {f.name for f in fields(cls)}
        for name in values:
            if name not in known:
                raise ConfigError(f"unknown setting {name!r} (known: {', '.join(sorted(known))})")
        return cls(**values)

    @classmethod
    def from_driver(cls, settings):
        """The Config a driver sent (its welcome, or a registration's answer); a ConfigError
        that says so when it does not parse here."""
        try:
            if not isinstance(settings, dict):
                raise ConfigError(f"settings are a {type(settings).__name__}, not a mapping")
            return cls.from_mapping(settings)
        except (ConfigError, TypeError) as exc:
            raise ConfigError(f"the driver's settings do not parse here ({exc}): is the driver "
                              "another version of zsched?") from None

    @classmethod
    def from_conf_pairs(cls, pairs, base=None):
        """A Config from ``["KEY=VALUE", ...]`` as given to ``--conf``."""
        values = dict(asdict(base)) if base is not None else {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"--conf expects KEY=VALUE, got {pair!r}")
            values[key.strip()] = value.strip()
        return cls.from_mapping(values)

    def to_settings(self):
        """The settings as a plain dict, for the wire."""
        return asdict(self)

    def with_changes(self, **changes):
        return replace(self, **changes)
