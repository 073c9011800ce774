"""The remote end of an executor started over SSH: ``python -m zsched.cluster_managers.ssh_remote
EXECUTOR-ARGUMENTS``, run by ssh on the host.

It reads the executor's credential from the first line of its standard input (an empty
line: an insecure bus), so the credential is on no command line and in no file. It then
starts the executor (``zsched.executor`` with the same arguments), hands it the credential
on a pipe it reads once (``--credential-fd``), and watches two things:

- its standard input, which is the SSH session: at end of input (the driver closed it,
  the driver or the ssh client died, the connection dropped), or on SIGHUP or SIGTERM,
  it stops the executor: SIGTERM to its process group, SIGKILL after a grace period.
  A separate process does this so that an executor whose task holds the GIL, or which is
  stopped, still ends;
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

from .local import credential_pipe, describe_exit, environment_without_secrets
from .ssh import EXIT_MARKER

from .base import KILL_GRACE as STOP_GRACE  # seconds between SIGTERM and SIGKILL


def _die_with_parent():
    """Run in the executor before exec: it gets SIGKILL if this process dies (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _stop(executor):
    for sig, grace in ((signal.SIGTERM, STOP_GRACE), (signal.SIGKILL, None)):
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


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    stdin = sys.stdin.buffer
    credential = stdin.readline().strip()
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
    stdin_fd = stdin.fileno()
    while executor.poll() is None:
        if stop_requested:
            _stop(executor)
            break
        try:
            readable, _, _ = select.select([stdin_fd], [], [], 0.2)
        except InterruptedError:
            continue
        if readable and not os.read(stdin_fd, 4096):  # end of input: the session is gone
            _stop(executor)
            break
    code = executor.wait()
    try:
        print(EXIT_MARKER + describe_exit(code), flush=True)
    except OSError:
        pass  # nobody is listening any more
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
