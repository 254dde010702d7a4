"""Compile the numba code most tests share, before the test processes start (``conftest``'s
``pytest_sessionstart``): ``python tests/numba_warmup.py GROUP`` fits tiny models so that the
on-disk cache holds their specializations.  On a fresh clone the cache is empty, and otherwise
both test workers and the cluster workers and CLI subprocesses of the first (slow) tests compile
the same code at the same time; two groups, one per core, take about 35 s there and about 3 s
when the cache is warm (the fits only load it)."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_iris


def group_a(X, y):
    from dmcsvm import MulticlassSVC
    MulticlassSVC(n_jobs=1).fit(X, y).predict(X[:4])
    MulticlassSVC(n_jobs=1).fit(X, y, sample_weight=np.arange(len(y)) % 3 + 1.0)
    MulticlassSVC(n_jobs=1).fit(sp.csr_matrix(X), y).predict(X[:4])


def group_b(X, y):
    from dmcsvm import BinarySVC, MulticlassSVC, MultiPrototypeSVC, ScatterSVC
    X32 = X.astype(np.float32)
    MulticlassSVC(n_jobs=1).fit(X32, y).predict(X32[:4])
    MulticlassSVC(n_jobs=1, kernel="linear").fit(X, y)
    for solver in ("sequential", "rounds"):
        MultiPrototypeSVC(n_prototypes=2, max_epochs=2, n_jobs=1, solver=solver,
                          random_state=0).fit(X, y)
    MultiPrototypeSVC(n_prototypes=2, max_epochs=2, n_jobs=1, kernel="rbf", gamma=0.5,
                      random_state=0).fit(X, y)
    ScatterSVC(n_jobs=1).fit(X, y).predict(X[:4])
    BinarySVC(n_jobs=1).fit(X, (y > 0).astype(int)).predict(X[:4])


GROUPS = {"a": group_a, "b": group_b}

if __name__ == "__main__":
    X, y = load_iris(return_X_y=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        GROUPS[sys.argv[1]](X, y)
