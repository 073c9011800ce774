"""A trace of dynamic allocation: a driver with --dynamic-allocation on the local cluster
manager, a map that builds a backlog, then idleness; prints each allocation decision.

    python bench/allocation_trace.py [--tasks 300] [--task-seconds 0.05] [--max-executors 3]
"""
import argparse
import importlib.util
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if importlib.util.find_spec("zsched") is None:
    sys.path.insert(0, REPO)  # not installed: this checkout's zsched

import zsched  # noqa: E402

BIN = os.path.join(REPO, "bin")
DECISIONS = ("dynamic allocation", "zsched.allocation", "Registered executor", "Removed executor")


def work(seconds):
    time.sleep(seconds)
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--task-seconds", type=float, default=0.05)
    parser.add_argument("--max-executors", type=int, default=3)
    parser.add_argument("--backlog-timeout", type=float, default=0.5)
    parser.add_argument("--idle-timeout", type=float, default=2.0)
    args = parser.parse_args()
    driver = subprocess.Popen(
        [sys.executable, os.path.join(BIN, "driver"), "--insecure", "--local", "0",
         "--dynamic-allocation", "--max-executors", str(args.max_executors),
         "--backlog-timeout", str(args.backlog_timeout),
         "--executor-idle-timeout", str(args.idle_timeout), "--conf", "allocation_batch_delay=0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = re.search(r"tcp://\S+", driver.stdout.readline()).group(0)
        with zsched.Client(url) as client:
            started = time.monotonic()
            results = list(client.map(work, [args.task_seconds] * args.tasks))
            assert len(results) == args.tasks
            print(f"map of {args.tasks} x {args.task_seconds * 1000:g} ms done at "
                  f"{time.monotonic() - started:.2f} s")
            while client.executor_ids():
                time.sleep(0.1)
            print(f"back to 0 executors at {time.monotonic() - started:.2f} s")
    finally:
        driver.terminate()
        _, log = driver.communicate(timeout=60)
    for line in log.splitlines():
        if any(marker in line for marker in DECISIONS):
            print(line)


if __name__ == "__main__":
    main()
