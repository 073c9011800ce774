"""What a cluster's start imports, process by process: each import is time a start waits
for (bench/startup.py measures it). A LocalCluster starts its driver before it imports
ZeroMQ or the client; a driver and an executor import neither psutil nor the managers
they do not use."""
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def imported(code, candidates):
    """Which of ``candidates`` (module names) a fresh interpreter has imported after ``code``."""
    check = f"{code}; import sys; print(sorted(m for m in {candidates!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    return out.stdout.strip()


@pytest.mark.parametrize("code, unwanted", [
    # before LocalCluster starts its driver: the client waits until the driver runs
    ("import zsched; zsched.LocalCluster",
     ["zmq", "zsched.security", "zsched.credentials", "zsched.client.client", "cloudpickle",
      "psutil", "zsched.cluster_managers.ssh", "zsched.cluster_managers.slurm"]),
    ("import zsched.executor.cli",
     ["psutil", "ctypes.util", "zsched.cluster_managers", "zsched.driver", "zsched.client.client"]),
    # the driver's own parts load once its first executors are forked
    ("import zsched.driver.cli",
     ["psutil", "ctypes.util", "zsched.cluster_managers.ssh", "zsched.cluster_managers.slurm",
      "zsched.dashboard", "prometheus_client", "zsched.client.client", "zsched.driver.core",
      "shutil"]),
])
def test_a_start_imports_nothing_it_does_not_use(code, unwanted):
    assert imported(code, unwanted) == "[]"


def test_keeping_freed_buffers_runs_no_other_program():
    # ctypes.util.find_library runs ldconfig; platform.libc_ver reads the interpreter's file
    code = "from zsched.heap import keep_freed_buffers; keep_freed_buffers(1 << 20)"
    assert imported(code, ["ctypes.util", "platform", "subprocess"]) == "[]"
