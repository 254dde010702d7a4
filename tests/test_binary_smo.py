"""Platt's SMO for the binary C-SVM with bias, one-vs-rest and one-vs-one (docs/design.md, 'Binary
SMO').

Kernels against NumPy references; BinarySVC against the exact QP optimum (cvxpy + CLARABEL) and
against scikit-learn's SVC (LIBSVM); OvR / OvO against LIBSVM's; bad input.
"""

from __future__ import annotations

import numpy as np
import pytest
from oracles import clarabel_solve, psd_factor
from sklearn.multiclass import OneVsRestClassifier
from sklearn.svm import SVC

from dmcsvm.estimators.binary import BinarySVC, OneVsOneSVC, OneVsRestSVC
from dmcsvm.kernels import KernelSpec, kernel_reference
from dmcsvm.numerics.binary_smo import platt_bias, platt_step, rho_from_parts, rho_parts


def _binary(seed, n=60, d=3, noise=0.7):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.where(X[:, 0] - 0.5 * X[:, 1] + noise * rng.normal(size=n) > 0, 1, -1)
    return X, y


# ------------------------------------------------------------------------------------------------
# numba kernels vs NumPy references
# ------------------------------------------------------------------------------------------------


def _pair_reference(ai, aj, yi, yj, gi, gj, kii, kjj, kij, U, w):
    """Exact minimiser of the dual along ``d = e_j - y_i y_j e_i`` inside the box (FCL 2005 form):
    ``s* = clip(-(g_j - y_i y_j g_i) / (w (K_ii + K_jj - 2 K_ij)), lo, hi)``."""
    slope = gj - yi * yj * gi
    curv = max(w * (kii + kjj - 2 * kij), 1e-12)
    # 0 <= aj + s <= U and 0 <= ai - yi yj s <= U
    lo, hi = -aj, U - aj
    if yi * yj > 0:
        lo, hi = max(lo, ai - U), min(hi, ai)
    else:
        lo, hi = max(lo, -ai), min(hi, U - ai)
    s = np.clip(-slope / curv, lo, hi)
    return ai - yi * yj * s, aj + s


def test_platt_step_matches_exact_pair_minimiser():
    rng = np.random.default_rng(0)
    for _ in range(400):
        U = rng.uniform(0.5, 3)
        ai, aj = rng.uniform(0, U, 2) * (rng.random(2) > 0.3)
        yi, yj = rng.choice([-1.0, 1.0], 2)
        gi, gj = rng.normal(size=2)
        x = rng.normal(size=(2, 3))
        K = kernel_reference(KernelSpec("rbf", 0.4), x, x)
        w = rng.choice([1.0, 0.75])
        got = platt_step(ai, aj, yi, yj, gi, gj, K[0, 0], K[1, 1], K[0, 1], U, w)
        ref = _pair_reference(ai, aj, yi, yj, gi, gj, K[0, 0], K[1, 1], K[0, 1], U, w)
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)
        assert 0.0 <= got[0] <= U and 0.0 <= got[1] <= U
        # the equality constraint y_i a_i + y_j a_j is kept
        assert abs(yi * got[0] + yj * got[1] - (yi * ai + yj * aj)) < 1e-12


def test_platt_step_puts_a_variable_exactly_on_its_bound():
    # y_i != y_j, a large step that drives a_i to 0 (a_j to its lower bound a_j - a_i): a_i must
    # be exactly 0 -- recomputed from a_j it would often be +-1e-17, and a residue > 0 looks
    # movable while no step can move it
    rng = np.random.default_rng(5)
    for _ in range(200):
        ai, aj = rng.uniform(0.01, 0.5), rng.uniform(0.6, 1.0)
        got = platt_step(ai, aj, -1.0, 1.0, 5.0, 5.0, 1.0, 1.0, 0.2, 2.0, 1.0)
        assert got[0] == 0.0
        assert got[1] == aj - ai


def test_platt_bias_makes_the_free_variable_sit_on_the_margin():
    rng = np.random.default_rng(1)
    X, y = _binary(1, n=8)
    y = y.astype(float)
    K = kernel_reference(KernelSpec("rbf", 0.5), X, X)
    Q = (y[:, None] * y[None, :]) * K
    U = 1.0
    for _ in range(50):
        a = rng.uniform(0, U, 8) * (rng.random(8) > 0.3)
        i, j = rng.choice(8, 2, replace=False)
        g = Q @ a - 1.0
        b = rng.normal()
        ai_n, aj_n = platt_step(
            a[i], a[j], y[i], y[j], g[i], g[j], K[i, i], K[j, j], K[i, j], U, 1.0
        )
        got = platt_bias(
            b, a[i], a[j], ai_n, aj_n, y[i], y[j], g[i], g[j], K[i, i], K[j, j], K[i, j], U
        )
        a2 = a.copy()
        a2[i], a2[j] = ai_n, aj_n
        g2 = Q @ a2 - 1.0
        # f(x_t) = sum a y K + b = y_t  <=>  b = -y_t g_t
        bi, bj = -y[i] * g2[i], -y[j] * g2[j]
        ref = bi if 0 < ai_n < U else (bj if 0 < aj_n < U else 0.5 * (bi + bj))
        assert got == pytest.approx(ref, abs=1e-10)


def _rho_reference(a, y, g, U):
    yg = y * g
    free = (a > 0) & (a < U)
    if free.any():
        return yg[free].mean()
    up = ((a >= U) & (y < 0)) | ((a <= 0) & (y > 0))
    lo = ((a >= U) & (y > 0)) | ((a <= 0) & (y < 0))
    return 0.5 * (yg[up].min() + yg[lo].max())


@pytest.mark.parametrize("with_free", [True, False])
def test_rho_parts_match_libsvm_rule(with_free):
    rng = np.random.default_rng(2)
    for _ in range(20):
        n, U = 30, 1.5
        a = rng.choice([0.0, U], n)
        if with_free:
            a[:5] = rng.uniform(0.1, 1.4, 5)
        y = rng.choice([-1.0, 1.0], n)
        g = rng.normal(size=n)
        parts = []
        for rows in (np.arange(0, 13), np.arange(13, 30)):
            out = np.empty(4)
            parts.append(rho_parts(a, y, g, U, rows.astype(np.int64), out).copy())
        assert rho_from_parts(parts) == pytest.approx(_rho_reference(a, y, g, U), abs=1e-12)


# ------------------------------------------------------------------------------------------------
# BinarySVC vs the exact QP and vs LIBSVM
# ------------------------------------------------------------------------------------------------


def _csvm_dual_qp(K, y, C):
    """Exact optimum of ``max sum a - 1/2 ||sum a_i y_i phi(x_i)||^2, y'a = 0, 0 <= a <= C``."""
    import cvxpy as cp

    L = psd_factor(K)
    a = cp.Variable(len(y))
    obj = cp.Maximize(cp.sum(a) - 0.5 * cp.sum_squares(L.T @ cp.multiply(y, a)))
    val = clarabel_solve(cp.Problem(obj, [a >= 0, a <= C, y @ a == 0]))
    return val, a.value


def _full_coef(clf, n):
    c = np.zeros(n)
    c[clf.support_] = np.asarray(clf.dual_coef_).ravel()
    return c


@pytest.mark.parametrize(
    "kernel,params,C,batch,selection",
    [
        ("rbf", {"gamma": 0.5}, 1.0, 2, "wss2"),
        ("rbf", {"gamma": 2.0}, 10.0, 8, "mvp"),
        ("linear", {}, 0.5, 16, "wss2"),
        ("poly", {"gamma": 0.5, "degree": 2, "coef0": 1.0}, 3.0, 1000, "wss2"),
    ],
)
def test_binary_reaches_qp_optimum(kernel, params, C, batch, selection):
    X, y = _binary(3)
    clf = BinarySVC(
        kernel_dtype="float64",
        C=C,
        kernel=kernel,
        tol=1e-9,
        n_jobs=2,
        **params,
        solver_options={"batch_size": batch, "pair_selection": selection},
    ).fit(X, y)
    spec = KernelSpec(kernel, clf.gamma_, params.get("degree", 3), params.get("coef0", 0.0))
    K = kernel_reference(spec, X, X)
    val, a_qp = _csvm_dual_qp(K, y.astype(float), C)
    coef = _full_coef(clf, len(y))
    a = coef * y
    assert np.all(a >= 0) and np.all(a <= C) and abs(coef.sum()) < 1e-10
    ours = a.sum() - 0.5 * coef @ K @ coef
    assert ours == pytest.approx(val, rel=1e-6)
    assert -clf.objective_ == pytest.approx(ours, rel=1e-9)
    assert clf.converged_


@pytest.mark.parametrize("seed,C,gamma", [(4, 1.0, 0.3), (5, 20.0, 1.0), (6, 0.1, 0.1)])
def test_binary_matches_libsvm(seed, C, gamma):
    X, y = _binary(seed, n=80)
    labels = np.array(["neg", "pos"])[(y > 0).astype(int)]
    ours = BinarySVC(C=C, gamma=gamma, tol=1e-10, n_jobs=2, solver_options={"batch_size": 16}).fit(
        X, labels
    )
    ref = SVC(C=C, gamma=gamma, tol=1e-10).fit(X, labels)
    np.testing.assert_allclose(_full_coef(ours, len(y)), _full_coef(ref, len(y)), atol=1e-4)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, atol=1e-4)
    assert ours.platt_intercept_ == pytest.approx(ref.intercept_[0], abs=1e-4)
    Xt = np.random.default_rng(seed + 100).normal(size=(200, X.shape[1]))
    np.testing.assert_array_equal(ours.predict(Xt), ref.predict(Xt))
    np.testing.assert_allclose(ours.decision_function(Xt), ref.decision_function(Xt), atol=1e-4)


def test_binary_sparse_input_matches_dense():
    import scipy.sparse as sp

    X, y = _binary(7)
    X[np.abs(X) < 0.5] = 0.0
    a = BinarySVC(kernel_dtype="float64", C=2.0, tol=1e-8, n_jobs=1).fit(X, y)
    b = BinarySVC(kernel_dtype="float64", C=2.0, tol=1e-8, n_jobs=1).fit(sp.csr_matrix(X), y)
    np.testing.assert_allclose(_full_coef(a, len(y)), _full_coef(b, len(y)), atol=1e-8)
    np.testing.assert_allclose(
        a.decision_function(X), b.decision_function(sp.csr_matrix(X)), atol=1e-8
    )


# ------------------------------------------------------------------------------------------------
# one-vs-rest and one-vs-one
# ------------------------------------------------------------------------------------------------


def _multi(seed=8, n=90, m=4, d=3):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=1.5, size=(m, d))
    y = np.concatenate([np.arange(m), rng.integers(0, m, n - m)])
    X = centers[y] + rng.normal(size=(n, d))
    return X, y


def test_one_vs_rest_matches_libsvm_ovr():
    X, y = _multi()
    ours = OneVsRestSVC(
        C=3.0, gamma=0.4, tol=1e-10, n_jobs=2, solver_options={"batch_size": 16}
    ).fit(X, y)
    ref = OneVsRestClassifier(SVC(C=3.0, gamma=0.4, tol=1e-10)).fit(X, y)
    np.testing.assert_allclose(ours.decision_function(X), ref.decision_function(X), atol=1e-4)
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))
    # later problems found kernel columns of earlier ones in the one shared cache
    assert sum(s["rows_cached"] for s in ours.engine_stats_) > 0


def test_one_vs_one_matches_libsvm_ovo():
    X, y = _multi(seed=9)
    ours = OneVsOneSVC(
        C=3.0, gamma=0.4, tol=1e-10, n_jobs=2, solver_options={"batch_size": 16}
    ).fit(X, y)
    ref = SVC(C=3.0, gamma=0.4, tol=1e-10, decision_function_shape="ovo").fit(X, y)
    np.testing.assert_allclose(ours._binary_decisions(X), ref.decision_function(X), atol=1e-4)
    # votes, ties broken by the summed confidences: LIBSVM's break_ties=True
    ref2 = SVC(C=3.0, gamma=0.4, tol=1e-10, break_ties=True).fit(X, y)
    Xt = np.random.default_rng(1).normal(scale=2, size=(300, 3))
    np.testing.assert_array_equal(ours.predict(Xt), ref2.predict(Xt))


def test_shared_cache_does_not_change_the_solution():
    """The cache hands back the columns it was given.  Not bit for bit: OpenBLAS (0.3.31)
    rounds a kernel column differently in a batch of 1, 3, 7, 19 or 21 columns than in a
    larger one (a cached column was computed in another batch), and at tol=1e-8 that last bit
    moves one coefficient by 4.6e-8 (with a product whose rounding does not depend on its
    shape the two fits are equal bit for bit).  A wrong column would move them far more."""
    X, y = _multi(seed=10)
    a = OneVsOneSVC(C=1.0, tol=1e-8, cache_size=0, n_jobs=1).fit(X, y)
    b = OneVsOneSVC(C=1.0, tol=1e-8, cache_size=50, n_jobs=1).fit(X, y)
    assert sum(s["rows_cached"] for s in a.engine_stats_) == 0
    assert sum(s["rows_cached"] for s in b.engine_stats_) > 0
    np.testing.assert_allclose(a.dual_coef_.toarray(), b.dual_coef_.toarray(), atol=1e-6)
    np.testing.assert_allclose(a.intercept_, b.intercept_, atol=1e-6)
    np.testing.assert_allclose(a.decision_function(X), b.decision_function(X), atol=1e-6)
    np.testing.assert_array_equal(a.predict(X), b.predict(X))


@pytest.mark.parametrize("Est", [OneVsRestSVC, OneVsOneSVC])
def test_two_class_decomposition_equals_binary(Est):
    X, y = _binary(11)
    d_bin = BinarySVC(C=1.0, tol=1e-10).fit(X, y).decision_function(X)
    d = Est(C=1.0, tol=1e-10).fit(X, y).decision_function(X)
    np.testing.assert_allclose(d, d_bin, atol=1e-6)


# ------------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,value,allowed",
    [
        ("C", 0.0, "a float in the range (0.0, inf)"),
        ("C", "big", "a float in the range (0.0, inf)"),
        ("tol", -1.0, "a float in the range (0.0, inf)"),
        ("batch_size", 1, "an int in the range [2, inf)"),
        ("batch_size", 2.5, "an int in the range [2, inf)"),
        ("pair_selection", "first", "a str among {'mvp', 'wss2'}"),
        ("kernel", "laplacian", "a str among {'linear', 'poly', 'rbf', 'sigmoid'}"),
        ("max_iter", 0, "an int in the range [1, inf) or -1"),
        ("cache_size", -5.0, "a str among {'auto'} or a float in the range [0.0, inf)"),
    ],
)
@pytest.mark.parametrize("Est", [BinarySVC, OneVsRestSVC, OneVsOneSVC])
def test_bad_parameters(Est, name, value, allowed):
    X, y = _binary(12, n=20)
    option = name in Est()._solver_options()
    with pytest.raises(ValueError) as e:
        Est(**({"solver_options": {name: value}} if option else {name: value})).fit(X, y)
    what = (
        f"{name!r} entry of {Est.__name__}'s solver_options"
        if option
        else f"{name!r} parameter of {Est.__name__}"
    )
    assert str(e.value) == f"The {what} must be {allowed}. Got {value!r} instead."


def test_binary_rejects_three_classes_and_one_class():
    X, y = _multi(n=30, m=3)
    with pytest.raises(ValueError) as e:
        BinarySVC().fit(X, y)
    assert str(e.value) == (
        "Only binary classification is supported. The type of the target is "
        "multiclass (3 classes); use OneVsRestSVC or OneVsOneSVC for more "
        "than two classes"
    )
    for Est in (BinarySVC, OneVsRestSVC, OneVsOneSVC):
        with pytest.raises(ValueError) as e:
            Est().fit(X, np.full(30, 7))
        assert str(e.value) == (
            f"{Est.__name__} needs samples of at least 2 classes in the "
            f"data, but the data contains only one class: 7"
        )
