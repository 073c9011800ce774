# cython: language_level=3
# The runtime helpers, for a compiled module that cimports them (a call from C, not through
# Python); _runtime_py.py is their twin.

cpdef void gc_untrack(object obj) noexcept
cpdef void gc_track(object obj) noexcept
