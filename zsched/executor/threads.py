"""The native thread pools of an executor's tasks: as wide as its cores.

OpenMP, OpenBLAS and MKL start one thread per core of the host by default. Two
executors of one core each on a host of two cores would then run four busy threads,
and each task would wait on the other's. Dask's and Ray's workers set the same limits.
"""
import os
import sys

# numba is left out: it refuses a NUMBA_NUM_THREADS above the host's cores
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def limit_threads(cores):
    """Set each pool's variable to ``cores`` unless the user set it. A pool already
    started (an executor forked from a process that loaded numpy) is resized through
    threadpoolctl, when it is installed."""
    unset = [name for name in THREAD_VARIABLES if name not in os.environ]
    for name in unset:
        os.environ[name] = str(cores)
    if not unset or "numpy" not in sys.modules:
        return
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    threadpool_limits(limits=cores)
