"""Large buffers taken from the C library's heap and given back to it, not to the system.

A large argument or result arrives in a buffer of its own (``PipeLink``, ZeroMQ). glibc's
malloc maps an allocation over its threshold afresh and unmaps it when freed, so each such
buffer costs the kernel a page fault and a zeroed page per 4 KiB: several times the copy
that fills it. A driver or executor process (never a client's: its host process's malloc
is its own) has malloc serve allocations up to 32 MiB from its heap, and keep up to
``driver_memory_cache`` bytes of freed heap for reuse.
"""
import ctypes
import os

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 32 << 20  # glibc's largest


def keep_freed_buffers(limit):
    """Keep up to ``limit`` bytes of freed heap for reuse (0: glibc's defaults); what it
    did, in words for the log."""
    if limit == 0:
        return "none (driver_memory_cache is 0)"
    if not _is_glibc():
        return "none (not glibc's malloc)"
    try:
        # the C library is loaded already: no search for it (find_library runs ldconfig)
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return "none (no mallopt)"
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    trim = min(limit, (1 << 31) - 1)
    if not (mallopt(_M_MMAP_THRESHOLD, min(_MMAP_THRESHOLD, trim))
            and mallopt(_M_TRIM_THRESHOLD, trim)):
        return "none (mallopt refused)"
    return f"up to {trim / 2**20:g} MiB of buffers"


def _is_glibc():
    """Whether this process runs on glibc (``platform.libc_ver`` reads the interpreter's
    file to say so; glibc itself answers at once)."""
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (ValueError, OSError, AttributeError):
        return False
