"""The chooser of the scheduling core: the compiled fast path (``_fastpath``, with
``_slot_table``), or its twin ``_fastpath_py`` where ``ZSCHED_PUREPYTHON=1`` (the rule is
``fastpath``'s). Both branches import the same names, those of ``__all__``."""
from .fastpath import COMPILED

if COMPILED:
    from ._fastpath import (
        LATENCY_BUCKETS,
        ClientTasks,
        LatencyHistogram,
        RunningTasks,
        Task,
        apply_status_updates,
        launch_tasks,
        offer_and_launch,
        queue_tasks,
    )
    from ._slot_table import SlotTable, slots_per_core, window
else:
    from ._fastpath_py import (
        LATENCY_BUCKETS,
        ClientTasks,
        LatencyHistogram,
        RunningTasks,
        SlotTable,
        Task,
        apply_status_updates,
        launch_tasks,
        offer_and_launch,
        queue_tasks,
        slots_per_core,
        window,
    )

__all__ = ["SlotTable", "Task", "RunningTasks", "ClientTasks", "queue_tasks", "launch_tasks",
           "offer_and_launch", "apply_status_updates", "LatencyHistogram", "LATENCY_BUCKETS",
           "slots_per_core", "window"]
