"""Settings of a zsched cluster: one typed, frozen object, validated at start-up.

The driver is configured (``--conf KEY=VALUE`` or keyword arguments) and executors and
clients receive its settings when they register, so a cluster is configured once.
Durations are seconds (``30``, ``30s``, ``500ms``, ``2m``); sizes are bytes
(``134217728``, ``128MiB``, ``128m``, ``1g``).
"""
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


def parse_float(value):
    if isinstance(value, bool):
        raise ValueError(value)
    return float(value)


# name -> (parser, check on the parsed value, what a valid value is)
_RULES = {
    "max_message_size": (parse_size, lambda v: v > 0, "a positive size in bytes"),
    "revive_interval": (parse_duration, lambda v: v > 0, "a positive duration"),
    "min_registered_ratio": (parse_float, lambda v: 0.0 <= v <= 1.0, "a number from 0 to 1"),
    "max_registered_waiting_time": (parse_duration, lambda v: v >= 0, "a duration >= 0"),
    "registration_timeout": (parse_duration, lambda v: v > 0, "a positive duration"),
    "executor_heartbeat_interval": (parse_duration, lambda v: v > 0, "a positive duration"),
    "executor_heartbeat_timeout": (parse_duration, lambda v: v > 0, "a positive duration"),
    "zmq_heartbeat_interval": (parse_duration, lambda v: v > 0, "a positive duration"),
    "zmq_heartbeat_timeout": (parse_duration, lambda v: v > 0, "a positive duration"),
    "tasks_per_core": (parse_int, lambda v: 1 <= v <= 1 << 20, "an integer from 1 to 1048576"),
    "prefetch_seconds": (parse_duration, lambda v: v >= 0, "a duration >= 0"),
    "max_failures": (parse_int, lambda v: v >= 1, "an integer >= 1"),
    "task_kill_timeout": (parse_duration, lambda v: v > 0, "a positive duration"),
    "shutdown_timeout": (parse_duration, lambda v: v >= 0, "a duration >= 0"),
    "allocation_batch_delay": (parse_duration, lambda v: v > 0, "a positive duration"),
    "allocation_batch_size": (parse_int, lambda v: v >= 1, "an integer >= 1"),
    "executor_start_timeout": (parse_duration, lambda v: v > 0, "a positive duration"),
    "local_executor_link": (str, lambda v: v in ("pipe", "socket"), "'pipe' or 'socket'"),
    "driver_memory_cache": (parse_size, lambda v: v >= 0, "a size in bytes >= 0"),
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
    driver_memory_cache: int = 256 << 20       # freed memory bin/driver keeps for reuse, bytes

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
