"""Which implementation runs: the compiled modules unless ``ZSCHED_PUREPYTHON=1`` selects
their pure-Python twins. ``COMPILED`` and ``IMPLEMENTATION`` say which; each part's module
(``wire``, ``scheduling``, ``runtime``, ``socket_state``) picks its own by ``COMPILED``, as
``pipe_link`` does. Importing this module fails with the install command where the
compiled modules are missing."""
import importlib
import importlib.util
import os

# The compiled modules, each beside its pure-Python twin (``<name>_py``) but _pipe_link's
# and _arena_cache's, whose fallbacks live in their callers.
EXTENSIONS = ("_wire", "_fastpath", "_slot_table", "_runtime", "_socket_state",
              "_pipe_link", "_arena_cache")

COMPILED = os.environ.get("ZSCHED_PUREPYTHON", "") in ("", "0")
IMPLEMENTATION = "compiled (Cython)" if COMPILED else "pure-Python reference (ZSCHED_PUREPYTHON is set)"


def missing_extension():
    """The ImportError for a checkout or an install without its compiled modules."""
    return ImportError(
        "zsched's compiled fast path is missing: install zsched with `pip install .` "
        "(in a checkout you work on: `pip install -e .`, which builds it in place), "
        "or set ZSCHED_PUREPYTHON=1 to use the pure-Python reference"
    )


if COMPILED and not all(importlib.util.find_spec(f"{__package__}.{name}") for name in EXTENSIONS):
    raise missing_extension()


def chosen(names, *compiled):
    """``names`` from the ``compiled`` modules, or from the twin of the first of them
    (``<name>_py``) where ``ZSCHED_PUREPYTHON=1``: what a part's selector module exports."""
    modules = compiled if COMPILED else (compiled[0] + "_py",)
    try:
        loaded = [importlib.import_module(f"{__package__}.{name}") for name in modules]
    except ImportError as exc:
        if not COMPILED:
            raise
        raise missing_extension() from exc
    return {name: getattr(module, name) for module in loaded for name in names
            if hasattr(module, name)}
