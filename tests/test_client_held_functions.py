"""Which functions a client releases: the least recently used, never a pinned one."""
import pytest

from zsched.client import held_functions
from zsched.client.held_functions import HeldFunctions

pytestmark = pytest.mark.unit


def test_the_least_recently_used_go_first_down_to_half_the_limits():
    held = HeldFunctions(max_count=4, max_bytes=1000)
    for digest in b"abcd":
        held.add(bytes([digest]), 10)
    held.used(b"a")  # now the most recent
    assert not held.over_limit()
    held.add(b"e", 10)
    assert held.over_limit()
    assert held.release(pinned=set()) == [b"b", b"c", b"d"]
    assert len(held) == 2 and b"a" in held and b"e" in held and held.bytes == 20
    assert not held.over_limit()


def test_bytes_count_too_and_pinned_functions_stay():
    held = HeldFunctions(max_count=100, max_bytes=100)
    held.add(b"big", 80)
    held.add(b"x", 30)
    held.add(b"x", 30)  # held already: counted once
    held.add(b"y", 5)
    assert held.bytes == 115 and held.over_limit()
    assert held.release(pinned={b"big"}) == [b"x"]
    assert held.bytes == 85 and not held.over_limit()


def test_the_most_recently_used_stays_however_large():
    held = HeldFunctions(max_count=100, max_bytes=100)
    held.add(b"old", 10)
    held.add(b"huge", 500)
    assert held.over_limit() and held.release(pinned=set()) == [b"old"]
    assert b"huge" in held
    held.add(b"next", 1)
    assert held.release(pinned=set()) == [b"huge"]


def test_limits_kept_exceeded_by_pinned_functions_are_looked_at_again_a_second_later(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(held_functions.time, "monotonic", lambda: now[0])
    held = HeldFunctions(max_count=100, max_bytes=100)
    held.add(b"big", 150)
    held.add(b"small", 1)
    assert held.over_limit() and held.release(pinned={b"big"}) == []
    assert not held.over_limit()  # not every turn: big stays pinned for now
    now[0] += held_functions.RAISED_SECONDS
    assert held.over_limit()  # a second later
    assert held.release(pinned=set()) == [b"big"] and len(held) == 1
