"""The driver's loop (zsched/driver/loop.py): handlers per watched descriptor, and timers
run by an injected clock, without sleeping."""
import os

from zsched.driver.loop import Loop


class FakeClock:
    def __init__(self, now=100.0):
        self.now = now

    def __call__(self):
        return self.now


def test_timers_run_when_due_by_the_clock_and_all_of_them_when_asked():
    clock = FakeClock()
    ran = []
    turns = []
    loop = Loop(clock, after_turn=lambda: turns.append(clock.now))
    loop.every(1.0, lambda: ran.append(("a", clock.now)))
    loop.every(5.0, lambda: ran.append(("b", clock.now)))
    loop.run_once(0)
    assert ran == [] and turns == [100.0]          # nothing due yet; the turn still ends
    clock.now = 101.0
    loop.run_once(0)
    assert ran == [("a", 101.0)]
    clock.now = 101.5
    loop.run_once(0)
    assert ran == [("a", 101.0)]                   # next due at 102
    loop.run_once(0, all_timers=True)
    assert ran[1:] == [("a", 101.5), ("b", 101.5)]
    clock.now = 102.0
    loop.run_once(0)
    assert ran[3:] == []                           # both rescheduled from 101.5
    assert len(turns) == 5


def test_handlers_are_called_for_what_is_ready_and_not_once_unwatched():
    clock = FakeClock()
    loop = Loop(clock)
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    calls = []
    try:
        def first():
            calls.append("first")
            os.read(r1, 1)
            loop.unwatch(r2)  # a handler may stop another being watched in the same turn

        loop.watch(r1, first)
        loop.watch(r2, lambda: calls.append("second"))
        assert loop.watching(r2)
        os.write(w1, b"x")
        os.write(w2, b"x")
        loop.run_once(1.0)
        assert calls == ["first"] and not loop.watching(r2)
        loop.run_once(0)
        assert calls == ["first"]
    finally:
        for fd in (r1, w1, r2, w2):
            os.close(fd)


def test_stop_ends_the_turn_before_timers_and_run_returns():
    clock = FakeClock()
    loop = Loop(clock, after_turn=lambda: turns.append(1))
    turns = []
    ran = []
    loop.every(0.5, lambda: ran.append(1))
    r, w = os.pipe()
    try:
        loop.watch(r, lambda: (os.read(r, 1), loop.stop()))
        os.write(w, b"x")
        clock.now += 1
        loop.run()
        assert ran == [] and turns == []
    finally:
        os.close(r)
        os.close(w)
