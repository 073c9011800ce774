"""The executor: registers with a driver, runs its tasks, reports their results.

``main`` is the command line of ``bin/executor``, ``zsched-executor`` and
``python -m zsched.executor``; ``ExecutorBackend`` is the process's loop.

- ``cli``: arguments, usage and ``main``.
- ``backend``: ``ExecutorBackend``, registration and the loop, the driver's messages.
- ``registration``: registering over a DEALER socket or over pipes.
- ``connection``: the driver's socket or pipes, once registered.
- ``tasks``: the task threads, running and killing tasks.
- ``inline``: a lone task run by the loop's thread, and the relief thread that covers
  for the loop meanwhile, over a connection of its own.
- ``timer``: the kernel timer that wakes the relief thread.
- ``worker``: the watch of ``--worker-url``.
"""
from ..entry import lazy_exports

# imported on first use: ``python -m zsched.executor`` in a checkout with nothing built
# says how to build it, rather than failing in this import
_SOURCES = {"ExecutorBackend": "backend", "dumps_value": "tasks", "main": "cli"}
__all__ = ["ExecutorBackend", "dumps_value", "main"]
__getattr__, __dir__ = lazy_exports(__name__, _SOURCES)
