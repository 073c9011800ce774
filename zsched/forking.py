"""Processes started as forks of this one, in place of a new interpreter.

A new interpreter imports zsched again, which takes most of the time a driver or an
executor takes to start. A fork has imported it already. A fork is made only where it
holds nothing its child must not have (``fork_is_safe``). The child then leaves its
parent behind (``_leave_the_parent``): its own standard streams, signals and log, no
descriptor but those it is given, and it never runs its parent's code again.
``ForkedProcess`` is the parent's handle on it, as a ``Popen`` is on a spawned one.
"""
import ctypes
import gc
import io
import logging
import os
import signal
import subprocess
import sys
import time
import traceback

from .secret_file import SECRET_VARIABLES

_kept = []  # what the child took from its parent: never freed, so never closed


def fork_is_safe():
    """Whether a fork of this process holds nothing a child must not have. There is one
    thread (a fork copies none, and their locks may be held; ZeroMQ's count too), no
    secret in the environment (a fork keeps the block it started with, in
    /proc/self/environ), and the platform is Linux (elsewhere some system libraries do
    not survive a fork without an exec)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        if len(os.listdir("/proc/self/task")) != 1:
            return False
    except OSError:
        return False
    return not any(name in os.environ for name in SECRET_VARIABLES)


def fork_process(main, arguments, command_line, keep_fds, stdin=None, stdout=None):
    """Fork a child that runs ``main(arguments)`` and exits with its status. ``ps`` shows
    it as ``command_line``. It keeps only ``keep_fds`` and its standard streams: ``stdin``
    and ``stdout`` (descriptors) replace this process's when given, and standard input
    is /dev/null otherwise. Its ``ForkedProcess``."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _run_in_child(main, arguments, command_line, keep_fds, stdin, stdout)  # never returns
    return ForkedProcess(pid)


def _run_in_child(main, arguments, command_line, keep_fds, stdin, stdout):
    code = 1
    try:
        _leave_the_parent(keep_fds, stdin, stdout)
        show_command_line(command_line)
        sys.argv = [sys.argv[0], *arguments]
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
            os._exit(code or 0)  # never back into the parent's code


def _leave_the_parent(keep_fds, stdin, stdout):
    """What the child has of its own, as a new interpreter would: its standard streams,
    the signal handling Python starts with, a log with no handler and no level set, and
    no descriptor of its parent's. The parent's objects stay in memory untouched: the
    collector leaves them (``gc.freeze``), and what is replaced here is kept in ``_kept``."""
    gc.freeze()
    _reset_signals()
    _reset_logging()
    if stdin is None:
        stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    if stdout is not None:
        os.dup2(stdout, 1)
    _release_descriptors(set(keep_fds))
    _kept.extend((sys.stdin, sys.stdout, sys.stderr))
    sys.stdin = _text(0, "r")
    sys.stdout = _text(1, "w", line_buffering=os.isatty(1))
    sys.stderr = _text(2, "w", errors="backslashreplace", line_buffering=True)


def _release_descriptors(keep_fds):
    """Let go of every descriptor of the parent's but standard streams and ``keep_fds``.
    Each becomes /dev/null rather than closed: its number stays taken. A library that
    remembers a number (libuv's fork handler closes its own pipe in each new child) then
    never closes a pipe of this process's that would have reused it."""
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd != null and fd not in keep_fds:
            try:
                os.fstat(fd)  # the listing's own descriptor is closed already
            except OSError:
                continue
            os.dup2(null, fd, inheritable=False)


def _text(fd, mode, errors=None, line_buffering=False):
    """A text stream on descriptor ``fd``, buffered as a new interpreter's; it never
    closes ``fd``."""
    raw = io.FileIO(fd, mode, closefd=False)
    buffered = io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw)
    return io.TextIOWrapper(buffered, errors=errors, line_buffering=line_buffering)


def _reset_signals():
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for sig in signal.valid_signals():
        try:
            handler = signal.getsignal(sig)
        except (OSError, ValueError):
            continue
        if callable(handler) and handler is not signal.default_int_handler:
            signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _reset_logging():
    logging.disable(logging.NOTSET)
    loggers = [logging.root] + [logger for logger in logging.root.manager.loggerDict.values()
                                if isinstance(logger, logging.Logger)]
    for logger in loggers:
        _kept.extend(logger.handlers)
        for handler in logger.handlers[:]:
            logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
        logger.propagate = True
        logger.disabled = False
    logging.root.setLevel(logging.WARNING)


def show_command_line(words):
    """Have ``ps`` (``/proc/self/cmdline``) show ``words`` as this process's command line,
    as setproctitle does: written over the parent's in this process's memory. Spaces after
    its third word (``python -m module``) fill the rest; what does not fit is cut off. Nothing
    is written unless that memory holds exactly what the kernel shows."""
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
    if room > 0 and len(words) > 2:
        words[2] += b" " * room
    text = b"\0".join(words)[:size - 1] + b"\0"
    ctypes.memmove(start, text, size)


class ForkedProcess:
    """A forked child, with the part of ``subprocess.Popen`` that its owners use: ``pid``,
    ``returncode`` (negative: the signal that ended it), ``poll``, ``wait`` (with a
    timeout, ``subprocess.TimeoutExpired``), ``terminate`` and ``kill`` (no signal once it
    is reaped: its pid may be another's), and ``stdin`` and ``stdout`` when it has pipes."""

    def __init__(self, pid, stdin=None, stdout=None):
        self.pid = pid
        self.returncode = None
        self.stdin = stdin
        self.stdout = stdout

    def poll(self):
        if self.returncode is None:
            self._reap(os.WNOHANG)
        return self.returncode

    def wait(self, timeout=None):
        if timeout is None:
            if self.returncode is None:
                self._reap(0)
            return self.returncode
        deadline = time.monotonic() + timeout
        delay = 0.0005
        while self.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(f"process {self.pid}", timeout)
            time.sleep(min(delay, left))
            delay = min(delay * 2, 0.05)
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
