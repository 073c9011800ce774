"""The chooser of the wire's frame readers and writers: the compiled ``_wire``, or its twin
``_wire_py`` where ``ZSCHED_PUREPYTHON=1`` (the rule is ``fastpath``'s). Both branches
import the same names, those of ``__all__``. ``protocol`` reads and checks frames through
them; the scheduler has them write its launch decisions (``launch_frames``) and its
clients' results (``ResultRows``).

``batch_tasks``, the splitter of task rows (the twin's LaunchTasks, the client's
SubmitTasks), is the twin's in both: the compiled launch cuts its frames as it writes them
(``LaunchWriter``), so it has none of its own. ``protocol`` takes it from ``_wire_py``."""
from .fastpath import COMPILED

if COMPILED:
    from ._wire import (
        ResultRows,
        StatusRows,
        SubmitRows,
        launch_frames,
        read_status_updates,
        read_submit_tasks,
        rows_have_types,
    )
else:
    from ._wire_py import (
        ResultRows,
        StatusRows,
        SubmitRows,
        launch_frames,
        read_status_updates,
        read_submit_tasks,
        rows_have_types,
    )

__all__ = ["StatusRows", "SubmitRows", "read_status_updates", "read_submit_tasks",
           "rows_have_types", "ResultRows", "launch_frames"]
