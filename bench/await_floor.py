"""What an awaited result costs over a waited one with no zsched in the way: the floor of
``bench/latency.py``'s ``await_vs_result``.

    python bench/await_floor.py                    # 5 rounds, asyncio's loop and uvloop's
    python bench/await_floor.py --loops asyncio --rounds 9
    python bench/await_floor.py --quick            # a smoke run

A client's shape, bare: the caller queues a request and wakes an I/O thread, which writes
it to a pipe; an echo process sends it back; the I/O thread reads it and ends the caller's
``concurrent.futures.Future``. The caller either waits in ``result()`` or awaits the future
in an event loop through zsched's own wake-up (``zsched/client/awaiting.py``). Each round
alternates blocks of the two ways; it reports both p50s and their ratio. Figures are
medians over rounds. Output: a table, then one line ``JSON {...}``.
"""
import argparse
import asyncio
import collections
import concurrent.futures
import os
import select
import statistics
import threading
import time

from _common import about_machine, about_zsched, median, print_json, require_positive

from zsched.client.awaiting import LoopWaiter

LOOPS = ("asyncio", "uvloop")


class EchoClient:
    """An I/O thread that relays each request to an echo process over a pipe and ends its
    future when the echo is back."""

    def __init__(self):
        to_echo, self._echo_in = os.pipe()
        self._echo_out, from_echo = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self._echo_in)  # this end's last copy is the parent's: its close is the end
            _echo(to_echo, from_echo)
        os.close(to_echo)
        os.close(from_echo)
        self._wakeup = os.eventfd(0, os.EFD_NONBLOCK)
        self._outbox = collections.deque()
        threading.Thread(target=self._serve, daemon=True).start()

    def submit(self):
        future = concurrent.futures.Future()
        self._outbox.append(future)
        os.write(self._wakeup, b"\1\0\0\0\0\0\0\0")
        return future

    def _serve(self):
        sent = collections.deque()
        while True:
            ready, _, _ = select.select([self._wakeup, self._echo_out], [], [])
            if self._wakeup in ready:
                os.read(self._wakeup, 8)
                while self._outbox:
                    sent.append(self._outbox.popleft())
                    os.write(self._echo_in, b"x")
            if self._echo_out in ready:
                for _ in os.read(self._echo_out, 4096):
                    sent.popleft().set_result(None)

    def close(self):
        os.close(self._echo_in)  # the echo process ends at its end of file
        os.waitpid(self.pid, 0)


def _echo(read_fd, write_fd):
    while True:
        data = os.read(read_fd, 4096)
        if not data:
            os._exit(0)
        os.write(write_fd, data)


class Awaited:
    """``await Awaited(future)``: what ``TaskFuture.__await__`` does."""

    def __init__(self, future):
        self.future = future

    def __await__(self):
        if not self.future.done():
            yield LoopWaiter(self.future)
        return self.future.result()


def waited(client, trips):
    times = []
    for _ in range(trips):
        t0 = time.perf_counter()
        client.submit().result()
        times.append(time.perf_counter() - t0)
    return times


async def awaited(client, trips):
    times = []
    for _ in range(trips):
        t0 = time.perf_counter()
        await Awaited(client.submit())
        times.append(time.perf_counter() - t0)
    return times


def one_round(client, loop, trips, blocks=10):
    size = max(1, trips // blocks)
    waits, awaits = [], []
    for _ in range(blocks):
        awaits += loop.run_until_complete(awaited(client, size))
        waits += waited(client, size)
    result_p50, await_p50 = statistics.median(waits) * 1e6, statistics.median(awaits) * 1e6
    return {"result_p50_us": result_p50, "await_p50_us": await_p50,
            "await_vs_result": await_p50 / result_p50}


def new_loop(name):
    if name == "uvloop":
        import uvloop
        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loops", default=",".join(LOOPS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trips", type=int, default=3000)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 200 round trips")
    args = parser.parse_args()
    require_positive(parser, args, ["rounds", "trips"])
    if args.quick:
        args.rounds, args.trips = 2, 200
    loops = args.loops.split(",")
    unknown = sorted(set(loops) - set(LOOPS))
    if unknown:
        parser.error(f"unknown loops {unknown}: choose from {', '.join(LOOPS)}")
    client = EchoClient()
    rounds = {name: [] for name in loops}
    try:
        for r in range(args.rounds):
            for name in loops:
                loop = new_loop(name)
                try:
                    loop.run_until_complete(awaited(client, 100))  # warm
                    figures = one_round(client, loop, args.trips)
                finally:
                    loop.close()
                rounds[name].append(figures)
                print(f"round {r + 1}/{args.rounds} {name:8} result {figures['result_p50_us']:6.1f} us,"
                      f" await {figures['await_p50_us']:6.1f} us", flush=True)
    finally:
        client.close()
    keys = ("result_p50_us", "await_p50_us", "await_vs_result")
    medians = {name: {key: median(rounds[name], key) for key in keys} for name in loops}
    print(f"A bare round trip through an I/O thread and an echo process, waited and awaited; "
          f"medians of {args.rounds} rounds of {args.trips:,}")
    print(f"{'loop':9} {'result() p50 us':>16} {'awaited p50 us':>15} {'ratio':>6}")
    for name in loops:
        m = medians[name]
        print(f"{name:9} {m['result_p50_us']:16.1f} {m['await_p50_us']:15.1f} "
              f"{m['await_vs_result']:6.3f}")
    print_json({"benchmark": "zsched-await-floor", **about_zsched(), **about_machine(),
                "params": vars(args), "median": medians, "rounds": rounds})


if __name__ == "__main__":
    main()
