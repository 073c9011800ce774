"""Peers the driver has warned about: each is warned once, however often it misbehaves."""
import logging

log = logging.getLogger("zsched.driver")

_WARNED_PEERS_LIMIT = 10000


class PeerWarnings:
    """The routing ids of the peers warned about (at most ``_WARNED_PEERS_LIMIT``, then
    forgotten at once). Only the driver's loop uses it."""

    def __init__(self):
        self._warned = set()

    def first(self, rid):
        """True the first time it is asked about ``rid``; the peer counts as warned after."""
        if rid in self._warned:
            return False
        if len(self._warned) >= _WARNED_PEERS_LIMIT:
            self._warned.clear()
        self._warned.add(rid)
        return True

    def warn(self, rid, what):
        """Log that input from ``rid`` was dropped for ``what``, if not done for it before."""
        if self.first(rid):
            log.warning("dropped malformed input from peer %s: %s (further input from it is "
                        "dropped without a word)", rid.hex(), what)
