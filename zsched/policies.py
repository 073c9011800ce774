"""The chooser of the scheduling policies: the compiled ``_policies``, or its twin
``_policies_py`` where ``ZSCHED_PUREPYTHON=1`` (the rule is ``fastpath``'s). Both branches
import the same names, those of ``__all__``."""
from .fastpath import COMPILED

if COMPILED:
    from ._policies import RUNTIMES_KEPT, HealthTracker, LocalityQueue, Runtimes, stragglers
else:
    from ._policies_py import RUNTIMES_KEPT, HealthTracker, LocalityQueue, Runtimes, stragglers

__all__ = ["RUNTIMES_KEPT", "Runtimes", "stragglers", "HealthTracker", "LocalityQueue"]
