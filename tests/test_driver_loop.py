"""The driver's event loop (``zsched/driver/loop.py``): a poller with a handler per watched
socket or descriptor, timers run by an injected clock, and one turn at a time
(``run_once``): handlers of what is ready, then the timers that are due, then
``after_turn``. A fake clock drives the timers; nothing here sleeps but the turn that
measures its pause."""
import os
import time

import pytest

from zsched.driver.loop import Loop

pytestmark = pytest.mark.unit


class FakeClock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


@pytest.fixture
def pipe():
    read_fd, write_fd = os.pipe()
    yield read_fd, write_fd
    os.close(read_fd)
    os.close(write_fd)


def test_a_timer_does_not_run_before_its_interval():
    clock = FakeClock()
    loop = Loop(clock)
    fired = []
    loop.every(1.0, lambda: fired.append(clock()))
    loop.run_once(0)
    clock.advance(0.999)
    loop.run_once(0)
    assert fired == []
    clock.advance(0.001)
    loop.run_once(0)
    assert len(fired) == 1


def test_a_timer_runs_again_an_interval_after_it_ran():
    clock = FakeClock()
    loop = Loop(clock)
    fired = []
    loop.every(1.0, lambda: fired.append(clock()))
    start = clock()
    for _ in range(40):
        clock.advance(0.25)
        loop.run_once(0)
    assert [t - start for t in fired] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]


def test_timers_fire_in_the_order_they_fall_due():
    clock = FakeClock()
    loop = Loop(clock)
    fired = []
    loop.every(1.0, lambda: fired.append("a"))
    loop.every(2.5, lambda: fired.append("b"))
    loop.every(0.75, lambda: fired.append("c"))
    for _ in range(12):
        clock.advance(0.25)
        loop.run_once(0)
    # at 0.75 c; 1.0 a; 1.5 c; 2.0 a; 2.25 c; 2.5 b; 3.0 a and c
    assert fired == ["c", "a", "c", "a", "c", "b", "a", "c"]


def test_a_step_runs_only_what_is_due():
    clock = FakeClock()
    loop = Loop(clock)
    fired = []
    loop.every(1.0, lambda: fired.append("fast"))
    loop.every(10.0, lambda: fired.append("slow"))
    clock.advance(5.0)
    loop.run_once(0)
    assert fired == ["fast"]  # once, however late: no catching up


def test_all_timers_runs_every_timer_now():
    clock = FakeClock()
    loop = Loop(clock)
    fired = []
    loop.every(1.0, lambda: fired.append("a"))
    loop.every(60.0, lambda: fired.append("b"))
    loop.run_once(0, all_timers=True)
    assert sorted(fired) == ["a", "b"]
    fired.clear()
    clock.advance(0.5)
    loop.run_once(0)
    assert fired == []  # each starts its interval again from then


def test_after_turn_runs_every_turn_after_the_timers():
    clock = FakeClock()
    order = []
    loop = Loop(clock, after_turn=lambda: order.append("after"))
    loop.every(1.0, lambda: order.append("timer"))
    loop.run_once(0)
    clock.advance(1.0)
    loop.run_once(0)
    assert order == ["after", "timer", "after"]


def test_a_watched_descriptor_calls_its_handler_when_ready(pipe):
    read_fd, write_fd = pipe
    loop = Loop(FakeClock())
    seen = []
    loop.watch(read_fd, lambda: seen.append(os.read(read_fd, 100)))
    assert loop.watching(read_fd)
    loop.run_once(0)
    assert seen == []
    os.write(write_fd, b"x")
    loop.run_once(1.0)
    assert seen == [b"x"]


def test_handlers_run_before_the_timers_of_the_same_turn(pipe):
    read_fd, write_fd = pipe
    clock = FakeClock()
    order = []
    loop = Loop(clock, after_turn=lambda: order.append("after"))
    loop.watch(read_fd, lambda: order.append(("input", os.read(read_fd, 100))))
    loop.every(1.0, lambda: order.append("timer"))
    os.write(write_fd, b"y")
    clock.advance(1.0)
    loop.run_once(1.0)
    assert order == [("input", b"y"), "timer", "after"]


def test_an_unwatched_descriptor_is_no_longer_handled(pipe):
    read_fd, write_fd = pipe
    loop = Loop(FakeClock())
    seen = []
    loop.watch(read_fd, lambda: seen.append(1))
    loop.unwatch(read_fd)
    assert not loop.watching(read_fd)
    loop.unwatch(read_fd)  # twice: no error
    os.write(write_fd, b"z")
    loop.run_once(0)
    assert seen == []


def test_a_handler_may_unwatch_another_ready_one():
    first, second = os.pipe(), os.pipe()
    try:
        loop = Loop(FakeClock())
        seen = []

        def on_first():
            seen.append("first")
            loop.unwatch(second[0])

        loop.watch(first[0], on_first)
        loop.watch(second[0], lambda: seen.append("second"))
        os.write(first[1], b"1")
        os.write(second[1], b"2")
        loop.run_once(1.0)
        assert seen == ["first"]
    finally:
        for fd in (*first, *second):
            os.close(fd)


def test_stop_ends_run_and_skips_the_rest_of_the_turn(pipe):
    read_fd, write_fd = pipe
    clock = FakeClock()
    order = []
    loop = Loop(clock, after_turn=lambda: order.append("after"))

    def on_input():
        os.read(read_fd, 100)
        order.append("input")
        loop.stop()

    loop.watch(read_fd, on_input)
    loop.every(1.0, lambda: order.append("timer"))
    os.write(write_fd, b"stop")
    clock.advance(1.0)
    loop.run()  # returns: stopped by the handler
    assert order == ["input"]
    assert loop.stopping



def test_a_timer_or_handler_that_raises_is_logged_and_the_loop_goes_on(pipe, caplog):
    clock = FakeClock()
    loop = Loop(clock)
    ran = []

    def broken():
        raise RuntimeError("can't start new thread")
    loop.every(1.0, broken)
    loop.every(1.0, lambda: ran.append("timer"))
    loop.watch(pipe[0], broken)
    os.write(pipe[1], b"x")
    clock.advance(1.0)
    loop.run_once(0)
    assert ran == ["timer"]
    assert "can't start new thread" in caplog.text and "it goes on" in caplog.text


def test_the_longest_pause_is_kept_for_a_minute():
    from zsched.driver.loop import LongestPause
    pauses = LongestPause()
    assert pauses.longest(100.0) == 0.0
    pauses.add(0.5, 100.2)
    pauses.add(0.1, 100.7)
    pauses.add(0.2, 130.0)
    assert pauses.longest(130.0) == 0.5
    assert pauses.longest(159.9) == 0.5
    assert pauses.longest(160.0) == 0.2   # the second of 100 is a minute old
    pauses.add(0.05, 220.0)   # the slot of second 100, reused: what it held is forgotten
    assert pauses.longest(220.0) == 0.05


def test_a_turn_measures_its_pause():
    clock = FakeClock()
    loop = Loop(clock, after_turn=lambda: time.sleep(0.01))
    loop.run_once(0)
    assert loop.longest_pause() >= 0.01
