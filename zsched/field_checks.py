"""The shapes of message fields, checked on decode: each check takes a decoded value and
says whether it has the declared shape (``protocol`` declares a check per field)."""
import math

from .wire import rows_have_types


def is_type(*types):
    def check(value):
        # bool is an int in Python, but never a valid int field on the wire
        return isinstance(value, types) and (bool in types or not isinstance(value, bool))
    return check


is_int = is_type(int)
is_bool = is_type(bool)
is_str = is_type(str)
is_bytes = is_type(bytes)
is_number = is_type(int, float)


def optional(check):
    return lambda value: value is None or check(value)


def list_of(check):
    return lambda value: isinstance(value, list) and all(check(v) for v in value)


def dict_of(check_key, check_value):
    return lambda value: isinstance(value, dict) and all(
        check_key(k) and check_value(v) for k, v in value.items()
    )


def rows_of(*types, read_as=None):
    """A list of rows (one task each in a batch) whose items have exactly ``types``, in
    order; or, given ``read_as``, rows the wire read from a frame and checked then (a
    ``StatusRows`` or ``SubmitRows``). msgpack decodes to exact int, float, str and bytes, so
    an exact type test is both right (a bool never passes for an int) and cheap: this runs
    once per task, compiled (``rows_have_types``)."""
    return lambda value: type(value) is read_as or rows_have_types(value, types)


DATA_KEY_SIZE = 16  # a data key: 8 random bytes of its client, then a count


def is_data_key(value):
    return type(value) is bytes and len(value) == DATA_KEY_SIZE


# a task may prefer this many hosts at most, each a name of at most HOST_NAME_LIMIT characters
MAX_PREFERRED_HOSTS = 256
HOST_NAME_LIMIT = 255


def is_placement_row(row):
    """A TaskPlacement row: ``[client task id, [host, ...], speculative]``."""
    return (type(row) is list and len(row) == 3 and type(row[0]) is int
            and type(row[1]) is list and len(row[1]) <= MAX_PREFERRED_HOSTS
            and all(type(host) is str and 0 < len(host) <= HOST_NAME_LIMIT for host in row[1])
            and type(row[2]) is bool)


def is_scalar(value):
    return value is None or isinstance(value, (int, float, str, bool))


is_settings = dict_of(is_str, is_scalar)


# What an executor's Heartbeat reports, each a number >= 0; the driver keeps these alone.
HEARTBEAT_METRICS = ("rss", "cpu", "busy_threads", "functions")


def heartbeat_metrics(metrics):
    """The known figures of a Heartbeat's ``metrics`` that are finite numbers >= 0 (the
    dashboard serves them as JSON and as Prometheus floats)."""
    kept = {}
    for name in HEARTBEAT_METRICS:
        value = metrics.get(name)
        if (type(value) is int or type(value) is float) and 0 <= value < math.inf:
            kept[name] = value
    return kept
