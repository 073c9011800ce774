"""CPU per no-op task of each process of a LocalCluster, and efficiency on 10 ms tasks.

    python bench/executor_cpu.py                      # 100k no-op tasks, 3 rounds
    python bench/executor_cpu.py --tasks 50000 --rounds 5 --eff-rounds 5
    python bench/executor_cpu.py --tasks-per-core 64     # a shallower window than the default

A LocalCluster of ``--executors`` executors x 1 core runs floods of no-op tasks (one
``submit`` per task, then wait for all); the CPU time (user + system, every thread) that
the client (this process), the driver and the executors spent during each flood is
divided by the number of tasks. CPU time, unlike wall-clock time, says what one process
costs even on a machine shared with other work. Then ``--eff-tasks`` per executor of
``time.sleep(0.01)`` run: efficiency is ideal / measured time, as bench/throughput.py.
Figures are medians over rounds; one line ``JSON {...}`` at the end has them all.
"""
import argparse
import gc
import importlib.util
import json
import os
import statistics
import sys
import time

if importlib.util.find_spec("zsched") is None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import psutil  # noqa: E402

import zsched  # noqa: E402


def noop(x):
    return x


def sleep_10ms(x):
    time.sleep(0.01)
    return x


def cpu_seconds(process):
    times = process.cpu_times()
    return times.user + times.system


def processes(cluster):
    """(driver, [executors]) as psutil processes."""
    driver = psutil.Process(cluster._process.pid)
    deadline = time.monotonic() + 30
    while True:
        executors = [c for c in driver.children()
                     if "zsched.executor" in " ".join(c.cmdline())]
        if len(executors) >= cluster.n_executors or time.monotonic() > deadline:
            return driver, executors
        time.sleep(0.05)


def thread_cpu(process):
    """{thread name (its comm; Python threads are 'python'): [user, system] seconds}."""
    out = {}
    for tid in os.listdir(f"/proc/{process.pid}/task"):
        try:
            with open(f"/proc/{process.pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{process.pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if name.startswith("python") or name == "MainThread":
            name = "loop thread" if int(tid) == process.pid else "task threads"
        ticks = os.sysconf("SC_CLK_TCK")
        cell = out.setdefault(name, [0.0, 0.0])
        cell[0] += int(fields[11]) / ticks
        cell[1] += int(fields[12]) / ticks
    return out


def flood(client, n):
    futures = [client.submit(noop, x) for x in range(n)]
    results = [f.result(timeout=120) for f in futures]
    if results != list(range(n)):
        raise AssertionError("wrong results")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--executors", type=int, default=2)
    parser.add_argument("--eff-tasks", type=int, default=100, help="10 ms tasks per executor")
    parser.add_argument("--eff-rounds", type=int, default=3)
    parser.add_argument("--tasks-per-core", type=int, default=None,
                        help="the cluster's tasks_per_core (default: zsched's own)")
    args = parser.parse_args(argv)
    settings = {} if args.tasks_per_core is None else {"tasks_per_core": args.tasks_per_core}

    me = psutil.Process()
    figures = {"client_us": [], "driver_us": [], "executors_us": [], "tasks_per_s": [],
               "efficiency_10ms": []}
    with zsched.LocalCluster(n_executors=args.executors, cores_per_executor=1, **settings) as cluster:
        client = cluster.client()
        driver, executors = processes(cluster)
        flood(client, 2000)  # warm-up: functions shipped, windows adapted
        for _ in range(args.rounds):
            gc.collect()
            threads_before = [thread_cpu(e) for e in executors]
            before = [cpu_seconds(me), cpu_seconds(driver), sum(map(cpu_seconds, executors))]
            t0 = time.perf_counter()
            flood(client, args.tasks)
            elapsed = time.perf_counter() - t0
            after = [cpu_seconds(me), cpu_seconds(driver), sum(map(cpu_seconds, executors))]
            for key, a, b in zip(("client_us", "driver_us", "executors_us"), before, after):
                figures[key].append((b - a) / args.tasks * 1e6)
            figures["tasks_per_s"].append(args.tasks / elapsed)
            threads_after = [thread_cpu(e) for e in executors]
            split = {}
            for b, a in zip(threads_before, threads_after):
                for name, (user, system) in a.items():
                    ub, sb = b.get(name, (0.0, 0.0))
                    for kind, now, then in (("user", user, ub), ("sys", system, sb)):
                        split[f"{name} {kind}"] = (split.get(f"{name} {kind}", 0.0)
                                                   + (now - then) / args.tasks * 1e6)
            figures.setdefault("executor_threads_us", []).append(split)
        n_eff = args.eff_tasks * args.executors
        for _ in range(args.eff_rounds):
            gc.collect()
            t0 = time.perf_counter()
            futures = [client.submit(sleep_10ms, y) for y in range(n_eff)]
            for f in futures:
                f.result(timeout=120)
            elapsed = time.perf_counter() - t0
            figures["efficiency_10ms"].append(n_eff * 0.01 / args.executors / elapsed)
        client.shutdown()

    split = figures.pop("executor_threads_us", [])
    medians = {k: statistics.median(v) for k, v in figures.items() if v}
    window = "" if args.tasks_per_core is None else f", tasks_per_core {args.tasks_per_core}"
    print(f"zsched {os.path.dirname(zsched.__file__)}: {args.executors} executors x 1 core{window}, "
          f"median of {args.rounds} flood(s) of {args.tasks} no-op tasks")
    print(f"  CPU per task: client {medians['client_us']:.2f} us, driver "
          f"{medians['driver_us']:.2f} us, executors (together) {medians['executors_us']:.2f} us")
    if split:
        names = sorted(split[0])
        print("  executors' threads, us per task (summed over executors; median): " + ", ".join(
            f"{n} {statistics.median(s.get(n, 0.0) for s in split):.2f}" for n in names))
    print(f"  {medians['tasks_per_s']:,.0f} tasks/s", end="")
    if "efficiency_10ms" in medians:
        print(f"; efficiency on 10 ms tasks {medians['efficiency_10ms']:.3f} "
              f"(median of {args.eff_rounds})", end="")
    print()
    print("JSON " + json.dumps({"median": medians, "rounds": figures, "executor_threads_us": split}))


if __name__ == "__main__":
    main()
