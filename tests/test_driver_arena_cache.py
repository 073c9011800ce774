"""The driver process's cache of freed object arenas (zsched/driver/arena_cache.py and
zsched/_arena_cache.pyx), each case in a fresh interpreter: the cache changes its process's
allocator for good."""
import json
import os
import subprocess
import sys

import pytest

from zsched.fastpath import COMPILED

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Fills and frees about 100 MiB of small objects three times; prints the page faults each
# fill took, the cache's figures, and a check that the objects held what was put in them.
FLOODS = """
import json, resource, sys
from zsched.driver.arena_cache import keep_freed_memory, stats
print(json.dumps({"kept": keep_freed_memory(int(sys.argv[1]))}))
faults, checks = [], []
for _ in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    objects = [[i, i + 1] for i in range(1_000_000)]
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    checks.append(sum(a + b for a, b in objects) == 1_000_000 ** 2)
    del objects
print(json.dumps({"faults": faults, "checks": checks, "stats": stats()}))
"""


def floods(limit):
    result = subprocess.run([sys.executable, "-c", FLOODS, str(limit)], capture_output=True,
                            text=True, timeout=120, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": ROOT})
    assert result.returncode == 0, result.stderr
    kept, figures = (json.loads(line) for line in result.stdout.splitlines())
    return kept["kept"], figures


@pytest.mark.skipif(not COMPILED, reason="the cache is compiled only")
def test_freed_arenas_are_kept_up_to_the_limit_and_reused_without_page_faults():
    kept, figures = floods(256 << 20)
    assert kept == "up to 256 MiB"
    assert figures["checks"] == [True, True, True]
    stats = figures["stats"]
    assert stats["installed"] and stats["arena_size"] > 0 and stats["reused"] > 0
    assert 0 < stats["kept_bytes"] <= 256 << 20
    first, second, third = figures["faults"]
    # the first fill takes fresh memory; the next ones reuse what the first one freed
    assert second < first / 4 and third < first / 4, figures


@pytest.mark.skipif(not COMPILED, reason="the cache is compiled only")
def test_beyond_the_limit_freed_arenas_go_back_to_the_system():
    kept, figures = floods(8 << 20)
    assert kept == "up to 8 MiB" and figures["checks"] == [True, True, True]
    stats = figures["stats"]
    assert stats["kept_bytes"] <= 8 << 20 and stats["released"] > 0
    first, second, _ = figures["faults"]
    assert second > first / 2, figures  # most of the memory is fresh again


def test_a_limit_of_0_keeps_nothing():
    kept, figures = floods(0)
    if COMPILED:
        assert kept == "none (driver_memory_cache is 0)"
        assert figures["stats"]["kept_bytes"] == 0 and figures["stats"]["reused"] == 0
    else:
        assert kept == "none (the compiled modules are not in use)" and figures["stats"] is None
    assert figures["checks"] == [True, True, True]
