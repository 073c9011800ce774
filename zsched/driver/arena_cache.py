"""Freed object memory a driver process keeps for reuse (see ``_arena_cache.pyx``).

Only ``bin/driver`` (a driver in a process of its own, as ``LocalCluster`` starts it) keeps
any: a driver embedded by ``zsched.Client()`` leaves its host process's allocator alone.
"""
from ..fastpath import COMPILED


def keep_freed_memory(limit):
    """Have this process keep up to ``limit`` bytes of freed arenas for reuse; what it
    keeps, in words for the log."""
    if not COMPILED:
        return "none (the compiled modules are not in use)"
    if limit == 0:  # nothing to keep: the allocator's arena functions stay as they are
        return "none (driver_memory_cache is 0)"
    from .._arena_cache import install
    install(limit)
    return f"up to {limit / 2**20:g} MiB"


def stats():
    """The cache's figures (``_arena_cache.stats``), or None without the compiled modules."""
    if not COMPILED:
        return None
    from .._arena_cache import stats as cache_stats
    return cache_stats()
