"""An executor's own figures for its heartbeats (``zsched/executor/metrics.py``): what
psutil says of the same process, read without it."""
import os
import time

import psutil
import pytest

from conftest import FakeClock
from zsched.executor.metrics import ProcessMetrics

pytestmark = pytest.mark.unit


def burn(seconds):
    """Keep this thread busy for ``seconds`` of its own CPU time."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_the_resident_set_is_psutils():
    block = bytearray(32 << 20)  # resident: written
    block[::4096] = b"x" * len(block[::4096])
    ours, theirs = ProcessMetrics().rss(), psutil.Process().memory_info().rss
    assert abs(ours - theirs) < 4 << 20  # apart by what the calls themselves allocated
    del block


def test_cpu_is_the_cpu_time_used_per_wall_clock_second_since_the_last_look():
    clock = FakeClock()
    metrics = ProcessMetrics(clock=clock)
    assert metrics.cpu_percent() == 0.0  # the first look has nothing to compare with
    before = os.times()
    burn(0.05)
    after = os.times()
    clock.set(clock() + 0.5)
    used = (after.user + after.system) - (before.user + before.system)
    percent = metrics.cpu_percent()
    assert used * 200 - 5 <= percent <= used * 200 + 5  # 0.5 s of wall clock: x 200
    assert metrics.cpu_percent() == 0.0  # no time has passed since


def test_cpu_agrees_with_psutil():
    ours, theirs = ProcessMetrics(), psutil.Process()
    ours.cpu_percent(), theirs.cpu_percent(None)
    burn(0.2)
    a, b = ours.cpu_percent(), theirs.cpu_percent(None)
    assert abs(a - b) < 15, (a, b)
