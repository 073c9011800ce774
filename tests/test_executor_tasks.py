"""``zsched.executor.tasks.TaskRunner`` alone, without a driver or a socket: how a task's
status row is made (result, exception, missing function, oversized result), kills before
and during a run, functions kept for the tasks bound to them, and tasks taken back before
they start. The executor as a whole is tested in test_executor_backend.py and
test_executor_inline.py."""
import pickle
import time

import cloudpickle
import pytest

from zsched.errors import MessageTooLarge
from zsched.executor.tasks import TaskRunner, dumps_value
from zsched.protocol import TaskState

pytestmark = pytest.mark.unit

WAIT = 30


class FakeWakeup:
    """The wake-up pipe's two members that task threads use."""

    def __init__(self):
        self.pending = False
        self.wakes = 0

    def wake(self):
        self.wakes += 1


def add(a, b=0):
    return a + b


def fail():
    raise KeyError("missing")


def spin():
    while True:
        time.sleep(0.001)


@pytest.fixture
def wakeup():
    return FakeWakeup()


@pytest.fixture
def runner(wakeup):
    r = TaskRunner(wakeup, max_result_size=1 << 20)
    yield r
    r.stop()


def task(runner, task_id, function, *args, attempt=1, **kwargs):
    """A LaunchTasks row for ``function(*args, **kwargs)``, its function bound."""
    digest = f"digest-{function.__name__}".encode()
    row = [task_id, attempt, digest, pickle.dumps((args, kwargs))]
    runner.bind_functions({digest: cloudpickle.dumps(function)}, [row])
    return row


def wait_for_row(runner):
    deadline = time.monotonic() + WAIT
    while not runner.results:
        assert time.monotonic() < deadline, "no status row"
        time.sleep(0.005)
    return runner.results.popleft()


def test_a_task_reports_its_pickled_result_and_the_time_it_took(runner):
    row = runner.run_here(task(runner, 7, add, 2, b=3))
    assert row == [7, 1, TaskState.FINISHED, dumps_value(5)]
    assert runner.take_busy() > 0
    assert runner.take_busy() == 0


def test_a_task_exception_fails_the_task(runner):
    task_id, attempt, state, payload = runner.run_here(task(runner, 1, fail))
    assert (task_id, attempt, state) == (1, 1, TaskState.FAILED)
    assert b"missing" in payload


def test_a_task_whose_function_was_not_sent_is_an_error(runner):
    row = [3, 2, b"never-sent", pickle.dumps(((), {}))]
    runner.bind_functions({}, [row])
    assert runner.run_here(row) == [3, 2, TaskState.ERROR,
                                    b"the driver did not send the task's function to this executor"]


def test_a_result_over_the_size_limit_is_an_error(runner):
    runner.max_result_size = 100
    _, _, state, payload = runner.run_here(task(runner, 4, bytes, 1000))
    assert state == TaskState.ERROR
    assert payload.decode() == str(MessageTooLarge("the result of task 4", len(dumps_value(bytes(1000))), 100))


def test_a_task_killed_before_it_starts_does_not_run(runner):
    assert runner.kill(5, 1) is False      # not running: kept from starting
    assert runner.run_here(task(runner, 5, add, 1)) == [5, 1, TaskState.KILLED,
                                                         b"killed before it started"]
    # the kill is used up: the next attempt runs
    assert runner.run_here(task(runner, 5, add, 1, attempt=2))[2] == TaskState.FINISHED


def test_a_kill_of_another_attempt_leaves_the_task_alone(runner):
    runner.kill(6, 1)
    assert runner.run_here(task(runner, 6, add, 1, attempt=2))[2] == TaskState.FINISHED


def test_kills_left_over_once_all_is_reported_are_dropped(runner):
    runner.kill(8, 1)
    runner.all_reported()
    assert runner.run_here(task(runner, 8, add, 1))[2] == TaskState.FINISHED


def test_a_task_running_in_a_task_thread_is_interrupted_by_a_kill(runner, wakeup):
    runner.start(1)
    runner.queue([task(runner, 9, spin)])
    deadline = time.monotonic() + WAIT
    while runner.running_attempt(9) != 1:
        assert time.monotonic() < deadline, "the task never started"
        time.sleep(0.005)
    assert runner.metrics()["busy_threads"] == 1
    assert runner.kill(9, 1) is True
    assert wait_for_row(runner) == [9, 1, TaskState.KILLED, b"killed while running"]
    assert runner.running_attempt(9) is None
    assert wakeup.wakes >= 1               # the loop was asleep (pending is False)
    # the thread goes on with the next task
    runner.queue([task(runner, 10, add, 4)])
    assert wait_for_row(runner) == [10, 1, TaskState.FINISHED, dumps_value(4)]


def test_a_forgotten_function_stays_with_the_tasks_bound_to_it(runner):
    row = task(runner, 11, add, 1, b=1)
    assert runner.metrics()["functions"] == 1
    runner.forget_functions([b"digest-add", b"unknown"])
    assert runner.metrics()["functions"] == 0
    assert runner.run_here(row)[2:] == [TaskState.FINISHED, dumps_value(2)]


def test_unstarted_tasks_are_taken_back_all_oldest_first_or_a_count_newest_first(runner):
    rows = [task(runner, i, add, i) for i in range(5)]
    runner.queue(rows)                     # no task thread: nothing starts
    assert [r[0] for r in runner.take_unstarted(2)] == [4, 3]
    assert [r[0] for r in runner.take_unstarted()] == [0, 1, 2]
    assert runner.take_unstarted() == [] and runner.take_unstarted(3) == []
