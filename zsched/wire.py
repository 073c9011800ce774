"""The wire's frame readers and writers in use: the compiled ``_wire``, or its twin
``_wire_py`` where ``ZSCHED_PUREPYTHON=1`` (see ``fastpath``). ``protocol`` is their one
user outside the scheduling core."""
from .fastpath import COMPILED, missing_extension

NAMES = ("StatusRows", "SubmitRows", "read_status_updates", "read_submit_tasks", "rows_have_types",
         "ResultRows")
__all__ = list(NAMES)

if COMPILED:
    try:
        from . import _wire as _implementation
    except ImportError as exc:  # pragma: no cover - depends on the build
        raise missing_extension() from exc
else:
    from . import _wire_py as _implementation
globals().update({name: getattr(_implementation, name) for name in NAMES})
