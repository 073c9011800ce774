"""Executors started as forks of the driver's process (``bin/driver --fork-executors``).

A new interpreter imports zsched again, which takes most of the time an executor takes
to start. A fork of the driver's process has imported what both use already. The driver forks its
first executors before it has read its secret or made a socket or a thread (``can_fork``
says whether it still may), so each child holds nothing that is not its own. The child
runs ``bin/executor``'s ``main`` on the command line an executor process would get, and
ends with it; ``ForkedProcess`` is the driver's handle on it, as a ``Popen`` is on an
executor it started.
"""
import ctypes
import logging
import os
import signal
import sys
import threading
import traceback

from ..cluster_managers.local import module_command
from ..secret_file import SECRET_VARIABLES


def executor_command_line(arguments):
    """The command line of an executor process given ``arguments``."""
    return module_command("zsched.executor") + list(arguments)


def can_fork():
    """Whether a fork of this process holds nothing an executor must not have: no other
    thread (a fork copies none, and their locks may be held), and no secret in the
    environment (a fork keeps the block it started with: /proc/self/environ). Linux only:
    elsewhere some system libraries do not survive a fork without an exec."""
    return (sys.platform.startswith("linux") and threading.active_count() == 1
            and not any(name in os.environ for name in SECRET_VARIABLES))


def fork_executor(arguments, keep_fds):
    """Fork an executor running ``bin/executor`` with ``arguments``; the child keeps only
    ``keep_fds`` (its pipes) and its standard output and error. Its ``ForkedProcess``."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _run_in_child(arguments, keep_fds)  # never returns
    return ForkedProcess(pid)


def _run_in_child(arguments, keep_fds):
    code = 1
    try:
        _leave_the_driver(keep_fds)
        _show_command_line(executor_command_line(arguments))
        sys.argv = [sys.argv[0], *arguments]
        # imported here, in each executor: the driver needs none of the executor's modules
        from ..executor.cli import main
        code = main(arguments)
    except SystemExit as exc:
        code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)  # never back into the driver's code


def _leave_the_driver(keep_fds):
    """What an executor process has of its own: standard input from /dev/null (the driver's
    tells it when its own starter is gone), and no other descriptor of the driver's."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    low = 3
    for fd in sorted(set(keep_fds)):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))
    for handler in logging.root.handlers[:]:  # the executor sets up its own log
        logging.root.removeHandler(handler)


def _show_command_line(words):
    """Have ``ps`` (``/proc/self/cmdline``) show ``words``, an executor's command line, as
    this process's, as setproctitle does: written over the driver's in this process's
    memory. Spaces at the end of its program (``-c``) fill the rest; what does not fit is
    cut off. Nothing is written unless that memory holds exactly what the kernel shows."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (fields 48, 49)
        with open("/proc/self/cmdline", "rb") as f:
            shown = f.read()
    except (OSError, IndexError, ValueError):
        return
    size = end - start
    if size <= 0 or len(shown) != size or ctypes.string_at(start, size) != shown:
        return
    words = [os.fsencode(word) for word in words]
    room = size - sum(len(word) + 1 for word in words)
    if room > 0:
        words[2] += b" " * room
    text = b"\0".join(words)[:size - 1] + b"\0"
    ctypes.memmove(start, text, size)


class ForkedProcess:
    """A forked executor, with the part of ``subprocess.Popen`` that a cluster manager
    uses: ``pid``, ``returncode`` (negative: the signal that ended it), ``poll``, ``wait``,
    ``terminate`` and ``kill`` (no signal once it is reaped: its pid may be another's)."""

    stdin = stdout = None

    def __init__(self, pid):
        self.pid = pid
        self.returncode = None

    def poll(self):
        if self.returncode is None:
            self._reap(os.WNOHANG)
        return self.returncode

    def wait(self):
        if self.returncode is None:
            self._reap(0)
        return self.returncode

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def send_signal(self, sig):
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def _reap(self, options):
        try:
            pid, status = os.waitpid(self.pid, options)
        except ChildProcessError:  # reaped elsewhere: how it ended is unknown
            self.returncode = 255
            return
        if pid == self.pid:
            self.returncode = os.waitstatus_to_exitcode(status)
