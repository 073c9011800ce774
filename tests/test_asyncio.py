"""zsched from asyncio, in real event loops on a real cluster: awaited futures, ``async
for`` over a map, ``async with`` that closes without blocking the loop, and cancelling."""
import asyncio
import os
import threading
import time

import pytest

import zsched
from conftest import wait_for

WAIT = 60


def square(x):
    return x * x


def sleep_in_steps(seconds):  # interruptible: a cancel stops it between steps
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.01)


def fail(x):
    raise ArithmeticError(f"no answer for {x}")


def test_ten_thousand_awaited_tasks_with_no_thread_per_await(client):
    async def main():
        threads = threading.active_count()
        pending = asyncio.gather(*(client.submit(square, i) for i in range(10**4)))
        await asyncio.sleep(0)
        during = threading.active_count()
        return await pending, during - threads

    results, more_threads = asyncio.run(main())
    assert results == [i * i for i in range(10**4)]
    # none per await; a driver in this process runs done-callbacks in one thread of its
    # client's, started at the first
    assert more_threads <= 1


def test_a_tasks_exception_is_raised_at_the_await(client):
    async def main():
        assert await client.submit(square, 7) == 49
        with pytest.raises(ArithmeticError, match="no answer for 3"):
            await client.submit(fail, 3)

    asyncio.run(main())


def test_cancelling_the_awaiting_coroutine_cancels_the_task(client):
    async def main():
        future = client.submit(sleep_in_steps, 30)
        waiting = asyncio.ensure_future(asyncio.wait_for(future, 60))
        await asyncio.sleep(0)
        # the task runs on an executor before the coroutine is cancelled
        while client.status()["tasks"]["running"] == 0:
            await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        return future

    future = asyncio.run(main())
    assert future.cancelled()
    wait_for(lambda: client.status()["tasks"]["running"] == 0, timeout=WAIT,
             message="the cancelled task to stop running")


def test_async_for_takes_a_maps_results_in_order(client):
    async def main(**kwargs):
        return [value async for value in client.map(square, range(5000), **kwargs)]

    assert asyncio.run(main()) == [i * i for i in range(5000)]
    assert asyncio.run(main(chunksize=1, buffersize=8)) == [i * i for i in range(5000)]


def test_async_for_raises_a_calls_exception_after_the_results_before_it(client):
    def fail_at_7(x):
        if x == 7:
            raise LookupError("seven")
        return x

    async def main():
        seen = []
        with pytest.raises(LookupError, match="seven"):
            async for value in client.map(fail_at_7, range(20), chunksize=4):
                seen.append(value)
        return seen

    assert asyncio.run(main()) == list(range(7))


def test_a_map_is_consumed_one_way_only(client):
    results = client.map(square, range(10))
    assert next(iter(results)) == 0
    with pytest.raises(RuntimeError, match="already"):  # the plain iteration began
        results.__aiter__()
    assert list(results) == [i * i for i in range(1, 10)]
    results = client.map(square, range(10))
    results.__aiter__()
    with pytest.raises(RuntimeError, match="already"):  # an async one did
        results.__aiter__()
    results.close()


def test_async_with_closes_a_client_and_a_cluster_without_blocking_the_loop(cluster):
    async def main():
        ticks = []

        async def ticker():
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.005)

        ticking = asyncio.ensure_future(ticker())
        async with zsched.LocalCluster(n_executors=1) as own:
            async with own.client() as client:
                assert await client.submit(square, 3) == 9
                slow = client.submit(time.sleep, 0.5)  # the close waits for it
                closing = time.monotonic()
        closed = time.monotonic()
        ticking.cancel()
        return slow, [t for t in ticks if closing <= t <= closed], own

    slow, ticks_while_closing, own = asyncio.run(main())
    assert slow.done() and slow.exception() is None
    assert len(ticks_while_closing) >= 5  # the loop ran while they closed
    assert not own.driver_running


def test_an_awaited_future_that_is_already_done_does_not_wait(client):
    future = client.submit(square, 5)
    assert future.result(WAIT) == 25

    async def main():
        return await future

    assert asyncio.run(main()) == 25


def test_awaits_in_two_loops_of_two_threads_at_once(client):
    def in_a_loop(base, out):
        async def main():
            return [await client.submit(square, base + i) for i in range(200)]
        out[base] = asyncio.run(main())

    out = {}
    threads = [threading.Thread(target=in_a_loop, args=(base, out)) for base in (0, 1000)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert out == {base: [(base + i) ** 2 for i in range(200)] for base in (0, 1000)}


def test_each_loop_gives_back_its_wake_up_descriptor(client):
    import gc

    async def main(i):
        return await client.submit(square, i)

    asyncio.run(main(0))
    gc.collect()
    before = len(os.listdir("/proc/self/fd"))
    assert [asyncio.run(main(i)) for i in range(100)] == [i * i for i in range(100)]
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) <= before + 2
