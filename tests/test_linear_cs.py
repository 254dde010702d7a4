"""The sequential dual method on explicit prototypes (dmcsvm.coordinators.linear_cs): kernels
against NumPy references, the optimum against the exact QP, the kernel (batched-round) path and
LIBLINEAR, and MulticlassSVC's fitted attributes / model files on the linear path."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_digits
from sklearn.svm import LinearSVC

from dmcsvm import MulticlassSVC
from dmcsvm.coordinators import linear_cs as L
from dmcsvm.engine.prototype_partition import prototype_groups
from dmcsvm.kernels import KernelSpec, kernel_reference
from dmcsvm.model_io import load_model, save_model
from dmcsvm.numerics import pattern as pt
from dmcsvm.numerics import sequential_dual as SD


def _random_row(rng, P, C):
    y = int(rng.randint(P))
    neg = [r for r in range(P) if r != y]
    al = rng.uniform(0, 1, len(neg)) * (rng.rand(len(neg)) < 0.5)
    if al.sum() > C:
        al *= C / al.sum()
    b = np.zeros(P)
    b[neg] = -al
    b[y] = al.sum()
    return y, neg, b


def _slack_problem(rng, n, d):
    """Rows (40 % zeros), three classes of 1 / 3 / 2 prototypes, random ``W`` and ``s``."""
    X = rng.normal(size=(n, d)) * (rng.random((n, d)) < 0.6)
    count = np.array([1, 3, 2], dtype=np.int64)
    pcls = np.repeat(np.arange(3), count).astype(np.int64)
    first = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
    cls = rng.integers(0, 3, n).astype(np.int64)
    W, s = rng.normal(size=(pcls.shape[0], d)), rng.normal(size=pcls.shape[0])
    return X, count, pcls, first, cls, W, s


@pytest.mark.parametrize("sparse", [False, True])
def test_slacks_equal_numpy_scores(sparse):
    """``SD.slacks`` (the primal checks' pass over the rows) against the score matrix
    ``a X W^T + c0 s`` and the slack of each row w.r.t. each of its class's prototypes, with
    classes of different prototype counts (missing prototypes: inf)."""
    n, d = 40, 7
    X, count, pcls, first, cls, W, s = _slack_problem(np.random.default_rng(5), n, d)
    a, c0 = 0.7, 1.3
    rows = (
        (sp.csr_matrix(X).indptr, sp.csr_matrix(X).indices, sp.csr_matrix(X).data)
        if sparse
        else (X,)
    )
    out = SD.slacks(rows, a, c0, W, s, cls, pcls, first, count, np.empty((n, 3)))
    F = a * X @ W.T + c0 * s
    for i in range(n):
        th = F[i, pcls != cls[i]].max()
        for q in range(3):
            want = max(0.0, th + 1.0 - F[i, first[cls[i]] + q]) if q < count[cls[i]] else np.inf
            assert out[i, q] == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_slacks_of_scores_equal_the_row_by_row_slacks():
    """``SD.slacks_of_scores`` (a block of GEMM products, rows ``lo..``) against ``SD.slacks``,
    block by block over uneven blocks; and a dense state's primal check (block GEMMs over
    several blocks) against the same rows as CSR (row-by-row dots)."""
    n, d = 2600, 7
    X, count, pcls, first, cls, W, s = _slack_problem(np.random.default_rng(6), n, d)
    want = SD.slacks((X,), 0.7, 1.3, W, s, cls, pcls, first, count, np.empty((n, 3)))
    got = np.full((n, 3), -1.0)
    for lo, hi in ((0, 5), (5, 1030), (1030, n)):
        SD.slacks_of_scores(X[lo:hi] @ W.T, 0.7, 1.3, s, cls, pcls, first, count, got, lo)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert np.array_equal(np.isinf(got), np.isinf(want))
    yp = first[cls]
    out = {}
    for sparse in (False, True):
        prob = L.LinearProblem.of(sp.csr_matrix(X) if sparse else X, 0.7, 1.3)
        st = L.SequentialState(prob, yp, cls, pcls, 1.0, 1e-3, True, 0, threads=2)
        st.run(2)
        out[sparse] = st.objective()
    assert L.CHECK_BLOCK_ROWS < n
    np.testing.assert_allclose(out[False][0], out[True][0], rtol=1e-12, atol=1e-12)
    assert out[False][1] == pytest.approx(out[True][1], rel=1e-13)


def _two_share_state(seed, d):
    """A 3000-row, three-class state whose primal checks split over two threads."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(3000, d))
    cls = rng.integers(0, 3, 3000).astype(np.int64)
    return L.SequentialState(
        L.LinearProblem.of(X, 1.0, 0.0),
        cls,
        cls,
        np.arange(3, dtype=np.int64),
        1.0,
        1e-3,
        True,
        0,
        threads=2,
    )


def test_range_max_equals_numpy():
    """``SD._range_max`` (four running maxima) is ``max(m, f[lo:hi])`` for every range of a
    13-long vector, empty ones included, whatever the remainder of the length by four."""
    rng = np.random.default_rng(12)
    f = rng.normal(size=13)
    for lo in range(14):
        for hi in range(lo, 14):
            for m in (-np.inf, 0.3):
                want = max([m] + list(f[lo:hi]))
                assert SD._range_max(f, lo, hi, m) == want


def test_slacks_of_scores_with_many_prototypes_equal_numpy():
    """The slack pass with groups of 5 / 1 / 7 / 4 prototypes (the largest score of another class
    comes from both sides of the row's group, in runs of every length mod 4) against the score
    matrix and NumPy's maxima, bit for bit."""
    rng = np.random.default_rng(13)
    n, d = 300, 6
    count = np.array([5, 1, 7, 4], dtype=np.int64)
    pcls = np.repeat(np.arange(4), count).astype(np.int64)
    first, _ = prototype_groups(pcls)
    P = pcls.shape[0]
    cls = rng.integers(0, 4, n).astype(np.int64)
    X, W, s = rng.normal(size=(n, d)), rng.normal(size=(P, d)), rng.normal(size=P)
    G = X @ W.T
    got = SD.slacks_of_scores(G, 0.7, 1.3, s, cls, pcls, first, count, np.empty((n, 7)), 0)
    F = 0.7 * G + 1.3 * s
    for i in range(n):
        th = F[i, pcls != cls[i]].max()
        own = F[i, first[cls[i]] : first[cls[i]] + count[cls[i]]]
        want = np.full(7, np.inf)
        want[: own.shape[0]] = np.maximum(0.0, th + 1.0 - own)
        assert np.array_equal(got[i], want)


def test_primal_checks_share_one_pool_closed_at_the_end():
    """A state's threaded checks reuse one pool (not a pool per check); ``close`` stops its
    threads and a later check starts them again; fits on the sequential dual path leave none."""
    import threading

    def check_threads():
        return [t for t in threading.enumerate() if t.name.startswith("dmcsvm-check")]

    st = _two_share_state(14, 5)
    first = st.objective()
    assert st._pool.started and len(check_threads()) == 1
    thread = check_threads()[0]
    again = st.objective()
    assert check_threads() == [thread]  # the same thread: one pool, not one per check
    assert np.array_equal(first[0], again[0])
    st.close()
    assert not st._pool.started and check_threads() == []
    assert np.array_equal(st.objective()[0], first[0])
    st.close()
    Xd, yd = load_digits(return_X_y=True)
    Xd = np.vstack([Xd, Xd]) / 16.0
    MulticlassSVC(kernel="linear", C=0.1, n_jobs=2).fit(Xd, np.concatenate([yd, yd]))
    from dmcsvm import MultiPrototypeSVC

    MultiPrototypeSVC(
        n_prototypes=2, kernel="linear", C=0.1, max_epochs=3, n_jobs=2, random_state=0
    ).fit(Xd, np.concatenate([yd, yd]))
    assert check_threads() == []


@pytest.mark.parametrize("sparse", [False, True])
def test_primal_check_on_threads_equals_one_thread(sparse):
    """The primal check's slacks split over threads (rows apart) give the one-thread values bit
    for bit, for dense and CSR rows; the last share ends at the last row."""
    rng = np.random.default_rng(8)
    n, d = 3500, 9
    X = rng.normal(size=(n, d)) * (rng.random((n, d)) < 0.5)
    count = np.array([2, 1, 3], dtype=np.int64)
    pcls = np.repeat(np.arange(3), count).astype(np.int64)
    cls = rng.integers(0, 3, n).astype(np.int64)
    yp = np.array([0, 2, 3], dtype=np.int64)[cls]
    prob = L.LinearProblem.of(sp.csr_matrix(X) if sparse else X, 0.7, 1.3)
    out = []
    for threads in (1, 3):
        st = L.SequentialState(prob, yp, cls, pcls, 1.0, 1e-3, True, 0, threads=threads)
        st.run(3)
        out.append(st.objective())
    xi1, xi3 = out[0][0], out[1][0]
    assert np.array_equal(xi1, xi3) and np.isfinite(xi1[:, 0]).all()
    assert out[0][1:] == out[1][1:]


def test_primal_check_raises_an_error_of_another_thread(monkeypatch):
    """A share of the rows that fails on another thread fails the check (no unwritten rows)."""
    st = _two_share_state(9, 4)
    real = L._check_rows

    def flaky(st, xi, lo, hi, WT):
        if lo > 0:
            raise FloatingPointError("share failed")
        return real(st, xi, lo, hi, WT)

    monkeypatch.setattr(L, "_check_rows", flaky)
    with pytest.raises(FloatingPointError, match="share failed"):
        st.objective()


@pytest.mark.parametrize("seed", range(5))
def test_subproblem_equals_exact_pattern_optimizer(seed):
    """The per-pattern solve (LIBLINEAR's sub-problem) equals pattern.opt_exact, with the
    positive prototype active, and with it shrunk at its bound C (then the others share -C)."""
    rng = np.random.RandomState(seed)
    for _ in range(50):
        P = rng.randint(2, 9)
        C = rng.uniform(0.1, 3.0)
        y, neg, b = _random_row(rng, P, C)
        f = rng.randn(P)
        kpp = rng.uniform(0.1, 3.0)
        ref_b, ref_f = b.copy(), f.copy()
        pt.opt_exact(ref_b, ref_f, y, y, np.arange(P), kpp, C, 0.0)
        act = [y] + neg
        G = np.array([f[r] + (r != y) for r in act])
        out, work = np.empty(P), np.empty(P)
        SD.subproblem(G, b[act].copy(), P, 0, kpp, C, work, out)
        got = np.zeros(P)
        got[act] = out
        np.testing.assert_allclose(got, ref_b, atol=1e-10)
    # y shrunk at its bound: the active negatives solve their part with sum = -C
    G = np.array([0.3, 1.2, -0.4])
    b = np.array([-0.5, -0.5, 0.0])
    out = np.empty(3)
    SD.subproblem(G, b, 3, -1, 1.5, 1.0, np.empty(3), out)
    assert out.sum() == pytest.approx(-1.0) and np.all(out <= 0.0)


def _problem(seed, n=40, d=3, m=3, q=1, sparse=False):
    rng = np.random.RandomState(seed)
    centers = rng.randn(m, d) * 1.5
    y = np.arange(n) % m
    X = centers[y] + rng.randn(n, d)
    if sparse:
        X[np.abs(X) < 0.4] = 0.0
    pcls = np.repeat(np.arange(m), q)
    first, _ = prototype_groups(pcls)
    yp = first[y] + rng.randint(q, size=n)
    return (sp.csr_matrix(X) if sparse else X), X, y, pcls, yp


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize(
    "q,a,c0,shrinking",
    [(1, 1.0, 0.0, True), (1, 1.0, 0.0, False), (2, 1.0, 1.0, True), (3, 0.5, 2.0, True)],
)
def test_passes_reach_the_exact_qp_optimum(sparse, q, a, c0, shrinking):
    """W = B^T X and s = B^T 1 stay in step with B, and the solve ends at the exact optimum of
    the fixed-assignment dual (cvxpy + CLARABEL), whatever the layout, kernel and shrinking."""
    from test_multiprototype import dual_reference, mprot_dual_qp, primal_reference

    Xi, X, y, pcls, yp = _problem(2 + q, q=q, sparse=sparse)
    C = 0.8
    st = L.SequentialState(L.LinearProblem.of(Xi, a, c0), yp, y, pcls, C, 1e-9, shrinking, 3)
    conv, stopped = L.solve_fixed(st, -1)
    assert conv and not stopped
    np.testing.assert_allclose(st.W, st.B.T @ X, atol=1e-10)
    np.testing.assert_allclose(st.s, st.B.sum(0), atol=1e-10)
    K = a * X @ X.T + c0
    D_star, _ = mprot_dual_qp(K, yp, y, pcls, C)
    D = dual_reference(st.B, K, yp)
    assert abs(D - D_star) <= 1e-7 * abs(D_star), (D, D_star)
    P = primal_reference(st.B, K, yp, y, pcls, C)
    assert P - D <= 1e-7 * abs(P)
    _, primal, dual, _ = st.objective()
    assert primal == pytest.approx(P, rel=1e-10) and dual == pytest.approx(D, rel=1e-10)


@pytest.mark.parametrize("sparse", [False, True])
def test_linear_path_equals_kernel_path(cs, sparse):
    """MulticlassSVC(kernel='linear') on the sequential path reaches the optimum of the batched
    kernel-column path: same dual and primal (1e-6 relative), same scores and predictions."""
    X, y = cs.make_blobs_problem(11, 45, 4, 3, spread=1.2, scale=1.5)  # test_solver_optimality's
    if sparse:
        X[np.abs(X) < 0.3] = 0.0
    Xi = sp.csr_matrix(X) if sparse else X
    kw = dict(kernel="linear", C=0.7, tol=1e-8)
    opts = {"gap_tol": 0.0}
    fast = MulticlassSVC(**kw, solver_options=opts).fit(Xi, y)
    kern = MulticlassSVC(**kw, solver_options={**opts, "linear_solver": "rounds"})
    kern.fit(Xi, y)
    assert fast.engine_stats_[0]["solver"] == "sequential_dual"
    assert "solver" not in kern.engine_stats_[0]
    K = kernel_reference(KernelSpec("linear"), X, X)
    B_f = np.zeros((len(y), 3))
    B_f[fast.support_] = fast.dual_coef_.T
    B_k = np.zeros((len(y), 3))
    B_k[kern.support_] = kern.dual_coef_.T
    D_f, D_k = dual_reference_cs(B_f, K, y), dual_reference_cs(B_k, K, y)
    assert D_f == pytest.approx(D_k, rel=1e-6)
    assert fast.history_["primal"][-1] == pytest.approx(kern.history_["primal"][-1], rel=1e-6)
    assert fast.history_["dual"][-1] == pytest.approx(D_f, rel=1e-9)
    np.testing.assert_allclose(fast.decision_function(Xi), kern.decision_function(Xi), atol=1e-5)
    np.testing.assert_array_equal(fast.predict(Xi), kern.predict(Xi))


def dual_reference_cs(B, K, y):
    return B[np.arange(len(y)), y].sum() - 0.5 * np.sum(B * (K @ B))


def _cs_primal(W, X, y, C):
    F = X @ W.T
    n = len(y)
    Fo = F.copy()
    Fo[np.arange(n), y] = -np.inf
    return 0.5 * np.sum(W * W) + C * np.maximum(0, 1 + Fo.max(1) - F[np.arange(n), y]).sum()


@pytest.mark.parametrize("sparse", [False, True])
def test_primal_within_0_1_percent_of_liblinear(sparse):
    X, y = load_digits(return_X_y=True)
    X, y = X[:500] / 16.0, y[:500]
    Xi = sp.csr_matrix(X) if sparse else X
    C = 0.1
    ours = MulticlassSVC(kernel="linear", C=C).fit(Xi, y)  # defaults: tol=1e-3
    ll = LinearSVC(
        multi_class="crammer_singer", fit_intercept=False, C=C, tol=1e-5, max_iter=100000
    ).fit(X, y)
    W = ours.dual_coef_ @ np.asarray(
        ours.support_vectors_.todense() if sparse else ours.support_vectors_
    )
    p_ours, p_ll = _cs_primal(W, X, y, C), _cs_primal(ll.coef_, X, y, C)
    assert abs(p_ours - p_ll) <= 1e-3 * p_ll, (p_ours, p_ll)
    assert ours.history_["primal"][-1] == pytest.approx(p_ours, rel=1e-9)
    assert ours.history_["gap"][-1] <= 1e-3


def test_fitted_attributes_and_model_file(tmp_path):
    X, y = load_digits(return_X_y=True)
    X, y = X[:300] / 16.0, y[:300] + 10
    m = MulticlassSVC(kernel="linear", C=0.5).fit(X, y)
    assert m.converged_ and m.n_iter_ == m.history_["round"][-1]
    sv = m.support_
    assert np.all(np.diff(sv) > 0)
    np.testing.assert_array_equal(m.support_vectors_, X[sv])
    np.testing.assert_array_equal(m.n_support_, np.bincount(y[sv] - 10, minlength=10))
    B = m.dual_coef_.T
    np.testing.assert_allclose(B.sum(1), 0.0, atol=1e-12)
    own = B[np.arange(len(sv)), y[sv] - 10]
    assert np.all(own > 0) and np.all(own <= m.C)
    assert set(L.PASS_KEYS) <= set(m.history_)
    # the history's support count (read from alpha_y alone) is the model's
    assert m.history_["n_sv"][-1] == len(sv)
    path = tmp_path / "linear.dmcsvm"
    save_model(m, path)
    back = load_model(path)
    np.testing.assert_array_equal(back.predict(X), m.predict(X))
    np.testing.assert_array_equal(back.dual_coef_, m.dual_coef_)


def test_max_iter_warns_and_random_state_sets_the_order():
    from sklearn.exceptions import ConvergenceWarning

    X, y = load_digits(return_X_y=True)
    X, y = X[:300] / 16.0, y[:300]
    with pytest.warns(ConvergenceWarning, match="max_iter=2 passes"):
        m = MulticlassSVC(kernel="linear", C=1.0, max_iter=2).fit(X, y)
    assert not m.converged_ and m.n_iter_ == 2
    a = MulticlassSVC(kernel="linear", C=1.0, random_state=1).fit(X, y)
    b = MulticlassSVC(kernel="linear", C=1.0, random_state=1).fit(X, y)
    np.testing.assert_array_equal(a.dual_coef_, b.dual_coef_)
