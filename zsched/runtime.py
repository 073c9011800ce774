"""Runtime helpers in use: the compiled ``_runtime``, or its twin ``_runtime_py`` where
``ZSCHED_PUREPYTHON=1`` (see ``fastpath``)."""
from .fastpath import chosen

NAMES = ("gc_track", "gc_untrack")
__all__ = list(NAMES)

globals().update(chosen(NAMES, "_runtime"))
