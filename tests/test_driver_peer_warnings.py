"""The peers the driver warned about (``zsched/driver/peer_warnings.py``): each once."""
import logging

import pytest

from zsched.driver import peer_warnings
from zsched.driver.peer_warnings import PeerWarnings

pytestmark = pytest.mark.unit


def test_a_peer_is_warned_about_once(caplog):
    warnings = PeerWarnings()
    with caplog.at_level(logging.WARNING, logger="zsched.driver"):
        warnings.warn(b"\x01", "junk")
        warnings.warn(b"\x01", "more junk")
        warnings.warn(b"\x02", "junk")
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "dropped malformed input from peer 01", "dropped malformed input from peer 02"]
    assert not warnings.first(b"\x01") and warnings.first(b"\x03") and not warnings.first(b"\x03")


def test_the_peers_warned_about_are_forgotten_at_the_limit(monkeypatch):
    monkeypatch.setattr(peer_warnings, "_WARNED_PEERS_LIMIT", 2)
    warnings = PeerWarnings()
    assert warnings.first(b"a") and warnings.first(b"b")
    assert warnings.first(b"c")  # the set was full: a and b forgotten, then c noted
    assert not warnings.first(b"c")
    assert warnings.first(b"a")
