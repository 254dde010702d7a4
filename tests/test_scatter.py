"""mScatter-SVM (Jenssen et al. 2009; docs/design.md, 'mScatter-SVM'): SMO kernels against NumPy
references, the estimator against the exact QP optimum, the two-class case against the mu-SVM of the
paper's Eq. 1, the test rules, bad input, and the Dask executor against the in-process one."""

from __future__ import annotations

import numpy as np
import pytest
from oracles import clarabel_solve, psd_factor

from dmcsvm.estimators.scatter import ScatterSVC
from dmcsvm.kernels import KernelSpec, kernel_reference
from dmcsvm.numerics import grouped_smo as sc


def _blobs(seed=0, n=60, m=4, d=2, scale=1.5):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=scale, size=(m, d))
    y = np.concatenate([np.arange(m), np.arange(m), rng.integers(0, m, n - 2 * m)])
    X = centers[y] + rng.normal(size=(n, d))
    return X, y


def _Q(K, y, m):
    return K * ((m * (y[:, None] == y[None, :]) - 1.0) / m)


def scatter_qp(K, y, m, mu):
    """Exact optimum of ``min 1/2 sum_c ||m_c - mbar||^2`` s.t. class sums 1, ``0 <= a <= mu``
    (the between-class scatter form of Eq. 6, written with a factor ``L`` of ``K``)."""
    import cvxpy as cp

    n = len(y)
    L = psd_factor(K)
    a = cp.Variable(n)
    Y = np.eye(m)[y]  # n x m one-hot
    M = L.T @ cp.multiply(Y, a[:, None] @ np.ones((1, m)))  # columns m_c (features x m)
    mbar = M @ np.full((m, 1), 1.0 / m)
    obj = 0.5 * cp.sum_squares(M - mbar @ np.ones((1, m)))
    val = clarabel_solve(cp.Problem(cp.Minimize(obj), [a >= 0, a <= mu, Y.T @ a == 1]))
    return val, a.value


def _alpha(clf, n):
    a = np.zeros(n)
    a[clf.support_] = clf.dual_coef_[0]
    return a


# ------------------------------------------------------------------------------------------------
# numba kernels vs NumPy references
# ------------------------------------------------------------------------------------------------


def _select_reference(K, y, grp, a, g, U, w, G, second_order):
    best, pair, viol = np.inf, (-1, -1), 0.0
    for c in range(G):
        idx = np.flatnonzero(grp == c)
        up = [t for t in idx if (y[t] > 0 and a[t] < U) or (y[t] < 0 and a[t] > 0)]
        low = [t for t in idx if (y[t] < 0 and a[t] < U) or (y[t] > 0 and a[t] > 0)]
        if not up or not low:
            continue
        i = up[int(np.argmax([-y[t] * g[t] for t in up]))]
        gmax = -y[i] * g[i]
        viol = max(viol, gmax - min(-y[t] * g[t] for t in low))
        for t in low:
            b = gmax + y[t] * g[t]
            if b <= 0:
                continue
            quad = max(w * (K[i, i] + K[t, t] - 2 * K[i, t]), 1e-12)
            obj = -b * b / quad if second_order else -b
            if obj < best:
                best, pair = obj, (i, t)
    return pair, viol


@pytest.mark.parametrize("selection", ["wss2", "mvp"])
def test_select_pair_matches_reference(selection):
    rng = np.random.default_rng(1)
    code = sc.SELECTIONS[selection]
    for _ in range(100):
        nb, G, U = 12, 3, 0.6
        X = rng.normal(size=(nb, 2))
        K = kernel_reference(KernelSpec("rbf", 0.7), X, X)
        y = rng.choice([-1.0, 1.0], nb)
        grp = rng.integers(0, G, nb).astype(np.int64)
        a = rng.choice([0.0, U, 0.3], nb)
        g = rng.normal(size=nb)
        gmax, imax, gmin = np.empty(G), np.empty(G, np.int64), np.empty(G)
        i, j, viol = sc.select_pair(K, y, grp, a, g, U, 0.75, G, code, gmax, imax, gmin)
        (ri, rj), rviol = _select_reference(K, y, grp, a, g, U, 0.75, G, code == sc.SEL_WSS2)
        assert (i, j) == (ri, rj)
        assert viol == pytest.approx(rviol, abs=1e-14)


def test_scan_and_apply_columns_match_numpy():
    rng = np.random.default_rng(2)
    n, m, U = 40, 3, 0.5
    X = rng.normal(size=(n, 2))
    y = rng.integers(0, m, n).astype(np.int64)
    K = kernel_reference(KernelSpec("rbf", 0.5), X, X)
    a = rng.uniform(0, U, n) * (rng.random(n) > 0.4)
    rows = np.arange(n, dtype=np.int64)
    B = np.flatnonzero(a)
    KT = np.ascontiguousarray(K[:, B].T)  # K(X_B, X), as partitions compute it

    def grouped(rows_, group):
        t, o = np.zeros(n), np.zeros(n)
        s_acc, so_acc = np.zeros(rows_.shape[0]), np.zeros(rows_.shape[0])
        for lo in range(0, B.shape[0], group):
            hi = min(lo + group, B.shape[0])
            sc.accumulate_columns_T(
                KT[lo:hi], rows_, y, y[B][lo:hi], a[B][lo:hi], s_acc, so_acc, True
            )
        sc.finish_columns(rows_, s_acc, so_acc, t, o, True)
        return t, o

    tot, own = grouped(rows, B.shape[0])
    np.testing.assert_allclose(tot, K @ a, atol=1e-12)
    np.testing.assert_allclose(own, [K[i, y == y[i]] @ a[y == y[i]] for i in range(n)], atol=1e-12)
    # in column groups, on a subset of rows: bit for bit the sums of one group
    sub = rows[::3]
    tot_s, own_s = grouped(sub, B.shape[0])
    tot_g, own_g = grouped(sub, 7)
    assert np.array_equal(tot_g, tot_s) and np.array_equal(own_g, own_s)
    assert np.count_nonzero(tot_g) == sub.shape[0]
    g, vup, vlow = np.empty(n), np.empty(n), np.empty(n)
    gmax, gmin = np.empty(m), np.empty(m)
    ones = np.ones(n)
    obj2 = sc.scan(
        rows, ones, y, a, tot, own, (m - 1) / m, -1 / m, 0.0, U, m, g, vup, vlow, gmax, gmin
    )
    Q = _Q(K, y, m)
    np.testing.assert_allclose(g, Q @ a, atol=1e-12)
    assert obj2 == pytest.approx(a @ Q @ a, abs=1e-12)
    for c in range(m):
        up = (y == c) & (a < U)
        low = (y == c) & (a > 0)
        assert gmax[c] == pytest.approx((-g[up]).max())
        assert gmin[c] == pytest.approx((-g[low]).min())


@pytest.mark.parametrize("mu", [1.0, 0.3, 0.25, 0.1])
def test_feasible_start_is_sparse_and_feasible(mu):
    y = np.array([0] * 10 + [1] * 4 + [2] * 7, dtype=np.int64)
    y = np.random.default_rng(3).permutation(y)
    if mu * 4 < 1:
        mu = 0.25
    a = sc.feasible_start(y, 3, mu)
    assert np.all(a >= 0) and np.all(a <= mu)
    np.testing.assert_allclose(np.bincount(y, weights=a), 1.0, atol=1e-12)
    assert np.count_nonzero(a) <= 3 * int(np.ceil(1 / mu - 1e-9))
    # the first points of every class, in row order
    for c in range(3):
        nz = np.flatnonzero((y == c) & (a > 0))
        assert np.array_equal(nz, np.flatnonzero(y == c)[: nz.shape[0]])


# ------------------------------------------------------------------------------------------------
# the estimator vs the exact QP
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kernel,params,mu,batch,cb,selection",
    [
        ("rbf", {"gamma": 0.5}, 1.0, 1000, 8, "wss2"),
        ("rbf", {"gamma": 0.5}, 0.3, 4, 1, "wss2"),
        ("rbf", {"gamma": 2.0}, 0.2, 16, 2, "mvp"),
        ("linear", {}, 0.5, 8, 2, "wss2"),
        ("poly", {"gamma": 0.5, "degree": 2, "coef0": 1.0}, 0.25, 1000, 3, "wss2"),
    ],
)
def test_scatter_reaches_qp_optimum(kernel, params, mu, batch, cb, selection):
    X, y = _blobs(4)
    m = 4
    clf = ScatterSVC(
        kernel_dtype="float64",
        mu=mu,
        kernel=kernel,
        tol=1e-10,
        n_jobs=2,
        **params,
        solver_options={"batch_size": batch, "class_batch": cb, "pair_selection": selection},
    ).fit(X, y)
    spec = KernelSpec(kernel, clf.gamma_, params.get("degree", 3), params.get("coef0", 0.0))
    K = kernel_reference(spec, X, X)
    val, _ = scatter_qp(K, y, m, mu)
    a = _alpha(clf, len(y))
    assert np.all(a >= 0) and np.all(a <= mu)
    np.testing.assert_allclose(np.bincount(y, weights=a), 1.0, atol=1e-12)
    ours = 0.5 * a @ _Q(K, y, m) @ a
    assert ours == pytest.approx(val, rel=1e-6)
    assert clf.objective_ == pytest.approx(ours, rel=1e-9)
    assert clf.converged_


def test_smallest_valid_mu_is_the_uniform_solution():
    # mu = 1/N_c for every class: the only feasible point is a_i = 1/N_c
    X, y = _blobs(5, n=24, m=3)
    y = np.repeat(np.arange(3), 8)
    clf = ScatterSVC(mu=1 / 8, tol=1e-10).fit(X, y)
    np.testing.assert_allclose(_alpha(clf, 24), 1 / 8, atol=1e-12)


def test_two_class_scatter_is_the_mu_svm_of_eq1():
    """Eq. 1 primal ``min 1/2 ||w||^2 - 2 rho + mu sum xi, y_i (w'x_i + b) >= rho - xi_i``
    solved directly in feature space (``phi = rows of a factor of K``); its dual is Eq. 6 with
    ``m = 2`` and twice the objective, and ``w = m_1 - m_2``."""
    import cvxpy as cp

    X, y = _blobs(6, n=40, m=2, scale=1.0)
    mu = 0.2
    clf = ScatterSVC(mu=mu, gamma=0.7, tol=1e-11).fit(X, y)
    K = kernel_reference(KernelSpec("rbf", 0.7), X, X)
    Phi = psd_factor(K)
    s = np.where(y == 0, 1.0, -1.0)  # class 0 = omega_1
    w, b, rho, xi = cp.Variable(Phi.shape[1]), cp.Variable(), cp.Variable(), cp.Variable(len(y))
    primal = clarabel_solve(
        cp.Problem(
            cp.Minimize(0.5 * cp.sum_squares(w) - 2 * rho + mu * cp.sum(xi)),
            [cp.multiply(s, Phi @ w + b) >= rho - xi, xi >= 0],
        )
    )
    a = _alpha(clf, len(y))
    w_ours = Phi.T @ (s * a)  # m_1 - m_2
    # strong duality: primal = -1/2 ||w||^2 = -2 * (mScatter objective)
    assert primal == pytest.approx(-2.0 * clf.objective_, rel=1e-6)
    np.testing.assert_allclose(w_ours, w.value, atol=1e-5)
    # test rule 2 with two classes is the mu-SVM's sign(w'x + b) (Eq. 3) with the paper's
    # b = -1/2 (m_1 - m_2)'(m_1^msv + m_2^msv)
    clf.set_params(test_rule=2)
    f = -clf.decision_function(X)  # positive = class 0 = omega_1
    Fw = Phi @ w_ours
    msv = (a > 1e-12) & (a < mu - 1e-12)
    m1 = Phi.T @ np.where((y == 0) & msv, a, 0) / a[(y == 0) & msv].sum()
    m2 = Phi.T @ np.where((y == 1) & msv, a, 0) / a[(y == 1) & msv].sum()
    b_paper = -0.5 * w_ours @ (m1 + m2)
    np.testing.assert_array_equal(np.sign(f), np.sign(Fw + b_paper))
    # and the paper's b is the primal optimum's b
    assert b_paper == pytest.approx(b.value, abs=1e-5)


def test_test_rules_follow_their_formulas():
    X, y = _blobs(7, n=45, m=3)
    clf = ScatterSVC(kernel_dtype="float64", mu=0.3, gamma=0.5, tol=1e-10).fit(X, y)
    K = kernel_reference(KernelSpec("rbf", 0.5), X, X)
    Phi = psd_factor(K)
    a = _alpha(clf, len(y))
    M = np.stack([Phi.T @ np.where(y == c, a, 0) for c in range(3)], axis=1)  # m_c columns
    mbar = M.mean(axis=1)
    Xt = np.random.default_rng(8).normal(scale=2, size=(30, 2))
    Kt = kernel_reference(KernelSpec("rbf", 0.5), Xt, X)
    St = np.stack([Kt @ np.where(y == c, a, 0) for c in range(3)], axis=1)  # m_c' phi(x)
    rule1 = St / np.linalg.norm(M, axis=0)
    np.testing.assert_allclose(clf.decision_function(Xt), rule1, atol=1e-9)
    msv = (a > 0) & (a < 0.3)
    off = np.array(
        [
            (M[:, c] - mbar) @ (Phi.T @ np.where((y == c) & msv, a, 0)) / a[(y == c) & msv].sum()
            for c in range(3)
        ]
    )
    rule2 = (St - St.mean(axis=1, keepdims=True) - off) / np.linalg.norm(M - mbar[:, None], axis=0)
    clf.set_params(test_rule=2)
    np.testing.assert_allclose(clf.decision_function(Xt), rule2, atol=1e-8)
    np.testing.assert_array_equal(clf.predict(Xt), np.argmax(rule2, axis=1))


# ------------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------------

_BAD = "The '{}' parameter of ScatterSVC must be {}. Got {} instead."
_BAD_OPTION = "The '{}' entry of ScatterSVC's solver_options must be {}. Got {} instead."


@pytest.mark.parametrize(
    "params,msg",
    [
        (
            {"mu": 0.1},
            "mu must satisfy 1/N_min <= mu <= 1; for this data (smallest class: N_min = 5 "
            "samples) that is 0.2 <= mu <= 1, got 0.1",
        ),
        (
            {"mu": 1.5},
            "mu must satisfy 1/N_min <= mu <= 1; for this data (smallest class: N_min = 5 "
            "samples) that is 0.2 <= mu <= 1, got 1.5",
        ),
        (
            {"mu": "half"},
            _BAD.format("mu", "a str among {'auto'} or a float in the range (0.0, inf)", "'half'"),
        ),
        ({"test_rule": 3}, _BAD.format("test_rule", "an int among {1, 2}", 3)),
        ({"test_rule": True}, _BAD.format("test_rule", "an int among {1, 2}", True)),
        (
            {"solver_options": {"class_batch": 0}},
            _BAD_OPTION.format("class_batch", "an int in the range [1, inf)", 0),
        ),
        (
            {"solver_options": {"batch_size": 1}},
            _BAD_OPTION.format("batch_size", "an int in the range [2, inf)", 1),
        ),
        ({"tol": 0.0}, _BAD.format("tol", "a float in the range (0.0, inf)", 0.0)),
        (
            {"solver_options": {"pair_selection": "wss3"}},
            _BAD_OPTION.format("pair_selection", "a str among {'mvp', 'wss2'}", "'wss3'"),
        ),
        (
            {"kernel": "cosine"},
            _BAD.format("kernel", "a str among {'linear', 'poly', 'rbf', 'sigmoid'}", "'cosine'"),
        ),
    ],
)
def test_bad_parameters(params, msg):
    X = np.random.default_rng(0).normal(size=(17, 2))
    y = np.array([0] * 5 + [1] * 6 + [2] * 6)
    with pytest.raises(ValueError) as e:
        ScatterSVC(**params).fit(X, y)
    assert str(e.value) == msg


def test_one_class_is_rejected():
    with pytest.raises(ValueError) as e:
        ScatterSVC().fit(np.zeros((5, 2)), ["a"] * 5)
    assert str(e.value) == (
        "ScatterSVC needs samples of at least 2 classes in the data, but the "
        "data contains only one class: 'a'"
    )


# ------------------------------------------------------------------------------------------------
# Dask executor: the same partition code gives the same coefficients
# ------------------------------------------------------------------------------------------------


def test_dask_localcluster_matches_inprocess(local_client):
    from dmcsvm import BinarySVC, OneVsOneSVC, OneVsRestSVC

    X, y = _blobs(9, n=70, m=4)
    # batches of 16, as in the store test below: fewer Dask round trips, still many rounds
    kw = dict(tol=1e-9)
    opts = {"n_partitions": 3, "batch_size": 16}
    a = ScatterSVC(
        mu=0.2, gamma=0.5, n_jobs=2, **kw, solver_options={**opts, "class_batch": 2}
    ).fit(X, y)
    b = ScatterSVC(
        mu=0.2, gamma=0.5, client=local_client, **kw, solver_options={**opts, "class_batch": 2}
    ).fit(X, y)
    assert a.n_iter_ == b.n_iter_ and a.n_iter_ > 5
    np.testing.assert_array_equal(a.support_, b.support_)
    np.testing.assert_allclose(a.dual_coef_, b.dual_coef_, rtol=0, atol=1e-9)
    np.testing.assert_allclose(a.msv_offsets_, b.msv_offsets_, rtol=0, atol=1e-9)
    yb = (y >= 2).astype(int)
    a = BinarySVC(C=2.0, n_jobs=2, **kw, solver_options=opts).fit(X, yb)
    b = BinarySVC(C=2.0, client=local_client, **kw, solver_options=opts).fit(X, yb)
    assert a.n_iter_ == b.n_iter_ and a.n_iter_ > 5
    np.testing.assert_array_equal(a.support_, b.support_)
    np.testing.assert_allclose(a.dual_coef_, b.dual_coef_, rtol=0, atol=1e-9)
    np.testing.assert_allclose(a.intercept_, b.intercept_, rtol=0, atol=1e-9)
    # one-vs-rest / one-vs-one reset the worker-resident partitions between problems
    for Est in (OneVsRestSVC, OneVsOneSVC):
        a = Est(C=2.0, n_jobs=2, **kw, solver_options=opts).fit(X, y)
        b = Est(C=2.0, client=local_client, **kw, solver_options=opts).fit(X, y)
        np.testing.assert_array_equal(a.n_iter_, b.n_iter_)
        np.testing.assert_allclose(
            a.dual_coef_.toarray(), b.dual_coef_.toarray(), rtol=0, atol=1e-9
        )
        np.testing.assert_allclose(a.intercept_, b.intercept_, rtol=0, atol=1e-9)


@pytest.mark.slow
def test_store_and_dask_array_inputs_train_on_the_workers_like_arrays(local_client, tmp_path):
    """A zarr store path and a dask array train ScatterSVC and the SMO estimators on the
    workers (each partition reads its own rows) to the coefficients of the same rows as a numpy
    array in-process; decision values / predictions of a store (chunk by chunk) and of a dask
    array (lazy) equal those of the array."""
    import dask.array as da

    from dmcsvm import BinarySVC, OneVsOneSVC, OneVsRestSVC
    from dmcsvm.store import write_arrays

    X, y = _blobs(9, n=72, m=4)
    X = X.astype(np.float32)
    url = str(tmp_path / "train.zarr")
    write_arrays(url, X, y, rows_per_chunk=24)  # partition edges 0/24/48/72 either way
    yb = (y >= 2).astype(int)
    url_b = str(tmp_path / "binary.zarr")
    write_arrays(url_b, X, yb, rows_per_chunk=24)
    # an explicit gamma: 'scale' computes the variance from the store in another order than
    # numpy's X.var(), which moves the last bits of gamma
    # batches of 16: 52 / 19 / 44 / 35 rounds (538 in all with batches of 4 and 8, each a Dask
    # round trip on the two cluster fits)
    kw = dict(tol=1e-6, gamma=0.5)
    opts = {"n_partitions": 3, "batch_size": 16}
    cases = [
        (
            lambda **c: ScatterSVC(mu=0.2, **kw, **c, solver_options={**opts, "class_batch": 2}),
            url,
            y,
        ),
        (lambda **c: BinarySVC(C=2.0, **kw, solver_options=opts, **c), url_b, yb),
        (lambda **c: OneVsRestSVC(C=2.0, **kw, solver_options=opts, **c), url, y),
        (lambda **c: OneVsOneSVC(C=2.0, **kw, solver_options=opts, **c), url, y),
    ]
    for make, store, labels in cases:
        ref = make(n_jobs=2).fit(X, labels)
        for est in (
            make(client=local_client).fit(store),
            make(client=local_client).fit(da.from_array(X, chunks=30), labels),
        ):
            np.testing.assert_array_equal(est.support_, ref.support_)
            np.testing.assert_array_equal(est.support_vectors_, ref.support_vectors_)
            dc, rc = est.dual_coef_, ref.dual_coef_
            if hasattr(dc, "toarray"):
                dc, rc = dc.toarray(), rc.toarray()
            np.testing.assert_allclose(dc, rc, rtol=0, atol=1e-9)
        expected = ref.predict(X)
        np.testing.assert_array_equal(est.predict(store), expected)
        assert est.score(store) == pytest.approx(ref.score(X, labels))
        np.testing.assert_allclose(
            est.decision_function(store), ref.decision_function(X), rtol=0, atol=1e-6
        )
        lazy = est.predict(da.from_array(X, chunks=25))
        assert isinstance(lazy, da.Array)
        # the session client is not the default one: compute on the cluster explicitly
        np.testing.assert_array_equal(local_client.compute(lazy).result(timeout=120), expected)
