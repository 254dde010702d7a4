"""Multi-prototype SVM (Aiolli & Sperduti 2005): array kernels against NumPy references, the convex
problem of a fixed assignment against an exact QP solver, the greedy search's monotone energy,
q = 1 against MulticlassSVC, the linear fast path against the kernel path, the in-process executor
against a Dask LocalCluster, and bad input."""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse as sp

from dmcsvm import MulticlassSVC, MultiPrototypeSVC
from dmcsvm.coordinators.multiprototype import (
    RandomAssignment,
    initial_assignment,
    prototype_classes,
)
from dmcsvm.engine.messages import PrototypeMessage
from dmcsvm.engine.prototype_partition import encode_linear, prototype_groups
from dmcsvm.kernels import KernelSpec, kernel_reference
from dmcsvm.numerics import linear_prototypes as lp
from dmcsvm.numerics import pattern as pt
from dmcsvm.numerics.working_set import solve_working_set

PAPER_KERNEL = KernelSpec("poly", gamma=1.0, degree=1, coef0=1.0)  # <x, z> + 1


# ------------------------------------------------------------------------------------------------
# data and independent NumPy formulas
# ------------------------------------------------------------------------------------------------


def multimodal(seed, n_per_mode=12, m=3, modes=2, d=2, spread=0.35, circle=True):
    """``m * modes`` blobs, blob ``k`` of class ``k mod m``.  ``circle``: the blobs lie on a circle
    (first two coordinates), so every class is a union of ``modes`` far-apart blobs that one
    linear prototype per class cannot separate and ``modes`` prototypes per class can (one wedge
    per blob); every class has the same mean.  Otherwise the centers are uniform in [-4, 4]^d."""
    rng = np.random.default_rng(seed)
    X, y = [], []
    for k in range(m * modes):
        center = np.zeros(d)
        ang = 2 * np.pi * k / (m * modes)
        if circle:
            center[:2] = 4.0 * np.cos(ang), 4.0 * np.sin(ang)
        else:
            center = rng.uniform(-4, 4, size=d)
        X.append(center + spread * rng.normal(size=(n_per_mode, d)))
        y.append(np.full(n_per_mode, k % m))
    X, y = np.vstack(X), np.concatenate(y)
    perm = rng.permutation(y.shape[0])
    return X[perm], y[perm].astype(np.int64)


def full_coef(model, n):
    """``B`` (n x P) of a fitted model."""
    B = np.zeros((n, model.dual_coef_.shape[0]))
    B[model.support_] = model.dual_coef_.T
    return B


def slacks_reference(F, cls, pcls):
    """``xi[i, s]`` over the positive prototypes of row i (``+inf`` past its class's count)."""
    first, count = prototype_groups(pcls)
    xi = np.full((F.shape[0], count.max()), np.inf)
    for i in range(F.shape[0]):
        theta = F[i, pcls != cls[i]].max()
        for s in range(count[cls[i]]):
            xi[i, s] = max(0.0, theta + 1.0 - F[i, first[cls[i]] + s])
    return xi


def primal_reference(B, K, yp, cls, pcls, C):
    """Eq. 8 with the assignment ``yp``: ``1/2 sum(B * K B) + C sum_i xi_i^{yp_i}``."""
    F = K @ B
    first, _ = prototype_groups(pcls)
    xi = slacks_reference(F, cls, pcls)
    return 0.5 * np.sum(B * F) + np.sum(C * xi[np.arange(len(yp)), yp - first[cls]])


def dual_reference(B, K, yp):
    """``D = sum_i alpha_i^{y_i} - 1/2 ||M||^2`` (docs/design.md, 'The Crammer-Singer dual')."""
    return B[np.arange(len(yp)), yp].sum() - 0.5 * np.sum(B * (K @ B))


def mprot_dual_qp(K, yp, cls, pcls, C):
    """Exact optimum of the dual with the assignment fixed (AS 2005 Eq. 11, docs/design.md units):
    ``max sum_i B[i, y_i] - 1/2 ||L^T B||^2`` s.t. rows sum to 0, ``0 <= B[i, y_i] <= C``,
    ``B[i, r] <= 0`` on negative prototypes and ``B[i, r] = 0`` on the other positive ones.
    ``C`` is a scalar or one bound per pattern (class / sample weights)."""
    import cvxpy as cp

    n, P = len(yp), len(pcls)
    w, V = np.linalg.eigh(0.5 * (K + K.T))
    keep = w > w.max() * 1e-14
    L = V[:, keep] * np.sqrt(w[keep])
    Y = np.zeros((n, P))
    Y[np.arange(n), yp] = 1.0
    NEG = (pcls[None, :] != cls[:, None]).astype(float)
    OTHER = 1.0 - Y - NEG  # positive prototypes not assigned to the row
    Bv = cp.Variable((n, P))
    cons = [
        cp.sum(Bv, axis=1) == 0,
        cp.multiply(NEG, Bv) <= 0,
        cp.multiply(OTHER, Bv) == 0,
        cp.sum(cp.multiply(Y, Bv), axis=1) >= 0,
        cp.sum(cp.multiply(Y, Bv), axis=1) <= C,
    ]
    obj = cp.Maximize(cp.sum(cp.multiply(Y, Bv)) - 0.5 * cp.sum_squares(L.T @ Bv))
    prob = cp.Problem(obj, cons)
    prob.solve(
        solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12, max_iter=500
    )
    assert prob.status == "optimal", prob.status
    return prob.value, Bv.value


# ------------------------------------------------------------------------------------------------
# array kernels
# ------------------------------------------------------------------------------------------------


def test_positive_slacks_matches_reference():
    rng = np.random.default_rng(0)
    pcls = prototype_classes([2, 3, 1])
    first, count = prototype_groups(pcls)
    n = 40
    F = rng.normal(scale=1.5, size=(n, pcls.shape[0]))
    cls = rng.integers(0, 3, n).astype(np.int64)
    out = np.empty((n, 3))
    lp.positive_slacks(F, cls, pcls, first, count, out)
    np.testing.assert_allclose(out, slacks_reference(F, cls, pcls), rtol=0, atol=1e-15)
    assert np.isinf(out[cls == 2, 1:]).all() and np.isinf(out[cls == 0, 2]).all()


def draw_reference(xi, cur, u, T, C):
    """Eq. 17 by inverse CDF in NumPy; greedy (keep the current slot on ties) at T = 0."""
    out = np.empty(len(cur), dtype=np.int64)
    for i in range(len(cur)):
        x = xi[i]
        if T == 0:
            out[i] = cur[i] if x[cur[i]] <= x.min() else int(np.argmin(x))
            continue
        p = np.where(np.isfinite(x), np.exp(-C * (x - x.min()) / T), 0.0)
        cdf = np.cumsum(p)
        out[i] = min(
            int(np.searchsorted(cdf, u[i] * cdf[-1], side="right")),
            int(np.flatnonzero(np.isfinite(x))[-1]),
        )
    return out


@pytest.mark.parametrize("T", [0.0, 0.05, 1.0, 50.0])
def test_draw_assignment_matches_reference(T):
    rng = np.random.default_rng(1)
    n, q = 300, 4
    xi = np.maximum(rng.normal(0.5, 1.0, size=(n, q)), 0.0)
    xi[::7, 3] = np.inf  # a class with 3 prototypes only
    xi[::5, 1] = xi[::5, 0]  # ties
    cur = rng.integers(0, 3, n).astype(np.int64)
    u = rng.random(n)
    got = lp.draw_assignment(xi, cur, u, T, 2.0, np.empty(n, dtype=np.int64))
    np.testing.assert_array_equal(got, draw_reference(xi, cur, u, T, 2.0))
    assert np.all(np.isfinite(xi[np.arange(n), got]))


def test_draw_assignment_frequencies_follow_eq17():
    """Empirical frequencies of one row's draws are the Boltzmann probabilities of Eq. 17."""
    rng = np.random.default_rng(2)
    xi_row = np.array([0.0, 0.3, 1.0, np.inf])
    n = 200000
    xi = np.tile(xi_row, (n, 1))
    got = lp.draw_assignment(
        xi, np.zeros(n, dtype=np.int64), rng.random(n), 0.5, 1.5, np.empty(n, dtype=np.int64)
    )
    p = np.exp(-1.5 * xi_row[:3] / 0.5)
    p /= p.sum()
    freq = np.bincount(got, minlength=4) / n
    np.testing.assert_allclose(freq[:3], p, atol=4e-3)
    assert freq[3] == 0


def random_batch(rng, nb, d, q, zero_below):
    """A batch of ``nb`` rows with some zero features, their classes, a random prototype of each
    row's class, and the prototypes' classes for ``q`` prototypes per class."""
    pcls = prototype_classes(q)
    XB = rng.normal(size=(nb, d))
    XB[XB < zero_below] = 0.0
    cb = rng.integers(0, len(q), nb).astype(np.int64)
    first, count = prototype_groups(pcls)
    yb = (first[cb] + rng.integers(0, count[cb])).astype(np.int64)
    return XB, cb, yb, pcls


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("optimizer", ["exact", "opt_kkt", "all_pairs", "fixed_point", "basic"])
@pytest.mark.parametrize("sweeps", [1, 3])
def test_linear_batch_solve_matches_kernel_batch_solve(sparse, optimizer, sweeps):
    """Explicit prototypes (``F + a dW x + c0 ds``) and ``K_BB`` give the same batch solution."""
    rng = np.random.default_rng(3)
    nb = 25
    XB, cb, yb, pcls = random_batch(rng, nb, 6, [2, 2, 3], -0.5)
    P = pcls.shape[0]
    a, c0, C = 0.7, 1.3, 1.5
    # a feasible starting point and its scores as the partitions would report them
    Bb = np.zeros((nb, P))
    for j in range(nb):
        neg = np.flatnonzero(pcls != cb[j])
        w = rng.dirichlet(np.ones(neg.shape[0])) * rng.uniform(0, C)
        Bb[j, neg] = -w
        Bb[j, yb[j]] = w.sum()
    Fb = rng.normal(size=(nb, P))
    K = a * XB @ XB.T + c0
    kdiag = np.diag(K).copy()
    code = pt.OPTIMIZERS[optimizer]
    dB_k, g_k = pt.solve_batch(code, Bb, Fb, K, yb, cb, pcls, kdiag, C, 1e-6, 1e-8, sweeps)
    XBs = sp.csr_matrix(XB) if sparse else XB
    dB_l, g_l, _ = lp.solve_batch_linear(
        code, Bb, Fb, XBs, yb, cb, pcls, kdiag, C, 1e-6, 1e-8, sweeps, a, c0
    )
    assert np.abs(dB_k).max() > 0.1
    # OptKKT iterates until a step gains <= phi ~ 1e-14: whether its last tiny step (~1e-8) is
    # taken can flip with the last bits of the scores; the other optimizers agree to rounding
    atol = 1e-6 if optimizer == "opt_kkt" else 1e-10
    np.testing.assert_allclose(dB_l, dB_k, rtol=0, atol=atol)
    np.testing.assert_allclose(g_l, g_k, rtol=atol, atol=1e-12)


@pytest.mark.parametrize("relax", [1.0, 1.4])
@pytest.mark.parametrize("weighted", [False, True], ids=["C", "C_i"])
@pytest.mark.parametrize("sparse", [False, True])
def test_linear_working_set_equals_kernel_working_set(sparse, weighted, relax):
    """The working-set solve by re-selection on explicit prototypes takes the same steps (rows,
    counts) and reaches the same batch solution as :func:`working_set.solve_working_set` on K_BB,
    and leaves every batch row within its inner tolerance, with exact and over-relaxed steps."""
    rng = np.random.default_rng(5)
    nb = 30
    XB, cb, yb, pcls = random_batch(rng, nb, 5, [2, 1, 3], -0.6)
    P = pcls.shape[0]
    a, c0 = 0.8, 1.0
    C = rng.uniform(0.0, 2.0, nb) if weighted else 1.2
    C = np.where(np.arange(nb) % 7 == 0, 0.0, C) if weighted else C
    Bb = np.zeros((nb, P))
    Fb = rng.normal(size=(nb, P))
    K = a * XB @ XB.T + c0
    kdiag = np.diag(K).copy()
    code = pt.OPTIMIZERS["exact"]
    tol, inner_tol, max_steps = 1e-6, 1e-3, 20 * nb
    dB_k, g_k, st_k = solve_working_set(
        code,
        Bb,
        Fb,
        K,
        np.arange(nb),
        yb,
        cb,
        pcls,
        kdiag,
        C,
        tol,
        1e-8,
        max_steps,
        inner_tol,
        relax,
    )
    XBs = sp.csr_matrix(XB) if sparse else XB
    dB_l, g_l, st_l = lp.LinearBatchSolver(a, c0).working_set(
        code, Bb, Fb, XBs, yb, cb, pcls, kdiag, C, tol, 1e-8, max_steps, inner_tol, relax
    )
    assert st_k.sum() > nb and st_k.sum() < max_steps  # re-selection took extra steps
    np.testing.assert_array_equal(st_l, st_k)
    np.testing.assert_allclose(dB_l, dB_k, rtol=0, atol=1e-10)
    np.testing.assert_allclose(g_l, g_k, rtol=1e-9, atol=1e-12)
    F_end = Fb + K @ dB_k
    Cv = np.broadcast_to(C, (nb,))
    psi = [pt.psi_value(Bb[j] + dB_l[j], F_end[j], yb[j], cb[j], pcls, Cv[j]) for j in range(nb)]
    assert max(psi) <= inner_tol


def test_has_coefficients_equals_a_scan_of_the_rows():
    """``lp.has_coefficients`` (reads ``B[i, yp_i]`` only) equals "any non-zero entry" on
    feasible coefficients: rows at zero, rows with one or several negatives, rows at the bound."""
    rng = np.random.default_rng(8)
    n, P = 40, 6
    yp = rng.integers(0, P, n)
    B = np.where(rng.random((n, P)) < 0.3, -rng.uniform(0.1, 1.0, (n, P)), 0.0)
    B[np.arange(n), yp] = 0.0
    B[::4] = 0.0
    B[np.arange(n), yp] = -B.sum(axis=1)
    rows = rng.permutation(n)[:25]
    want = np.any(B[rows] != 0.0, axis=1)
    assert np.array_equal(lp.has_coefficients(B, rows, yp), want)
    assert want.any() and not want.all()


@pytest.mark.parametrize("sparse", [False, True])
def test_prototype_step_scores_and_encoding(sparse):
    rng = np.random.default_rng(4)
    X = rng.normal(size=(30, 5))
    X[X < 0] = 0.0
    Xs = sp.csr_matrix(X) if sparse else X
    dB = rng.normal(size=(30, 7))
    dW, ds = lp.prototype_step(dB, Xs)
    np.testing.assert_allclose(dW, dB.T @ X, atol=1e-13)
    np.testing.assert_allclose(ds, dB.sum(0), atol=1e-13)
    W, s = rng.normal(size=(7, 5)), rng.normal(size=7)
    np.testing.assert_allclose(
        lp.linear_scores(Xs, W, s, 0.5, 2.0), 0.5 * X @ W.T + 2.0 * s, atol=1e-13
    )
    ids = np.arange(30)
    msg = encode_linear(
        PrototypeMessage(
            ids=ids,
            XB=Xs,
            dB=dB,
            unshrink={"ids": ids, "X": Xs},
            assign={"ids": ids[:2], "yp": ids[:2]},
        )
    )
    assert msg.XB is None and msg.unshrink == {} and msg.assign["ids"].shape == (2,)
    np.testing.assert_allclose(msg.dW, dB.T @ X, atol=1e-13)
    assert lp.linear_coefficients(KernelSpec("linear")) == (1.0, 0.0)
    assert lp.linear_coefficients(PAPER_KERNEL) == (1.0, 1.0)
    assert lp.linear_coefficients(KernelSpec("poly", degree=2)) is None
    assert lp.linear_coefficients(KernelSpec("rbf")) is None


def test_initial_assignment_is_random_and_the_same_for_any_partitioning():
    """pi(1): every row to a prototype of its class, uniformly; a row's prototype depends on the
    seed, its index and its class only, so partitions drawing their own slices agree with one
    draw of all rows (what lets the coordinator hold no n-long assignment)."""
    rng = np.random.default_rng(0)
    pcls = prototype_classes([3, 2, 1])
    n = 30000
    cls = rng.integers(0, 3, n).astype(np.int64)
    yp = initial_assignment(cls, pcls, 12345)
    assert yp.dtype == np.int64 and np.all(pcls[yp] == cls)
    for c, (f, q) in enumerate([(0, 3), (3, 2), (5, 1)]):
        freq = np.bincount(yp[cls == c] - f, minlength=q) / np.count_nonzero(cls == c)
        np.testing.assert_allclose(freq, 1.0 / q, atol=0.02)
    ra = RandomAssignment(12345, pcls, 0, n)
    cuts = [0, 1, 977, 20000, n]
    parts = [ra[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=False)]
    assert [len(p) for p in parts] == [1, 976, 19023, 10000]
    got = np.concatenate(
        [p.draw(cls[a:b]) for p, a, b in zip(parts, cuts[:-1], cuts[1:], strict=False)]
    )
    np.testing.assert_array_equal(got, yp)
    assert not np.array_equal(initial_assignment(cls, pcls, 54321), yp)
    with pytest.raises(ValueError, match="^3 class indices for 1 rows$"):
        parts[0].draw(cls[:3])
    with pytest.raises(IndexError, match="takes only slices"):
        ra[np.arange(3)]


# ------------------------------------------------------------------------------------------------
# the convex problem of a fixed assignment reaches the exact QP optimum
# ------------------------------------------------------------------------------------------------

FIXED_CASES = {
    "linear-seq": dict(kernel="poly", degree=1, gamma=1.0, coef0=1.0),
    "linear-fast": dict(kernel="poly", degree=1, gamma=1.0, coef0=1.0),
    "linear-kernel": dict(kernel="poly", degree=1, gamma=1.0, coef0=1.0),
    "rbf": dict(kernel="rbf", gamma=0.4),
}
#: each case's solver_options
FIXED_OPTIONS = {
    "linear-seq": {"linear_solver": "sequential"},
    "linear-fast": {"fast_linear": True, "linear_solver": "rounds"},
    "linear-kernel": {"fast_linear": False},
    "rbf": {},
}


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("case", list(FIXED_CASES))
def test_fixed_assignment_reaches_exact_qp_optimum(case, weighted):
    """Weighted: class_weight and sample_weight make every pattern's bound its own C_i."""
    X, y = multimodal(5, n_per_mode=10)
    C = 0.8
    # batch_size 30 of 60 rows: rounds that leave violators out, and rounds that hold them all
    # (with batch_size 7 the weighted problem, whose bounds C_i span 0 to 4.8 on a rank-3 linear
    # kernel, takes ~10k rounds on every path, the sequential one too: slow coordinate descent)
    model = MultiPrototypeSVC(
        kernel_dtype="float64",
        n_prototypes=[2, 3, 2],
        C=C,
        max_epochs=0,
        tol=1e-9,
        random_state=0,
        n_jobs=2,
        **FIXED_CASES[case],
        solver_options={"gap_tol": 0.0, "batch_size": 30, **FIXED_OPTIONS[case]},
    )
    sw = None
    if weighted and case == "linear-fast":
        # the fast path's default one pass in order needs ~50k rounds (60 s) on this degenerate
        # weighted problem; its working-set solve (the kernel path's default) ~1k
        model.set_params(solver_options={**model.solver_options, "inner_steps": 20.0})
    if weighted:
        sw = np.random.default_rng(3).uniform(0.2, 3.0, len(y))
        sw[::9] = 0.0
        model.set_params(class_weight={0: 0.5, 2: 2.0})
    model.fit(X, y, sample_weight=sw)
    if weighted:
        C = C * sw * np.array([0.5, 1.0, 2.0])[np.searchsorted(model.classes_, y)]
    pcls = np.searchsorted(model.classes_, model.prototype_class_)
    cls = np.searchsorted(model.classes_, y)
    yp = model.assignment_
    assert np.array_equal(
        yp, initial_assignment(cls, pcls, lp.epoch_seed(np.random.RandomState(0)))
    )
    assert model.converged_ and model.n_epochs_ == 0
    spec = model._spec
    K = kernel_reference(spec, X, X)
    D_star, _ = mprot_dual_qp(K, yp, cls, pcls, C)
    B = full_coef(model, len(y))
    # feasibility of Eq. 11
    n = len(y)
    assert np.abs(B.sum(1)).max() <= 1e-10
    own = B[np.arange(n), yp]
    assert own.min() >= -1e-12 and np.all(own <= C * (1 + 1e-12))
    other = B.copy()
    other[np.arange(n), yp] = 0.0
    assert np.all(other[pcls[None, :] != cls[:, None]] <= 1e-12)
    assert np.all(other[pcls[None, :] == cls[:, None]] == 0.0)
    # the optimum
    D = dual_reference(B, K, yp)
    assert abs(D - D_star) <= 1e-6 * abs(D_star), (D, D_star)
    P_model = primal_reference(B, K, yp, cls, pcls, C)
    assert (P_model - D) <= 1e-6 * abs(P_model)
    assert model.energy_ == pytest.approx(P_model, rel=1e-9)


# ------------------------------------------------------------------------------------------------
# the search
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fast_linear,solver", [(True, "sequential"), (True, "rounds"), (False, "auto")]
)
def test_greedy_energy_never_increases(fast_linear, solver):
    """T0 = 0 is the greedy search of §6.1: every epoch lowers the energy E(t)."""
    # random blob centers: the class means differ, so the random initial assignment is not the
    # degenerate M = 0 optimum that equal class means give
    X, y = multimodal(6, n_per_mode=15, modes=3, circle=False)
    model = MultiPrototypeSVC(
        kernel_dtype="float64",
        n_prototypes=3,
        C=2.0,
        T0=0.0,
        max_epochs=40,
        random_state=1,
        n_jobs=2,
        solver_options={"batch_size": 20, "fast_linear": fast_linear, "linear_solver": solver},
    ).fit(X, y)
    h = model.epoch_history_
    E = np.concatenate([[2.0 * len(y)], h["energy"]])  # E(1) = C n
    assert len(h["energy"]) >= 3
    assert np.all(np.diff(E) <= 0.0), np.diff(E)
    assert np.all(h["temperature"] == 0.0)
    # within an epoch: E(t+1) <= P_pi(t)(alpha) < E(t)
    assert np.all(h["energy"] <= h["primal"])
    assert np.all(h["primal"] < E[:-1])
    # the search stopped at a stationary point, well before max_epochs
    assert model.n_epochs_ < 40
    assert h["n_changed"][0] > 0
    # the final model's energy, recomputed from its coefficients
    cls = np.searchsorted(model.classes_, y)
    pcls = np.searchsorted(model.classes_, model.prototype_class_)
    K = kernel_reference(model._spec, X, X)
    B = full_coef(model, len(y))
    assert model.energy_ == pytest.approx(
        primal_reference(B, K, model.assignment_, cls, pcls, 2.0), rel=1e-9
    )
    assert model.energy_ <= E[-1] * (1 + 1e-2)


def test_annealed_history_and_multimodal_fit():
    """Annealing cools as T0 (1 - tau)^t, re-assigns fewer patterns as it cools, and several
    linear prototypes per class fit classes made of far-apart blobs that one prototype cannot."""
    X, y = multimodal(7, n_per_mode=20, modes=2)
    one = MultiPrototypeSVC(n_prototypes=1, C=1.0, n_jobs=2, random_state=0).fit(X, y)
    # a fast schedule (tau=0.1, 60 epochs) from a random start: about half the starts end in the
    # symmetric local optimum (both prototypes of a class alike, patterns flipping between them);
    # this one (the epochs' uniforms of linear_prototypes.epoch_uniforms) finds the blobs
    model = MultiPrototypeSVC(
        n_prototypes=2,
        C=1.0,
        T0=2.0,
        tau=0.1,
        max_epochs=60,
        random_state=1,
        n_jobs=2,
        solver_options={"batch_size": 50},
    ).fit(X, y)
    h = model.epoch_history_
    t = h["epoch"]
    np.testing.assert_allclose(h["temperature"], 2.0 * 0.9**t, rtol=1e-12)
    assert h["n_changed"][:5].mean() > h["n_changed"][-5:].mean()
    assert model.score(X, y) >= 0.97 > one.score(X, y) + 0.1
    assert model.energy_ < one.energy_
    # winner-take-all over prototypes
    S = model.prototype_scores(X)
    np.testing.assert_array_equal(model.predict(X), model.prototype_class_[S.argmax(1)])
    D = model.decision_function(X)
    np.testing.assert_array_equal(model.classes_[D.argmax(1)], model.predict(X))
    # explicit prototypes reproduce the kernel scores
    K = kernel_reference(model._spec, X, model.support_vectors_)
    np.testing.assert_allclose(S, K @ model.dual_coef_.T, atol=1e-9)
    assert model.prototypes_.shape == (6, 2) and model.intercept_.shape == (6,)


def test_single_prototype_equals_multiclass_svc():
    """q = 1 is the Crammer-Singer model: the same optimum as MulticlassSVC (whose kernel path
    solves each round's working set to a tolerance, where MultiPrototypeSVC's rounds take one
    pass: other rounds, the same scores at tol=1e-8)."""
    X, y = multimodal(8, n_per_mode=12, circle=False)
    kw = dict(C=0.5, kernel="poly", degree=1, gamma=1.0, coef0=1.0, tol=1e-8, n_jobs=2)
    opts = {"gap_tol": 0.0, "pattern_selection": "bmg", "batch_size": 9}
    ref = MulticlassSVC(kernel_dtype="float64", **kw, solver_options=opts).fit(X, y)
    kern = MultiPrototypeSVC(
        kernel_dtype="float64",
        n_prototypes=1,
        random_state=0,
        **kw,
        solver_options={**opts, "fast_linear": False},
    ).fit(X, y)
    np.testing.assert_allclose(kern.decision_function(X), ref.decision_function(X), atol=1e-6)
    np.testing.assert_array_equal(kern.predict(X), ref.predict(X))
    assert kern.n_epochs_ == 0
    fast = MultiPrototypeSVC(
        kernel_dtype="float64",
        n_prototypes=1,
        random_state=0,
        **kw,
        solver_options={**opts, "fast_linear": True},
    ).fit(X, y)
    # the primal solution (prototypes) is unique: compare it and the scores
    W_ref = ref.dual_coef_ @ ref.support_vectors_
    np.testing.assert_allclose(fast.prototypes_, W_ref, atol=1e-6)
    np.testing.assert_allclose(fast.intercept_, ref.dual_coef_.sum(1), atol=1e-6)
    np.testing.assert_allclose(fast.decision_function(X), ref.decision_function(X), atol=1e-6)
    np.testing.assert_array_equal(fast.predict(X), ref.predict(X))


@pytest.mark.parametrize("sparse", [False, True])
def test_fast_linear_path_equals_kernel_path(sparse):
    """Explicit prototypes and kernel rows give the same search (same draws, re-assignments,
    stops) and the same model."""
    X, y = multimodal(9, n_per_mode=15, modes=2, d=3, circle=False)
    X[np.abs(X) < 0.5] = 0.0
    Xi = sp.csr_matrix(X) if sparse else X
    # default tolerances: the search and the final solve stay clear of the floating-point end
    # game (selection values ~1e-13) where the last bits of the scores decide the next batch
    kw = dict(n_prototypes=2, C=1.0, T0=1.0, tau=0.2, max_epochs=12, random_state=3, n_jobs=2)
    opts = {"batch_size": 15, "batch_sweeps": 1, "linear_solver": "rounds"}
    # the same batch solve on both: the working set by re-selection (the kernel path's default;
    # the fast path's default is one pass in order, the same as the kernel path's with
    # inner_steps=0)
    fast = MultiPrototypeSVC(
        kernel_dtype="float64", **kw, solver_options={**opts, "fast_linear": True}
    )
    kern = MultiPrototypeSVC(
        kernel_dtype="float64", **kw, solver_options={**opts, "fast_linear": False}
    )
    for m in (fast, kern):
        m.set_params(solver_options={**m.solver_options, "inner_steps": 20.0})
    fast.fit(Xi, y)
    kern.fit(Xi, y)
    assert fast.n_epochs_ == kern.n_epochs_ == 12
    np.testing.assert_array_equal(
        fast.epoch_history_["n_changed"], kern.epoch_history_["n_changed"]
    )
    np.testing.assert_array_equal(fast.epoch_history_["rounds"], kern.epoch_history_["rounds"])
    np.testing.assert_allclose(
        fast.epoch_history_["energy"], kern.epoch_history_["energy"], rtol=1e-9
    )
    np.testing.assert_array_equal(fast.assignment_, kern.assignment_)
    assert fast.n_iter_ == kern.n_iter_
    np.testing.assert_allclose(full_coef(fast, len(y)), full_coef(kern, len(y)), atol=1e-10)
    np.testing.assert_allclose(fast.prototypes_, kern.prototypes_, atol=1e-10)
    assert fast.energy_ == pytest.approx(kern.energy_, rel=1e-10)


# ------------------------------------------------------------------------------------------------
# Dask
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel", ["linear-fast", "rbf"])
def test_dask_localcluster_equals_inprocess(local_client, kernel):
    X, y = multimodal(10, n_per_mode=15, modes=2, circle=False)
    kw = dict(n_prototypes=2, C=1.0, T0=1.0, tau=0.2, max_epochs=8, random_state=4)
    opts = {"batch_size": 12, "n_partitions": 2, **FIXED_OPTIONS[kernel]}
    kw.update(FIXED_CASES[kernel])
    ref = MultiPrototypeSVC(n_jobs=2, **kw, solver_options=opts).fit(X, y)
    dsk = MultiPrototypeSVC(client=local_client, **kw, solver_options=opts).fit(X, y)
    assert ref.n_epochs_ == dsk.n_epochs_ == 8
    np.testing.assert_array_equal(dsk.assignment_, ref.assignment_)
    np.testing.assert_array_equal(dsk.epoch_history_["n_changed"], ref.epoch_history_["n_changed"])
    assert dsk.n_iter_ == ref.n_iter_
    np.testing.assert_allclose(full_coef(dsk, len(y)), full_coef(ref, len(y)), rtol=0, atol=1e-9)
    np.testing.assert_array_equal(dsk.predict(X), ref.predict(X))


@pytest.mark.parametrize("kernel", ["linear-fast", "rbf"])
def test_store_and_dask_array_inputs_on_dask_equal_arrays_in_process(
    local_client, kernel, tmp_path
):
    """A zarr store path (and a dask array) trains on the workers, each partition reading its
    own rows, to the model of the same rows as a numpy array in-process; predicting a store or
    a dask array runs per chunk and equals predicting the array."""
    import dask.array as da

    from dmcsvm.store import write_arrays

    X, y = multimodal(11, n_per_mode=20, modes=2, d=3, circle=False)  # 120 rows
    X = X.astype(np.float32)
    url = str(tmp_path / "train.zarr")
    write_arrays(url, X, y, rows_per_chunk=30)  # partition edges 0/60/120 either way
    # a batch of all 120 rows: 124 rounds on the linear path (676 with batches of 40, each round
    # a Dask actor round trip on the two cluster fits); 3 epochs: 54 and 41 rows are re-assigned
    # after the first and second (the equality of assignments below covers them)
    kw = dict(n_prototypes=2, C=1.0, T0=1.0, tau=0.2, max_epochs=3, random_state=4)
    opts = {"batch_size": 120, "n_partitions": 2, **FIXED_OPTIONS[kernel]}
    kw.update(FIXED_CASES[kernel])
    ref = MultiPrototypeSVC(n_jobs=2, **kw, solver_options=opts).fit(X, y)
    on_store = MultiPrototypeSVC(client=local_client, **kw, solver_options=opts).fit(url)
    on_dask = MultiPrototypeSVC(client=local_client, **kw, solver_options=opts).fit(
        da.from_array(X, chunks=40), y
    )
    for est in (on_store, on_dask):
        assert est.n_features_in_ == 3 and est.n_epochs_ == ref.n_epochs_
        np.testing.assert_array_equal(est.assignment_, ref.assignment_)
        np.testing.assert_allclose(
            full_coef(est, len(y)), full_coef(ref, len(y)), rtol=0, atol=1e-9
        )
    expected = ref.predict(X)
    assert ref.score(X, y) > 0.7  # chance: 1/3
    np.testing.assert_array_equal(on_store.predict(url), expected)
    assert on_store.score(url) == pytest.approx(ref.score(X, y))
    lazy = on_store.predict(da.from_array(X, chunks=25))
    assert isinstance(lazy, da.Array)
    # the session client is not the default one: compute on the cluster explicitly
    np.testing.assert_array_equal(local_client.compute(lazy).result(timeout=120), expected)
    np.testing.assert_allclose(
        on_store.decision_function(url), ref.decision_function(X), rtol=0, atol=1e-5
    )


def test_store_with_labels_given_is_refused(tmp_path):
    from dmcsvm.store import write_arrays

    X, y = multimodal(12, n_per_mode=5)
    url = str(tmp_path / "s.zarr")
    write_arrays(url, X.astype(np.float32), y)
    with pytest.raises(ValueError, match="y must be None"):
        MultiPrototypeSVC(n_prototypes=1).fit(url, y)


# ------------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 3))
    y = np.array(["a"] * 8 + ["b"] * 9 + ["c"] * 3)
    return X, y


@pytest.mark.parametrize("q", [0, -2, [2, 0, 1], 1.5, "3", True])
def test_bad_prototype_count(small, q):
    X, y = small
    if isinstance(q, list):  # the entries are checked against the classes in fit
        msg = (
            f"n_prototypes must be an integer >= 1 or a list of such integers (one per "
            f"class), got {q!r}"
        )
    else:
        msg = (
            f"The 'n_prototypes' parameter of MultiPrototypeSVC must be an int in the range "
            f"[1, inf), an instance of 'list', an instance of 'tuple' or an instance of "
            f"'numpy.ndarray'. Got {q!r} instead."
        )
    with pytest.raises(ValueError, match=re.escape(msg)):
        MultiPrototypeSVC(n_prototypes=q).fit(X, y)


def test_prototype_list_length(small):
    X, y = small
    with pytest.raises(
        ValueError, match=re.escape("n_prototypes has 2 entries but the data has 3 classes")
    ):
        MultiPrototypeSVC(n_prototypes=[1, 2]).fit(X, y)


def test_class_smaller_than_its_prototypes(small):
    X, y = small
    with pytest.raises(
        ValueError,
        match=re.escape(
            "class 'c' has 3 training patterns, fewer than its 4 prototypes (n_prototypes)"
        ),
    ):
        MultiPrototypeSVC(n_prototypes=4).fit(X, y)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "class 'a' has 8 training patterns, fewer than its 9 prototypes (n_prototypes)"
        ),
    ):
        MultiPrototypeSVC(n_prototypes=[9, 1, 1]).fit(X, y)
    MultiPrototypeSVC(n_prototypes=[8, 2, 3], max_epochs=2, n_jobs=1).fit(X, y)


@pytest.mark.parametrize("tau", [0.0, 1.0, -0.1, 1.5, "0.1"])
def test_tau_outside_unit_interval(small, tau):
    X, y = small
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"The 'tau' parameter of MultiPrototypeSVC must be a float in the range "
            f"(0.0, 1.0). Got {tau!r} instead."
        ),
    ):
        MultiPrototypeSVC(tau=tau).fit(X, y)


@pytest.mark.parametrize("T0", [-1.0, -1e-9, float("nan"), None])
def test_negative_T0(small, T0):
    X, y = small
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"The 'T0' parameter of MultiPrototypeSVC must be a float in the range "
            f"[0.0, inf). Got {T0!r} instead."
        ),
    ):
        MultiPrototypeSVC(T0=T0).fit(X, y)


@pytest.mark.parametrize("epochs", [-1, 2.5])
def test_bad_max_epochs(small, epochs):
    X, y = small
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"The 'max_epochs' parameter of MultiPrototypeSVC must be an int in the range "
            f"[0, inf). Got {epochs!r} instead."
        ),
    ):
        MultiPrototypeSVC(max_epochs=epochs).fit(X, y)


@pytest.mark.parametrize("solver", ["rounds", "sequential"])
def test_history_is_per_round_with_its_epoch(solver):
    """history_ has one row per solver round (per pass on the sequential path), as every other
    estimator's, tagged with its epoch; the per-epoch summary is epoch_history_."""
    X, y = multimodal(7, n_per_mode=20, modes=2)
    model = MultiPrototypeSVC(
        n_prototypes=2,
        C=1.0,
        T0=2.0,
        tau=0.1,
        max_epochs=6,
        kernel="linear",
        random_state=0,
        n_jobs=1,
        solver_options={"linear_solver": solver, "batch_size": 50},
    ).fit(X, y)
    h, e = model.history_, model.epoch_history_
    assert len(h["round"]) == len(h["dual"]) == len(h["epoch"])
    if solver == "rounds":
        assert len(h["round"]) == model.n_iter_
    ep = h["epoch"]
    searched = ep[ep > 0]
    assert np.all(np.diff(searched) >= 0) and np.all(ep[len(searched) :] == 0)
    # every epoch of epoch_history_ has its rounds in history_ (the sequential path: at least
    # the primal check that ended it; its epoch_history_ counts passes, not checks)
    for t, r in zip(e["epoch"], e["rounds"], strict=False):
        if solver == "rounds":
            assert np.count_nonzero(ep == t) == r
        else:
            assert np.count_nonzero(ep == t) >= 1
    assert model.n_epochs_ == len(e["epoch"])


# ------------------------------------------------------------------------------------------------
# the re-assignment drawn on the partitions (docs/design.md, 'The coordinator's size'): the n x q
# slacks never leave them
# ------------------------------------------------------------------------------------------------


def test_epoch_uniforms_do_not_depend_on_the_partitioning():
    u = lp.epoch_uniforms(2024, 0, 1000)
    assert u.shape == (1000,) and 0.0 <= u.min() and u.max() < 1.0
    for edges in ([0, 1000], [0, 317, 318, 1000], [0, 1, 500, 999, 1000]):
        parts = [lp.epoch_uniforms(2024, a, b) for a, b in zip(edges[:-1], edges[1:], strict=False)]
        np.testing.assert_array_equal(np.concatenate(parts), u)
    assert not np.array_equal(lp.epoch_uniforms(2025, 0, 1000), u)


class _Recording:
    """Wraps an executor and keeps what every ``call`` returned."""

    def __init__(self, ex):
        self.ex, self.replies = ex, []

    def call(self, name, *args):
        out = self.ex.call(name, *args)
        self.replies.append((name, out))
        return out

    def __getattr__(self, name):
        return getattr(self.ex, name)


@pytest.mark.parametrize("weighted", [False, True], ids=["C", "row-C"])
@pytest.mark.parametrize("T", [0.0, 0.7])
def test_partitions_draw_what_the_in_memory_redraw_draws(weighted, T):
    """Each partition draws its rows from the slacks it kept: the same new assignment, energy and
    moved coefficients as :func:`_redraw` on all rows' slacks in one array, for 1 or 3
    partitions.  The draw waits in the partitions until a message names its seed; the replies
    carry only the re-assigned rows that have coefficients, never an n-long or n x q array."""
    from dmcsvm.coordinators.coefficients import CoefficientRows
    from dmcsvm.coordinators.multiprototype import _moved, _redraw, _redraw_parts, _slacks
    from dmcsvm.engine.executor import InProcessExecutor
    from dmcsvm.engine.messages import PrototypeMessage
    from dmcsvm.engine.partition import PartitionSettings
    from dmcsvm.engine.prototype_partition import PrototypePartition

    rng = np.random.default_rng(3)
    n, m, q = 90, 3, 3
    X = rng.normal(size=(n, 4))
    cls = rng.integers(0, m, n)
    pcls = np.repeat(np.arange(m), q)
    first, _ = prototype_groups(pcls)
    yp = first[cls] + rng.integers(0, q, n)
    row_C = rng.uniform(0.5, 2.0, n) if weighted else None
    F = rng.normal(size=(n, m * q))
    # a third of the rows hold coefficients: +a on their prototype, -a on one of another class
    Bd = np.zeros((n, m * q))
    held = rng.choice(n, 30, replace=False)
    Bd[held, yp[held]] = 0.5
    Bd[held, (yp[held] + q) % (m * q)] = -0.5
    B = CoefficientRows(n, m * q)
    B[held] = Bd[held]
    draws = []
    for n_parts in (1, 3):
        pset = PartitionSettings(
            kernel=KernelSpec("rbf", gamma=0.5).to_dict(),
            C=1.5,
            selection=pt.SEL_KKT,
            tol=1e-3,
            n_candidates=8,
            pcls=pcls,
            shrinking=False,
        )
        ex = _Recording(
            InProcessExecutor(1, n_parts).start(
                X, yp, cls, pset, partition_cls=PrototypePartition, row_C=row_C
            )
        )
        for p in ex.ex.parts:
            p.F[:] = F[p.lo : p.hi]
            p.B[:] = Bd[p.lo : p.hi]
        slack, mM, _ = _slacks(ex, None, False, False, 4, False, np.float64)
        n_changed, E_new, moved = _redraw_parts(ex, 77, T, mM)
        # a partition without kept slacks (rebuilt after a lost worker) computes them: same draw
        for p in ex.ex.parts:
            p._xi = None
        again = _redraw_parts(ex, 77, T, mM)
        assert again[:2] == (n_changed, E_new)
        for a, b in zip(again[2], moved, strict=False):
            np.testing.assert_array_equal(a, b)
        assert all(
            v.shape[0] <= moved[0].shape[0]
            for _, reps in ex.replies
            for rep in reps
            for v in rep.get("moved", {}).values()
        )
        # nothing installed until a message names the draw's seed
        np.testing.assert_array_equal(np.concatenate(ex.call("assignment")), yp)
        ex.ex.step(PrototypeMessage(assign=77))
        draws.append((n_changed, E_new, moved, np.concatenate(ex.call("assignment"))))
        ex.close()
    xi = np.empty((n, q))
    lp.positive_slacks(F, cls, pcls, first, np.full(m, q), xi)
    new_yp, E_ref, changed_ref, moved_ref = _redraw(xi, yp, cls, first, 77, T, 1.5, mM, B, row_C)
    assert moved_ref.size == np.intersect1d(changed_ref, held).size > 0
    assert np.array_equal(moved_ref, _moved(B, changed_ref, yp))
    own = xi[np.arange(n), yp - first[cls]]
    assert slack == pytest.approx(1.5 * own.sum() if row_C is None else row_C @ own, rel=1e-12)
    assert changed_ref.size > 0
    for n_changed, E_new, (ids, old, new), got in draws:
        assert n_changed == changed_ref.size
        np.testing.assert_array_equal(got, new_yp)
        np.testing.assert_array_equal(ids, moved_ref)
        np.testing.assert_array_equal(old, yp[moved_ref])
        np.testing.assert_array_equal(new, new_yp[moved_ref])
        assert E_new == pytest.approx(E_ref, rel=1e-12)
