"""Pure-Python twin of ``_arena_cache.pyx``, which keeps nothing: Python code cannot put
functions in front of the allocator's own arena functions."""


def install(limit_bytes):
    """Keep no freed arena, whatever ``limit_bytes``."""


def stats():
    """None: no cache is installed."""
    return None
