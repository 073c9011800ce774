"""Chaos with large data: executors killed at random while tasks with large arguments, a
broadcast value and large results flow. Nothing is lost, wrong or completed twice."""
import os
import random
import signal
import threading
import time

import numpy

import zsched
from conftest import wait_for
from test_executor_loss import completion_counter

KIB = 1 << 10


def scaled(array, handle):
    time.sleep(0.01)
    return array * 2 + handle.value[:len(array)]


def test_chaos_with_large_arguments_results_and_a_broadcast_loses_nothing():
    n_tasks = 300
    with zsched.LocalCluster(3, wait=True) as cluster:
        client = cluster.client()
        watcher = cluster.client()
        base = numpy.arange(512 * KIB // 8, dtype=numpy.float64)
        handle = client.broadcast(base * 3)
        arrays = [base + i for i in range(n_tasks)]
        done = threading.Event()
        kills = []

        def killer():
            rng = random.Random()
            while not done.wait(0.7):
                candidates = [e for e in watcher.status()["executors"] if e["state"] == "active"]
                if candidates:
                    victim = rng.choice(candidates)
                    try:
                        os.kill(victim["pid"], signal.SIGKILL)
                        kills.append(victim["id"])
                    except ProcessLookupError:
                        pass

        completions, completed = completion_counter()
        thread = threading.Thread(target=killer, daemon=True)
        thread.start()
        try:
            futures = []
            for i, array in enumerate(arrays):
                future = client.submit(scaled, array, handle)
                future.add_done_callback(completed(i))
                futures.append(future)
            results = [future.result(180) for future in futures]
        finally:
            done.set()
            thread.join(30)
        assert kills, "the killer never killed"
        wrong = [i for i, (array, result) in enumerate(zip(arrays, results))
                 if not numpy.array_equal(result, array * 2 + base * 3)]
        assert not wrong, f"{len(wrong)} wrong results, first {wrong[:5]}"
        assert set(completions) == set(range(n_tasks)) and set(completions.values()) == {1}
        status = client.status()
        assert status["tasks"]["failed"] == 0 and status["tasks"]["finished"] == n_tasks
        # every task's data was forgotten once its task ended; the broadcast stays
        wait_for(lambda: client.status()["data"]["entries"] == 1, message="the tasks' data dropped")
        handle.destroy()
        wait_for(lambda: len(client.executor_ids()) == 3, timeout=60, message="3 executors again")
        watcher.shutdown()
        client.shutdown()
