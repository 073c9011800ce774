"""CPU time of one lone task's round trip with the embedded client (``zsched.Client()``),
by thread: the driver's loop thread and the caller.

    python bench/lone_task_cpu.py                     # 5 rounds of 3,000 round trips
    python bench/lone_task_cpu.py --rounds 9 --round-trips 5000

A no-op task is submitted and waited for, again and again. Each thread's CPU time (user and
system, ``pthread_getcpuclockid``) over a round, divided by its round trips, is steadier on
a shared machine than the round trip's own time, which is printed beside it. The executors
are processes of their own and not counted. Medians over rounds; a table, then one line
``JSON {...}``.
"""
import argparse
import importlib.util
import json
import os
import statistics
import sys
import threading
import time

if importlib.util.find_spec("zsched") is None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import zsched  # noqa: E402


def noop(x):
    return x


def one_round(client, driver_clock, round_trips):
    driver_start, caller_start = time.clock_gettime(driver_clock), time.thread_time()
    start = time.perf_counter()
    for i in range(round_trips):
        client.submit(noop, i).result()
    wall = time.perf_counter() - start
    driver = time.clock_gettime(driver_clock) - driver_start
    caller = time.thread_time() - caller_start
    return {name: seconds / round_trips * 1e6
            for name, seconds in (("wall_us", wall), ("driver_thread_cpu_us", driver),
                                  ("caller_cpu_us", caller))}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--round-trips", type=int, default=3000)
    args = parser.parse_args(argv)
    with zsched.Client() as client:
        for i in range(300):  # warm-up: the function shipped, the executors' loops hot
            client.submit(noop, i).result()
        driver = next(t for t in threading.enumerate() if t.name.startswith("zsched-driver"))
        driver_clock = time.pthread_getcpuclockid(driver.ident)
        rounds = [one_round(client, driver_clock, args.round_trips) for _ in range(args.rounds)]
    medians = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    print(f"zsched {os.path.dirname(zsched.__file__)}: embedded client, {args.rounds} rounds of "
          f"{args.round_trips:,} round trips, medians")
    print(f"{'per round trip':<24}{'us':>8}")
    print("-" * 32)
    for key, label in (("wall_us", "round trip (wall)"), ("driver_thread_cpu_us", "driver thread CPU"),
                       ("caller_cpu_us", "caller CPU")):
        print(f"{label:<24}{medians[key]:>8.1f}")
    print("JSON " + json.dumps({"medians": medians, "rounds": rounds,
                                "round_trips": args.round_trips}))


if __name__ == "__main__":
    main()
