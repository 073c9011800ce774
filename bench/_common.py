"""What the benchmark scripts share: this checkout's zsched when none is installed, medians
and percentiles, the log file that takes the systems' output, child processes left
running, py-spy recordings, and the closing ``JSON {...}`` line.

Importing this module puts the checkout on ``sys.path`` when zsched is not installed, so
a script imports it before zsched.
"""
import contextlib
import importlib.util
import json
import logging
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if importlib.util.find_spec("zsched") is None:
    # not installed: use this checkout's zsched (`pip install -e .` builds it in place)
    sys.path.insert(0, CHECKOUT)


class Stall(Exception):
    """A phase did not finish within its time limit."""


def check_results(results, expected, what):
    """Raise AssertionError, saying how many are wrong, unless ``results == expected``."""
    if results != expected:
        wrong = sum(1 for a, b in zip(results, expected) if a != b) + abs(len(results) - len(expected))
        raise AssertionError(f"{what}: {wrong} of {len(expected)} results are wrong or missing")


def require_positive(parser, args, names):
    """A usage error for the first of ``names`` (attributes of ``args``) below 1."""
    for name in names:
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")


# ---------------------------------------------------------------- figures

def median(rounds, key):
    """Median of ``key`` over the rounds (dicts) that have it; None if none has."""
    values = [r[key] for r in rounds if r.get(key) is not None]
    return statistics.median(values) if values else None


def percentile(sorted_values, q):
    """Linear interpolation between closest ranks (numpy's default); None if empty."""
    if not sorted_values:
        return None
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def fmt(value, spec):
    """``spec.format(value)``, or "-" for a figure that is missing."""
    return "-" if value is None else spec.format(value)


def about_zsched():
    """The version and fast path of the zsched measured (None if it does not import)."""
    try:
        import zsched
        from zsched.fastpath import IMPLEMENTATION
        return {"zsched_version": zsched.__version__, "fastpath": IMPLEMENTATION}
    except Exception:
        return {"zsched_version": None, "fastpath": None}


def about_machine():
    """Python, platform and CPU count, as each JSON line reports them."""
    return {"python": platform.python_version(), "platform": platform.platform(),
            "cpus": os.cpu_count()}


def print_json(report):
    """The last line of a benchmark's output: ``JSON`` and every figure."""
    print("JSON " + json.dumps(report, default=str))


# ---------------------------------------------------------------- log output

NOTABLE = re.compile(r"\b(WARNING|ERROR|CRITICAL|Traceback)\b|Error\b|Exception\b")


def new_log_file(prefix):
    """The path of a new, empty, private temporary file for the systems' log output."""
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=".log")
    os.close(fd)
    return path


@contextlib.contextmanager
def output_to_log(path, enabled):
    """Send fd 2 (this process and the children it starts) and this process's log records
    to ``path``; yield a stream for progress messages that still reaches the terminal.
    With ``enabled`` false, all stays on stderr."""
    if not enabled:
        _log_records_to_stderr()
        yield sys.stderr
        return
    sys.stderr.flush()
    saved = os.dup(2)
    progress = os.fdopen(os.dup(saved), "w", buffering=1)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.dup2(fd, 2)
        os.close(fd)
        _log_records_to_stderr()
        yield progress
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        progress.close()


def _log_records_to_stderr():
    # in-process log records (clients, peers) get their level and logger name
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def report_log(path, keep=False, expected=None):
    """Print how many lines the log file holds and its first ten warnings and errors, and
    delete it if it holds none and ``keep`` is false. ``expected`` is (text, why): warnings
    containing text are no trouble. Returns (the path, or None once deleted; the number of
    warnings and errors)."""
    with open(path, errors="replace") as f:
        lines = f.read().splitlines()
    notable = [line for line in lines if NOTABLE.search(line)]
    known = [line for line in notable if expected and expected[0] in line]
    others = [line for line in notable if not (expected and expected[0] in line)]
    if others or keep:
        word = "unexpected " if expected else ""
        print(f"log output: {len(lines)} lines, {len(others)} {word}warnings/errors, kept in {path}")
        for line in others[:10]:
            print(f"  {line[:200]}")
        return path, len(notable)
    besides = f" besides {len(known)} '{expected[0]}' ({expected[1]})" if expected else ""
    print(f"log output: {len(lines)} lines, no warnings or errors{besides}")
    os.unlink(path)
    return None, len(notable)


# ---------------------------------------------------------------- processes

def _is_helper(cmdline):
    """multiprocessing's resource tracker / fork server: live until this process exits."""
    return "multiprocessing.resource_tracker" in cmdline or "multiprocessing.forkserver" in cmdline


def live_children(grace):
    """(pid, cmdline) of this process's descendants still running after ``grace`` seconds,
    multiprocessing helpers left out (none without psutil)."""
    try:
        import psutil
    except ImportError:
        return []
    me = psutil.Process()
    deadline = time.monotonic() + grace
    while True:
        alive = []
        for child in me.children(recursive=True):
            try:
                if child.status() == psutil.STATUS_ZOMBIE:
                    continue
                cmdline = " ".join(child.cmdline())
            except psutil.NoSuchProcess:
                continue
            if not _is_helper(cmdline):
                alive.append((child.pid, cmdline))
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.1)


def kill_pids(pids):
    """SIGKILL each of ``pids`` that still runs."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------- py-spy

PY_SPY_SUFFIXES = {"flamegraph": "svg", "raw": "txt", "speedscope": "json"}


def add_profile_options(parser, what):
    """``--profile DIR`` (py-spy records ``what`` into DIR) and ``--profile-format``."""
    parser.add_argument("--profile", default=None, metavar="DIR",
                        help=f"run py-spy on {what}, output in DIR")
    parser.add_argument("--profile-format", default="flamegraph", choices=sorted(PY_SPY_SUFFIXES),
                        help="py-spy's output format (default flamegraph: an SVG)")


def check_profile_options(parser, args):
    """A usage error for ``--profile`` without py-spy; otherwise its directory is made."""
    if args.profile:
        if shutil.which("py-spy") is None:
            parser.error("--profile needs py-spy (pip install py-spy)")
        os.makedirs(args.profile, exist_ok=True)


def profile_path(args, name):
    """The file under ``--profile`` for the recording ``name``; None without ``--profile``."""
    if not args.profile:
        return None
    return os.path.join(args.profile, f"{name}.{PY_SPY_SUFFIXES[args.profile_format]}")


class PySpy:
    """``py-spy record`` of one process into ``path``, from construction until ``stop()``;
    py-spy's own messages go to ``output`` (default: this process's stderr)."""

    def __init__(self, pid, path, fmt="flamegraph", output=None):
        command = ["py-spy", "record", "--pid", str(pid), "--nonblocking", "--idle",
                   "--rate", "100", "--format", fmt, "--output", path]
        output = sys.stderr if output is None else output
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output,
                                        stderr=output, start_new_session=True)
        time.sleep(0.5)  # attached before the phase starts

    def stop(self):
        """Have py-spy write its output and exit (SIGINT); kill it after 30 s."""
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
