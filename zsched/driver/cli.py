"""``bin/driver``: the driver's command line, and running it until a signal stops it."""
import argparse
import logging
import os
import signal
import stat
import sys

from .. import protocol as p
from ..config import MAX_EXECUTORS, MAX_EXECUTORS_PER_HOST, MAX_PORT, MIN_WAIT, WEEK, Config, number_in
from ..dynamic_allocation import DynamicAllocationPolicy, executors_at_start
from ..errors import ConfigError
from ..secret_file import default_secret_path
from .options import DriverOptions, local_manager, new_app_id

# The driver's own parts (core, and what it builds) are imported once the executors of
# --fork-executors are forked: they need none of it, and start meanwhile.

log = logging.getLogger("zsched.driver")


class _Parser(argparse.ArgumentParser):
    """Bad input is usage and an error line on stderr, exit status 1 (as bin/executor)."""

    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def _number(low, high, integer=False, unit=""):
    """An argparse type: a number from ``low`` to ``high``; else the option's error says so."""
    def parse(text):
        try:
            return number_in(text, low, high, integer, unit)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    parse.__name__ = "integer" if integer else "number"
    return parse


_PORT = _number(0, MAX_PORT, integer=True)
_EXECUTORS = _number(0, MAX_EXECUTORS, integer=True)
_TIMEOUT = _number(MIN_WAIT, WEEK, unit="s")


def build_parser():
    parser = _Parser(prog="zsched-driver", description="Run a zsched driver.")
    parser.add_argument("--host", default=None,
                        help="address to bind (default 127.0.0.1; with --hosts 0.0.0.0, and each "
                             "host's executors get the address that host is reached from)")
    parser.add_argument("--port", type=_PORT, default=0, help="port to bind; 0 picks a free one")
    parser.add_argument("--app-id", default=None)
    parser.add_argument("--secret-file", default=None,
                        help=f"shared secret; created (mode 0600) if missing (default {default_secret_path()})")
    parser.add_argument("--client-credential", default=None, metavar="FILE",
                        help="write a credential (mode 0600) that only submits tasks and calls "
                             "the client API: zsched.Client(address, secret_file=FILE)")
    parser.add_argument("--insecure", action="store_true",
                        help="no authentication or encryption (anyone reaching the port can run code)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--dashboard-port", type=_PORT, default=None, metavar="P",
                        help="serve a live dashboard and Prometheus /metrics on this port of "
                             "--dashboard-host (0 picks a free one); off unless given")
    parser.add_argument("--dashboard-host", default="127.0.0.1", metavar="H",
                        help="address the dashboard binds (default 127.0.0.1: this host only, "
                             "whatever --host is)")
    _add_manager_options(parser)
    parser.add_argument("--ipc-path", default=None, metavar="PATH",
                        help="also listen at this Unix socket, in a directory private to you: "
                             "executors started with --local connect there (lower latency than "
                             "TCP), and so can clients on this host (ipc://PATH)")
    parser.add_argument("--private-dir", default=None, metavar="DIR",
                        help="a directory made for this driver alone by the program that "
                             "started it (its secret file, its --ipc-path): removed, with "
                             "what it holds, when the driver stops")
    parser.add_argument("--client-pipes", default=None, type=_open_unix_socket, metavar="FD",
                        help="a Unix socket inherited from the program that started this "
                             "driver, through which it passes a pipe pair for each of its "
                             "clients (LocalCluster's client())")
    parser.add_argument("--fork-executors", action="store_true",
                        help="start the executors of --local N as forks of this process, "
                             "before it reads its secret or opens a socket: they start "
                             "without importing zsched again (those started later are "
                             "new processes)")
    parser.add_argument("--exit-on-stdin-close", action="store_true",
                        help="stop (and stop the executors) when standard input closes: "
                             "fate-sharing with the program that started the driver")
    parser.add_argument("--log-level", default="INFO", type=str.upper,
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return parser


def _add_manager_options(parser):
    """The cluster managers' options (local, SSH, Slurm) and dynamic allocation's."""
    managers = parser.add_mutually_exclusive_group()
    managers.add_argument("--local", type=_number(0, MAX_EXECUTORS_PER_HOST, integer=True),
                          default=None, metavar="N", help="start N executor processes on this host")
    managers.add_argument("--hosts", default=None, metavar="FILE",
                          help="start executors over SSH on the hosts in FILE, one "
                               "'[user@]host[:port] [executors]' per line")
    managers.add_argument("--slurm", action="store_true",
                          help="run executors as Slurm jobs (sbatch), watched with squeue")
    parser.add_argument("--cores-per-executor", type=_number(1, p.MAX_CORES, integer=True),
                        default=1, metavar="C")
    ssh = parser.add_argument_group("executors over SSH (with --hosts)")
    ssh.add_argument("--ssh-option", action="append", default=[], metavar="OPT",
                     help="passed to ssh as -o OPT (repeatable)")
    ssh.add_argument("--remote-python", default=None, metavar="PATH",
                     help="the Python on the hosts, with zsched installed (default python3; "
                          "with --slurm this driver's own interpreter)")
    slurm = parser.add_argument_group("executors as Slurm jobs (with --slurm)")
    slurm.add_argument("--partition", default=None, metavar="P", help="Slurm partition (default: Slurm's)")
    slurm.add_argument("--slurm-option", action="append", default=[], metavar="OPT",
                       help="passed to sbatch, e.g. --slurm-option=--time=60 (repeatable)")
    slurm.add_argument("--executors-per-job", type=_number(1, MAX_EXECUTORS, integer=True),
                       default=1, metavar="N", help="executors each job runs (default 1)")
    _add_dynamic_options(parser)


def _add_dynamic_options(parser):
    dynamic = parser.add_argument_group("dynamic allocation (with --local, --hosts or --slurm)")
    dynamic.add_argument("--dynamic-allocation", action="store_true",
                         help="grow the executors with the backlog, shrink them when idle")
    dynamic.add_argument("--min-executors", type=_EXECUTORS, default=0, metavar="N")
    dynamic.add_argument("--max-executors", type=_EXECUTORS, default=None, metavar="N")
    dynamic.add_argument("--initial-executors", type=_EXECUTORS, default=None, metavar="N",
                         help="executors at start, also without dynamic allocation (default: "
                              "--local N, all the hosts' executors, or one Slurm job)")
    dynamic.add_argument("--backlog-timeout", type=_TIMEOUT, default=1.0, metavar="S",
                         help="add executors while tasks have waited this long (default 1)")
    dynamic.add_argument("--executor-idle-timeout", type=_TIMEOUT, default=60.0, metavar="S",
                         help="decommission executors idle this long (default 60)")


def _open_unix_socket(text):
    """``--client-pipes FD``: an open Unix socket's descriptor."""
    try:
        fd = int(text)
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            raise ValueError
    except (ValueError, OSError):
        raise argparse.ArgumentTypeError(
            f"--client-pipes must be the descriptor of an open Unix socket, got {text!r}") from None
    return fd


def _cluster_manager(args, config):
    """The cluster manager the command line asks for, or None; ConfigError if malformed."""
    if args.local is not None:
        return local_manager(args.host, args.cores_per_executor, args.log_level)
    if args.hosts is not None:
        from ..cluster_managers.hosts_file import read_hosts_file
        from ..cluster_managers.ssh import SSHClusterManager
        return SSHClusterManager(read_hosts_file(args.hosts), args.cores_per_executor,
                                 ssh_options=args.ssh_option,
                                 remote_python=args.remote_python or "python3",
                                 driver_host=args.host, log_level=args.log_level,
                                 session_timeout=config.executor_heartbeat_timeout)
    if args.ssh_option:
        raise ConfigError("--ssh-option needs --hosts FILE")
    if args.slurm:
        from ..cluster_managers.slurm import SlurmClusterManager
        return SlurmClusterManager(args.cores_per_executor, partition=args.partition,
                                   slurm_options=args.slurm_option,
                                   executors_per_job=args.executors_per_job,
                                   python=args.remote_python or sys.executable,
                                   log_level=args.log_level)
    for option in ("partition", "slurm_option"):
        if getattr(args, option):
            raise ConfigError(f"--{option.replace('_', '-')} needs --slurm")
    return None


def _initial_executors(args, manager):
    """Executors at start: ``--local N``, else ``--initial-executors``, else all the hosts
    hold, else one Slurm job."""
    if manager is None:
        return 0
    if args.local is not None:
        return args.local
    if args.initial_executors is not None:
        return args.initial_executors
    capacity = manager.capacity()
    return capacity if capacity is not None else args.executors_per_job


def _report(text):
    print(f"zsched: {text}", flush=True)


def options_from_args(args, manager=None):
    """The ``DriverOptions`` the command line asks for (with ``manager``, the cluster
    manager it asks for, if made already); ConfigError if malformed."""
    config = Config.from_conf_pairs(args.conf)
    policy = _allocation_policy(args)
    if manager is None:
        manager = _cluster_manager(args, config)
    if manager is not None and (manager.capacity() or 0) > MAX_EXECUTORS:
        raise ConfigError(f"--hosts {args.hosts} lists {manager.capacity()} executors, "
                          f"more than {MAX_EXECUTORS}")
    initial = executors_at_start(_initial_executors(args, manager), args.initial_executors, policy)
    return DriverOptions.create(
        config, secret_file=args.secret_file or default_secret_path(), insecure=args.insecure,
        cluster_manager=manager, initial_executors=initial, dynamic_allocation=policy,
        ipc_path=args.ipc_path, host=args.host, port=args.port, app_id=args.app_id,
        report=_report, dashboard_port=args.dashboard_port, dashboard_host=args.dashboard_host,
        client_pipes=args.client_pipes,
        stop_on_eof_fd=sys.stdin.fileno() if args.exit_on_stdin_close else None)


def _allocation_policy(args):
    """The dynamic allocation policy the command line asks for, or None."""
    if args.max_executors is not None and args.min_executors > args.max_executors:
        raise ConfigError(f"--min-executors {args.min_executors} is above "
                          f"--max-executors {args.max_executors}")
    if not args.dynamic_allocation:
        return None
    return DynamicAllocationPolicy(args.min_executors, args.max_executors,
                                   args.backlog_timeout, args.executor_idle_timeout)


def _fork_first_executors(args, config, manager):
    """With ``--fork-executors``, fork the executors ``--local`` starts with, before this
    process reads its secret or makes a socket or a thread: whether it did. It does not
    where an executor could not reach it over pipes at a known address, or where a fork
    would hold more than an executor may (see ``forked_executors``)."""
    if not (args.fork_executors and args.local):
        return False
    from .forked_executors import fork_executor, may_fork_first
    count = executors_at_start(args.local, args.initial_executors, _allocation_policy(args))
    if not may_fork_first(count, args.ipc_path, config):
        return False
    if args.app_id is None:  # the executors are told it now
        args.app_id = new_app_id()
    manager.fork_first(count, f"ipc://{args.ipc_path}", args.app_id, fork_executor)
    return True


def _write_client_credential(parser, path, keys):
    from ..credentials import write_credential_file
    if keys is None:
        parser.error("--client-credential needs the cluster secret: not with --insecure")
    try:
        write_credential_file(path, keys.client_credential)
    except OSError as exc:
        parser.error(f"cannot write --client-credential {path}: {exc.strerror}")


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.host is None:
        args.host = "0.0.0.0" if args.hosts is not None or args.slurm else "127.0.0.1"
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = Config.from_conf_pairs(args.conf)
        manager = _cluster_manager(args, config)
        forked = _fork_first_executors(args, config, manager)
    except ConfigError as exc:
        parser.error(str(exc))
    try:
        driver, options = _new_driver(parser, args, manager)
    except BaseException:
        if forked:  # executors that no driver will take
            manager.stop(0)
        raise
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: driver.request_stop())
    print(f"zsched driver listening on {driver.url}", flush=True)
    secret_file = options.secret_file
    if secret_file:
        print(f"zsched secret file: {secret_file}", flush=True)
    if driver.dashboard is not None:
        print(f"zsched dashboard at {driver.dashboard.public_url}", flush=True)
    try:
        driver.run()
    finally:
        if args.private_dir is not None:
            import shutil  # only here: it loads the compression modules, which a start waits for
            shutil.rmtree(args.private_dir, ignore_errors=True)
    return 0


def _new_driver(parser, args, manager):
    """The driver the command line asks for, bound, and its options; a usage error (exit
    status 1) when it cannot be made."""
    import zmq

    from ..heap import keep_freed_buffers
    from .arena_cache import keep_freed_memory
    from .core import Driver
    try:
        options = options_from_args(args, manager)
    except ConfigError as exc:
        parser.error(str(exc))
    if args.client_credential is not None:
        _write_client_credential(parser, args.client_credential, options.keys)
    log.info("freed memory kept for reuse: %s; %s", keep_freed_memory(options.config.driver_memory_cache),
             keep_freed_buffers(options.config.driver_memory_cache))
    try:
        return Driver(options), options
    except (OSError, zmq.ZMQError) as exc:
        parser.exit(1, f"{parser.prog}: cannot listen on {args.host}: {exc}\n")
