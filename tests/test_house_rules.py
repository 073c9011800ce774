"""The house rules of zsched's source: rooms small enough to read in a sitting.

A Python module holds at most 600 lines, a compiled one at most 900; a class at most 400,
a function at most 60. A part that grows past them is a part to split."""
import ast
import os

import pytest

from conftest import REPO

pytestmark = pytest.mark.unit

PACKAGE = os.path.join(REPO, "zsched")
LIMITS = {"module": 600, "compiled module": 900, "class": 400, "function": 60}


def _sources(suffix):
    for folder, _, names in os.walk(PACKAGE):
        for name in sorted(names):
            if name.endswith(suffix):
                yield os.path.join(folder, name)


def _too_long():
    found = []
    for path in _sources(".py"):
        with open(path) as f:
            text = f.read()
        where = os.path.relpath(path, REPO)
        if text.count("\n") > LIMITS["module"]:
            found.append(f"{where}: module of {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            kind = ("class" if isinstance(node, ast.ClassDef) else
                    "function" if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None)
            if kind and node.end_lineno - node.lineno + 1 > LIMITS[kind]:
                found.append(f"{where}:{node.lineno}: {kind} {node.name} of "
                             f"{node.end_lineno - node.lineno + 1} lines")
    for path in _sources(".pyx"):
        with open(path) as f:
            lines = f.read().count("\n")
        if lines > LIMITS["compiled module"]:
            found.append(f"{os.path.relpath(path, REPO)}: compiled module of {lines} lines")
    return found


def test_every_module_class_and_function_is_within_its_limit():
    assert not _too_long(), "\n".join(_too_long())
