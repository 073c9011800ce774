"""joblib's backends side by side: loky (joblib's default), zsched, Dask's and Ray's.

    python bench/joblib_backends.py                       # 3 alternated rounds
    python bench/joblib_backends.py --rounds 1 --calls 10000 --systems loky,zsched

Each round runs every system in a fresh process of its own, the order rotated each round.
A system starts its workers (two, one core each) and warms them with a small
``Parallel`` that imports scikit-learn in each, untimed. Then, timed: ``Parallel(n_jobs=-1)`` of ``--calls`` tiny calls
(checked), and ``GridSearchCV`` of an SVC on scikit-learn's digits (its best score
checked against the same search with ``n_jobs=1``, made once), ``--grid-repeats`` times
(the median counts). The figures are medians
over rounds, and each system's ratio to loky's time in the same round.
Output: the table, then one line ``JSON {...}`` with every figure.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

from _common import about_machine, about_zsched, median, print_json, require_positive

SYSTEMS = ("loky", "zsched", "dask", "ray")
WORKERS = 2
GRID = {"C": [1, 10, 100], "gamma": [0.001, 0.0005, 0.0001]}


def tiny(x):
    return x + 1


def import_sklearn(x):
    import sklearn.svm  # noqa: F401  a warm worker has the user's libraries loaded
    return x


# ---------------------------------------------------------------- in the child process

def start(system):
    """Start ``system``'s workers; what closes them."""
    if system == "loky":
        return lambda: None
    if system == "zsched":
        import zsched
        import zsched.joblib  # noqa: F401  registers the backend
        cluster = zsched.LocalCluster(n_executors=WORKERS, cores_per_executor=1)
        client = cluster.client()
        return lambda: (client.shutdown(), cluster.close())
    if system == "dask":
        from dask.distributed import Client, LocalCluster
        cluster = LocalCluster(n_workers=WORKERS, threads_per_worker=1, processes=True,
                               dashboard_address=None)
        client = Client(cluster)
        return lambda: (client.close(), cluster.close())
    if system == "ray":
        import ray
        from ray.util.joblib import register_ray
        register_ray()
        ray.init(num_cpus=WORKERS, include_dashboard=False, log_to_driver=False)
        return ray.shutdown
    raise ValueError(system)


def run_system(system, calls, grid_repeats):
    import joblib
    from sklearn.datasets import load_digits
    from sklearn.model_selection import GridSearchCV
    from sklearn.svm import SVC

    X, y = load_digits(return_X_y=True)
    stop = start(system)
    try:
        with joblib.parallel_config(backend=system, n_jobs=-1 if system != "loky" else WORKERS):
            joblib.Parallel(batch_size=1)(joblib.delayed(import_sklearn)(i) for i in range(8))
            t0 = time.perf_counter()
            out = joblib.Parallel()(joblib.delayed(tiny)(i) for i in range(calls))
            tiny_s = time.perf_counter() - t0
            if out != [i + 1 for i in range(calls)]:
                raise AssertionError(f"{system}: wrong results of the tiny calls")
            grid_times = []
            for _ in range(grid_repeats):
                t0 = time.perf_counter()
                search = GridSearchCV(SVC(), GRID, cv=5).fit(X, y)
                grid_times.append(time.perf_counter() - t0)
            grid_s = statistics.median(grid_times)
    finally:
        stop()
    return {"tiny_s": tiny_s, "tiny_calls_per_s": calls / tiny_s, "grid_s": grid_s,
            "best_score": search.best_score_}


def reference_score():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import GridSearchCV
    from sklearn.svm import SVC
    X, y = load_digits(return_X_y=True)
    return GridSearchCV(SVC(), GRID, cv=5, n_jobs=1).fit(X, y).best_score_


# ---------------------------------------------------------------- the parent

def one(system, calls, grid_repeats):
    out = subprocess.run([sys.executable, __file__, "--child", system, "--calls", str(calls),
                          "--grid-repeats", str(grid_repeats)],
                         capture_output=True, text=True, timeout=1800)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        sys.stderr.write(out.stderr[-3000:])
        raise SystemExit(f"{system} failed (exit status {out.returncode})")
    return json.loads(lines[-1][len("RESULT "):])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--grid-repeats", type=int, default=3)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    require_positive(parser, args, ["rounds", "calls", "grid_repeats"])
    if args.child:
        print("RESULT " + json.dumps(run_system(args.child, args.calls, args.grid_repeats)), flush=True)
        return
    systems = [s for s in args.systems.split(",") if s]
    if unknown := set(systems) - set(SYSTEMS):
        parser.error(f"unknown systems: {', '.join(sorted(unknown))}")
    expected = reference_score()
    rounds = {system: [] for system in systems}
    for r in range(args.rounds):
        order = systems[r % len(systems):] + systems[:r % len(systems)]
        figures = {system: one(system, args.calls, args.grid_repeats) for system in order}
        for system in systems:
            f = figures[system]
            if abs(f["best_score"] - expected) > 1e-12:
                raise SystemExit(f"{system}: best score {f['best_score']} != {expected}")
            if "loky" in figures:
                f["tiny_vs_loky"] = figures["loky"]["tiny_s"] / f["tiny_s"]
                f["grid_vs_loky"] = f["grid_s"] / figures["loky"]["grid_s"]
            rounds[system].append(f)
            print(f"round {r + 1} {system}: {json.dumps(f)}", file=sys.stderr, flush=True)
    print(f"\n{args.calls} tiny calls and a GridSearchCV of {len(GRID['C']) * len(GRID['gamma'])}"
          f" x 5 fits (median of {args.grid_repeats}); {WORKERS} workers; medians of"
          f" {args.rounds} rounds\n")
    print("| backend | tiny calls/s | tiny: loky's time / its | grid search s | grid: its time / loky's |")
    print("|---|---|---|---|---|")
    summary = {}
    for system in systems:
        s = {key: median(rounds[system], key)
             for key in ("tiny_calls_per_s", "tiny_vs_loky", "grid_s", "grid_vs_loky")}
        summary[system] = s
        print(f"| {system} | {s['tiny_calls_per_s']:,.0f} | {s['tiny_vs_loky'] or 0:.2f} "
              f"| {s['grid_s']:.2f} | {s['grid_vs_loky'] or 0:.3f} |")
    print_json({**about_machine(), **about_zsched(), "calls": args.calls, "rounds": rounds,
                "summary": summary})


if __name__ == "__main__":
    main()
