"""What a wake-up costs on this machine: a bare pyzmq round trip between two processes,
with their CPUs left to the kernel, pinned to one CPU each, or both pinned to the same one;
and with the CPUs left to the kernel but ZeroMQ's I/O threads in a scheduling class that
does not preempt the thread that woke them (``SCHED_BATCH``, ``SCHED_IDLE``).

    python bench/wakeup_cost.py                # 4 rounds x 4,000 round trips per placement
    python bench/wakeup_cost.py --rounds 6 --samples 10000

A DEALER in this process sends a 60-byte frame over ipc:// to a DEALER in a child
process, which sends it back; p50 of the round trip, in µs, median over rounds. Each
round trip wakes four threads in turn (each process's ZeroMQ I/O thread, then the other
process's Python thread). When they sit on different CPUs, an idle CPU must be woken
each time; on a virtual machine whose idle vCPUs halt, that is a trip through the
hypervisor, and it sets the floor of every round trip zsched makes. Placements are
interleaved. Output: a table, then one line ``JSON {...}``.
"""
import argparse
import json
import multiprocessing
import os
import statistics
import tempfile

import zmq

PLACEMENTS = {  # (this process's CPU, the echoing process's CPU; None: any), and the
    # scheduling policy of both processes' ZeroMQ I/O threads (None: the default)
    "free": (None, None, None),
    "one CPU each": (0, 1, None),
    "same CPU": (0, 0, None),
    "I/O SCHED_BATCH": (None, None, os.SCHED_BATCH),
    "I/O SCHED_IDLE": (None, None, os.SCHED_IDLE),
}


def make_context(policy):
    """A context whose I/O thread, once started, has the scheduling ``policy``."""
    context = zmq.Context()
    if policy is not None:
        context.set(zmq.THREAD_SCHED_POLICY, policy)
        context.set(zmq.THREAD_PRIORITY, 0)  # the only priority these policies take
    return context


def echo(url, cpu, policy):
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    context = make_context(policy)  # after pinning: its I/O thread inherits the affinity
    sock = context.socket(zmq.DEALER)
    sock.connect(url)
    while True:
        frame = sock.recv()
        if frame == b"stop":
            break
        sock.send(frame)
    sock.close(0)
    context.term()


def round_trips(placement, samples, warmup=300):
    import time
    mine, theirs, policy = PLACEMENTS[placement]
    allowed = os.sched_getaffinity(0)
    if mine is not None:
        os.sched_setaffinity(0, {mine})
    try:
        with tempfile.TemporaryDirectory() as directory:
            url = f"ipc://{directory}/echo"
            context = make_context(policy)
            sock = context.socket(zmq.DEALER)
            sock.bind(url)
            child = multiprocessing.Process(target=echo, args=(url, theirs, policy))
            child.start()
            frame, times = b"x" * 60, []
            for _ in range(warmup + samples):
                start = time.perf_counter()
                sock.send(frame)
                sock.recv()
                times.append(time.perf_counter() - start)
            sock.send(b"stop")
            child.join(10)
            sock.close(0)
            context.term()
    finally:
        os.sched_setaffinity(0, allowed)
    return statistics.median(times[warmup:]) * 1e6


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--samples", type=int, default=4000, help="round trips per round")
    args = parser.parse_args(argv)
    if len(os.sched_getaffinity(0)) < 2 or not {0, 1} <= os.sched_getaffinity(0):
        raise SystemExit("needs CPUs 0 and 1")
    runs = {name: [] for name in PLACEMENTS}
    for _ in range(args.rounds):
        for name in PLACEMENTS:
            runs[name].append(round_trips(name, args.samples))
    print(f"{'placement':<16} {'p50 us':>8}   rounds")
    for name, values in runs.items():
        print(f"{name:<16} {statistics.median(values):>8.0f}   {', '.join(f'{v:.0f}' for v in values)}")
    print("JSON " + json.dumps({"benchmark": "zsched-wakeup-cost", "params": vars(args),
                                "p50_us": {k: statistics.median(v) for k, v in runs.items()},
                                "rounds": runs}))


if __name__ == "__main__":
    main()
