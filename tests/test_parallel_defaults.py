"""n_jobs with scikit-learn's meaning (issue 17): None is one thread unless a joblib context sets
n_jobs, -1 every core; and the estimators compose with GridSearchCV(n_jobs=2) and Pipeline."""

from __future__ import annotations

import os

import numpy as np
import pytest
from joblib import parallel_backend, parallel_config
from sklearn.datasets import load_iris

from dmcsvm import MulticlassSVC, OneVsRestSVC
from dmcsvm.engine.executor import InProcessExecutor
from dmcsvm.estimators._engine import make_executor, n_threads


def test_none_means_one_thread():
    assert n_threads(None) == 1
    assert n_threads(1) == 1 and n_threads(3) == 3
    from joblib import cpu_count
    assert n_threads(-1) == cpu_count() and n_threads(-2) == max(1, cpu_count() - 1)
    ex, owned = make_executor(MulticlassSVC())
    assert isinstance(ex, InProcessExecutor) and ex.n_threads == 1 and owned == []


def test_joblib_context_sets_the_default():
    with parallel_config(n_jobs=3):
        assert n_threads(None) == 3
        assert n_threads(2) == 2                  # an explicit value wins
    with parallel_backend("threading", n_jobs=2):
        assert n_threads(None) == 2
    assert n_threads(None) == 1


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
    np.testing.assert_array_equal(seq.cv_results_["mean_test_score"],
                                  par.cv_results_["mean_test_score"])
    assert par.best_params_ == seq.best_params_
    assert par.score(X, y) > 0.9


def test_docstrings_share_the_thread_policy():
    from dmcsvm import BinarySVC, OneVsOneSVC, ScatterSVC
    from dmcsvm.estimators._engine import THREAD_POLICY
    for cls in (MulticlassSVC, ScatterSVC, BinarySVC, OneVsRestSVC, OneVsOneSVC):
        assert THREAD_POLICY in cls.__doc__, cls.__name__
        assert "None uses every core" not in cls.__doc__
    readme = open(os.path.join(os.path.dirname(__file__), "..", "README.md")).read()
    assert "Thread policy" in readme
