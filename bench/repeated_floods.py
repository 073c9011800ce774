"""The fast path over several floods in one driver process, with and without the cache of
freed memory (``driver_memory_cache``, zsched/_arena_cache.pyx).

    python bench/repeated_floods.py                 # 10 and 1,000 executors, 3 floods, 3 rounds
    python bench/repeated_floods.py --executors 10 --tasks 300000 --floods 4 --rounds 5

Each run is one process: ``bench/offers.py``'s ``run_once`` (queue, launch and finish
``--tasks`` no-op tasks on simulated executors of 8 cores; ns per task of the four timed
calls) called ``--floods`` times in a row, as a long-running driver meets one flood after
another. ``kept`` runs install the cache first, as ``bin/driver`` does (256 MiB, its
default); ``none`` runs do not, as before it. Implementations (compiled, reference) and
caches are interleaved in each round; figures are medians over rounds. ``faults/1k`` are
the minor page faults taken in the timed calls per 1,000 tasks (``timed_faults_per_1k``).
Output: a table, then one line ``JSON {...}``.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
IMPLEMENTATIONS = {"compiled": "0", "reference": "1"}  # -> ZSCHED_PUREPYTHON
CACHE_BYTES = 256 << 20

RUN = """
import json, sys
sys.path.insert(0, {bench!r})
import offers
if {cache}:
    from zsched import _arena_cache
    _arena_cache.install({cache})
floods = [offers.run_once({executors}, 8, {tasks}, 64) for _ in range({floods})]
print("JSON " + json.dumps([{{"total_ns": f["total_ns"], "faults": f["timed_faults_per_1k"]}}
                            for f in floods]))
"""


def run(implementation, cache, executors, tasks, floods):
    code = RUN.format(bench=BENCH, cache=cache, executors=executors, tasks=tasks, floods=floods)
    env = {**os.environ, "ZSCHED_PUREPYTHON": IMPLEMENTATIONS[implementation]}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if result.returncode:
        raise SystemExit(f"{implementation} run failed:\n{result.stderr}")
    line = [l for l in result.stdout.splitlines() if l.startswith("JSON ")][-1]
    return json.loads(line[5:])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executors", default="10,1000", help="comma-separated sizes")
    parser.add_argument("--tasks", type=int, default=1_000_000, help="tasks per flood")
    parser.add_argument("--floods", type=int, default=3, help="floods per process")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.executors.split(",")]
    caches = {"none": 0, "kept": CACHE_BYTES}
    runs = {}
    for round_index in range(args.rounds):
        for executors in sizes:
            for implementation in IMPLEMENTATIONS:
                for cache_name, cache in caches.items():
                    key = (executors, implementation, cache_name)
                    figures = run(implementation, cache, executors, args.tasks, args.floods)
                    runs.setdefault(key, []).append(figures)
                    print(f"  round {round_index + 1}/{args.rounds} {executors:>6,} executors "
                          f"{implementation:<9} {cache_name:<4} "
                          + " ".join(f"{f['total_ns']:7.0f}" for f in figures), flush=True)
    medians = {key: [{name: statistics.median(r[i][name] for r in rounds)
                      for name in ("total_ns", "faults")} for i in range(args.floods)]
               for key, rounds in runs.items()}
    print(f"ns per task (and page faults per 1,000 tasks) of each flood of {args.tasks:,} in one "
          f"process; medians of {args.rounds} round(s)")
    header = "".join(f"{'flood ' + str(i + 1):>18}" for i in range(args.floods))
    print(f"{'executors':>9}  {'implementation':<10} {'cache':<5}{header}")
    print("-" * (28 + 18 * args.floods))
    for (executors, implementation, cache_name), floods in medians.items():
        cells = "".join(f"{f['total_ns']:>10,.0f} ({f['faults']:>4.1f})" for f in floods)
        print(f"{executors:>9,}  {implementation:<10} {cache_name:<5}{cells}")
    ratios = {}
    for executors in sizes:
        for cache_name in caches:
            ref = medians[(executors, "reference", cache_name)]
            comp = medians[(executors, "compiled", cache_name)]
            ratios[f"{executors}/{cache_name}"] = [r["total_ns"] / c["total_ns"] for r, c in zip(ref, comp)]
    print("reference / compiled, by flood: " + "; ".join(
        f"{key}: " + " ".join(f"{x:.2f}x" for x in values) for key, values in ratios.items()))
    print("JSON " + json.dumps({
        "benchmark": "zsched-repeated-floods", "python": platform.python_version(),
        "params": vars(args), "cache_bytes": CACHE_BYTES, "ratios": ratios,
        "medians": {"/".join(map(str, key)): value for key, value in medians.items()}}))


if __name__ == "__main__":
    sys.exit(main())
