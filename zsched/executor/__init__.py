"""The executor: registers with a driver, runs its tasks, reports their results.

``main`` is the command line of ``bin/executor``, ``zsched-executor`` and
``python -m zsched.executor``; ``ExecutorBackend`` is the process's loop.
"""
from .backend import ExecutorBackend, dumps_value, main

__all__ = ["ExecutorBackend", "dumps_value", "main"]
