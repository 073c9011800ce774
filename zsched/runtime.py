"""The chooser of the runtime helpers: the compiled ``_runtime``, or its twin
``_runtime_py`` where ``ZSCHED_PUREPYTHON=1`` (the rule is ``fastpath``'s). Both branches
import the same names, those of ``__all__``."""
from .fastpath import COMPILED

if COMPILED:
    from ._runtime import gc_track, gc_untrack
else:
    from ._runtime_py import gc_track, gc_untrack

__all__ = ["gc_track", "gc_untrack"]
