"""The base of the wire's message types: frozen records whose methods are written once.

A ``dataclass(frozen=True)`` compiles six methods for each class it makes. For the
protocol's forty-odd message types that is most of the time a driver or an executor
takes to import zsched. ``record`` makes each a dataclass (``dataclasses.fields`` and
``replace`` work on it) without generated methods; ``Message`` holds the methods, alike
for all: no assignment, equality and hash of the fields in order, the dataclass's repr.
Only ``__init__`` is a type's own, as fast as a dataclass's: compiled when the first
message of the type is made, so a process compiles those of the types it uses.
"""
from dataclasses import MISSING, FrozenInstanceError, dataclass, fields

_set = object.__setattr__


class Message:
    """Base of every message: a frozen record whose fields are checked on decode."""

    # set on each message type: TYPE, its number; CHECKS, a check per field; FIELDS, the
    # names of its fields, in order

    def __init__(self, *values, **named):
        # the first message of its type: compile the type's own, which later ones call
        _compile_init(type(self))(self, *values, **named)

    def __setattr__(self, name, value):
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name):
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return self._values() == other._values()
        return NotImplemented

    def __hash__(self):
        return hash(self._values())

    def __getstate__(self):  # pickled as the dataclass would be
        return list(self._values())

    def __setstate__(self, state):
        for name, value in zip(self.FIELDS, state):
            _set(self, name, value)

    def __repr__(self):
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.FIELDS)
        return f"{type(self).__qualname__}({shown})"

    def _values(self):
        return tuple(getattr(self, name) for name in self.FIELDS)


def record(cls):
    """``cls`` (a subclass of ``Message`` with annotated fields) as a slotted dataclass
    whose methods are ``Message``'s."""
    if not cls.__doc__:  # else dataclass reads the signature of the shared __init__
        cls.__doc__ = f"{cls.__name__}({', '.join(cls.__dict__.get('__annotations__', ()))})"
    cls = dataclass(init=False, repr=False, eq=False, slots=True)(cls)
    cls.FIELDS = tuple(f.name for f in fields(cls))
    return cls


def _compile_init(cls):
    """``cls.__init__`` compiled, as a dataclass's: the fields in order, by position or by
    name, with their defaults; set on ``cls`` and returned."""
    names = cls.FIELDS
    defaults = {f.name: f.default for f in fields(cls) if f.default is not MISSING}
    params = ", ".join(f"{name}=_defaults[{name!r}]" if name in defaults else name for name in names)
    body = "".join(f"\n    _set(self, {name!r}, {name})" for name in names) or "\n    pass"
    namespace = {}
    exec(f"def __init__(self, {params}):{body}", {"_set": _set, "_defaults": defaults}, namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init
    return init
