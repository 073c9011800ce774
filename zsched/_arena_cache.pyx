# cython: language_level=3
"""Freed object arenas kept for reuse, in a driver process.

CPython's small-object allocator takes memory from the system in arenas (1 MiB on 64-bit
builds) and gives an arena back as soon as the last object in it is freed. A driver that
ran a flood of tasks frees most of its arenas when the flood ends, and the next flood takes
as much fresh memory again: each of its pages costs a page fault when first touched.

``install(limit)`` puts a cache in front of the allocator's own arena functions: a freed
arena is kept, while the kept ones add up to at most ``limit`` bytes, and a new arena is
taken from those kept first. Beyond the limit, arenas go back to the system as before.
Kept arenas stay in the process's resident memory. The functions run holding the GIL, as
the allocator's do. There is no pure-Python version: without the compiled modules nothing
is kept.
"""

cdef extern from "Python.h":
    ctypedef struct PyObjectArenaAllocator:
        void *ctx
        void *(*alloc)(void *ctx, size_t size) noexcept
        void (*free)(void *ctx, void *ptr, size_t size) noexcept
    void PyObject_GetArenaAllocator(PyObjectArenaAllocator *allocator)
    void PyObject_SetArenaAllocator(PyObjectArenaAllocator *allocator)


cdef struct Kept:
    Kept *next              # written in the kept arena itself: no bookkeeping memory


cdef PyObjectArenaAllocator system          # the allocator's own arena functions
cdef bint installed = False
cdef size_t limit = 0
cdef size_t arena_size = 0                  # of the first arena freed: only that size is kept
cdef Kept *kept = NULL
cdef size_t kept_bytes = 0
cdef size_t reused = 0                      # arenas handed out again
cdef size_t released = 0                    # arenas given back to the system past the limit


cdef void *alloc_arena(void *ctx, size_t size) noexcept:
    global kept, kept_bytes, reused
    cdef Kept *arena
    if kept != NULL and size == arena_size:
        arena = kept
        kept = arena.next
        kept_bytes -= size
        reused += 1
        return <void *>arena
    return system.alloc(system.ctx, size)


cdef void free_arena(void *ctx, void *ptr, size_t size) noexcept:
    global kept, kept_bytes, arena_size, released
    cdef Kept *arena
    if arena_size == 0:
        arena_size = size
    if size == arena_size and size >= sizeof(Kept) and kept_bytes + size <= limit:
        arena = <Kept *>ptr
        arena.next = kept
        kept = arena
        kept_bytes += size
        return
    released += 1
    system.free(system.ctx, ptr, size)


def install(size_t limit_bytes):
    """Keep freed arenas up to ``limit_bytes`` (0: keep none; arenas already kept stay
    until reused). Installed once per process; a later call changes the limit."""
    global installed, limit
    cdef PyObjectArenaAllocator cache
    limit = limit_bytes
    if installed:
        return
    PyObject_GetArenaAllocator(&system)
    cache.ctx = NULL
    cache.alloc = alloc_arena
    cache.free = free_arena
    PyObject_SetArenaAllocator(&cache)
    installed = True


def stats():
    """``{"installed", "limit", "arena_size", "kept_bytes", "reused", "released"}``
    (``arena_size`` is 0 until an arena is freed)."""
    return {"installed": installed, "limit": limit, "arena_size": arena_size,
            "kept_bytes": kept_bytes, "reused": reused, "released": released}
