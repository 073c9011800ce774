"""The scheduling core in use: the compiled ``_scheduling`` (with ``_slot_table``), or its
twin ``_scheduling_py`` where ``ZSCHED_PUREPYTHON=1`` (see ``fastpath``)."""
from .fastpath import chosen

NAMES = ("SlotTable", "Task", "RunningTasks", "ClientTasks", "queue_tasks", "launch_tasks",
         "offer_and_launch", "apply_status_updates", "LatencyHistogram", "LATENCY_BUCKETS",
         "slots_per_core", "window")
__all__ = list(NAMES)

globals().update(chosen(NAMES, "_scheduling", "_slot_table"))
