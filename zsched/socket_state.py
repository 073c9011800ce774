"""``SocketState`` in use, for the transport loops: the compiled ``_socket_state``, or its
twin ``_socket_state_py`` where ``ZSCHED_PUREPYTHON=1`` (see ``fastpath``)."""
from .fastpath import chosen

NAMES = ("SocketState",)
__all__ = list(NAMES)

globals().update(chosen(NAMES, "_socket_state"))
