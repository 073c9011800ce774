"""``SocketState`` in use, for the transport loops: the compiled ``_socket_state``, or its
twin ``_socket_state_py`` where ``ZSCHED_PUREPYTHON=1`` (see ``fastpath``)."""
from .fastpath import COMPILED, missing_extension

NAMES = ("SocketState",)
__all__ = list(NAMES)

if COMPILED:
    try:
        from . import _socket_state as _implementation
    except ImportError as exc:  # pragma: no cover - depends on the build
        raise missing_extension() from exc
else:
    from . import _socket_state_py as _implementation
globals().update({name: getattr(_implementation, name) for name in NAMES})
