"""The fast path in use: the compiled ``_fastpath`` unless ``ZSCHED_PUREPYTHON=1``
selects the pure-Python reference ``_fastpath_py``. Both export ``NAMES``. ``COMPILED``
says which; ``pipe_link`` chooses its link by it too."""
import os

NAMES = ("SlotTable", "Task", "RunningTasks", "ClientTasks", "ResultRows", "queue_tasks", "launch_tasks",
         "apply_status_updates", "LatencyHistogram", "LATENCY_BUCKETS", "gc_track", "gc_untrack",
         "rows_have_types", "SocketState", "slots_per_core", "window", "offer_and_launch",
         "StatusRows", "read_status_updates", "SubmitRows", "read_submit_tasks")
__all__ = [*NAMES, "IMPLEMENTATION", "COMPILED"]

if os.environ.get("ZSCHED_PUREPYTHON", "") not in ("", "0"):
    from ._fastpath_py import (LATENCY_BUCKETS, ClientTasks, LatencyHistogram, ResultRows, RunningTasks,
                               SlotTable, SocketState, Task, apply_status_updates, gc_track,
                               gc_untrack, launch_tasks, queue_tasks, rows_have_types,
                               slots_per_core, window, offer_and_launch, StatusRows,
                               read_status_updates, SubmitRows, read_submit_tasks)
    IMPLEMENTATION = "pure-Python reference (ZSCHED_PUREPYTHON is set)"
    COMPILED = False
else:
    try:
        from ._fastpath import (LATENCY_BUCKETS, ClientTasks, LatencyHistogram, ResultRows, RunningTasks,
                                SlotTable, SocketState, Task, apply_status_updates, gc_track,
                                gc_untrack, launch_tasks, queue_tasks, rows_have_types,
                                slots_per_core, window, offer_and_launch, StatusRows,
                                read_status_updates, SubmitRows, read_submit_tasks)
    except ImportError as exc:  # pragma: no cover - depends on the build
        raise ImportError(
            "zsched's compiled fast path is missing: install zsched with `pip install .` "
            "(in a checkout you work on: `pip install -e .`, which builds it in place), "
            "or set ZSCHED_PUREPYTHON=1 to use the pure-Python reference"
        ) from exc
    IMPLEMENTATION = "compiled (Cython)"
    COMPILED = True
