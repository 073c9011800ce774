"""Executors started as forks of the driver's process (``bin/driver --fork-executors``).

A new interpreter imports zsched again, which takes most of the time an executor takes
to start. A fork of the driver's process has imported what both use already. The driver forks its
first executors before it has read its secret or made a socket or a thread (``can_fork``
says whether it still may), so each child holds nothing that is not its own. The child
runs ``bin/executor``'s ``main`` on the command line an executor process would get, and
ends with it; ``ForkedProcess`` is the driver's handle on it, as a ``Popen`` is on an
executor it started.
"""
import os
import sys
import threading

from ..forking import ForkedProcess, fork_is_safe, fork_process

__all__ = ["ForkedProcess", "can_fork", "executor_command_line", "fork_executor",
           "may_fork_first"]


def executor_command_line(arguments):
    """The command line an executor given ``arguments`` shows: ``python -m
    zsched.executor``, its id first (what is cut off is the end of a long one)."""
    arguments = list(arguments)
    at = arguments.index("--executor-id") if "--executor-id" in arguments else 0
    first = arguments[at:at + 2]
    return [os.path.basename(sys.executable), "-m", "zsched.executor", *first,
            *arguments[:at], *arguments[at + 2:]]


def can_fork():
    """Whether a fork of this process holds nothing an executor must not have
    (``zsched.forking.fork_is_safe``); no thread of Python's either."""
    return threading.active_count() == 1 and fork_is_safe()


def may_fork_first(count, ipc_path, config):
    """Whether a driver's first ``count`` executors may be forks of this process: there
    are some, they reach the driver over pipes at a known address (``ipc_path``), and a
    fork holds nothing an executor must not have (``can_fork``)."""
    return (count > 0 and ipc_path is not None and config.local_executor_link == "pipe"
            and can_fork())


def fork_executor(arguments, keep_fds):
    """Fork an executor running ``bin/executor`` with ``arguments``; the child keeps only
    ``keep_fds`` (its pipes) and its standard output and error, and reads its standard
    input from /dev/null (the driver's tells it when its own starter is gone). Its
    ``ForkedProcess``."""
    return fork_process(_executor_main, arguments, executor_command_line(arguments), keep_fds)


def _executor_main(arguments):
    # imported here, in each executor: the driver needs none of the executor's modules
    from ..executor.cli import main
    return main(arguments)
