"""joblib's backend ``zsched`` (``zsched/joblib.py``) with real joblib and scikit-learn,
on a real cluster: the same scores as without it, many calls in order, an exception that
cancels the rest, a nested ``Parallel``, and the clients it finds."""
import os
import subprocess
import sys
import textwrap
import time
import traceback

import pytest

joblib = pytest.importorskip("joblib")
pytest.importorskip("sklearn")

import zsched  # noqa: E402
import zsched.joblib  # noqa: E402,F401  registers the backend
from conftest import REPO, wait_for  # noqa: E402

WAIT = 60


def double(x):
    return 2 * x


def test_grid_search_scores_the_same_as_without_a_cluster(client):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import GridSearchCV
    from sklearn.svm import SVC

    X, y = load_digits(return_X_y=True)
    grid = {"C": [1, 10], "gamma": [0.001, 0.0001]}
    alone = GridSearchCV(SVC(), grid, cv=3, n_jobs=1).fit(X, y)
    with joblib.parallel_config(backend="zsched"):
        spread = GridSearchCV(SVC(), grid, cv=3, n_jobs=-1).fit(X, y)
    assert client.status()["tasks"]["finished"] > 0  # it ran on the cluster
    for key in ("params", "mean_test_score", "std_test_score", "rank_test_score",
                "split0_test_score", "split1_test_score", "split2_test_score"):
        assert list(spread.cv_results_[key]) == list(alone.cv_results_[key]), key
    assert spread.best_params_ == alone.best_params_


def test_a_hundred_thousand_calls_come_back_right_and_in_order(client):
    with joblib.parallel_config(backend="zsched"):
        assert joblib.effective_n_jobs(-1) == 2  # the cluster's cores
        results = joblib.Parallel(n_jobs=-1)(joblib.delayed(double)(i) for i in range(10**5))
    assert results == [2 * i for i in range(10**5)]
    # as a generator too, which joblib fills as results come
    with joblib.parallel_config(backend="zsched"):
        out = joblib.Parallel(n_jobs=-1, return_as="generator")(
            joblib.delayed(double)(i) for i in range(1000))
        assert list(out) == [2 * i for i in range(1000)]


def sleep_a_while(i):
    time.sleep(1.0)
    return i


@pytest.mark.filterwarnings("ignore:.*have been cancelled:UserWarning")  # joblib's, on the close
def test_results_as_they_come_and_a_generator_closed_early(client):
    with joblib.parallel_config(backend="zsched"):
        out = joblib.Parallel(n_jobs=-1, return_as="generator_unordered")(
            joblib.delayed(double)(i) for i in range(1000))
        assert sorted(out) == [2 * i for i in range(1000)]
        # 40 calls of 1 s on two cores: 20 s, were the rest not cancelled at the close
        out = joblib.Parallel(n_jobs=-1, batch_size=1, return_as="generator")(
            joblib.delayed(sleep_a_while)(i) for i in range(40))
        assert next(out) == 0
        out.close()
    wait_for(lambda: client.status()["tasks"]["running"] == 0
             and client.status()["tasks"]["queued"] == 0,
             timeout=10, message="the rest to be cancelled")


def slow_or_failing(i, marks):
    if i == 5:
        raise KeyError(f"call {i} failed")
    time.sleep(0.05)
    with open(os.path.join(marks, str(i)), "w"):
        pass
    return i


def test_an_exception_raises_in_the_caller_and_cancels_the_rest(client, tmp_path):
    n = 400  # 10 s of calls on two cores, were they not cancelled
    with joblib.parallel_config(backend="zsched"):
        with pytest.raises(KeyError, match="call 5 failed") as raised:
            joblib.Parallel(n_jobs=-1, batch_size=1)(
                joblib.delayed(slow_or_failing)(i, str(tmp_path)) for i in range(n))
    text = "".join(traceback.format_exception(raised.value))
    assert "slow_or_failing" in text  # the task's own frame
    wait_for(lambda: client.status()["tasks"]["running"] == 0
             and client.status()["tasks"]["queued"] == 0,
             timeout=WAIT, message="the rest to be cancelled")
    ran = len(os.listdir(tmp_path))
    assert ran < n / 2
    # the backend stays usable
    with joblib.parallel_config(backend="zsched"):
        assert joblib.Parallel()(joblib.delayed(double)(i) for i in range(10)) == \
            [2 * i for i in range(10)]


def inner_sum(i):
    inner = joblib.Parallel(n_jobs=2)(joblib.delayed(double)(j) for j in range(20))
    return i + sum(inner)


def test_a_parallel_inside_a_task_does_not_deadlock(client):
    with joblib.parallel_config(backend="zsched"):
        results = joblib.Parallel(n_jobs=-1, batch_size=1)(
            joblib.delayed(inner_sum)(i) for i in range(8))
    assert results == [i + 380 for i in range(8)]


def test_the_backend_runs_on_the_client_or_the_address_it_is_given(cluster, client):
    with cluster.client() as other:
        before = other.status()["clients"]
        with joblib.parallel_config(backend="zsched", client=other):
            assert joblib.Parallel()(joblib.delayed(double)(i) for i in range(5)) == \
                [0, 2, 4, 6, 8]
        with joblib.parallel_config(backend="zsched", address=cluster.address,
                                    secret_file=cluster.secret_file):
            assert joblib.Parallel()(joblib.delayed(os.getpid)() for _ in range(4))
        assert len(other.status()["clients"]) >= len(before) + 1  # a client of its own
    with pytest.raises(ValueError, match="not both"):
        with joblib.parallel_config(backend="zsched", client=client, address=cluster.address):
            joblib.Parallel()(joblib.delayed(double)(1) for _ in range(2))


SCRIPT = textwrap.dedent("""
    import joblib, os, zsched, zsched.joblib

    def where(i):
        return os.getppid()

    with joblib.parallel_config(backend="zsched"):
        parents = joblib.Parallel()(joblib.delayed(where)(i) for i in range(20))
    print(len(parents), all(p == os.getpid() for p in parents))
""")


def test_with_no_client_it_starts_an_embedded_cluster_and_closes_it_at_exit(tmp_path):
    script = tmp_path / "embedded.py"
    script.write_text(SCRIPT)
    out = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True,
                         text=True, timeout=WAIT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["20", "True"]  # executors of a driver in the script


def column_sums(array, column):
    return float(array[:, column].sum())


def test_large_arrays_reach_the_calls_whole(client):
    import numpy as np
    whole = np.arange(200_000, dtype=np.float64).reshape(1000, 200)  # 1.6 MB, contiguous
    strided = whole[:, ::2]  # not contiguous: pickled in band, a large pickle
    with joblib.parallel_config(backend="zsched"):
        for array in (whole, strided):
            sums = joblib.Parallel(batch_size=1)(joblib.delayed(column_sums)(array, c)
                                                 for c in range(5))
            assert sums == [float(array[:, c].sum()) for c in range(5)]
