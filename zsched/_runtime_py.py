"""Pure-Python twin of ``_runtime.pyx``: helpers of the process itself, not of the scheduler.

``gc_untrack`` and ``gc_track`` take an object out of the cyclic garbage collector and put
it back: what a process holds by the hundred thousand (the client's futures and rows, the
driver's queues) would otherwise be traversed by its collections again and again.
"""
import ctypes
import gc


def _c_api(name, restype):
    function = getattr(ctypes.pythonapi, name)  # called holding the GIL
    function.argtypes = (ctypes.py_object,)
    function.restype = restype
    return function


_GC_TRACK = _c_api("PyObject_GC_Track", None)
_GC_UNTRACK = _c_api("PyObject_GC_UnTrack", None)
_IS_GC = _c_api("PyObject_IS_GC", ctypes.c_int)


def gc_untrack(obj):
    """Take ``obj`` out of the cyclic garbage collector's lists, if it is in them. Only for
    an object that is in no reference cycle, nor will be while it stays out: a cycle
    through it would never be collected."""
    if gc.is_tracked(obj):
        _GC_UNTRACK(obj)


def gc_track(obj):
    """Put ``obj`` back in the cyclic garbage collector's lists, if it is a container that
    is not in them."""
    if _IS_GC(obj) and not gc.is_tracked(obj):
        _GC_TRACK(obj)
