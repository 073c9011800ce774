"""Freed object memory a driver process keeps for reuse (see ``_arena_cache.pyx``), and the
chooser of ``_arena_cache``: the compiled cache, or its twin ``_arena_cache_py``, which
keeps nothing, where ``ZSCHED_PUREPYTHON=1`` (the rule is ``fastpath``'s).

Only ``bin/driver`` (a driver in a process of its own, as ``LocalCluster`` starts it) keeps
any: a driver embedded by ``zsched.Client()`` leaves its host process's allocator alone.
"""
from ..fastpath import COMPILED

if COMPILED:
    from .._arena_cache import install, stats
else:
    from .._arena_cache_py import install, stats

__all__ = ["keep_freed_memory", "stats"]


def keep_freed_memory(limit):
    """Have this process keep up to ``limit`` bytes of freed arenas for reuse; what it
    keeps, in words for the log."""
    if not COMPILED:
        return "none (the compiled modules are not in use)"
    if limit == 0:  # nothing to keep: the allocator's arena functions stay as they are
        return "none (driver_memory_cache is 0)"
    install(limit)
    return f"up to {limit / 2**20:g} MiB"
