"""The ``zsched`` command (also ``python -m zsched``): ``status`` of a running cluster,
and ``driver`` and ``executor``, the same as ``bin/driver`` and ``bin/executor``.

    zsched status tcp://host:port --secret-file FILE [--json] [--timeout S]

``status`` prints what the driver reports: its executors by host, with their cores, the
tasks each holds, its busy cores and when it was last heard; the tasks queued, running,
done and failed; the allocation target; and the exclusions. ``--json`` prints the
driver's whole report as JSON, for scripts. It exits with status 1, saying why, when the
driver cannot be reached or refuses the credential.
"""
import argparse
import json
import sys

USAGE = """usage: zsched {status,driver,executor} ...

  zsched status ADDRESS [--secret-file FILE | --insecure] [--json] [--timeout S]
                     what a running cluster is doing
  zsched driver ...  run a driver (zsched driver --help)
  zsched executor ...
                     run an executor (zsched executor --help)
"""


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "status":
        return status_main(rest)
    if command == "driver":
        from .driver.cli import main as driver_main
        return driver_main(rest)
    if command == "executor":
        from .executor.cli import main as executor_main
        return executor_main(rest)
    sys.stderr.write(f"zsched: unknown command {command!r}\n{USAGE}")
    return 2


def status_main(argv):
    parser = argparse.ArgumentParser(prog="zsched status",
                                     description="What a running zsched cluster is doing.")
    parser.add_argument("address", help="the driver's address, tcp://host:port")
    parser.add_argument("--secret-file", help="the cluster's secret file, or a client "
                        "credential (default: ZSCHED_SECRET, then ZSCHED_SECRET_FILE)")
    parser.add_argument("--insecure", action="store_true",
                        help="for a driver started with --insecure")
    parser.add_argument("--json", action="store_true", help="the driver's whole report, as JSON")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="seconds to wait for the driver (default: 10)")
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error(f"--timeout must be > 0, got {args.timeout:g}")
    from .client import Client
    from .errors import ZschedError
    try:
        client = Client(args.address, secret_file=args.secret_file, insecure=args.insecure,
                        timeout=args.timeout)
        try:
            status = client.status()
        finally:
            client.close()
    except (ZschedError, ValueError, OSError) as exc:
        sys.stderr.write(f"zsched status: cannot get the status of {args.address}: {exc}\n")
        return 1
    if args.json:
        json.dump(status, sys.stdout, indent=2, sort_keys=True, default=str)
        sys.stdout.write("\n")
    else:
        from .status_report import report
        sys.stdout.write(report(status))
    return 0
