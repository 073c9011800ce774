"""The chooser of ``SocketState``, for the transport loops: the compiled ``_socket_state``,
or its twin ``_socket_state_py`` where ``ZSCHED_PUREPYTHON=1`` (the rule is
``fastpath``'s). Both branches import the same names, those of ``__all__``."""
from .fastpath import COMPILED

if COMPILED:
    from ._socket_state import SocketState
else:
    from ._socket_state_py import SocketState

__all__ = ["SocketState"]
