"""``TaskState``, part of the wire protocol (``protocol`` exports it), in a module of its own
so that the wire's compiled part and the scheduling core need nothing else of it."""
from enum import IntEnum


class TaskState(IntEnum):
    """State carried by StatusUpdates (executor -> driver) and TaskResults (driver -> client)."""

    FINISHED = 1   # payload: the pickled return value
    FAILED = 2     # payload: the pickled (exception, traceback text) raised by the task
    KILLED = 3     # payload: reason, utf-8
    ERROR = 4      # payload: utf-8 text of a failure that is not the task's own exception
    RETURNED = 5   # executor -> driver only: given back unstarted (decommissioning, ReturnTasks); payload empty
