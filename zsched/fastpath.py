"""Which implementation runs: the compiled modules unless ``ZSCHED_PUREPYTHON=1`` selects
their pure-Python twins. ``COMPILED`` and ``IMPLEMENTATION`` say which.

Each compiled module has one chooser, which imports the same names from the compiled module
or from its twin by ``COMPILED``, in plain ``from ... import`` lines: ``wire``,
``scheduling`` (the fast path, ``_fastpath`` and ``_slot_table``), ``runtime``,
``socket_state``, ``pipe_link``, ``driver.arena_cache`` and ``policies``. Importing this
module fails with the install command where the compiled modules are missing."""
import importlib.util
import os

# The compiled modules, each beside its pure-Python twin (``<name>_py``) but _slot_table,
# whose twin is _fastpath_py. All sit at the top of the package, _arena_cache too: finding
# one here must not import the package its chooser lives in.
EXTENSIONS = ("_wire", "_fastpath", "_slot_table", "_runtime", "_socket_state",
              "_pipe_link", "_arena_cache", "_policies")

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

