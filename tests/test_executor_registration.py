"""An executor's registration over the pipes a driver on its host gave it
(``zsched.executor.registration``), against a driver of another version: the executor
says the settings do not parse and exits 1, with no traceback, with or without a relief
thread's pipes. Over a socket: test_settings_mismatch.py."""
import os
import select
import subprocess
import sys
import time

import pytest

from conftest import BIN
from zsched import protocol as p
from zsched.pipe_link import PipeLink, pipe_pair

pytestmark = pytest.mark.timeout(60)


def piped_executor(relief):
    """An executor process on pipes of the test's: (its process, the test's end)."""
    ours, theirs = pipe_pair()
    command = [sys.executable, os.path.join(BIN, "executor"), "--driver-url", "pipe:test",
               "--executor-id", "7", "--hostname", "localhost", "--cores", "1",
               "--app-id", "app", "--driver-fds", "%d,%d" % theirs]
    passed, kept = list(theirs), []
    if relief:
        relief_ours, relief_theirs = pipe_pair()
        command += ["--relief-fds", "%d,%d" % relief_theirs]
        passed += relief_theirs
        kept += relief_ours
    proc = subprocess.Popen(command, pass_fds=passed, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    for fd in passed:
        os.close(fd)
    return proc, PipeLink(*ours, 1 << 30), kept


def receive_one(link, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frames = link.receive()
        if frames:
            return p.decode(frames[0])
        select.select([link.read_fd], [], [], 0.5)
    raise AssertionError("nothing from the executor")


@pytest.mark.parametrize("relief", [False, True], ids=["pipes", "pipes and relief pipes"])
@pytest.mark.parametrize("settings, named", [
    ({"max_failures": 4, "a_setting_of_a_later_version": 1}, "a_setting_of_a_later_version"),
    ({"max_failures": "many"}, "max_failures"),
])
def test_an_executor_on_pipes_of_another_version_exits_1_saying_why(relief, settings, named):
    proc, link, kept = piped_executor(relief)
    try:
        assert isinstance(receive_one(link), p.RegisterExecutor)
        link.send(p.encode(p.RegisteredExecutor(99, settings, b"token")))
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        link.close()
        for fd in kept:
            os.close(fd)
    assert proc.returncode == 1, err
    assert "the driver's settings do not parse here" in err and named in err, err
    assert "is the driver another version of zsched?" in err and "Traceback" not in err, err
