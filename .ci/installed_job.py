"""A short job through `bin/driver --local 2`, as a user runs it after `pip install .`.

Run with the installed venv active, from the checkout's root. It checks that the driver
and this client both run the installed, compiled zsched, that the dashboard's page was
installed, that the installed `zsched status` reports the cluster, and that the driver
stops cleanly on SIGTERM."""
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time

import zsched
import zsched.fastpath
from zsched.dashboard.server import load_static_files


def read_address(driver, timeout=60):
    """The driver's address from its `listening on` line, or exit naming the wait."""
    selector = selectors.DefaultSelector()
    selector.register(driver.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if selector.select(deadline - time.monotonic()):
            line = driver.stdout.readline()
            if not line:
                break
            if line.startswith("zsched driver listening on "):
                return line.split()[-1]
    sys.exit(f"bin/driver printed no address within {timeout} s")


def main():
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    installed = os.path.dirname(zsched.__file__)
    if installed == os.path.join(checkout, "zsched") or not zsched.fastpath.COMPILED:
        sys.exit(f"this client runs {installed} ({zsched.fastpath.IMPLEMENTATION}), "
                 "not an installed, compiled zsched")
    page = {"index.html", "dashboard.js", "dashboard.css"} - set(load_static_files())
    assert not page, f"the installed dashboard lacks {sorted(page)}"
    with tempfile.TemporaryDirectory() as tmp:
        secret = os.path.join(tmp, "secret")
        driver = subprocess.Popen([os.path.join(checkout, "bin", "driver"), "--local", "2",
                                   "--port", "0", "--secret-file", secret],
                                  cwd=checkout, stdout=subprocess.PIPE, text=True)
        try:
            address = read_address(driver)
            with zsched.Client(address, secret_file=secret) as client:
                deadline = time.monotonic() + 60
                while len(client.executor_ids()) < 2 and time.monotonic() < deadline:
                    time.sleep(0.05)
                squares = list(client.map(pow, range(10_000), [2] * 10_000))
                assert squares == [x * x for x in range(10_000)], "wrong results"
                status = client.status()
            executors = len(status["executors"])
            assert executors == 2, f"{executors} executors, expected 2"
            # the installed command tells the same
            shown = subprocess.run(["zsched", "status", address, "--secret-file", secret],
                                   capture_output=True, text=True, timeout=60)
            assert shown.returncode == 0, shown.stderr
            assert "2 executor(s)" in shown.stdout, shown.stdout
            # the arena cache exists only in the compiled build: the driver runs it too
            assert status["memory_cache"] is not None, "the driver runs no compiled zsched"
        finally:
            driver.send_signal(signal.SIGTERM)
            code = driver.wait(60)
    assert code == 0, f"bin/driver exited {code} on SIGTERM"
    print(f"bin/driver --local 2 ran {len(squares)} tasks on {executors} executors "
          f"with the installed zsched ({installed}); SIGTERM: exit 0")


if __name__ == "__main__":
    main()
