"""A map with one straggler, with speculation off and on.

A LocalCluster of 2 executors of 2 cores maps 200 calls of 50 ms. One call sleeps 10 s on
its first attempt only (a marker file says which attempt runs), as if its machine were
slow. Without speculation the map waits for it; with speculation a copy of it runs
elsewhere and wins. Each run times the map from its first submit to its last result;
off and on alternate, and the figures are medians over ``--repeat`` runs of each.

    python bench/straggler.py              # 3 runs of each, about a minute
    python bench/straggler.py --quick      # 1 run of each
"""
import argparse
import os
import sys
import tempfile
import time

from _common import about_machine, about_zsched, fmt, median, print_json

CALLS, CALL_SECONDS, SLOW_CALL, SLOW_SECONDS = 200, 0.05, 100, 10.0


def call(i, folder):
    marker = os.path.join(folder, f"started-{i}")
    if i == SLOW_CALL and not os.path.exists(marker):
        open(marker, "w").close()
        deadline = time.monotonic() + SLOW_SECONDS
        while time.monotonic() < deadline:  # short sleeps: the loser's kill lands between two
            time.sleep(0.01)
        return "first attempt"
    time.sleep(CALL_SECONDS)
    return "quick"


def run(speculation):
    import zsched
    with zsched.LocalCluster(2, 2, speculation=speculation) as cluster:
        client = cluster.client()
        client.submit(abs, 1).result()  # executors up
        with tempfile.TemporaryDirectory() as folder:
            start = time.perf_counter()
            results = list(client.map(call, range(CALLS), [folder] * CALLS))
            seconds = time.perf_counter() - start
        tasks = client.status()["tasks"]
    return {"seconds": seconds, "straggler": results[SLOW_CALL],
            "speculated": tasks["speculated"], "won": tasks["speculation_won"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each, alternated")
    parser.add_argument("--quick", action="store_true", help="one run of each")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    repeat = 1 if args.quick else args.repeat
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # call() pickles by name
    runs = {False: [], True: []}
    for _ in range(repeat):
        for speculation in (False, True):
            runs[speculation].append(run(speculation))
    print(f"map of {CALLS} calls of {CALL_SECONDS * 1000:g} ms on 2 executors x 2 cores; "
          f"call {SLOW_CALL} sleeps {SLOW_SECONDS:g} s on its first attempt")
    print(f"{'speculation':<12} {'seconds':>8}  straggler's result (per run)  copies (won)")
    for speculation in (False, True):
        rounds = runs[speculation]
        results = ", ".join(r["straggler"] for r in rounds)
        copies = ", ".join("%d (%d)" % (r["speculated"], r["won"]) for r in rounds)
        print(f"{'on' if speculation else 'off':<12} {fmt(median(rounds, 'seconds'), '{:8.2f}')}  "
              f"{results:<28}  {copies}")
    print_json({"machine": about_machine(), "zsched": about_zsched(),
                "off": runs[False], "on": runs[True]})


if __name__ == "__main__":
    main()
