"""n_jobs: None uses the cores this process may use, its share of them inside another parallel
job (joblib worker processes and threads, threadpoolctl limits), -1 every core; a joblib
context's n_jobs wins; and the estimators compose with GridSearchCV(n_jobs=2) and Pipeline."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from joblib import Parallel, cpu_count, delayed, parallel_backend, parallel_config
from sklearn.datasets import load_iris

from dmcsvm import MulticlassSVC, OneVsRestSVC
from dmcsvm.engine.executor import InProcessExecutor
from dmcsvm.estimators._engine import available_threads, make_executor, n_threads


def _usable_cores() -> int:
    """What the process may use: affinity (and joblib's cgroup reading), not the machine's."""
    return min(cpu_count(), len(os.sched_getaffinity(0)))


def test_none_means_the_usable_cores():
    if "OMP_NUM_THREADS" in os.environ:
        pytest.skip("OMP_NUM_THREADS is set for this run")
    assert n_threads(None) == available_threads() == _usable_cores()
    assert n_threads(1) == 1 and n_threads(3) == 3
    assert n_threads(-1) == cpu_count() and n_threads(-2) == max(1, cpu_count() - 1)
    ex, owned = make_executor(MulticlassSVC())
    assert isinstance(ex, InProcessExecutor) and ex.n_threads == _usable_cores() and owned == []


def test_joblib_context_sets_the_default():
    with parallel_config(n_jobs=3):
        assert n_threads(None) == 3
        assert n_threads(2) == 2  # an explicit value wins
    with parallel_backend("threading", n_jobs=2):
        assert n_threads(None) == 2
    assert n_threads(None) == available_threads()


def test_threadpool_limits_bound_the_default():
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        assert n_threads(None) == 1
        assert n_threads(2) == 2  # an explicit value is the user's choice


def _threads_in_worker(_):
    from dmcsvm.estimators._engine import n_threads

    return n_threads(None)


@pytest.mark.parametrize("backend", ["loky", "threading"])
def test_nested_in_joblib_workers_takes_its_share(backend):
    """GridSearchCV(n_jobs=k) runs its fits in joblib workers: each takes cores // k (loky
    processes: what joblib sets as OMP_NUM_THREADS) or one thread (threads), never all cores."""
    got = Parallel(n_jobs=2, backend=backend)(delayed(_threads_in_worker)(i) for i in range(2))
    share = max(1, _usable_cores() // 2) if backend == "loky" else 1
    assert got == [share, share]


def test_omp_num_threads_bounds_the_default_in_a_fresh_process():
    code = textwrap.dedent("""
        from dmcsvm.estimators._engine import n_threads
        print(n_threads(None))
    """)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert out.strip() == "1"


def test_a_default_fit_runs_its_rounds_on_every_usable_core(monkeypatch):
    """Measured, not assumed: the threads that ran a default fit's partition rounds."""
    import threading

    from dmcsvm.engine import partition as part_mod

    seen = set()
    real = part_mod.Partition.step

    def step(self, msg):
        seen.add(threading.get_ident())
        return real(self, msg)

    monkeypatch.setattr(part_mod.Partition, "step", step)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2 * InProcessExecutor.POOL_MIN_ROWS * max(1, _usable_cores()), 4))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0)
    # working sets of 500 rows: the partitions' rounds (a working set of every row runs its
    # rounds in the coordinator's block, where the partitions step only twice, and a thread
    # pool may then run both partitions on one thread)
    with pytest.warns(Warning):
        MulticlassSVC(max_iter=6, solver_options={"batch_size": 500}).fit(X, y)
    assert len(seen) == n_threads(None)


@pytest.mark.parametrize("bad", [0, 1.5, True, "2"])
def test_bad_n_jobs_is_refused(bad):
    with pytest.raises(ValueError, match="n_jobs"):
        n_threads(bad)


@pytest.mark.slow
def test_gridsearch_parallel_and_pipeline():
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = load_iris(return_X_y=True)
    grid = {"onevsrestsvc__C": [0.1, 10.0]}
    pipe = make_pipeline(StandardScaler(), OneVsRestSVC())
    seq = GridSearchCV(pipe, grid, cv=3).fit(X, y)
    par = GridSearchCV(pipe, grid, cv=3, n_jobs=2).fit(X, y)
    np.testing.assert_array_equal(
        seq.cv_results_["mean_test_score"], par.cv_results_["mean_test_score"]
    )
    assert par.best_params_ == seq.best_params_
    assert par.score(X, y) > 0.9


def test_docstrings_share_the_thread_policy():
    from dmcsvm import BinarySVC, OneVsOneSVC, ScatterSVC
    from dmcsvm.estimators._engine import THREAD_POLICY

    for cls in (MulticlassSVC, ScatterSVC, BinarySVC, OneVsRestSVC, OneVsOneSVC):
        assert THREAD_POLICY in cls.__doc__, cls.__name__
        assert "None`` uses the\n        cores this process may use" in cls.__doc__
    guide = open(os.path.join(os.path.dirname(__file__), "..", "docs", "user_guide.md")).read()
    assert "## Thread policy" in guide
