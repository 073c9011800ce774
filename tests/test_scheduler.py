"""The task scheduler on its own: no sockets, no processes."""
import pytest

from zsched.config import Config
from zsched.protocol import TaskState
from zsched.scheduler import ClientData, TaskScheduler


def make(**settings):
    scheduler = TaskScheduler(Config(**settings))
    client = ClientData(b"client", 1)
    return scheduler, client


def submit(scheduler, client, n, start=1):
    scheduler.submit(client, [[i, b"f", b"args"] for i in range(start, start + n)])


def test_offers_fill_windows_round_robin_and_results_reach_the_client():
    scheduler, client = make()
    a = scheduler.add_executor("a", b"ra", "h", 1, 10, 0.0)
    scheduler.add_executor("b", b"rb", "h", 1, 11, 0.0)
    submit(scheduler, client, 5)
    launches = scheduler.resource_offers()
    # one task per core until the executors' task length is known
    assert [(e.executor_id, [t.client_task_id for t in tasks]) for e, tasks in launches] == [
        ("a", [1]), ("b", [2])]
    assert scheduler.n_pending == 3
    task = launches[0][1][0]
    assert scheduler.status_updates(a, [[task.task_id, 1, TaskState.FINISHED, b"r"]], 0.001) == 0
    assert client.results == [[1, TaskState.FINISHED, b"r"]]
    assert a.slots == 3  # 1 ms tasks: one running and two queued cover prefetch_seconds
    assert [(e.executor_id, [t.client_task_id for t in ts])
            for e, ts in scheduler.resource_offers()] == [("a", [3, 4, 5])]


def test_stale_and_unknown_updates_are_counted_not_applied():
    scheduler, client = make()
    a = scheduler.add_executor("a", b"ra", "h", 1, 10, 0.0)
    submit(scheduler, client, 1)
    (_, [task]), = scheduler.resource_offers()
    assert scheduler.status_updates(a, [[task.task_id, 2, TaskState.FINISHED, b"r"],
                                        [999, 1, TaskState.FINISHED, b"r"]]) == 2
    assert client.results == []


@pytest.mark.parametrize("task_seconds, expected", [(1e-6, 64), (0.0005, 5), (0.001, 3),
                                                    (0.01, 2), (100.0, 2)])
def test_window_adapts_to_task_length(task_seconds, expected):
    scheduler, _ = make()
    assert scheduler.slots_per_core(task_seconds) == expected


def test_window_never_exceeds_tasks_per_core():
    scheduler, _ = make(tasks_per_core=1)
    assert scheduler.slots_per_core(1e-6) == 1 and scheduler.slots_per_core(10.0) == 1


def test_window_grows_for_short_tasks_and_shrinks_for_long_ones():
    scheduler, client = make()
    a = scheduler.add_executor("a", b"ra", "h", 2, 10, 0.0)
    assert a.slots == 2
    submit(scheduler, client, 1000)
    (_, tasks), = scheduler.resource_offers()
    scheduler.status_updates(a, [[t.task_id, 1, TaskState.FINISHED, b""] for t in tasks], 4e-6)
    assert a.slots == 128
    (_, tasks), = scheduler.resource_offers()
    assert len(tasks) == 128
    scheduler.status_updates(a, [[t.task_id, 1, TaskState.FINISHED, b""] for t in tasks[:10]], 10 * 5.0)
    assert a.slots < 128
    assert scheduler.resource_offers() == []  # over-committed until enough tasks end


def test_lost_executor_requeues_its_tasks_first_then_fails_them_after_max_failures():
    scheduler, client = make(max_failures=2)
    submit(scheduler, client, 3)
    e1 = scheduler.add_executor("1", b"r1", "h", 2, 10, 0.0)
    (_, first), = scheduler.resource_offers()
    assert [t.client_task_id for t in first] == [1, 2]
    scheduler.remove_executor(e1, "exited with code 1")
    assert [t.client_task_id for t in scheduler.pending] == [1, 2, 3]
    e2 = scheduler.add_executor("2", b"r2", "h", 2, 11, 0.0)
    (_, second), = scheduler.resource_offers()
    assert [t.attempt for t in second] == [2, 2]
    scheduler.remove_executor(e2, "killed by signal SIGKILL")
    failed = {row[0]: row for row in client.results}
    assert set(failed) == {1, 2}
    assert failed[1][1] == TaskState.ERROR
    text = failed[1][2].decode()
    assert "failed 2 times" in text and "executor 1: exited with code 1" in text
    assert "executor 2: killed by signal SIGKILL" in text
    assert scheduler.n_pending == 1


def test_cancel_drops_queued_tasks_and_reports_running_ones_for_killing():
    scheduler, client = make(tasks_per_core=1)
    a = scheduler.add_executor("a", b"ra", "h", 1, 10, 0.0)
    submit(scheduler, client, 3)
    (_, [running]), = scheduler.resource_offers()
    to_kill = scheduler.cancel(client, [1, 2, 42])
    assert to_kill == [(a, running)]
    assert scheduler.n_pending == 1
    scheduler.status_updates(a, [[running.task_id, 1, TaskState.KILLED, b""]])
    (_, [third]), = scheduler.resource_offers()
    assert third.client_task_id == 3
    assert client.results == []
