"""Exceptions that zsched raises, each carrying the facts that explain it, and how a
task's exception travels from an executor (``exception_payload``)."""
import pickle
import traceback



class ZschedError(Exception):
    """Base class of zsched's own errors."""


class ProtocolError(ZschedError, ValueError):
    """A frame that is not a valid zsched message."""


class ConfigError(ZschedError, ValueError):
    """A setting with an unknown name or an invalid value."""


class MessageTooLarge(ZschedError, ValueError):
    """A task or a result larger than the message limit (checked by the sender)."""

    def __init__(self, what, size, limit):
        self.what = what
        self.size = size
        self.limit = limit
        super().__init__(
            f"{what} is {size} bytes, larger than the message limit of {limit} bytes "
            f"(setting max_message_size)"
        )


class DataRefused(ZschedError, MemoryError):
    """The driver would not keep a task's large arguments or a broadcast value: it holds
    ``driver_data_limit`` bytes of data already."""


class TaskFailed(ZschedError):
    """A task that failed for a reason other than its own exception
    (its result could not be sent back, its executor was lost, ...)."""


class ExceptionTooLarge(ZschedError):
    """A task's exception too large for a message, whose own type could not be rebuilt:
    the type's name and the start of its message, cut to fit."""

    def __init__(self, type_name, message):
        self.type_name = type_name
        self.message = message
        super().__init__(type_name, message)

    def __str__(self):
        return f"{self.type_name}: {self.message}"


class RemoteTraceback(Exception):
    """The traceback of a task's exception, as printed on the executor.

    Attached as ``__cause__`` of the exception re-raised in the caller."""

    def __init__(self, text):
        self.text = text
        super().__init__(text)

    def __str__(self):
        return "\n\nTraceback on the executor:\n" + self.text


class DriverConnectionError(ZschedError, ConnectionError):
    """The driver could not be reached, refused us, or failed authentication."""


def exception_payload(exc):
    """Pickled (exception, traceback text); a stand-in when the exception does not pickle."""
    import cloudpickle  # here: the driver imports this module and never needs it
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    exc.__traceback__ = None
    try:
        payload = cloudpickle.dumps((exc, text))
        pickle.loads(payload)
        return payload
    except Exception:
        stand_in = RuntimeError(f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}")
        return cloudpickle.dumps((stand_in, text))


def load_exception(payload):
    """The exception of ``exception_payload``, its executor's traceback as ``__cause__``."""
    try:
        exc, text = pickle.loads(payload)
    except Exception as error:
        return TaskFailed(f"the task raised an exception that cannot be unpickled here: {error!r}")
    exc.__cause__ = RemoteTraceback(text)
    return exc
