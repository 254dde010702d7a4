"""Test helpers: the exact QP oracles (cvxpy + CLARABEL), a direct driver of the solver, and
independent NumPy implementations of the dual value, the primal and the KKT conditions.

Importable from any test module as ``import oracles``: ``tests/`` has no ``__init__.py``, so
pytest's default ``prepend`` import mode puts ``tests/`` itself on ``sys.path``.

Everything here follows the notation of docs/design.md, 'The Crammer-Singer dual': ``B`` (n x m)
holds the signed coefficients, ``F = K B`` the scores, ``D = sum_i B[i, y_i] - 1/2 sum(B * F)`` the
dual and ``P = 1/2 sum(B * F) + C sum_i max(0, 1 + max_{r != y_i} F[i, r] - F[i, y_i])`` the primal.

``tests/conftest.py`` keeps only fixtures; its session-scoped ``cs`` fixture hands out this module
as a namespace.
"""

from __future__ import annotations

import numpy as np

# ------------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------------


def make_blobs_problem(seed, n, d, m, spread=1.0, scale=2.0):
    """Overlapping Gaussian blobs: ``m`` classes, every class present, labels 0..m-1 (int64)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=scale, size=(m, d))
    y = np.concatenate([np.arange(m), rng.integers(0, m, n - m)]).astype(np.int64)
    rng.shuffle(y)
    X = centers[y] + spread * rng.normal(size=(n, d))
    return X, y


# ------------------------------------------------------------------------------------------------
# independent NumPy formulas
# ------------------------------------------------------------------------------------------------


def psd_factor(K):
    """``L`` with ``K = L L^T`` (eigen-decomposition; exact also for rank-deficient K)."""
    K = 0.5 * (K + K.T)
    w, V = np.linalg.eigh(K)
    w = np.clip(w, 0.0, None)
    keep = w > w.max() * 1e-14
    return V[:, keep] * np.sqrt(w[keep])


def dual_value(B, K, y):
    """``D = sum_i B[i, y_i] - 1/2 sum(B * (K B))``."""
    n = B.shape[0]
    return B[np.arange(n), y].sum() - 0.5 * np.sum(B * (K @ B))


def primal_from_scores(F, normM2, y, C):
    """``1/2 ||M||^2 + C sum_i max(0, 1 + max_{r != y_i} F[i, r] - F[i, y_i])``."""
    n = F.shape[0]
    Fo = F.copy()
    Fo[np.arange(n), y] = -np.inf
    xi = np.maximum(0.0, 1.0 + Fo.max(axis=1) - F[np.arange(n), y])
    if np.ndim(C):  # per-pattern bounds C_i (class / sample weights)
        return 0.5 * normM2 + float(np.dot(C, xi))
    return 0.5 * normM2 + C * xi.sum()


def kkt_violation(B, F, y, C, zero=1e-12, at_c=1e-9):
    """Largest violation over all patterns of the three non-optimality conditions of
    Aiolli-Sperduti 2005 Eq. 15 (one prototype per class):

    (a) ``alpha_y < C and F_y < max_N F + 1``              -> ``max_N F + 1 - F_y``
    (b) ``alpha_y > 0 and F_y > max_{N, a_r > 0} F + 1``    -> ``F_y - 1 - max_{N, a_r > 0} F``
    (c) ``alpha_y > 0 and max_N F > min_{N, a_r > 0} F``    -> ``max_N F - min_{N, a_r > 0} F``

    ``alpha_r > 0`` is read as ``-B[i, r] > zero``, ``alpha_y < C`` as ``B[i, y] < C (1 - at_c)``.
    ``C`` may be one bound per pattern (weights).
    Returns ``(max violation, per-pattern violations)``.
    """
    n, m = B.shape
    viol = np.zeros(n)
    Cs = C
    for i in range(n):
        C = Cs[i] if np.ndim(Cs) else Cs
        yi = y[i]
        neg = np.arange(m) != yi
        a_y = B[i, yi]
        fN = F[i, neg]
        aN = -B[i, neg]
        v = 0.0
        if a_y < C * (1.0 - at_c):
            v = max(v, fN.max() + 1.0 - F[i, yi])
        if a_y > zero:
            sup = aN > zero
            if sup.any():
                v = max(v, F[i, yi] - 1.0 - fN[sup].max())
                v = max(v, fN.max() - fN[sup].min())
        viol[i] = v
    return viol.max(), viol


def check_feasible(B, y, C, atol=1e-10):
    """Feasibility of the Crammer-Singer dual (docs/design.md, 'The Crammer-Singer dual') for one
    prototype per class (``C`` a scalar or one bound per pattern)."""
    n, m = B.shape
    own = B[np.arange(n), y]
    other = B.copy()
    other[np.arange(n), y] = 0.0
    assert np.all(np.abs(B.sum(axis=1)) <= atol * max(1.0, np.max(C))), "row sums are not zero"
    assert np.all(own >= -atol) and np.all(own <= C * (1 + 1e-12) + atol), "alpha_y outside [0, C]"
    assert np.all(other <= atol), "a negative prototype has a positive coefficient"


# ------------------------------------------------------------------------------------------------
# exact oracles
# ------------------------------------------------------------------------------------------------


def clarabel_solve(problem):
    """Solve a cvxpy problem with CLARABEL at 1e-12 tolerances; asserts it is optimal."""
    import cvxpy as cp

    problem.solve(
        solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12, max_iter=500
    )
    assert problem.status == "optimal", problem.status
    return problem.value


_clarabel = clarabel_solve  # the name conftest.py used


def cs_dual_qp(K, y, m, C):
    """Exact optimum of the Crammer-Singer dual: ``(D*, B*)``; ``C`` a scalar or one bound
    ``C_i`` per pattern (class / sample weights: ``alpha_i^{y_i} <= C_i``)."""
    import cvxpy as cp

    n = len(y)
    L = psd_factor(K)
    Bv = cp.Variable((n, m))
    Y = np.zeros((n, m))
    Y[np.arange(n), y] = 1.0
    cons = [
        cp.sum(Bv, axis=1) == 0,
        cp.multiply(1.0 - Y, Bv) <= 0,
        cp.sum(cp.multiply(Y, Bv), axis=1) <= C,
    ]
    obj = cp.Maximize(cp.sum(cp.multiply(Y, Bv)) - 0.5 * cp.sum_squares(L.T @ Bv))
    val = clarabel_solve(cp.Problem(obj, cons))
    return val, Bv.value


def binary_svm_dual_qp(K, s, C, bias=False):
    """Binary C-SVM: ``max sum a - 1/2 a^T (s s^T o K) a, 0 <= a <= C`` (``C`` a scalar or one
    bound per pattern), bias-free or (``bias``) with ``s'a = 0``; returns ``(value, a)`` with
    decision function ``g(x) = sum_i a_i s_i k(x_i, x) (+ b)``."""
    import cvxpy as cp

    n = len(s)
    L = psd_factor(K)
    a = cp.Variable(n)
    obj = cp.Maximize(cp.sum(a) - 0.5 * cp.sum_squares(L.T @ cp.multiply(s, a)))
    cons = [a >= 0, a <= C] + ([s @ a == 0] if bias else [])
    val = clarabel_solve(cp.Problem(obj, cons))
    return val, a.value


def reduced_pattern_qp(b0, f, y, c, pcls, kpp, C):
    """Exact solution of one pattern's reduced problem (docs/design.md, 'The Crammer-Singer dual',
    AS 2005 units): ``max 2 b[y] - (kpp ||b||^2 + 2 b . f_other)`` with ``f_other = f - kpp b0``,
    subject to ``sum b = 0``, ``0 <= b[y] <= C``, ``b[r] <= 0`` for ``pcls[r] != c``, ``b[r] = 0``
    for the other positive prototypes.  Returns ``(b*, value(b*) - value(b0))`` (the Lagrangian
    gain)."""
    import cvxpy as cp

    P = len(b0)
    f_other = f - kpp * b0
    b = cp.Variable(P)
    cons = [cp.sum(b) == 0, b[y] >= 0, b[y] <= C]
    for r in range(P):
        if r == y:
            continue
        if pcls[r] != c:
            cons.append(b[r] <= 0)
        else:
            cons.append(b[r] == 0)
    obj = cp.Maximize(2 * b[y] - kpp * cp.sum_squares(b) - 2 * (f_other @ b))
    clarabel_solve(cp.Problem(obj, cons))
    bs = np.asarray(b.value, dtype=float)
    return bs, reduced_value(bs, f_other, y, kpp) - reduced_value(b0, f_other, y, kpp)


def reduced_value(b, f_other, y, kpp):
    """``2 b[y] - (kpp ||b||^2 + 2 b . f_other)``: its share of ``sum alpha - ||M||^2``."""
    return 2.0 * b[y] - (kpp * np.dot(b, b) + 2.0 * np.dot(b, f_other))


# ------------------------------------------------------------------------------------------------
# driving the solver directly
# ------------------------------------------------------------------------------------------------


def run_solver(
    X,
    y,
    m,
    spec,
    C,
    optimizer="exact",
    selection="bmg",
    threshold="mean",
    batch_size=7,
    tol=1e-8,
    n_threads=2,
    n_partitions=None,
    max_iter=20000,
    shrinking=True,
    **extra,
):
    """Run :func:`dmcsvm.coordinators.crammer_singer.solve` on the in-process executor; returns
    ``(B (n x m), SolveResult)``."""
    from dmcsvm.coordinators.crammer_singer import SolverSettings, solve
    from dmcsvm.engine.executor import InProcessExecutor
    from dmcsvm.engine.partition import PartitionSettings
    from dmcsvm.numerics import pattern as pt

    n, d = X.shape
    s = SolverSettings(
        C=C,
        optimizer=optimizer,
        selection=selection,
        threshold=threshold,
        tol=tol,
        gap_tol=0.0,
        batch_size=batch_size,
        max_iter=max_iter,
        shrinking=shrinking,
        **extra,
    ).check()
    pset = PartitionSettings(
        kernel=spec.to_dict(),
        C=C,
        selection=pt.SELECTIONS[selection],
        tol=s.tol,
        n_candidates=batch_size,
        pcls=np.arange(m),
        shrinking=shrinking,
        shrink_after=s.shrink_after,
        cache_bytes=10**6,
    )
    ex = InProcessExecutor(n_threads, n_partitions).start(X, y, y, pset)
    try:
        r = solve(ex, n, np.arange(m), spec, s, d, False)
    finally:
        ex.close()
    B = np.zeros((n, m))
    B[r.support] = r.coef
    return B, r
