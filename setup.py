"""Build the compiled modules; everything else is declared in pyproject.toml."""
from Cython.Build import cythonize
from setuptools import Extension, setup

EXTENSIONS = ("_wire", "_fastpath", "_slot_table", "_runtime", "_socket_state", "_pipe_link",
              "_arena_cache", "_policies")  # as zsched.fastpath

setup(
    ext_modules=cythonize(
        [Extension(f"zsched.{name}", [f"zsched/{name}.pyx"]) for name in EXTENSIONS],
        compiler_directives={"language_level": "3", "boundscheck": False, "wraparound": False},
    )
)
