"""An executor's native thread pools are as wide as its cores (``zsched/executor/threads.py``),
unless the user set their variables: tasks of executors that share a host do not
oversubscribe it."""
import os

import pytest

import zsched

WAIT = 60


def pools():
    """In the task: the variables, and the BLAS pools' widths when threadpoolctl is there."""
    import numpy  # noqa: F401  loads its BLAS
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        widths = None
    else:
        widths = sorted({pool["num_threads"] for pool in threadpool_info()
                         if pool["user_api"] == "blas"})
    return {"omp": os.environ.get("OMP_NUM_THREADS"),
            "openblas": os.environ.get("OPENBLAS_NUM_THREADS"), "blas": widths}


@pytest.mark.parametrize("cores", [1, 2])
def test_the_pools_of_an_executor_are_as_wide_as_its_cores(monkeypatch, cores):
    pytest.importorskip("numpy")
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    with zsched.LocalCluster(n_executors=1, cores_per_executor=cores) as cluster, \
            cluster.client() as client:
        seen = client.submit(pools).result(WAIT)
    assert seen["omp"] == seen["openblas"] == str(cores)
    if seen["blas"]:
        assert seen["blas"] == [cores]


def test_a_variable_the_user_set_stays(monkeypatch):
    pytest.importorskip("numpy")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    with zsched.LocalCluster(n_executors=1, cores_per_executor=1) as cluster, \
            cluster.client() as client:
        seen = client.submit(pools).result(WAIT)
    assert seen["omp"] == "3" and seen["openblas"] == "1"
