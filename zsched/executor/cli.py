"""The command line of ``bin/executor``, ``zsched-executor`` and ``python -m zsched.executor``.

Arguments as Spark's CoarseGrainedExecutorBackend takes them; a missing, unknown or bad
one prints the usage on stderr and exits 1.
"""
import argparse
import logging
import os
import signal
import sys

from .. import protocol as p
from ..config import Config, check_name, check_url
from ..errors import ConfigError
from ..credentials import read_credential_fd
from ..secret_file import SECRET_ENV, SECRET_FILE_ENV, SECRET_VARIABLES
from ..security import CurveKeys, load_keys
from .backend import ExecutorBackend
from .threads import limit_threads

REGISTRATION_TIMEOUT_ENV = "ZSCHED_REGISTRATION_TIMEOUT"
USAGE = """\
Usage: zsched-executor [options]

 Options are:
   --driver-url <driverUrl>
   --executor-id <executorId>
   --hostname <hostname>
   --cores <cores>
   --app-id <appid>
   --worker-url <workerUrl>
   --secret-file <path>
   --credential-fd <fd>
   --insecure
   --driver-fds <readFd>,<writeFd>
   --relief-fds <readFd>,<writeFd>
   --log-level <level>
"""


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _UsageError(message)


def _fd_pair(option):
    """The type of ``option`` (``--driver-fds`` or ``--relief-fds``): READ,WRITE, two open
    descriptors inherited from the driver."""
    def fd_pair(text):
        try:
            read_fd, write_fd = (int(part) for part in text.split(","))
            for fd in (read_fd, write_fd):
                os.fstat(fd)
        except (ValueError, OSError, OverflowError):
            raise argparse.ArgumentTypeError(
                f"{option} must be two open file descriptors READ,WRITE, got {text!r}") from None
        return read_fd, write_fd
    return fd_pair


def _registration_timeout():
    """``ZSCHED_REGISTRATION_TIMEOUT`` if set, else the default; ConfigError naming it if bad."""
    value = os.environ.get(REGISTRATION_TIMEOUT_ENV)
    if not value:
        return Config().registration_timeout
    try:
        return Config(registration_timeout=value).registration_timeout
    except ConfigError as exc:
        raise ConfigError(f"{REGISTRATION_TIMEOUT_ENV}: {exc}") from None


def _keys(args):
    """The keys the executor connects with: its own credential, read from
    ``--credential-fd``, else the cluster secret's; None with ``--insecure``, or over pipes
    given none. ConfigError naming the options when a socket would have none. Tasks inherit
    no secret: the secret's variables leave this process's environment."""
    if args.insecure:
        keys = None
    elif args.credential_fd is not None:
        keys = CurveKeys.from_credential(read_credential_fd(args.credential_fd))
    else:
        keys = load_keys(args.secret_file)
    for name in SECRET_VARIABLES:
        os.environ.pop(name, None)
    if keys is None and not args.insecure and args.driver_fds is None:  # pipes need none
        raise ConfigError(
            f"no credential to connect to {args.driver_url}: give --secret-file, set "
            f"{SECRET_FILE_ENV} or {SECRET_ENV}, or pass --insecure to connect without "
            f"authentication or encryption")
    return keys


def parse_args(argv):
    """The parsed arguments; _UsageError says what is wrong with them."""
    parser = _Parser(prog="zsched-executor", add_help=False)
    parser.add_argument("--driver-url", required=True)
    parser.add_argument("--executor-id", required=True)
    parser.add_argument("--hostname", required=True)
    parser.add_argument("--cores", required=True, type=int)
    parser.add_argument("--app-id", required=True)
    parser.add_argument("--worker-url", default=None)
    parser.add_argument("--secret-file", default=None)
    parser.add_argument("--credential-fd", default=None, type=int)
    parser.add_argument("--insecure", action="store_true")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--driver-fds", default=None, type=_fd_pair("--driver-fds"))
    parser.add_argument("--relief-fds", default=None, type=_fd_pair("--relief-fds"))
    args = parser.parse_args(argv)
    if args.relief_fds is not None and args.driver_fds is None:
        raise _UsageError("--relief-fds goes with --driver-fds")
    if args.credential_fd is not None and args.secret_file is not None:
        raise _UsageError("--credential-fd and --secret-file exclude each other")
    for option in ("secret_file", "credential_fd"):
        if args.insecure and getattr(args, option) is not None:
            raise _UsageError(f"--insecure and --{option.replace('_', '-')} exclude each other")
    try:
        check_name("--executor-id", args.executor_id)
        check_name("--app-id", args.app_id)
        if args.driver_fds is None:  # over pipes, the URL only names the driver
            check_url("--driver-url", args.driver_url)
        if args.worker_url is not None:
            check_url("--worker-url", args.worker_url)
    except ConfigError as exc:
        raise _UsageError(str(exc)) from None
    if not 1 <= args.cores <= p.MAX_CORES:
        raise _UsageError(f"--cores must be from 1 to {p.MAX_CORES}, got {args.cores}")
    if not isinstance(logging.getLevelName(args.log_level.upper()), int):
        raise _UsageError(f"--log-level must be DEBUG, INFO, WARNING or ERROR, got {args.log_level}")
    return args


def main(argv=None):
    """Run an executor with these arguments (default: the command line's); its exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if argv in (["--help"], ["-h"]):
        sys.stdout.write(USAGE)
        return 0
    try:
        args = parse_args(argv)
    except _UsageError as exc:
        sys.stderr.write(f"{exc}\n{USAGE}")
        return 1
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s executor {args.executor_id}: %(message)s")
    try:
        keys = _keys(args)
        timeout = _registration_timeout()
    except ConfigError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    limit_threads(args.cores)
    backend = ExecutorBackend(args.driver_url, args.executor_id, args.hostname, args.cores,
                              args.app_id, keys=keys, worker_url=args.worker_url,
                              registration_timeout=timeout, driver_fds=args.driver_fds,
                              relief_fds=args.relief_fds)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: backend.request_stop(
            f"received signal {signal.Signals(signum).name}"))
    return backend.run()

