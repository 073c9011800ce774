"""The wire's frame readers and writers in use: the compiled ``_wire``, or its twin
``_wire_py`` where ``ZSCHED_PUREPYTHON=1`` (see ``fastpath``). ``protocol`` reads and checks
frames through them; the scheduler has them write its launch decisions (``launch_frames``)
and its clients' results (``ResultRows``)."""
from .fastpath import chosen

NAMES = ("StatusRows", "SubmitRows", "read_status_updates", "read_submit_tasks", "rows_have_types",
         "ResultRows", "launch_frames")
__all__ = list(NAMES)

globals().update(chosen(NAMES, "_wire"))
