"""How a cluster starts its driver process: a fork of this process where that is safe,
a new interpreter otherwise.

A new interpreter takes most of a local cluster's start: it starts, then imports what the
driver needs. A fork of this process has imported it once, and starts at once. It is
made only while this process runs a single thread and holds no secret in its
environment (``zsched.forking.fork_is_safe``): a notebook's kernel, or a process with a
thread of its own, gets a new interpreter. Either way the driver is a process of its
own, its standard input tells it when this process is gone, and its standard output
gives its address. ``fork=False`` always starts a new interpreter.
"""
import os
import subprocess
import sys

from ..cluster_managers.local import child_environment, module_command
from ..forking import fork_is_safe, fork_process


def start_driver(command, client_pipes_fd, fork=True):
    """Start the driver process of ``command`` (``module_command("zsched.driver")`` and
    its arguments), handing it ``client_pipes_fd``. A ``Popen`` or a ``ForkedProcess``,
    each with text ``stdin`` and ``stdout`` pipes."""
    if fork and fork_is_safe():
        from ..driver.cli import main  # the driver's imports, once in this process
        from ..executor import cli  # noqa: F401  and its forked executors'
        if fork_is_safe():  # importing started no thread
            return _fork_driver(main, command, client_pipes_fd)
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=child_environment(), text=True, pass_fds=[client_pipes_fd])


def _fork_driver(main, command, client_pipes_fd):
    arguments = command[len(module_command("zsched.driver")):]
    stdin_read, stdin_write = os.pipe()
    try:
        stdout_read, stdout_write = os.pipe()
    except BaseException:
        os.close(stdin_read)
        os.close(stdin_write)
        raise
    shown = [os.path.basename(sys.executable), "-m", "zsched.driver", *arguments]
    try:
        process = fork_process(main, arguments, shown, [client_pipes_fd],
                               stdin=stdin_read, stdout=stdout_write)
    except BaseException:
        os.close(stdin_write)
        os.close(stdout_read)
        raise
    finally:
        os.close(stdin_read)
        os.close(stdout_write)
    process.stdin = open(stdin_write, "w")
    process.stdout = open(stdout_read)
    return process
