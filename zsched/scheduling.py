"""The scheduling core in use: the compiled ``_scheduling`` (with ``_slot_table``), or its
twin ``_scheduling_py`` where ``ZSCHED_PUREPYTHON=1`` (see ``fastpath``)."""
from .fastpath import COMPILED, missing_extension

NAMES = ("SlotTable", "Task", "RunningTasks", "ClientTasks", "queue_tasks", "launch_tasks",
         "offer_and_launch", "apply_status_updates", "LatencyHistogram", "LATENCY_BUCKETS",
         "slots_per_core", "window")
__all__ = list(NAMES)

if COMPILED:
    try:
        from . import _scheduling, _slot_table
    except ImportError as exc:  # pragma: no cover - depends on the build
        raise missing_extension() from exc
    _modules = (_scheduling, _slot_table)
else:
    from . import _scheduling_py
    _modules = (_scheduling_py,)
globals().update({name: getattr(module, name) for module in _modules for name in NAMES
                  if hasattr(module, name)})
