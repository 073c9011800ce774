# cython: language_level=3
"""Compiled runtime helpers; ``_runtime_py.py`` is the twin it must agree with."""


cdef extern from "Python.h":
    void PyObject_GC_UnTrack(object)
    void PyObject_GC_Track(object)
    int PyObject_GC_IsTracked(object)
    int PyObject_IS_GC(object)


cpdef void gc_untrack(object obj) noexcept:
    if PyObject_GC_IsTracked(obj):
        PyObject_GC_UnTrack(obj)


cpdef void gc_track(object obj) noexcept:
    if PyObject_IS_GC(obj) and not PyObject_GC_IsTracked(obj):
        PyObject_GC_Track(obj)
