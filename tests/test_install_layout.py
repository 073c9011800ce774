"""Which zsched runs: an installed, compiled one wins over a checkout's uncompiled sources,
and a checkout with nothing installed says how to install it."""
import importlib.machinery
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

PACKAGE = os.path.join(REPO, "zsched")
COMPILED_HERE = any(os.path.exists(os.path.join(PACKAGE, "_wire" + suffix))
                    for suffix in importlib.machinery.EXTENSION_SUFFIXES)
PROBE = "import zsched.fastpath as f, zsched.driver; print(f.__file__, f.COMPILED)"


def _copy_sources(destination, compiled):
    """The package's sources (and its compiled modules if ``compiled``) under ``destination``."""
    skip = ["__pycache__", "*.c"] + ([] if compiled else ["*.so", "*.pyd"])
    shutil.copytree(PACKAGE, os.path.join(destination, "zsched"), ignore=shutil.ignore_patterns(*skip))
    return destination


def _run(args, cwd, **env):
    environ = {k: v for k, v in os.environ.items() if k not in ("ZSCHED_PUREPYTHON", "PYTHONPATH")}
    environ.update(env)
    return subprocess.run(args, cwd=cwd, env=environ, capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(not COMPILED_HERE, reason="no compiled modules in this checkout to install")
def test_python_m_in_a_checkout_runs_the_installed_compiled_package(tmp_path):
    checkout = _copy_sources(tmp_path / "checkout", compiled=False)
    site = _copy_sources(tmp_path / "site", compiled=True)
    done = _run([sys.executable, "-c", PROBE], cwd=checkout, PYTHONPATH=str(site))
    assert done.returncode == 0, done.stderr
    path, compiled = done.stdout.split()
    assert path.startswith(str(site)) and compiled == "True"


def test_an_uncompiled_checkout_names_the_install_command(tmp_path):
    checkout = _copy_sources(tmp_path / "checkout", compiled=False)
    # -S: no site-packages, so no installed zsched (an editable install's finder included)
    done = _run([sys.executable, "-S", "-c", "import zsched.fastpath"], cwd=checkout)
    assert done.returncode != 0
    assert "pip install ." in done.stderr and "ZSCHED_PUREPYTHON=1" in done.stderr



@pytest.mark.skipif(not COMPILED_HERE, reason="no compiled modules in this checkout")
def test_a_checkout_missing_one_compiled_module_names_the_install_command(tmp_path):
    # as after a compiled module is renamed and the checkout not rebuilt
    checkout = _copy_sources(tmp_path / "checkout", compiled=True)
    for name in os.listdir(checkout / "zsched"):
        if name.startswith("_fastpath.") and name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
            os.remove(checkout / "zsched" / name)
    done = _run([sys.executable, "-S", "-c", "import zsched.scheduling"], cwd=checkout)
    assert done.returncode != 0
    assert "pip install ." in done.stderr and "ZSCHED_PUREPYTHON=1" in done.stderr

def test_the_pure_python_reference_runs_from_an_uncompiled_checkout(tmp_path):
    checkout = _copy_sources(tmp_path / "checkout", compiled=False)
    done = _run([sys.executable, "-c", PROBE], cwd=checkout, ZSCHED_PUREPYTHON="1")
    assert done.returncode == 0, done.stderr
    path, compiled = done.stdout.split()
    assert path.startswith(str(checkout)) and compiled == "False"


@pytest.mark.parametrize("tool", ["driver", "executor"])
def test_bin_scripts_without_an_installed_zsched_say_how_to_install(tmp_path, tool):
    checkout = _copy_sources(tmp_path / "checkout", compiled=False)
    shutil.copytree(os.path.join(REPO, "bin"), checkout / "bin")
    # -S: no site-packages, so neither zsched nor its dependencies are installed
    done = _run([sys.executable, "-S", str(checkout / "bin" / tool), "--help"], cwd=tmp_path)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert f"pip install {checkout}" in done.stderr


@pytest.mark.parametrize("tool", ["driver", "executor"])
def test_bin_scripts_run_the_installed_zsched_from_any_directory(tmp_path, tool):
    done = _run([sys.executable, os.path.join(REPO, "bin", tool), "--help"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"zsched-{tool}" in done.stdout


@pytest.mark.parametrize("tool", ["driver", "executor"])
@pytest.mark.parametrize("isolated", [False, True], ids=["with-dependencies", "nothing-installed"])
def test_python_m_in_an_uncompiled_checkout_says_how_to_install(tmp_path, tool, isolated):
    checkout = _copy_sources(tmp_path / "checkout", compiled=False)
    for name in ("pyproject.toml", "setup.py"):
        shutil.copy(os.path.join(REPO, name), checkout)
    # -S: no site-packages, so no installed zsched (nor, when isolated, its dependencies)
    command = ([sys.executable, "-S", "-m", f"zsched.{tool}", "--help"] if isolated else
               [sys.executable, "-S", "-c", _WITH_DEPENDENCIES, f"zsched.{tool}"])
    done = _run(command, cwd=checkout)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("zsched cannot start: ")
    assert f"python3 -m pip install {checkout}" in done.stderr


# ``python -m`` with the dependencies importable but no installed zsched: site-packages
# added after the checkout, with any zsched found there hidden
_WITH_DEPENDENCIES = """
import runpy, site, sys
sys.path[:0] = [''] ; site.main()
sys.path = [p for p in sys.path if 'zsched' not in p.lower() or p == '']
sys.meta_path = [f for f in sys.meta_path if 'zsched' not in repr(f).lower()]
sys.argv = [sys.argv[1], '--help']
runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)
"""
