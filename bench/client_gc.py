"""The cyclic garbage collector's time in the client's process during a flood of submits.

    python bench/client_gc.py                        # 3 rounds of 200,000 tasks, both clients
    python bench/client_gc.py --tasks 500000 --rounds 5 --client local
    python bench/client_gc.py --client embedded --tasks 100000 --rounds 5 --wait

Each round submits ``--tasks`` no-op tasks (one ``submit`` each, every future kept, as a
user collecting results does), then waits for them all: ``result()`` of each, or with
``--wait`` first ``concurrent.futures.wait`` of them all (as ``bench/throughput.py`` does). ``gc.callbacks`` time every
collection in this process, by generation. ``local`` is ``LocalCluster(2 executors).client()``
(a driver process; this process holds the client alone), ``embedded`` is ``zsched.Client()``
(the driver's thread shares this process, and its collections are counted too). The first
round of each client is preceded by an untimed warm-up of 20,000 tasks.

Output: per round and client, the collections of each generation and their milliseconds,
the round's wall time and tasks per second; then one line ``JSON {...}``. The machine may be
shared and noisy: compare the GC's share of a round, not absolute rates across runs.
``CPU us/task`` is this process's CPU time (every thread) per task: steadier than the rate.
"""
import argparse
import concurrent.futures
import gc
import importlib.util
import json
import os
import platform
import statistics
import sys
import time

if importlib.util.find_spec("zsched") is None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import zsched  # noqa: E402


def noop(x):
    return x


class CollectionTimer:
    """Collections and their seconds per generation, from ``gc.callbacks``."""

    def __init__(self):
        self.counts = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._started = 0.0

    def __call__(self, phase, info):
        if phase == "start":
            self._started = time.perf_counter()
        else:
            generation = info["generation"]
            self.counts[generation] += 1
            self.seconds[generation] += time.perf_counter() - self._started


def flood(client, n_tasks, wait):
    """One round: figures of ``n_tasks`` submits and their results."""
    timer = CollectionTimer()
    gc.callbacks.append(timer)
    try:
        cpu = time.process_time()
        started = time.perf_counter()
        futures = [client.submit(noop, i) for i in range(n_tasks)]
        if wait:
            concurrent.futures.wait(futures, timeout=600)
        results = [future.result(600) for future in futures]
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu
    finally:
        gc.callbacks.remove(timer)
    if results != list(range(n_tasks)):
        raise AssertionError("wrong results")
    return {"seconds": elapsed, "tasks_per_s": n_tasks / elapsed, "cpu_us_per_task": cpu / n_tasks * 1e6,
            "collections": timer.counts, "gc_ms": [s * 1e3 for s in timer.seconds],
            "gc_share": sum(timer.seconds) / elapsed}


def open_client(kind):
    """(client, closer) for ``kind``."""
    if kind == "local":
        cluster = zsched.LocalCluster(n_executors=2, cores_per_executor=1)
        client = cluster.client()

        def close():
            client.shutdown()
            cluster.close()
        return client, close
    client = zsched.Client()
    return client, client.shutdown


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200_000, metavar="N")
    parser.add_argument("--rounds", type=int, default=3, metavar="R")
    parser.add_argument("--client", choices=("local", "embedded", "both"), default="both")
    parser.add_argument("--wait", action="store_true",
                        help="concurrent.futures.wait for the futures before their results")
    args = parser.parse_args(argv)
    kinds = ["local", "embedded"] if args.client == "both" else [args.client]
    runs = {}
    print(f"{'client':<9} {'round':>5} {'tasks/s':>9} {'round ms':>9} {'gen0':>11} {'gen1':>11} "
          f"{'gen2':>11} {'GC share':>8} {'CPU us/task':>11}")
    for kind in kinds:
        client, close = open_client(kind)
        try:
            for future in [client.submit(noop, i) for i in range(20_000)]:
                future.result(600)
            runs[kind] = []
            for round_ in range(args.rounds):
                figures = flood(client, args.tasks, args.wait)
                runs[kind].append(figures)
                gens = " ".join(f"{n:>4}/{ms:>4.0f}ms" for n, ms in zip(figures["collections"],
                                                                      figures["gc_ms"]))
                print(f"{kind:<9} {round_ + 1:>5} {figures['tasks_per_s']:>9,.0f} "
                      f"{figures['seconds'] * 1e3:>9.0f} {gens} {figures['gc_share']:>8.1%} "
                      f"{figures['cpu_us_per_task']:>11.2f}",
                      flush=True)
        finally:
            close()
    medians = {kind: {"tasks_per_s": statistics.median(r["tasks_per_s"] for r in rs),
                      "gc_share": statistics.median(r["gc_share"] for r in rs),
                      "cpu_us_per_task": statistics.median(r["cpu_us_per_task"] for r in rs)}
               for kind, rs in runs.items()}
    for kind, m in medians.items():
        print(f"{kind}: median {m['tasks_per_s']:,.0f} tasks/s, GC {m['gc_share']:.1%} of the round, "
              f"{m['cpu_us_per_task']:.2f} us of CPU per task")
    print("JSON " + json.dumps({"settings": vars(args), "medians": medians, "runs": runs,
                                "zsched": os.path.dirname(zsched.__file__),
                                "python": platform.python_version(), "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
