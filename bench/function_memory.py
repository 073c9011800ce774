"""Memory of the driver and an executor while a client makes a new function per task.

    python bench/function_memory.py                  # 5 waves of 1,000 partials of 100 KB
    python bench/function_memory.py --waves 3 --per-wave 2000 --size 10000

A ``LocalCluster`` of one executor (driver process) serves one client that submits, in
each wave, ``--per-wave`` tasks of ``functools.partial(work, data)`` with ``data`` of
``--size`` bytes, different for every task (so every task has a function of its own),
and waits for them. After each wave: the RSS of the driver and of the executor (psutil),
and how many functions each holds (``client.status()``; the executor's count is as of its
last heartbeat, sent every 100 ms here). Without a limit, both would grow by about
``per-wave x size`` per wave (the executor twice: the pickle and the unpickled function);
with it, they level off. Output: a table, then one line ``JSON {...}``.
"""
import argparse
import functools
import importlib.util
import json
import os
import sys
import time

if importlib.util.find_spec("zsched") is None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import psutil  # noqa: E402

import zsched  # noqa: E402


def work(data, i):
    return len(data) + i


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waves", type=int, default=5)
    parser.add_argument("--per-wave", type=int, default=1000, metavar="N")
    parser.add_argument("--size", type=int, default=100_000, metavar="BYTES",
                        help="data held by each task's function (default 100,000)")
    args = parser.parse_args(argv)
    rows = []
    with zsched.LocalCluster(1, executor_heartbeat_interval="100ms") as cluster:
        client = cluster.client()
        children = psutil.Process().children(recursive=True)
        driver = next(c for c in children if "zsched.driver" in " ".join(c.cmdline()))
        executor = next(c for c in children if "zsched.executor" in " ".join(c.cmdline()))

        def figures(wave):
            time.sleep(0.3)  # a heartbeat or two: the executor's count is current
            status = client.status()
            return {"wave": wave, "tasks": wave * args.per_wave,
                    "driver_rss_mib": driver.memory_info().rss / 2 ** 20,
                    "executor_rss_mib": executor.memory_info().rss / 2 ** 20,
                    "driver_functions": status["functions"],
                    "executor_functions": status["executors"][0].get("functions")}

        rows.append(figures(0))
        for wave in range(1, args.waves + 1):
            first = (wave - 1) * args.per_wave
            futures = [client.submit(functools.partial(work, (b"%d:" % i) + bytes(args.size)), i)
                       for i in range(first, first + args.per_wave)]
            assert [f.result() for f in futures] == [
                args.size + len(b"%d:" % i) + i for i in range(first, first + args.per_wave)]
            rows.append(figures(wave))
        client.shutdown()
    print(f"{'wave':>4} {'tasks':>8} {'driver RSS MiB':>15} {'executor RSS MiB':>17} "
          f"{'driver functions':>17} {'executor functions':>19}")
    for r in rows:
        print(f"{r['wave']:>4} {r['tasks']:>8,} {r['driver_rss_mib']:>15.0f} {r['executor_rss_mib']:>17.0f} "
              f"{r['driver_functions']:>17,} {r['executor_functions']:>19,}")
    print("JSON " + json.dumps({"benchmark": "zsched-function-memory", "params": vars(args), "waves": rows}))


if __name__ == "__main__":
    main()
