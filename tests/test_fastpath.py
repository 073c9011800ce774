"""The choice of implementation (``zsched/fastpath.py``): each compiled module has one chooser,
whose two branches import the same names, each defined by the compiled module and by its
twin, so the two cannot drift apart unseen whichever of them runs."""
import ast
import importlib
import os

import pytest

from conftest import REPO
from zsched import fastpath

pytestmark = pytest.mark.unit

PACKAGE = os.path.join(REPO, "zsched")
# chooser -> the compiled modules its first branch imports from, and their twin
CHOOSERS = {
    "zsched.wire": (("_wire",), "_wire_py"),
    "zsched.scheduling": (("_fastpath", "_slot_table"), "_fastpath_py"),
    "zsched.runtime": (("_runtime",), "_runtime_py"),
    "zsched.socket_state": (("_socket_state",), "_socket_state_py"),
    "zsched.pipe_link": (("_pipe_link",), "_pipe_link_py"),
    "zsched.driver.arena_cache": (("_arena_cache",), "_arena_cache_py"),
    "zsched.policies": (("_policies",), "_policies_py"),
}


def _choice(module_name):
    """The chooser's ``if COMPILED:`` statement, parsed from its source."""
    path = os.path.join(REPO, *module_name.split(".")) + ".py"
    with open(path) as f:
        tree = ast.parse(f.read())
    choices = [node for node in tree.body if isinstance(node, ast.If)
               and isinstance(node.test, ast.Name) and node.test.id == "COMPILED"]
    assert len(choices) == 1, f"{module_name}: one `if COMPILED:` at its top level"
    return choices[0]


def _imports(branch):
    """{module: [names]} of a branch made of ``from .x import ...`` lines alone."""
    found = {}
    for node in branch:
        assert isinstance(node, ast.ImportFrom) and node.level > 0, ast.dump(node)
        assert all(alias.asname is None for alias in node.names), "no renaming: one name each"
        found.setdefault(node.module, []).extend(alias.name for alias in node.names)
    return found


def _names(imports):
    names = [name for listed in imports.values() for name in listed]
    assert len(names) == len(set(names)), f"a name imported twice: {sorted(names)}"
    return set(names)


@pytest.mark.parametrize("chooser", CHOOSERS)
def test_both_branches_import_the_same_names_from_the_compiled_module_and_its_twin(chooser):
    compiled_modules, twin = CHOOSERS[chooser]
    choice = _choice(chooser)
    compiled, reference = _imports(choice.body), _imports(choice.orelse)
    assert set(compiled) == set(compiled_modules) and set(reference) == {twin}
    assert _names(compiled) == _names(reference)
    twin_module = importlib.import_module(f"zsched.{twin}")
    for module_name, names in compiled.items():
        module = importlib.import_module(f"zsched.{module_name}")
        for name in names:
            assert hasattr(module, name), f"zsched.{module_name} has no {name}"
            assert hasattr(twin_module, name), f"zsched.{twin} has no {name}"


@pytest.mark.parametrize("chooser", CHOOSERS)
def test_the_chooser_exports_what_the_rule_selects(chooser):
    compiled_modules, twin = CHOOSERS[chooser]
    module = importlib.import_module(chooser)
    sources = compiled_modules if fastpath.COMPILED else (twin,)
    for name in _names(_imports(_choice(chooser).body)):
        chosen = getattr(module, name)
        assert any(getattr(importlib.import_module(f"zsched.{source}"), name, None) is chosen
                   for source in sources), f"{chooser}.{name}"


def test_every_compiled_module_has_one_chooser_and_a_twin():
    chosen = [name for compiled, _ in CHOOSERS.values() for name in compiled]
    assert sorted(chosen) == sorted(fastpath.EXTENSIONS)
    for _, twin in CHOOSERS.values():
        assert os.path.exists(os.path.join(PACKAGE, twin + ".py"))


def test_no_other_module_chooses_for_itself():
    # a module that imports a compiled module is its chooser, or another compiled module
    # (cimports and the shared constants of a twin aside)
    compiled = set(fastpath.EXTENSIONS)
    choosers = {os.path.join(REPO, *name.split(".")) + ".py" for name in CHOOSERS}
    for folder, _, files in os.walk(PACKAGE):
        for file in files:
            path = os.path.join(folder, file)
            if not file.endswith(".py") or path in choosers:
                continue
            with open(path) as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level > 0:
                    assert node.module not in compiled, f"{path} imports {node.module}"

