# cython: language_level=3
"""Compiled ``SocketState``; ``_socket_state_py.py`` is the twin it must agree with. It
reads ZMQ_EVENTS and ZMQ_RCVMORE with libzmq's own ``zmq_getsockopt``."""
from ._socket_state_py import ZMQ_EVENTS as _ZMQ_EVENTS, ZMQ_RCVMORE as _ZMQ_RCVMORE

ctypedef int (*GetSockOpt)(void *, int, void *, size_t *) noexcept nogil


def _find_zmq_getsockopt():
    """The address of libzmq's ``zmq_getsockopt`` as pyzmq loaded it, or 0."""
    import ctypes
    import os
    try:
        from zmq.backend.cython import _zmq
        # dlsym with the handle of pyzmq's extension searches the libzmq it was linked with
        library = ctypes.CDLL(_zmq.__file__, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        return ctypes.cast(library.zmq_getsockopt, ctypes.c_void_p).value or 0
    except (ImportError, OSError, AttributeError):
        return 0


cdef GetSockOpt zmq_getsockopt = <GetSockOpt><size_t>_find_zmq_getsockopt()
cdef int ZMQ_EVENTS = _ZMQ_EVENTS, ZMQ_RCVMORE = _ZMQ_RCVMORE


cdef class SocketState:
    """Read by libzmq's ``zmq_getsockopt`` through the socket's handle, where pyzmq's
    ``Socket.get`` makes an enum of the option at each call; through ``Socket.get`` where
    that function was not found, or the socket is closed (pyzmq raises), or the call fails."""
    cdef void *_handle
    cdef object _socket

    def __cinit__(self, socket):
        self._socket = socket
        self._handle = <void *><size_t>socket.underlying

    cdef int _get(self, int option) except? -1:
        cdef int value = 0
        cdef size_t size = sizeof(int)
        if (zmq_getsockopt == NULL or self._socket.closed
                or zmq_getsockopt(self._handle, option, &value, &size) != 0):
            return self._socket.get(option)
        return value

    cpdef int events(self) except? -1:
        return self._get(ZMQ_EVENTS)

    cpdef bint more(self) except? -1:
        return self._get(ZMQ_RCVMORE) != 0


SOCKET_OPTIONS_IN_C = zmq_getsockopt != NULL  # for the tests
