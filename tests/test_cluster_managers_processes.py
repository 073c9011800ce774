"""A cluster manager's processes in the hands of its thread: real processes, no driver.

What the driver's thread calls (``start``, ``stop``, ``take_exits``, ``exit_of``) never
waits; the thread starts, signals, reads and reaps.
"""
import subprocess
import sys
import threading
import time

import psutil
import pytest

from conftest import wait_for
from zsched.cluster_managers.local import describe_exit
from zsched.cluster_managers.processes import ChildProcesses

# a process that ignores SIGTERM: only SIGKILL ends it
IGNORES_SIGTERM = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                   "print('ready', flush=True); time.sleep(600)")


def python(code, **kwargs):
    return lambda: subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL, **kwargs)


def how_it_ended(child):
    return describe_exit(child.process.returncode)


def exits_of(children, n):
    found = []

    def all_found():
        found.extend(children.take_exits())
        return len(found) >= n
    wait_for(all_found, timeout=30, message=f"{n} exit(s)")
    return found


@pytest.fixture
def children():
    made = []

    def make(*args, **kwargs):
        made.append(ChildProcesses("test-children", *args, **kwargs))
        return made[-1]
    yield make
    for each in made:
        each.close()


def test_exits_are_found_and_taken_once(children):
    processes = children(how_it_ended)
    processes.start("1", python("import sys; sys.exit(3)"))
    processes.start("2", python("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
    assert sorted(exits_of(processes, 2)) == [("1", "exited with code 3"), ("2", "killed by signal SIGKILL")]
    assert processes.take_exits() == [] and processes.exit_of("1") is None
    assert processes.wait_idle(0)


def test_an_exit_is_known_before_it_is_taken(children):
    processes = children(how_it_ended)
    processes.start("1", python("pass"))
    wait_for(lambda: processes.exit_of("1"), timeout=30, message="the exit found")
    assert processes.exit_of("1") == "exited with code 0"
    assert processes.take_exits() == [("1", "exited with code 0")]


def test_a_start_that_raises_is_an_exit_saying_why(children):
    processes = children(how_it_ended)

    def spawn():
        raise OSError(24, "Too many open files")
    processes.start("1", spawn)
    assert exits_of(processes, 1) == [("1", "could not start: OSError: [Errno 24] Too many open files")]


def test_the_steps_of_a_stop_run_in_order_until_the_process_is_gone(children):
    """SIGTERM is ignored: the SIGKILL of the next step, after its delay, ends it."""
    lines = []
    processes = children(how_it_ended, on_line=lambda child, line: lines.append(line))
    processes.start("1", python(IGNORES_SIGTERM, stdout=subprocess.PIPE))
    wait_for(lambda: lines == ["ready"], timeout=30, message="the process ready")
    ran = []

    def step(name, signal_name):
        def action(child):
            ran.append((name, time.monotonic()))
            getattr(child.process, signal_name)()
        return action
    asked = time.monotonic()
    processes.stop("1", [(0.0, step("terminate", "terminate")), (0.5, step("kill", "kill")),
                         (60.0, step("never", "kill"))])
    assert exits_of(processes, 1) == [("1", "killed by signal SIGKILL")]
    assert [name for name, _ in ran] == ["terminate", "kill"]
    assert ran[1][1] - asked >= 0.5  # the second step waited for its delay


def test_output_is_read_to_its_last_line_before_the_exit_is_reported(children):
    lines = []
    processes = children(lambda child: f"ended after {lines[-1]}",
                         on_line=lambda child, line: lines.append(line))
    code = "import sys; [print(i) for i in range(20000)]; sys.stdout.write('last'); sys.exit(1)"
    processes.start("1", python(code, stdout=subprocess.PIPE))
    assert exits_of(processes, 1) == [("1", "ended after last")]
    assert lines == [str(i) for i in range(20000)] + ["last"]


def test_keepalive_reaches_running_processes_and_not_those_stopping(children):
    echo = "import sys\nfor line in sys.stdin: print('heard', flush=True)"
    heard = []

    def keepalive(child):
        child.process.stdin.write(b"\n")
        child.process.stdin.flush()
    processes = children(how_it_ended, on_line=lambda child, line: heard.append(child.executor_id),
                         keepalive=(0.05, keepalive))
    for executor_id in ("1", "2"):
        processes.start(executor_id, lambda: subprocess.Popen(
            [sys.executable, "-c", echo], stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    wait_for(lambda: {"1", "2"} <= set(heard), timeout=30, message="both heard")

    def close_input(child):
        child.process.stdin.close()
    processes.stop("1", [(0.0, close_input)])
    assert exits_of(processes, 1) == [("1", "exited with code 0")]
    processes.stop("2", [(0.0, close_input)])
    assert exits_of(processes, 1) == [("2", "exited with code 0")]


def test_the_calls_of_the_driver_thread_do_not_wait_for_a_start(children):
    """A start (fork and exec) holds the manager's thread, not its caller: here the start
    waits for the caller to be done with its calls, which would never be if they waited."""
    processes = children(how_it_ended)
    calls_done = threading.Event()
    waited = []

    def spawn_when_the_calls_are_done():
        waited.append(calls_done.wait(60))
        return python("pass")()
    processes.start("1", spawn_when_the_calls_are_done)
    processes.start("2", python("pass"))
    processes.stop("1", [(0.0, lambda child: child.process.terminate())])
    assert processes.take_exits() == [] and processes.exit_of("1") is None
    calls_done.set()
    assert len(exits_of(processes, 2)) == 2 and waited == [True]


def test_close_ends_the_thread_and_leaves_its_processes(children):
    processes = children(how_it_ended)
    processes.start("1", python("import time; time.sleep(600)"))
    wait_for(lambda: [c for c in psutil.Process().children() if "sleep(600)" in " ".join(c.cmdline())],
             timeout=30, message="the process started")
    (child,) = [c for c in psutil.Process().children() if "sleep(600)" in " ".join(c.cmdline())]
    assert not processes.wait_idle(0.1)
    processes.close()
    assert child.is_running()
    child.kill()
    child.wait(30)
