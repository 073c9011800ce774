"""The remote end of an executor started over SSH: ``python -m zsched.cluster_managers.ssh_remote
[--session-timeout SECONDS] EXECUTOR-ARGUMENTS``, run by ssh on the host.

It reads the executor's credential from the first line of its standard input (an empty
line: an insecure bus), so the credential is on no command line and in no file. It then
starts the executor (``zsched.executor`` with the same arguments), hands it the credential
on a pipe it reads once (``--credential-fd``), and watches two things:

- its standard input, which is the SSH session. It stops the executor (SIGTERM to its
  process group, SIGKILL after ``KILL_GRACE``) at end of input (the driver closed it, the
  driver or the ssh client died, the connection dropped), on SIGHUP or SIGTERM, and when
  the session is silent for ``--session-timeout`` seconds (the driver's
  ``executor_heartbeat_timeout``; ``SESSION_TIMEOUT`` by default) once the driver said that it keeps it
  alive (empty lines after the credential): its host cut off from the driver, or the
  driver stopped, with nothing to tell this end that the session is gone. A separate
  process does this so that an executor whose task holds the GIL, or which is stopped,
  still ends;
- the executor: when it exits, this prints ``EXIT_MARKER`` and how it ended on standard
  output (ssh carries it to the driver, which reports it as the reason of the loss) and
  exits with its exit status.
"""
import ctypes
import os
import select
import signal
import subprocess
import sys
import time

from .base import KILL_GRACE
from .local import credential_pipe, describe_exit, environment_without_secrets
from .ssh import EXIT_MARKER, SESSION_TIMEOUT


def _die_with_parent():
    """Run in the executor before exec: it gets SIGKILL if this process dies (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _stop(executor):
    for sig, grace in ((signal.SIGTERM, KILL_GRACE), (signal.SIGKILL, None)):
        try:
            os.killpg(executor.pid, sig)
        except ProcessLookupError:
            return
        try:
            executor.wait(grace)
            return
        except subprocess.TimeoutExpired:
            pass
    executor.wait()


def _first_line(fd):
    """The first line on ``fd`` (without its end of line), and what came after it."""
    data = b""
    while b"\n" not in data:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    line, _, rest = data.partition(b"\n")
    return line.strip(), rest


def _watch_session(executor, stdin_fd, kept_alive, stop_requested, timeout):
    """Until the executor exits, or is to stop (see the module's docstring): then stop it."""
    last_heard = time.monotonic()
    while executor.poll() is None:
        if stop_requested:
            _stop(executor)
            return
        readable, _, _ = select.select([stdin_fd], [], [], 0.2)
        if readable:
            if not os.read(stdin_fd, 4096):  # end of input: the session is gone
                _stop(executor)
                return
            kept_alive, last_heard = True, time.monotonic()
        elif kept_alive and time.monotonic() - last_heard > timeout:
            print(f"zsched ssh_remote: the session was silent for {timeout:g} s: "
                  f"stopping the executor", file=sys.stderr, flush=True)
            _stop(executor)
            return


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    timeout = SESSION_TIMEOUT
    if argv[:1] == ["--session-timeout"]:
        timeout, argv = float(argv[1]), argv[2:]
    stdin_fd = sys.stdin.fileno()
    credential, rest = _first_line(stdin_fd)
    environment = environment_without_secrets()
    credential_fds = []
    if credential:
        credential_fds.append(credential_pipe(credential + b"\n"))
        argv = [*argv, "--credential-fd", str(credential_fds[0])]
    else:
        argv = [*argv, "--insecure"]
    del credential
    stop_requested = []
    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop_requested.append(True))
    try:
        executor = subprocess.Popen([sys.executable, "-m", "zsched.executor", *argv],
                                    stdin=subprocess.DEVNULL, env=environment, pass_fds=credential_fds,
                                    start_new_session=True, preexec_fn=_die_with_parent)
    finally:
        for fd in credential_fds:
            os.close(fd)
    _watch_session(executor, stdin_fd, bool(rest), stop_requested, timeout)
    code = executor.wait()
    try:
        print(EXIT_MARKER + describe_exit(code), flush=True)
    except OSError:
        pass  # nobody is listening any more
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
