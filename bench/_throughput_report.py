"""The tables of bench/throughput.py: every system's medians, its efficiency on calls of
1 ms and 10 ms, the peers over zsched, and zsched's map over Pool.map's."""
import os

from _common import fmt

CELL = 12  # characters a figure's column takes: 99,999,999 and a space or two

FIGURES = [
    # key in the JSON, table header, format
    ("submit_tasks_per_s", "submit/s", "{:,.0f}"),
    ("map_tasks_per_s", "map/s", "{:,.0f}"),
    ("map_large_per_s", "map M/s", "{:,.0f}"),
    ("latency_p50_us", "p50 us", "{:,.0f}"),
    ("latency_p99_us", "p99 us", "{:,.0f}"),
    ("startup_s", "start s", "{:.2f}"),
    ("shutdown_s", "stop s", "{:.2f}"),
]
EFFICIENCY = [
    ("efficiency_1ms", "submit 1ms", "{:.3f}"),
    ("efficiency_10ms", "submit 10ms", "{:.3f}"),
    ("map_efficiency_1ms", "map 1ms", "{:.3f}"),
    ("map_efficiency_10ms", "map 10ms", "{:.3f}"),
]
ALL_FIGURES = FIGURES + EFFICIENCY


def print_header(order, labels, columns):
    """Print a table's header of ``columns`` (key, heading, format): its first column's width."""
    width = max(len(labels[n]) for n in order) + 2
    header = "system".ljust(width) + "".join(h.rjust(CELL) for _, h, _ in columns)
    print(header)
    print("-" * len(header))
    return width


def print_table(order, labels, status, medians, per_round, args):
    print(f"zsched throughput: {args.executors} executor(s) x 1 core, {args.tasks} no-op tasks, "
          f"{args.latency_samples} latency samples; median of {args.rounds} round(s); "
          f"{os.cpu_count()} CPUs")
    width = print_header(order, labels, FIGURES)
    for name in order:
        row = labels[name].ljust(width)
        if status[name] != "ok":
            text = status[name]
            print(row + (text if len(text) <= 100 else text[:97] + "..."))
            continue
        print(row + "".join(fmt(medians[name].get(k), f).rjust(CELL) for k, _, f in FIGURES))
    print("submit/s: N x submit(), then wait for all.  map/s: list(map(fn, range(N))) (Pool: map_async")
    print("  chunksize=1, Pool.map: its own chunks; Dask: client.map + gather; Ray: f.remote + ray.get).")
    print(f"  map M/s: the same with M = {args.large_map:,} calls, for the systems that chunk a map.  p50/p99: submit one,")
    print("  wait for it, repeat.  start s: construct until workers registered and a first task")
    print("  returned.  stop s: shutdown.")
    for name in order:
        counts = sorted({f["tasks"] for f in per_round[name] if "tasks" in f})
        if counts and counts[0] < args.tasks:
            print(f"  * {labels[name]} ran {'/'.join(f'{c:,}' for c in counts)} tasks per phase, not "
                  f"{args.tasks:,} (slow: capped to about {args.phase_budget:g} s by --phase-budget)")


def print_efficiency(order, labels, status, medians, n_eff):
    """Each system's fraction of the ideal time on calls of 1 ms and 10 ms, through
    ``submit`` and through its own map."""
    print()
    print(f"efficiency: ideal / measured time (1.000 = perfect) of {10 * n_eff} calls of 1 ms and "
          f"{n_eff} of 10 ms (time.sleep)")
    width = print_header(order, labels, EFFICIENCY)
    for name in order:
        if status[name] == "ok":
            print(labels[name].ljust(width)
                  + "".join(fmt(medians[name].get(k), f).rjust(CELL) for k, _, f in EFFICIENCY))
    print("submit: one task per call, then wait for all.  map: the system's own, as in map/s (zsched:")
    print("  client.map, chunked by itself; ProcessPoolExecutor: Executor.map; multiprocessing.Pool:")
    print("  map_async chunksize=1, Pool.map: its own chunks; Dask: client.map; Ray: f.remote each).")


def print_ratios(order, labels, status, medians):
    """The peers' figures over zsched's, the main table's printed; every figure's returned."""
    peers = [n for n in order if n not in ("zsched", "zsched_embedded") and status[n] == "ok"]
    if not peers or status.get("zsched") != "ok":
        return {}
    base = medians["zsched"]
    ratios = {name: {} for name in peers}
    for name in peers:
        for key, _, _ in ALL_FIGURES:
            a, b = medians[name].get(key), base.get(key)
            ratios[name][key] = a / b if a is not None and b else None
    print()
    print("peer / zsched  (tasks/s: below 1 = zsched better;  us, s: above 1 = zsched better)")
    width = max(len(labels[n]) for n in order) + 2
    header = "system".ljust(width) + "".join(h.rjust(CELL) for _, h, _ in FIGURES)
    print(header)
    print("-" * len(header))
    for name in peers:
        cells = [("-" if ratios[name][key] is None else f"{ratios[name][key]:.2f}x").rjust(CELL)
                 for key, _, _ in FIGURES]
        print(labels[name].ljust(width) + "".join(cells))
    return ratios


def print_map_against_pool(labels, status, medians):
    """zsched's map against Pool.map's own chunks, at N and M calls."""
    pool = medians.get("mp_pool_map")
    if status.get("mp_pool_map") != "ok" or not pool:
        return {}
    print()
    ratios = {}
    for name in ("zsched", "zsched_embedded"):
        if status[name] != "ok":
            continue
        ratios[name] = {k: medians[name][k] / pool[k] if medians[name].get(k) and pool.get(k) else None
                        for k in ("map_tasks_per_s", "map_large_per_s")}
        cells = ", ".join("-" if r is None else f"{r:.2f}x" for r in ratios[name].values())
        print(f"map: {labels[name]} / multiprocessing.Pool.map (N, M calls): {cells}")
    return ratios

