"""How zsched is entered: a package's public names, each imported from its module on first
use, and what a command says when zsched cannot start."""
import importlib
import os
import sys


def lazy_exports(package, sources):
    """``(__getattr__, __dir__)`` for ``package``, whose name ``n`` lives in its module
    ``sources[n]``: importing the package imports none of them."""
    def __getattr__(name):
        module = sources.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        setattr(sys.modules[package], name, value)  # later lookups find it directly
        return value

    def __dir__():
        return sorted(sources)

    return __getattr__, __dir__


def cannot_start(error):
    """The message of a command that could not import what it runs (``error``), with the
    install command when zsched runs from a checkout."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    hint = ""
    if os.path.isfile(os.path.join(root, "pyproject.toml")):
        hint = f"\nInstall it first: python3 -m pip install {root}"
    return f"zsched cannot start: {error}{hint}"
