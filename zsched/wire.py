"""The wire's frame readers and writers in use: the compiled ``_wire``, or its twin
``_wire_py`` where ``ZSCHED_PUREPYTHON=1`` (see ``fastpath``). ``protocol`` reads and checks
frames through them; the scheduler has them write its launch decisions (``launch_frames``)
and its clients' results (``ResultRows``).

``batch_tasks``, the splitter of task rows (the twin's LaunchTasks, the client's
SubmitTasks), is the twin's in both: the compiled launch cuts its frames as it writes them
(``LaunchWriter``), so it has none of its own."""
from ._wire_py import batch_tasks
from .fastpath import chosen

NAMES = ("StatusRows", "SubmitRows", "read_status_updates", "read_submit_tasks", "rows_have_types",
         "ResultRows", "launch_frames")
__all__ = list(NAMES) + ["batch_tasks"]

globals().update(chosen(NAMES, "_wire"))
