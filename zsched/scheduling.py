"""The scheduling core in use: the compiled ``_fastpath`` (with ``_slot_table``), or its
twin ``_fastpath_py`` where ``ZSCHED_PUREPYTHON=1`` (see ``fastpath``)."""
from .fastpath import chosen

NAMES = ("SlotTable", "Task", "RunningTasks", "ClientTasks", "queue_tasks", "launch_tasks",
         "offer_and_launch", "apply_status_updates", "LatencyHistogram", "LATENCY_BUCKETS",
         "slots_per_core", "window")
__all__ = list(NAMES)

globals().update(chosen(NAMES, "_fastpath", "_slot_table"))
