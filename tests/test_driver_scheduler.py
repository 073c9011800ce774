"""The task scheduler on its own: no sockets, no processes."""
import pytest

from zsched import protocol as p
from zsched import wire
from zsched.config import Config
from zsched.protocol import TaskState
from zsched.driver.reclaim import reclaim_hoarded_tasks
from zsched.driver.records import ClientData, ExecutorData
from zsched.driver.scheduler import TaskScheduler

pytestmark = pytest.mark.unit


def make(functions=None, **settings):
    functions = {b"f": b"function blob"} if functions is None else functions
    scheduler = TaskScheduler(Config(**settings), functions=functions)
    client = ClientData(b"client", 1)
    return scheduler, client


def offers(scheduler):
    """``offer_frames``, as the driver makes offers, as ``[(executor, [Task, ...])]``: each
    launched row's task."""
    return [(executor, [executor.running[row[0]] for frame in frames for row in p.decode(frame).tasks])
            for executor, frames in scheduler.offer_frames()]


def results_of(client):
    """The results waiting for ``client``, as rows; they stay waiting."""
    rows = client.results.take_rows()
    for row in rows:
        client.results.add(*row)
    return rows


def report(scheduler, executor, rows, busy=0.0):
    """``status_updates`` of the StatusUpdates rows ``rows``, read from a frame."""
    updates = p.decode(p.encode(p.StatusUpdates(1, 0.0, rows))).updates
    return scheduler.status_updates(executor, updates, busy)


def submit(scheduler, client, n, start=1, retries=0):
    rows = [[i, b"f", b"args", retries] for i in range(start, start + n)]
    scheduler.submit(client, p.decode(p.encode(p.SubmitTasks({}, rows))).tasks)


def test_offers_fill_windows_round_robin_and_results_reach_the_client():
    scheduler, client = make()
    a = scheduler.add_executor("a", b"ra", "h", 1, 10, 0.0)
    scheduler.add_executor("b", b"rb", "h", 1, 11, 0.0)
    submit(scheduler, client, 5)
    launches = offers(scheduler)
    # one task per core until the executors' task length is known
    assert [(e.executor_id, [t.client_task_id for t in tasks]) for e, tasks in launches] == [
        ("a", [1]), ("b", [2])]
    assert scheduler.n_pending == 3
    task = launches[0][1][0]
    assert report(scheduler, a, [[task.task_id, 1, TaskState.FINISHED, b"r"]], 0.001) == 0
    assert results_of(client) == [[1, TaskState.FINISHED, b"r"]]
    assert a.slots == 3  # 1 ms tasks: one running and two queued cover prefetch_seconds
    assert [(e.executor_id, [t.client_task_id for t in ts])
            for e, ts in offers(scheduler)] == [("a", [3, 4, 5])]


def test_stale_and_unknown_updates_are_counted_not_applied():
    scheduler, client = make()
    a = scheduler.add_executor("a", b"ra", "h", 1, 10, 0.0)
    submit(scheduler, client, 1)
    (_, [task]), = offers(scheduler)
    assert report(scheduler, a, [[task.task_id, 2, TaskState.FINISHED, b"r"],
                                        [999, 1, TaskState.FINISHED, b"r"]]) == 2
    assert not client.results


@pytest.mark.parametrize("task_seconds, expected", [(1e-6, 256), (0.0005, 5), (0.001, 3),
                                                    (0.01, 2), (100.0, 2)])
def test_window_adapts_to_task_length(task_seconds, expected):
    scheduler, _ = make()
    assert scheduler.slots_per_core(task_seconds) == expected


def test_window_never_exceeds_tasks_per_core():
    scheduler, _ = make(tasks_per_core=1)
    assert scheduler.slots_per_core(1e-6) == 1 and scheduler.slots_per_core(10.0) == 1


@pytest.mark.parametrize("busy", [float("nan"), float("inf"), float("-inf"), -1.0])
def test_a_run_time_that_is_no_duration_leaves_the_window_alone(busy):
    """``busy`` comes from the executor: one that is not a finite duration >= 0 measures
    nothing. The tasks end as reported, and the window is what the last sound report made it."""
    scheduler, client = make()
    a = scheduler.add_executor("a", b"ra", "h", 1, 10, 0.0)
    submit(scheduler, client, 3)
    (_, [first]), = offers(scheduler)
    finish_all(scheduler, a, [first], busy=0.001)
    assert a.task_seconds == 0.001 and a.slots == 3
    (_, tasks), = offers(scheduler)
    assert report(scheduler, a, [[t.task_id, 1, TaskState.FINISHED, b"r"] for t in tasks],
                                    busy) == 0
    assert a.task_seconds == 0.001 and a.slots == 3
    assert [row[0] for row in results_of(client)] == [1, 2, 3]


def test_window_grows_for_short_tasks_and_shrinks_for_long_ones():
    scheduler, client = make()
    a = scheduler.add_executor("a", b"ra", "h", 2, 10, 0.0)
    assert a.slots == 2
    submit(scheduler, client, 1000)
    (_, tasks), = offers(scheduler)
    report(scheduler, a, [[t.task_id, 1, TaskState.FINISHED, b""] for t in tasks], 4e-6)
    deepest = 2 * scheduler.config.tasks_per_core
    assert a.slots == deepest
    (_, tasks), = offers(scheduler)
    assert len(tasks) == deepest
    report(scheduler, a, [[t.task_id, 1, TaskState.FINISHED, b""] for t in tasks[:10]], 10 * 5.0)
    assert a.slots < deepest
    assert offers(scheduler) == []  # over-committed until enough tasks end


def test_an_executor_idle_for_a_whole_check_interval_forgets_its_task_length():
    scheduler, client = make()
    idle = scheduler.add_executor("idle", b"ri", "h", 2, 10, 0.0)
    busy = scheduler.add_executor("busy", b"rb", "h", 2, 11, 0.0)
    holding = scheduler.add_executor("holding", b"rh", "h", 2, 12, 0.0)
    submit(scheduler, client, 6)
    launched = dict(offers(scheduler))
    for executor in (idle, busy, holding):
        finish_all(scheduler, executor, launched[executor][:1], busy=1e-6)
        assert executor.slots == 2 * scheduler.config.tasks_per_core
    scheduler.forget_idle_task_lengths()  # the first check only counts: each ended a task
    finish_all(scheduler, idle, launched[idle][1:])       # idle from now on
    finish_all(scheduler, busy, launched[busy][1:])
    submit(scheduler, client, 1, start=7)
    (executor, [task]), = offers(scheduler)
    finish_all(scheduler, executor, [task])               # ends a task in this interval
    assert executor in (idle, busy)
    scheduler.forget_idle_task_lengths()
    # the one that ended tasks since the last check keeps its window until the next one
    for executor in (idle, busy):
        assert executor.task_seconds is not None and executor.slots > 2
    scheduler.forget_idle_task_lengths()
    for executor in (idle, busy):  # a whole interval with no task: one per core again
        assert executor.task_seconds is None and executor.slots == 2
    assert holding.task_seconds is not None and holding.slots > 2  # it still runs a task
    # the next batch goes out one task per core; what it measures opens the window again
    submit(scheduler, client, 10, start=100)
    launched = dict(offers(scheduler))
    assert len(launched[idle]) == 2 and len(launched[busy]) == 2
    finish_all(scheduler, idle, launched[idle], busy=0.02)  # 10 ms each
    assert idle.slots == 2 * scheduler.slots_per_core(0.01) == 4


def deep_windows_then(n_tasks):
    """Two one-core executors whose windows were measured on no-op tasks, then ``n_tasks``
    longer ones dealt by those windows: (scheduler, its clock, a, b, {executor: tasks})."""
    now = [0.0]
    scheduler = TaskScheduler(Config(), functions={b"f": b"function blob"}, clock=lambda: now[0])
    client = ClientData(b"client", 1)
    a = scheduler.add_executor("a", b"ra", "h", 1, 10, 0.0)
    b = scheduler.add_executor("b", b"rb", "h", 1, 11, 0.0)
    submit(scheduler, client, 2)
    for executor, tasks in offers(scheduler):
        finish_all(scheduler, executor, tasks, busy=1e-6)
    submit(scheduler, client, n_tasks, start=3)
    return scheduler, now, a, b, dict(offers(scheduler))


def test_unstarted_tasks_behind_a_long_one_are_asked_back_while_cores_idle_elsewhere():
    scheduler, now, a, b, held = deep_windows_then(8)
    assert len(held[a]) == len(held[b]) == 4
    assert reclaim_hoarded_tasks(scheduler, 0.1) == []  # no core idle
    now[0] = 0.3
    finish_all(scheduler, b, held[b], busy=0.3)       # b ran its four; a still runs its first
    assert reclaim_hoarded_tasks(scheduler, 0.1) == [(a, 3)]
    assert a.task_seconds is None and a.slots == 1    # its measure is stale: cores only
    now[0] = 0.35
    assert reclaim_hoarded_tasks(scheduler, 0.1) == []  # asked once per 0.1 s at most
    finish_all(scheduler, a, held[a][1:], TaskState.RETURNED)
    assert [t.client_task_id for t in scheduler.pending] == [t.client_task_id for t in held[a][1:]]
    assert all(t.failures == () for t in held[a][1:])
    (executor, tasks), = offers(scheduler)            # they go to the idle core, not back
    assert executor is b and len(tasks) == b.slots
    now[0] = 1.0
    assert reclaim_hoarded_tasks(scheduler, 0.1) == []  # something still waits for a core
    scheduler.pending.clear()
    scheduler.n_pending = 0
    finish_all(scheduler, b, tasks)
    assert reclaim_hoarded_tasks(scheduler, 0.1) == []  # a holds only what its core runs


def test_a_flood_of_long_tasks_batched_by_stale_windows_comes_back_one_per_idle_core():
    now = [0.0]
    scheduler = TaskScheduler(Config(), functions={b"f": b"function blob"}, clock=lambda: now[0])
    client = ClientData(b"client", 1)
    executors = [scheduler.add_executor(str(i), b"r%d" % i, "h", 1, 10 + i, 0.0) for i in range(8)]
    submit(scheduler, client, 8)
    for executor, tasks in offers(scheduler):  # no-op tasks: deep windows, batches of 128
        finish_all(scheduler, executor, tasks, busy=1e-6)
    assert all(e.slots == 256 for e in executors)
    submit(scheduler, client, 300, start=9)  # long ones: three batches' worth
    held = dict(offers(scheduler))
    assert sorted(map(len, held.values())) == [100, 100, 100]
    now[0] = 0.2  # they each run their first task, silent; five cores idle
    assert sorted(count for _, count in reclaim_hoarded_tasks(scheduler, 0.1)) == [99, 99, 99]
    # every measure taken on the no-op tasks is stale, the idle executors' too
    assert all(e.task_seconds is None and e.slots == 1 for e in executors)
    for executor, tasks in held.items():
        finish_all(scheduler, executor, tasks[1:], TaskState.RETURNED)
    launched = offers(scheduler)  # one per idle core, not three more batches
    assert len(launched) == 5 and all(len(tasks) == 1 for _, tasks in launched)
    assert not set(held) & {executor for executor, _ in launched}


def test_tasks_beyond_a_shrunk_window_are_asked_back_when_worth_moving():
    scheduler, now, a, b, held = deep_windows_then(20)
    assert len(held[a]) == len(held[b]) == 10
    now[0] = 0.3
    for _ in range(3):  # a reports 0.1 s tasks one by one: its window shrinks to 2
        finish_all(scheduler, a, [held[a].pop(0)], busy=0.1)
    assert a.slots == 2 and len(a.running) == 7
    finish_all(scheduler, b, held[b], busy=0.01)  # b ran its ten short ones: idle
    now[0] = 0.35
    assert reclaim_hoarded_tasks(scheduler, 0.1) == [(a, 5)]  # not silent, but over its window
    assert a.task_seconds is not None and a.slots == 2
    now[0] = 0.4
    assert reclaim_hoarded_tasks(scheduler, 0.1) == []  # once per 0.1 s
    report(scheduler, a, [[t.task_id, t.attempt, TaskState.RETURNED, b""] for t in held[a][2:]])
    assert len(a.running) == 2 and scheduler.n_pending == 5
    assert [(e, len(ts)) for e, ts in offers(scheduler)] == [(b, 5)]  # all to the idle one


def test_a_few_short_tasks_beyond_a_window_are_not_worth_asking_back():
    scheduler, now, a, b, held = deep_windows_then(20)
    now[0] = 0.45
    finish_all(scheduler, a, [held[a].pop(0)], busy=0.005)  # 5 ms tasks: its window shrinks
    finish_all(scheduler, b, held[b], busy=1e-5)
    assert a.slots == 3 and len(a.running) == 9
    now[0] = 0.5
    # 6 beyond it, measured at about 1 ms each so far: not worth a round trip
    assert reclaim_hoarded_tasks(scheduler, 0.1) == []


def test_lost_executor_requeues_its_tasks_first_then_fails_them_after_max_failures():
    scheduler, client = make(max_failures=2)
    submit(scheduler, client, 3)
    e1 = scheduler.add_executor("1", b"r1", "h", 2, 10, 0.0)
    (_, first), = offers(scheduler)
    assert [t.client_task_id for t in first] == [1, 2]
    scheduler.remove_executor(e1, "exited with code 1")
    assert [t.client_task_id for t in scheduler.queued_suspects()] == [1, 2]
    assert [t.client_task_id for t in scheduler.pending] == [3]
    e2 = scheduler.add_executor("2", b"r2", "h", 2, 11, 0.0)
    (_, second), = offers(scheduler)
    # one suspect per executor; the core beside it goes to a task never charged
    assert [(t.client_task_id, t.attempt) for t in second] == [(1, 2), (3, 1)]
    scheduler.remove_executor(e2, "killed by signal SIGKILL")
    failed = {row[0]: row for row in results_of(client)}
    assert set(failed) == {1}
    assert failed[1][1] == TaskState.ERROR
    text = failed[1][2].decode()
    assert "failed 2 times" in text and "attempt 1 on executor 1: exited with code 1" in text
    assert "attempt 2 on executor 2: killed by signal SIGKILL" in text
    assert scheduler.n_pending == 2 and [t.client_task_id for t in scheduler.queued_suspects()] == [2, 3]


def test_cancel_drops_queued_tasks_and_reports_running_ones_for_killing():
    scheduler, client = make(tasks_per_core=1)
    a = scheduler.add_executor("a", b"ra", "h", 1, 10, 0.0)
    submit(scheduler, client, 3)
    (_, [running]), = offers(scheduler)
    to_kill = scheduler.cancel(client, [1, 2, 42])
    assert to_kill == [(a, running)]
    assert scheduler.n_pending == 1
    report(scheduler, a, [[running.task_id, 1, TaskState.KILLED, b""]])
    (_, [third]), = offers(scheduler)
    assert third.client_task_id == 3
    assert not client.results


def test_cancelled_tasks_do_not_wait_when_nothing_else_does():
    scheduler, client = make(tasks_per_core=1)
    scheduler.add_executor("a", b"ra", "h", 1, 10, 0.0)
    submit(scheduler, client, 3)
    (_, [running]), = offers(scheduler)
    scheduler.cancel(client, [2])
    assert len(scheduler.pending) == 2  # the next offer takes it out
    scheduler.cancel(client, [3])
    assert scheduler.n_pending == 0 and len(scheduler.pending) == 0
    assert len(client.tasks) == 1  # the running one


def test_cancel_queued_cancels_what_no_executor_holds_and_leaves_running_ones():
    scheduler, client = make(tasks_per_core=1)
    a = scheduler.add_executor("a", b"ra", "h", 1, 10, 0.0)
    submit(scheduler, client, 4)
    (_, [running]), = offers(scheduler)
    scheduler.cancel(client, [3])
    assert sorted(scheduler.cancel_queued(client)) == [2, 4]
    assert scheduler.n_pending == 0 and list(client.tasks) == [running.client_task_id]
    assert offers(scheduler) == []
    finish_all(scheduler, a, [running])
    assert [row[0] for row in client.results.take_rows()] == [running.client_task_id]
    assert scheduler.cancel_queued(client) == []


def finish_all(scheduler, executor, tasks, state=TaskState.FINISHED, busy=1e-5):
    report(scheduler, executor, [[t.task_id, t.attempt, state, b""] for t in tasks], busy)


def test_tasks_of_a_lost_executor_are_suspects_run_on_idle_cores_with_nothing_queued_behind():
    scheduler, client = make(tasks_per_core=64)
    a = scheduler.add_executor("a", b"ra", "h", 2, 10, 0.0)
    b = scheduler.add_executor("b", b"rb", "h", 2, 11, 0.0)
    submit(scheduler, client, 1000)
    for executor, tasks in offers(scheduler):
        finish_all(scheduler, executor, tasks)
    assert a.slots == b.slots == 128                 # short tasks: deep windows
    held = dict(offers(scheduler))
    assert len(held[a]) == len(held[b]) == 128
    scheduler.remove_executor(a, "killed by signal SIGKILL")
    assert len(scheduler.queued_suspects()) == 128 and all(len(t.failures) == 1 for t in scheduler.queued_suspects())
    assert offers(scheduler) == []        # b is full...
    assert scheduler.clamped and b.slots == 2       # ...and no longer queues: it drains
    finish_all(scheduler, b, held[b][:127])
    (executor, tasks), = offers(scheduler)
    # one task still held, so one idle core: the oldest suspect, alone
    assert executor is b and [t.client_task_id for t in tasks] == [held[a][0].client_task_id]
    assert b.suspects == 1 and b.slots == 2
    scheduler.remove_executor(b, "killed by signal SIGKILL")
    # only the suspect and the task really running beside it are charged again
    assert len(held[a][0].failures) == 2 and len(held[b][127].failures) == 1
    c = scheduler.add_executor("c", b"rc", "h", 2, 12, 0.0)
    while scheduler.queued_suspects():
        launched = offers(scheduler)
        assert all(len(tasks) <= 2 for _, tasks in launched)
        for executor, tasks in launched:
            finish_all(scheduler, executor, tasks)
    offers(scheduler)
    assert not scheduler.clamped
    finish_all(scheduler, c, list(c.running.values()))
    assert c.slots > 2                              # windows open again


def test_losses_caused_by_the_driver_are_not_charged():
    scheduler, client = make(max_failures=1)
    a = scheduler.add_executor("a", b"ra", "h", 1, 10, 0.0)
    submit(scheduler, client, 1)
    offers(scheduler)
    scheduler.remove_executor(a, "decommissioned", count_failure=False)
    assert not client.results and [t.failures for t in scheduler.pending] == [()]


def test_a_failed_task_runs_again_only_when_the_caller_asked_for_retries():
    scheduler, client = make()
    scheduler.add_executor("a", b"ra", "h", 1, 10, 0.0)
    submit(scheduler, client, 1, retries=2)
    submit(scheduler, client, 1, start=2)
    attempts = []
    while len(client.results) < 2:
        for executor, tasks in offers(scheduler):
            attempts += [(t.client_task_id, t.attempt) for t in tasks]
            finish_all(scheduler, executor, tasks, TaskState.FAILED)
    assert sorted(attempts) == [(1, 1), (1, 2), (1, 3), (2, 1)]
    assert [row[1] for row in results_of(client)] == [TaskState.FAILED] * 2
    assert scheduler.counts["retried"] == 2


def test_decommissioned_executor_is_offered_nothing_and_returned_tasks_run_elsewhere():
    scheduler, client = make(tasks_per_core=64)
    a = scheduler.add_executor("a", b"ra", "h", 1, 10, 0.0)
    submit(scheduler, client, 200)
    (_, tasks), = offers(scheduler)
    finish_all(scheduler, a, tasks)
    (_, held), = offers(scheduler)
    assert len(held) > 2
    scheduler.decommission(a)
    b = scheduler.add_executor("b", b"rb", "h", 1, 11, 0.0)
    launched = offers(scheduler)
    assert [e for e, _ in launched] == [b]
    finish_all(scheduler, a, held[:1])
    finish_all(scheduler, a, held[1:], TaskState.RETURNED)
    assert not a.running and held[1].failures == () and scheduler.pending[0] is held[1]
    scheduler.remove_executor(a, "decommissioned", count_failure=False)
    assert a.tasks_done == 2 and a.tasks_failed == 0


def test_suspects_lost_together_never_run_together_again():
    scheduler, client = make()
    a = scheduler.add_executor("a", b"ra", "h", 4, 10, 0.0)
    submit(scheduler, client, 6)
    (_, first), = offers(scheduler)
    scheduler.remove_executor(a, "exited with code 3")
    assert len(scheduler.queued_suspects()) == 4
    b = scheduler.add_executor("b", b"rb", "h", 4, 11, 0.0)
    (_, second), = offers(scheduler)
    # one suspect, and the idle cores beside it go to tasks never charged
    assert [len(t.failures) for t in second] == [1, 0, 0]
    assert b.suspects == 1 and len(scheduler.queued_suspects()) == 3


def test_suspects_of_different_losses_may_share_an_executor():
    scheduler, client = make()
    a = scheduler.add_executor("a", b"ra", "h", 1, 10, 0.0)
    b = scheduler.add_executor("b", b"rb", "h", 1, 11, 0.0)
    submit(scheduler, client, 2)
    offers(scheduler)
    scheduler.remove_executor(a, "exited with code 3")
    scheduler.remove_executor(b, "exited with code 3")
    c = scheduler.add_executor("c", b"rc", "h", 2, 12, 0.0)
    (_, tasks), = offers(scheduler)
    assert sorted(t.client_task_id for t in tasks) == [1, 2] and c.suspects == 2
    finish_all(scheduler, c, tasks)
    assert c.suspects == 0 and c.suspect_losses == {}


def test_clients_and_executors_that_go_are_freed_with_their_tasks():
    # compiled Tasks are outside the garbage collector: the scheduler must break the cycles
    # (client.tasks -> Task -> client, executor.running -> Task -> executor) itself
    import gc

    def alive():
        gc.collect()
        return [o for o in gc.get_objects() if type(o) in (ClientData, ExecutorData)]

    # those of earlier tests (held here, so that none is freed meanwhile) are not this one's
    earlier = alive()
    scheduler, client = make()
    a = scheduler.add_executor("a", b"ra", "h", 2, 10, 0.0)
    submit(scheduler, client, 10)
    offers(scheduler)
    scheduler.remove_executor(a, "exited with code 1")
    b = scheduler.add_executor("b", b"rb", "h", 2, 11, 0.0)
    offers(scheduler)
    scheduler.drop_client(client)
    scheduler.remove_executor(b, "decommissioned", count_failure=False)
    del scheduler, client, a, b
    assert [o for o in alive() if not any(o is e for e in earlier)] == []


def test_queues_and_waiting_results_are_out_of_the_collector_and_still_hold_their_tasks():
    # A full collection would visit every queued task and every result waiting to be sent;
    # the queues are in no cycle, so they stay out of the collector, and results waiting
    # are no objects at all in the compiled path (rows in a list out of the collector in the
    # reference). What they hold must still be there, and run, after collections.
    import gc

    from zsched.fastpath import COMPILED

    scheduler, client = make(tasks_per_core=8)
    a = scheduler.add_executor("a", b"ra", "h", 2, 10, 0.0)
    submit(scheduler, client, 100)
    assert not gc.is_tracked(scheduler.pending)
    if not COMPILED:
        assert not gc.is_tracked(client.results.rows)
    held = dict(offers(scheduler))
    scheduler.remove_executor(a, "killed by signal SIGKILL")
    assert scheduler.suspects and not any(gc.is_tracked(group) for group in scheduler.suspects.values())
    gc.collect()
    b = scheduler.add_executor("b", b"rb", "h", 2, 11, 0.0)
    while scheduler.n_pending:
        gc.collect()
        for executor, tasks in offers(scheduler):
            finish_all(scheduler, executor, tasks)
    gc.collect()
    if not COMPILED:
        assert not gc.is_tracked(client.results.rows)
    results = client.results.take_rows()
    assert sorted(row[0] for row in results) == list(range(1, 101))
    assert all(row[1] == TaskState.FINISHED for row in results)
    assert not client.results
    if COMPILED:  # the rows a client in the driver's process gets: ints and bytes, out of it
        assert not gc.is_tracked(results) and not any(gc.is_tracked(row) for row in results)
    assert len(held[a]) == 2 and b.tasks_done == 100


# ---------------------------------------------------------------- decisions and frames

def test_resource_offers_hands_back_the_launch_decisions_for_the_wire_to_write():
    scheduler, client = make(functions={b"f": b"function blob", b"g": b"g blob"})
    a = scheduler.add_executor("a", b"ra", "h", 2, 10, 0.0)
    b = scheduler.add_executor("b", b"rb", "h", 1, 11, 0.0)
    rows = [[1, b"f", b"x1", 0], [2, b"g", b"x2", 0], [3, b"f", b"x3", 0], [4, b"g", b"x4", 0]]
    scheduler.submit(client, p.decode(p.encode(p.SubmitTasks({}, rows))).tasks)
    scheduler.cancel(client, [2])
    launches = scheduler.resource_offers()
    # one task per idle core, round robin: a, b, a; the cancelled one is skipped
    assert launches == [(a, [[1, 1, b"f", b"x1"], [3, 1, b"f", b"x3"]], {b"f": b"function blob"}),
                        (b, [[4, 1, b"g", b"x4"]], {b"g": b"g blob"})]
    assert list(a.running) == [1, 3] and list(b.running) == [4]
    assert scheduler.n_pending == 0 and not scheduler.pending and scheduler.latency.count == 3
    assert a.functions == b.functions == set()  # nothing written yet: the wire records what it sends
    header, limit = p.frame_header(p.LaunchTasks), scheduler.config.max_message_size
    for executor, decided, functions in launches:
        frames = wire.launch_frames(header, decided, functions, executor.functions, limit)
        (message,) = [p.decode(frame) for frame in frames]
        assert message.tasks == decided and message.functions == functions
        assert executor.functions == set(functions)
    finish_all(scheduler, a, [a.running[1]])
    submit(scheduler, client, 1, start=5)
    assert scheduler.resource_offers() == [(a, [[5, 1, b"f", b"args"]], {b"f": b"function blob"})]
    assert wire.launch_frames(header, [[5, 1, b"f", b"args"]], {b"f": b"function blob"},
                              a.functions, limit) == [p.encode(p.LaunchTasks({}, [[5, 1, b"f", b"args"]]))]


class _Clock:
    """A clock both schedulers of a pair read alike: each read a step later."""

    def __init__(self):
        self.now = 10.0

    def __call__(self):
        self.now += 0.00025
        return self.now


_FUNCTIONS = {b"f": b"F" * 100, b"g": p.FunctionBlob(b"G" * 10), b"big": b"B" * 3000}
_LIMIT = 1000  # smaller than the big function: a task of it goes in a frame of its own
_SUBMITTING = 7  # steps that submit tasks; the later ones run the queue out


def _pair_step(scheduler, client, step, lose):
    """Step ``step`` of the scenario the two schedulers of a pair go through alike."""
    if step == 0:
        for i, cores in enumerate((1, 2, 3)):
            scheduler.add_executor(str(i), b"r%d" % i, "h", cores, 10 + i, 0.0)
    if step < _SUBMITTING:
        digests = sorted(_FUNCTIONS)
        rows = [[100 * step + i, digests[(step + i) % 3], b"a" * ((37 * i + step) % 300), 0]
                for i in range(60)]
        scheduler.submit(client, p.decode(p.encode(p.SubmitTasks({}, rows))).tasks)
        scheduler.cancel(client, [100 * step + i for i in range(0, 60, 7)])  # queued ones
    executors = list(scheduler.executors_by_slot.values())
    for n, executor in enumerate(executors):
        done = list(executor.running.values())[:5 + 20 * n]
        report(scheduler, executor, [[t.task_id, t.attempt, TaskState.FINISHED, b""] for t in done],
               1e-6 * len(done))
    if lose and step in (2, 4):  # the executor holding most tasks is lost
        lost = max(executors, key=lambda executor: len(executor.running))
        scheduler.remove_executor(lost, "killed by signal SIGKILL")
        scheduler.add_executor("new%d" % step, b"n%d" % step, "h", 2, 20 + step, 0.0)


def _state(scheduler):
    """Everything an offer changes in ``scheduler``."""
    return (scheduler.n_pending, scheduler.clamped, dict(scheduler.counts),
            [(t.task_id, t.cancelled) for t in scheduler.pending],
            {loss: [t.task_id for t in group] for loss, group in scheduler.suspects.items()},
            scheduler.latency.counts, scheduler.latency.sum, scheduler.latency.count,
            [(slot, e.executor_id, e.slots, scheduler.slots.free(slot), sorted(e.functions),
              dict(e.suspect_losses), [(t.task_id, t.attempt) for t in e.running.values()])
             for slot, e in scheduler.executors_by_slot.items()])


@pytest.mark.parametrize("lose", [False, True], ids=["no suspects", "suspects"])
def test_offer_frames_are_the_decisions_the_wire_writes(lose):
    """Two schedulers in the same state: the driver's fused call (``offer_frames``) gives
    byte for byte the frames the wire writes of ``resource_offers``, and leaves the same
    state, offer after offer: tasks of several functions to several executors, frames cut
    at the size limit, cancelled tasks in the queue, and (``lose``) suspects waiting."""
    fused, stepwise = (TaskScheduler(Config(max_message_size=_LIMIT, tasks_per_core=32),
                                     functions=dict(_FUNCTIONS), clock=_Clock()) for _ in range(2))
    clients = ClientData(b"c", 1), ClientData(b"c", 1)
    header = p.frame_header(p.LaunchTasks)
    split = with_suspects = 0
    for step in range(100):
        if step >= _SUBMITTING and not stepwise.n_pending:
            break
        for scheduler, client in zip((fused, stepwise), clients):
            _pair_step(scheduler, client, step, lose)
        assert _state(fused) == _state(stepwise)
        with_suspects += bool(stepwise.suspects)
        written = [(executor, wire.launch_frames(header, rows, functions, executor.functions, _LIMIT))
                   for executor, rows, functions in stepwise.resource_offers()]
        sent = fused.offer_frames()
        assert [(e.executor_id, frames) for e, frames in sent] == \
            [(e.executor_id, frames) for e, frames in written]
        assert _state(fused) == _state(stepwise)
        assert all(p.encode(p.decode(frame)) == frame for _, frames in sent for frame in frames)
        split += sum(len(frames) > 1 for _, frames in sent)
    assert not fused.n_pending and not fused.clamped  # the queue ran out, suspects and all
    assert split and bool(with_suspects) == lose  # the cases it is for did occur


def test_a_held_client_launches_nothing_until_released_and_then_goes_first():
    scheduler, client = make()
    other = ClientData(b"other", 2)
    a = scheduler.add_executor("a", b"ra", "h", 1, 10, 0.0)
    submit(scheduler, client, 3)
    submit(scheduler, other, 2, start=100)
    scheduler.hold_client(client)
    assert scheduler.n_pending == 2
    submit(scheduler, client, 2, start=4)  # submitted while held: held too
    assert scheduler.n_pending == 2 and len(client.held) == 5
    (_, [task]), = offers(scheduler)
    assert task.client is other
    report(scheduler, a, [[task.task_id, 1, TaskState.FINISHED, b"r"]], 10.0)
    scheduler.release_client(client)
    assert client.held is None and scheduler.n_pending == 6
    launched = []
    while scheduler.n_pending:
        (_, tasks), = offers(scheduler)
        launched += [task.client_task_id for task in tasks]
        report(scheduler, a, [[task.task_id, 1, TaskState.FINISHED, b"r"] for task in tasks], 10.0)
    assert launched == [1, 2, 3, 4, 5, 101]


def test_cancelling_held_tasks_keeps_the_count_of_queued_tasks_right():
    scheduler, client = make()
    scheduler.add_executor("a", b"ra", "h", 1, 10, 0.0)
    submit(scheduler, client, 4)
    scheduler.hold_client(client)
    assert scheduler.cancel(client, [1, 2]) == []
    assert scheduler.n_pending == 0 and sorted(t.client_task_id for t in client.held.values()) == [3, 4]
    assert scheduler.cancel_queued(client) == [3, 4]
    assert scheduler.n_pending == 0 and not client.held
    scheduler.release_client(client)
    assert scheduler.n_pending == 0 and offers(scheduler) == []
    submit(scheduler, client, 1, start=9)
    scheduler.hold_client(client)
    assert scheduler.drop_client(client) == [] and not client.held and scheduler.n_pending == 0
