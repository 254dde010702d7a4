"""float32 kernel values, the default (``kernel_dtype='float32'``, as LIBSVM's float kernel
cache): what they may and may not change.

* The solve still reaches the exact (float64) QP optimum, to the accuracy of float32 values:
  kernel values rounded at 6e-8 move the optimum by about 1e-6 relative.  The QP-oracle tests
  of the solver's own arithmetic (tests/test_weights.py, test_binary_smo.py, ...) run with
  ``kernel_dtype='float64'`` and keep their 1e-6 tolerances.
* Predictions on real data: the same accuracy, and (nearly) the same predictions, as float64.
* ``support_vectors_`` are the rows as given (float64 in, float64 out), and float64 input is
  not changed in place.
"""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import scipy.sparse as sp
from data_dir import DATA
from oracles import make_blobs_problem
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from dmcsvm import BinarySVC, MulticlassSVC, OneVsOneSVC
from dmcsvm.kernels import KernelSpec, kernel_reference

GAMMA = 0.4


def test_default_float32_reaches_the_float64_cs_optimum(cs):
    X, y = make_blobs_problem(seed=3, n=60, d=4, m=3, spread=1.5)
    K = kernel_reference(KernelSpec("rbf", GAMMA), X, X)
    val, _ = cs.cs_dual_qp(K, y, 3, 2.0)
    est = MulticlassSVC(C=2.0, gamma=GAMMA, tol=1e-7).fit(X, y)
    assert est.kernel_dtype == "float32"
    B = np.zeros((60, 3))
    B[est.support_] = est.dual_coef_.T
    cs.check_feasible(B, y, 2.0)
    # the fitted coefficients' dual in float64 arithmetic: within float32's reach of the optimum
    assert cs.dual_value(B, K, y) == pytest.approx(val, rel=1e-5)
    assert cs.dual_value(B, K, y) <= val * (1 + 1e-9)
    # and float64 kernel values reach it to the oracle tests' 1e-6
    est64 = MulticlassSVC(C=2.0, gamma=GAMMA, tol=1e-7, kernel_dtype="float64").fit(X, y)
    B64 = np.zeros((60, 3))
    B64[est64.support_] = est64.dual_coef_.T
    assert cs.dual_value(B64, K, y) == pytest.approx(val, rel=1e-6)


def test_default_float32_reaches_the_float64_binary_optimum(cs):
    X, y = make_blobs_problem(seed=5, n=50, d=3, m=2, spread=1.8)
    s = np.where(y == 1, 1.0, -1.0)
    K = kernel_reference(KernelSpec("rbf", GAMMA), X, X)
    val, _ = cs.binary_svm_dual_qp(K, s, 1.5, bias=True)
    est = BinarySVC(C=1.5, gamma=GAMMA, tol=1e-7).fit(X, y)
    a = np.zeros(50)
    a[est.support_] = est.dual_coef_[0] * s[est.support_]
    assert np.all(a >= 0) and np.all(a <= 1.5 * (1 + 1e-12))
    ours = a.sum() - 0.5 * (a * s) @ K @ (a * s)
    assert ours == pytest.approx(val, rel=1e-5)


def _split(X, y):
    return train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)


def _real_sets():
    X, y = load_digits(return_X_y=True)
    yield "digits", (X / 8.0 - 1.0, y)
    sat = DATA / "satimage" / "sat.trn"
    if sat.exists():
        a = np.loadtxt(sat)
        X = a[:, :-1]
        X = (X - X.min(0)) / np.maximum(X.max(0) - X.min(0), 1e-12) * 2 - 1
        yield "satimage", (X, a[:, -1].astype(int))
    usps = DATA / "usps" / "zip.train.gz"
    if usps.exists():
        with gzip.open(usps, "rt") as fh:
            a = np.loadtxt(fh)
        yield "usps", (a[:4000, 1:], a[:4000, 0].astype(int))


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,data", list(_real_sets()), ids=lambda v: v if isinstance(v, str) else ""
)
def test_float32_kernels_predict_as_float64_on_real_data(name, data):
    """Accuracy unchanged (within 0.3 points; measured: equal) and at most 0.5 % of the test
    predictions different, on digits, satimage and usps, for the direct and the pairwise model."""
    X, y = data
    Xtr, Xte, ytr, yte = _split(X, y)
    for cls in (MulticlassSVC, OneVsOneSVC):
        p32 = cls(C=10.0).fit(Xtr, ytr).predict(Xte)
        p64 = cls(C=10.0, kernel_dtype="float64").fit(Xtr, ytr).predict(Xte)
        assert abs(np.mean(p32 == yte) - np.mean(p64 == yte)) <= 0.003, (name, cls.__name__)
        assert np.mean(p32 == p64) >= 0.995, (name, cls.__name__)


@pytest.mark.parametrize("sparse", [False, True])
def test_support_vectors_are_the_rows_as_given(sparse):
    X, y = load_digits(return_X_y=True)
    X = X[:300] / 16.0
    y = y[:300]
    Xin = sp.csr_matrix(X) if sparse else X.copy()
    m = MulticlassSVC(C=10.0).fit(Xin, y)
    sv = m.support_vectors_.toarray() if sparse else m.support_vectors_
    assert sv.dtype == np.float64
    np.testing.assert_array_equal(sv, X[m.support_])  # not their float32 copies
    np.testing.assert_array_equal(Xin.toarray() if sparse else Xin, X)  # input untouched


def test_float32_input_stays_float32():
    X, y = load_digits(return_X_y=True)
    X = (X[:200] / 16.0).astype(np.float32)
    m = MulticlassSVC().fit(X, y[:200])
    assert m.support_vectors_.dtype == np.float32
    m64 = MulticlassSVC(kernel_dtype="float64").fit(X, y[:200])
    np.testing.assert_array_equal(m64.dual_coef_, m.dual_coef_)  # float32 rows either way


def test_bad_kernel_dtype_names_the_choices():
    X, y = load_digits(return_X_y=True)
    with pytest.raises(ValueError, match="kernel_dtype.*'float32', 'float64'"):
        MulticlassSVC(kernel_dtype="half").fit(X[:50], y[:50])
