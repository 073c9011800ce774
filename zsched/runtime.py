"""Runtime helpers in use: the compiled ``_runtime``, or its twin ``_runtime_py`` where
``ZSCHED_PUREPYTHON=1`` (see ``fastpath``)."""
from .fastpath import COMPILED, missing_extension

NAMES = ("gc_track", "gc_untrack")
__all__ = list(NAMES)

if COMPILED:
    try:
        from . import _runtime as _implementation
    except ImportError as exc:  # pragma: no cover - depends on the build
        raise missing_extension() from exc
else:
    from . import _runtime_py as _implementation
globals().update({name: getattr(_implementation, name) for name in NAMES})
