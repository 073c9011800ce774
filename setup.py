"""Build the compiled modules; everything else is declared in pyproject.toml."""
from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [Extension("zsched._fastpath", ["zsched/_fastpath.pyx"]),
         Extension("zsched._pipe_link", ["zsched/_pipe_link.pyx"]),
         Extension("zsched._arena_cache", ["zsched/_arena_cache.pyx"])],
        compiler_directives={"language_level": "3", "boundscheck": False, "wraparound": False},
    )
)
