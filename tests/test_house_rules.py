"""The house rules of zsched's source and its benchmarks: rooms small enough to read in a
sitting.

A Python module holds at most 600 lines, a compiled one at most 900; a class at most 400,
a function at most 60. A part that grows past them is a part to split. The scripts of
``bench/`` and their helper modules are held to the same limits."""
import ast
import os
import re

import pytest

from conftest import REPO

pytestmark = pytest.mark.unit

PACKAGE = os.path.join(REPO, "zsched")
BENCH = os.path.join(REPO, "bench")
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


def _bench_sources():
    """The benchmark scripts and their helper modules (``bench/*.py``)."""
    for name in sorted(os.listdir(BENCH)):
        if name.endswith(".py"):
            yield os.path.join(BENCH, name)


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


def _too_long(paths):
    found = []
    for path in paths:
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
    found = _too_long(_sources(".py", ".pyx", ".pxd"))
    assert not found, "\n".join(found)


def test_every_benchmark_module_class_and_function_is_within_its_limit():
    paths = list(_bench_sources())
    assert paths, f"no benchmark found in {BENCH}"
    found = _too_long(paths)
    assert not found, "\n".join(found)


# The wire is the bottom layer: of zsched it imports errors, task states, the chooser of
# implementations and its own parts, nothing else (import-linter forbids by name; this allows).
WIRE = ("protocol.py", "message_base.py", "field_checks.py", "msg_types.py", "data_frames.py", "wire.py",
        "_wire_py.py", "_wire.pyx", "_wire.pxd")
WIRE_MAY_IMPORT = {"zsched.errors", "zsched.task_state", "zsched.fastpath", "zsched.wire", "zsched.field_checks",
                   "zsched.msg_types", "zsched.data_frames", "zsched._wire_py", "zsched._wire",
                   "zsched.message_base"}
ZSCHED_IMPORT = re.compile(r"^\s*(?:from|c?import)\s+(\.+\w*|zsched[\w.]*)", re.MULTILINE)


def _zsched_imports(name, text):
    """The zsched modules that module ``name`` (a file of the package) imports."""
    found = set()
    for target in ZSCHED_IMPORT.findall(text):
        if target.startswith("."):
            target = "zsched." + target.lstrip(".") if target.strip(".") else "zsched"
        found.add(target)
    return found - {"zsched." + name.split(".")[0]}


def test_the_wire_imports_nothing_of_zsched_but_errors_task_states_and_itself():
    found = {}
    for name in WIRE:
        with open(os.path.join(PACKAGE, name)) as f:
            found[name] = sorted(_zsched_imports(name, f.read()) - WIRE_MAY_IMPORT)
    assert not any(found.values()), found
