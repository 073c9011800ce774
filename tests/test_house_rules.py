"""The house rules of zsched's source: rooms small enough to read in a sitting.

A Python module holds at most 600 lines, a compiled one at most 900; a class at most 400,
a function at most 60. A part that grows past them is a part to split."""
import ast
import os
import re

import pytest

from conftest import REPO

pytestmark = pytest.mark.unit

PACKAGE = os.path.join(REPO, "zsched")
LIMITS = {"module": 600, "compiled module": 900, "class": 400, "function": 60}

# Where a class or a function of a .pyx or .pxd file begins: its indentation, then
# ``class C``, ``cdef class C``, or ``def``/``cpdef``/``cdef`` with a return type and
# ``inline`` if any, and the function's name before its parenthesis (a cdef with an = before
# any parenthesis declares a variable).
COMPILED_CLASS = re.compile(r"( *)(?:cdef +(?:public +)?)?class +(\w+)")
COMPILED_FUNCTION = re.compile(r"( *)(?:def|cpdef|cdef) +[^=(]*?\b(\w+) *\(")


def _sources(*suffixes):
    for folder, _, names in os.walk(PACKAGE):
        for name in sorted(names):
            if name.endswith(suffixes):
                yield os.path.join(folder, name)


def _python_parts(text):
    """(line, kind, name, lines) of each class and function of a Python module."""
    for node in ast.walk(ast.parse(text)):
        kind = ("class" if isinstance(node, ast.ClassDef) else
                "function" if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None)
        if kind:
            yield node.lineno, kind, node.name, node.end_lineno - node.lineno + 1


def _indentation(line):
    return len(line) - len(line.lstrip(" "))


def _is_code(line):
    return line.strip() != "" and not line.lstrip().startswith("#")


def _compiled_parts(text):
    """(line, kind, name, lines) of each class and function of a .pyx or .pxd file, by
    indentation: a part ends at its last line of code before the next line of code
    indented no deeper than its first line."""
    lines = text.splitlines()
    for start, line in enumerate(lines):
        match = COMPILED_CLASS.match(line) or COMPILED_FUNCTION.match(line)
        if not match:
            continue
        kind = "class" if match.re is COMPILED_CLASS else "function"
        end = start
        for i in range(start + 1, len(lines)):
            if _is_code(lines[i]):
                if _indentation(lines[i]) <= len(match.group(1)):
                    break
                end = i
        yield start + 1, kind, match.group(2), end - start + 1


def _too_long():
    found = []
    for path in _sources(".py", ".pyx", ".pxd"):
        with open(path) as f:
            text = f.read()
        where = os.path.relpath(path, REPO)
        compiled = not path.endswith(".py")
        module = "compiled module" if compiled else "module"
        if not path.endswith(".pxd") and text.count("\n") > LIMITS[module]:
            found.append(f"{where}: {module} of {text.count(chr(10))} lines")
        for line, kind, name, length in (_compiled_parts if compiled else _python_parts)(text):
            if length > LIMITS[kind]:
                found.append(f"{where}:{line}: {kind} {name} of {length} lines")
    return found


def test_every_module_class_and_function_is_within_its_limit():
    assert not _too_long(), "\n".join(_too_long())
