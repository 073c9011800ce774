"""How long one full collection of the cyclic garbage collector takes in a driver holding
many tasks: queued, and finished with their results waiting to be sent.

    python bench/collector_pause.py                    # 10^5 and 10^6 tasks, 5 collections each
    python bench/collector_pause.py --tasks 100000,1000000,3000000 --collections 9

For each size, a ``TaskScheduler`` (the driver's, no sockets) gets that many tasks, in
SubmitTasks of 1,024 rows, read as the driver reads them. ``queued``: all of them wait in the
queue. ``results waiting``: all of them were launched on simulated executors and reported
FINISHED, and their result rows wait for the client (``ResultRows``), as at the end of a
driver's wake-up that handled a thousand StatusUpdates. Each state is timed as the scheduler leaves
it (``as is``) and with the queue, the results list and the result rows put back in the
collector (``tracked``: what the driver did before they were taken out; the compiled path
writes the results as msgpack bytes, so there they are decoded into rows first). The figure is
the median wall time of ``gc.collect()``; the driver's own collections are full ones about
once every ten thousand container allocations, and each one is a pause of its loop.

The fast path in use is the one ``zsched.fastpath`` chose (``ZSCHED_PUREPYTHON=1``: the
reference, whose own ``Task`` objects are in the collector whatever their queue). Output:
a table, then one line ``JSON {...}``.
"""
import argparse
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

FINISHED = 1     # TaskState.FINISHED as msgpack decodes it
SUBMIT_BATCH = 1024


def full_collection_ms(collections):
    times = []
    for _ in range(collections):
        start = time.perf_counter()
        gc.collect()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def scheduler_with(n_tasks, finished):
    """A scheduler holding ``n_tasks`` queued, or (``finished``) their results waiting."""
    from zsched.config import Config
    from zsched.protocol import StatusUpdates, SubmitTasks, decode, encode
    from zsched.scheduler import ClientData, TaskScheduler

    scheduler = TaskScheduler(Config(), functions={b"digest": b"cloudpickled function"})
    client = ClientData(b"client", 1)
    for first in range(0, n_tasks, SUBMIT_BATCH):
        rows = [[i, b"digest", b"args", 0] for i in range(first, min(n_tasks, first + SUBMIT_BATCH))]
        scheduler.submit(client, decode(encode(SubmitTasks({}, rows))).tasks)
    if finished:
        executors = []
        for i in range((n_tasks + 2047) // 2048):  # 8 cores x 256 tasks each
            executor = scheduler.add_executor(str(i), b"e%d" % i, "host", 8, 1000 + i, 0.0)
            executor.task_seconds = 2e-6
            scheduler._apply_window(executor)
            executors.append(executor)
        for executor, frames in scheduler.resource_offers():
            rows = [[row[0], row[1], FINISHED, b"\x80\x05N."]
                    for frame in frames for row in decode(frame).tasks]
            report = decode(encode(StatusUpdates(1, 2e-6 * len(rows), rows)))
            scheduler.status_updates(executor, report.updates, report.busy)
        assert len(client.results) == n_tasks, "every task should have finished"
    return scheduler, client


def track(scheduler, client):
    """Put back in the collector what zsched keeps out of it: the queue and the results
    waiting (the reference's list of rows; the compiled path keeps them as bytes, so they
    are taken out as the rows msgpack would make: returned, to be kept meanwhile)."""
    from zsched.fastpath import gc_track
    gc_track(scheduler.pending)
    rows = getattr(client.results, "rows", None)
    if rows is None:
        rows = client.results.take_rows()
    gc_track(rows)
    for row in rows:
        gc_track(row)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="100000,1000000", help="comma-separated sizes")
    parser.add_argument("--collections", type=int, default=5, help="timed per figure (median)")
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.tasks.split(",")]

    from zsched.fastpath import IMPLEMENTATION
    figures = []
    for n_tasks in sizes:
        for state, finished in (("queued", False), ("results waiting", True)):
            scheduler, client = scheduler_with(n_tasks, finished)
            gc.collect()
            as_is = full_collection_ms(args.collections)
            rows = track(scheduler, client)
            gc.collect()
            tracked = full_collection_ms(args.collections)
            figures.append({"tasks": n_tasks, "state": state, "as_is_ms": as_is,
                            "tracked_ms": tracked})
            del scheduler, client, rows
            gc.collect()

    print(f"one full collection, median of {args.collections}; fast path: {IMPLEMENTATION}")
    print(f"{'tasks':>10}  {'state':<16} {'tracked, ms':>12} {'as is, ms':>10}")
    print("-" * 52)
    for f in figures:
        print(f"{f['tasks']:>10,}  {f['state']:<16} {f['tracked_ms']:>12.1f} {f['as_is_ms']:>10.1f}")
    print("JSON " + json.dumps({"benchmark": "zsched-collector-pause", "fastpath": IMPLEMENTATION,
                                "python": platform.python_version(),
                                "collections": args.collections, "figures": figures}))


if __name__ == "__main__":
    sys.exit(main())
