"""The remote end of an executor started over SSH: ``python -m zsched.cluster_managers.ssh_remote
EXECUTOR-ARGUMENTS``, run by ssh on the host.

It reads the secret from the first line of its standard input (an empty line: no
secret), so the secret is on no command line and in no file. It then starts the executor
(``zsched.executor`` with the same arguments, the secret in its environment, which only
the same user can read) and watches two things:

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

from ..security import SECRET_ENV
from .local import describe_exit
from .ssh import EXIT_MARKER

STOP_GRACE = 3.0  # seconds between SIGTERM and SIGKILL


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
    secret = stdin.readline().strip()
    environment = dict(os.environ)
    environment.pop(SECRET_ENV, None)
    if secret:
        environment[SECRET_ENV] = secret.decode()
    del secret
    stop_requested = []
    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop_requested.append(True))
    executor = subprocess.Popen([sys.executable, "-m", "zsched.executor", *argv],
                                stdin=subprocess.DEVNULL, env=environment,
                                start_new_session=True, preexec_fn=_die_with_parent)
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
