"""A cluster's driver forked from the caller's process (``zsched/clusters/driver_start.py``,
``zsched/forking.py``): it is a process of its own that holds nothing of the caller's
but memory, and a caller with a thread, a secret in its environment or ``fork=False``
starts a new interpreter instead.

Each case runs its caller in a new interpreter: a test runner's process may have
threads, and a fork of it is made only where it has none."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest

from conftest import REPO, wait_for

WAIT = 60

CALLER = textwrap.dedent("""
    import json, logging, os, signal, sys, threading, types
    import psutil
    import zsched

    MODE = sys.argv[1]
    sys.modules["caller_marker"] = types.ModuleType("caller_marker")
    log_file = sys.argv[2]
    logging.basicConfig(filename=log_file, level=logging.DEBUG)  # the caller's own log
    signal.signal(signal.SIGUSR1, lambda *_: None)
    kept_open = open(log_file + ".open", "w")  # a descriptor of the caller's
    if MODE == "thread":
        threading.Thread(target=threading.Event().wait, daemon=True).start()
    if MODE == "fork handler":  # as libuv's: in each new child, close a remembered pipe
        remembered = list(os.pipe())
        def renew():
            os.close(remembered[0]), os.close(remembered[1])
            remembered[:] = os.pipe()
        os.register_at_fork(after_in_child=renew)

    def what_the_task_sees():
        return {"caller_module": "caller_marker" in sys.modules, "pid": os.getpid()}

    with zsched.LocalCluster(n_executors=2, fork=MODE != "no fork") as cluster, \\
            cluster.client() as client:
        driver = psutil.Process(cluster.driver_pid)
        seen = client.submit(what_the_task_sees).result(60)
        report = {
            "forked": type(cluster._process).__name__ == "ForkedProcess",
            "driver_parent": driver.ppid() == os.getpid(),
            "driver_cmdline": " ".join(driver.cmdline()),
            "driver_files": [f.path for f in driver.open_files()],
            "driver_stdin": os.readlink(f"/proc/{driver.pid}/fd/0"),
            "driver_sigusr1": int(open(f"/proc/{driver.pid}/status").read()
                                  .split("SigCgt:")[1].split()[0], 16) >> 9 & 1,
            "executor_pids": [c.pid for c in driver.children()],
            "task": seen,
            "results": list(client.map(abs, range(-50, 0))),
            "executor_ids": sorted(e["id"] for e in client.status()["executors"]),
        }
        if MODE == "killed":
            print(json.dumps({**report, "driver_pid": driver.pid}), flush=True)
            sys.stdin.read()  # killed here by the test
    report["driver_left"] = psutil.pid_exists(report["executor_pids"][0])
    print(json.dumps(report), flush=True)
""")


def run_caller(tmp_path, mode, env=None):
    script = tmp_path / "caller.py"
    script.write_text(CALLER)
    log_file = tmp_path / "caller.log"
    out = subprocess.run([sys.executable, str(script), mode, str(log_file)], cwd=REPO,
                         capture_output=True, text=True, timeout=WAIT,
                         env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), log_file.read_text()


def test_a_single_threaded_caller_forks_a_driver_that_is_a_process_of_its_own(tmp_path):
    report, caller_log = run_caller(tmp_path, "fork")
    assert report["forked"] and report["driver_parent"]
    assert "zsched.driver" in report["driver_cmdline"]
    # its descriptors, signals and log are its own; its executors fork from it
    assert not any(path.startswith(str(tmp_path)) for path in report["driver_files"])
    assert report["driver_stdin"].startswith("pipe:")
    assert report["driver_sigusr1"] == 0
    assert "zsched.driver" not in caller_log
    assert report["task"]["caller_module"] and report["task"]["pid"] in report["executor_pids"]
    assert report["results"] == list(range(50, 0, -1))
    assert not report["driver_left"]


def test_a_fork_handler_that_closes_a_remembered_descriptor_spares_the_executors(tmp_path):
    """A library's fork handler closes, in each child, a pipe it made in the parent. The
    driver (a child) lets go of that pipe; its executors (grandchildren) must not lose a
    pipe of theirs that reused its number."""
    report, _ = run_caller(tmp_path, "fork handler")
    assert report["forked"]
    assert report["executor_ids"] == ["1", "2"]  # each registered at its first start
    assert report["results"] == list(range(50, 0, -1))


@pytest.mark.parametrize("mode, env", [("thread", None), ("no fork", None),
                                       ("fork", {"ZSCHED_SECRET": "a" * 40})],
                         ids=["a thread", "fork=False", "a secret in the environment"])
def test_otherwise_the_driver_is_a_new_interpreter(tmp_path, mode, env):
    report, _ = run_caller(tmp_path, mode, env)
    assert not report["forked"] and report["driver_parent"]
    assert not report["task"]["caller_module"]
    assert report["results"] == list(range(50, 0, -1))


def test_a_forked_driver_and_its_executors_leave_with_their_killed_caller(tmp_path):
    script = tmp_path / "caller.py"
    script.write_text(CALLER)
    caller = subprocess.Popen([sys.executable, str(script), "killed", str(tmp_path / "log")],
                              cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        report = json.loads(caller.stdout.readline())
        assert report["forked"]
        left = [psutil.Process(pid) for pid in [report["driver_pid"], *report["executor_pids"]]]
        caller.send_signal(signal.SIGKILL)
        caller.wait(WAIT)
        wait_for(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE
                                 for p in left),
                 timeout=WAIT, message="the driver and executors to leave with their caller")
    finally:
        caller.kill()
        caller.wait()
        caller.stdin.close()
        caller.stdout.close()


EMBEDDED = textwrap.dedent("""
    import json, os, sys, threading, types
    import zsched

    sys.modules["caller_marker"] = types.ModuleType("caller_marker")
    if sys.argv[1] == "thread":
        threading.Thread(target=threading.Event().wait, daemon=True).start()

    def what_the_task_sees():
        return {"caller_module": "caller_marker" in sys.modules, "parent": os.getppid(),
                "stdin": os.readlink("/proc/self/fd/0")}

    if sys.argv[1] == "no fork":
        cluster = zsched.LocalCluster(n_executors=2, in_process=True, fork=False)
        client = cluster.client()
    else:
        cluster, client = None, zsched.Client()
    seen = [client.submit(what_the_task_sees).result(60) for _ in range(4)]
    total = sum(client.map(abs, range(-100, 0)))
    client.shutdown()
    if cluster is not None:
        cluster.close()
    print(json.dumps({"seen": seen, "total": total, "me": os.getpid()}))
""")


@pytest.mark.parametrize("mode", ["fork", "thread", "no fork"])
def test_a_driver_in_this_process_forks_its_first_executors_when_it_may(tmp_path, mode):
    script = tmp_path / "embedded.py"
    script.write_text(EMBEDDED)
    out = subprocess.run([sys.executable, str(script), mode], cwd=REPO, capture_output=True,
                         text=True, timeout=WAIT)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["total"] == 5050
    for task in report["seen"]:
        assert task["parent"] == report["me"]
        assert task["caller_module"] == (mode == "fork")
        if mode == "fork":
            assert task["stdin"] == "/dev/null"
