"""Many executors lost at once: the driver's loop keeps answering, and says how long it
paused (``loop_longest_pause``). The executors are the simulated ones of bench/scale.py:
a hundred per process, over real sockets."""
import os
import subprocess
import sys
import threading
import time

import zsched

from conftest import REPO, wait_for

SIMULATED_EXECUTORS = os.path.join(REPO, "bench", "_scale_sim.py")
N_EXECUTORS, PER_PROCESS = 200, 100


def expect(process, prefix, timeout=120):
    """Read the process's lines until one starts with ``prefix`` (its reader may block:
    the process prints that line soon)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            raise AssertionError(f"simulated executors exited before {prefix!r}")
        if line.startswith(prefix):
            return line
    raise AssertionError(f"no {prefix!r} within {timeout} s")


def test_200_executors_lost_at_once_leave_the_loop_responsive(driver_factory, tmp_path):
    secret = str(tmp_path / "secret")
    driver = driver_factory("--app-id", "mass-loss", "--secret-file", secret, "--log-level", "ERROR")
    sims = [subprocess.Popen(
        [sys.executable, SIMULATED_EXECUTORS, "--driver-url", driver.url, "--app-id", "mass-loss",
         "--first-id", str(1 + i * PER_PROCESS), "--count", str(PER_PROCESS), "--cores", "1",
         "--hostname", f"simhost{i}", "--secret-file", secret],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        for i in range(N_EXECUTORS // PER_PROCESS)]
    try:
        for sim in sims:
            expect(sim, "ready")
        for sim in sims:
            sim.stdin.write("go\n")
            sim.stdin.flush()
        for sim in sims:
            expect(sim, "registered")
        with zsched.Client(driver.url, secret_file=secret) as client:
            wait_for(lambda: len(client.executor_ids()) == N_EXECUTORS, 60, message="200 executors")
            assert sum(client.map(abs, range(-4000, 0), chunksize=1)) == 4000 * 4001 // 2
            held = [client.submit(abs, -i) for i in range(4000)]  # some held by executors at the loss
            gaps = []
            pinging = threading.Event()

            def ping():  # the longest answer to a status request while executors go
                while not pinging.is_set():
                    started = time.monotonic()
                    client.executor_ids()
                    gaps.append(time.monotonic() - started)
            pinger = threading.Thread(target=ping)
            pinger.start()
            for sim in sims:
                sim.stdin.write("vanish\n")
                sim.stdin.flush()
            for sim in sims:
                expect(sim, "vanished", 30)
            wait_for(lambda: not client.executor_ids(), 60, message="every executor found lost")
            pinging.set()
            pinger.join()
            status = client.status()
            assert status["counters"]["executors_lost"] == N_EXECUTORS
            # generous bounds: the figures are for bench/, this says the loop never stalls
            print(f"longest loop pause {status['loop_longest_pause'] * 1000:.1f} ms, "
                  f"longest status answer {max(gaps) * 1000:.1f} ms")
            assert status["loop_longest_pause"] < 1.0
            assert max(gaps) < 2.0
            # none lost: each is done, or queued again for executors to come
            assert status["tasks"]["running"] == 0
            wait_for(lambda: client.status()["tasks"]["queued"] + sum(f.done() for f in held) == len(held),
                     10, message="each task done or queued")
            client.shutdown(cancel_futures=True)
    finally:
        for sim in sims:
            sim.stdin.close()
        for sim in sims:
            try:
                sim.wait(30)
            except subprocess.TimeoutExpired:
                sim.kill()
                sim.wait()
