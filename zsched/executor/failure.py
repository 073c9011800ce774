"""A failed task's exception as it travels back to its client: pickled with its traceback
(``errors.exception_payload``), or, when that is larger than a message may be, cut to fit.

A cut exception is of the task's own type when that type can be rebuilt from a message
alone (else an ``ExceptionTooLarge`` naming it). It carries the start of the message, a
line saying it was cut and how large it was, and the end of the traceback, its long lines
cut too. So the task fails with its own error, and the driver never sees a frame over its
limit (which would cost the executor its connection).
"""
import pickle
import traceback

import cloudpickle

from ..errors import ExceptionTooLarge, exception_payload

KEEP = 16 << 10  # characters kept of a cut message, and of each line of a cut traceback
TRACEBACK_LINES = 4  # a cut traceback keeps at most this many times KEEP characters


def failure_payload(exc, limit):
    """The payload of a FAILED status row for ``exc``, at most ``limit`` bytes where it can
    be (a limit under a few hundred bytes leaves room for nothing)."""
    trace = exc.__traceback__  # exception_payload lets go of it: kept in case of a cut
    payload = exception_payload(exc)
    if len(payload) <= limit:
        return payload
    text = "".join(traceback.format_exception(type(exc), exc, trace))
    return cut_payload(exc, text, len(payload), limit)


def cut_payload(exc, text, size, limit):
    """A payload for ``exc`` and its traceback ``text``, whose full payload was ``size``
    bytes, cut to at most ``limit`` bytes."""
    note = (f"[cut to fit a message: this exception and its traceback were {size} bytes, "
            f"over max_message_size ({limit} bytes)]")
    name = f"{type(exc).__module__}.{type(exc).__qualname__}"
    keep = max(1, min(KEEP, limit // 16))
    while True:
        message = f"{cut_text(message_of(exc), keep)}\n{note}"
        trace = cut_traceback(text, keep)
        for candidate in (rebuilt(exc, message), ExceptionTooLarge(name, message)):
            payload = dumps_checked(candidate, trace) if candidate is not None else None
            if payload is not None and len(payload) <= limit:
                return payload
        if keep == 1:  # the least there is to say
            return cloudpickle.dumps((ExceptionTooLarge(name, note), ""))
        keep = max(1, keep // 4)


def message_of(exc):
    """The message ``exc`` was made with: its one text argument, else its ``str``."""
    args = exc.args
    if len(args) == 1 and isinstance(args[0], str):
        return args[0]
    try:
        return str(exc)
    except Exception as error:
        return f"<its str() failed: {error!r}>"


def cut_text(text, keep):
    """``text``, or its first ``keep`` characters and how many more there were."""
    if len(text) <= keep:
        return text
    return f"{text[:keep]}... [{len(text) - keep} more characters]"


def cut_traceback(text, keep):
    """The end of the traceback ``text``, each line cut to ``keep`` characters, in all at
    most ``TRACEBACK_LINES * keep`` characters from whole lines."""
    text = "\n".join(cut_text(line, keep) for line in text.splitlines())
    budget = TRACEBACK_LINES * keep
    if len(text) <= budget:
        return text
    end = text[-budget:]
    start = end.find("\n") + 1  # from the start of a line, if one begins there
    end = end[start:] if start else end
    return f"[the first {len(text) - len(end)} characters of this traceback cut]\n{end}"


def rebuilt(exc, message):
    """An exception of ``exc``'s type made of ``message`` alone, or None."""
    cls = type(exc)
    try:
        new = cls(message)
    except Exception:
        return None
    return new if type(new) is cls else None


def dumps_checked(exc, text):
    """``(exc, text)`` pickled as ``exception_payload`` does, if it comes back whole as
    ``exc``'s type; else None."""
    try:
        payload = cloudpickle.dumps((exc, text))
        loaded, _ = pickle.loads(payload)
    except Exception:
        return None
    return payload if type(loaded).__qualname__ == type(exc).__qualname__ else None
