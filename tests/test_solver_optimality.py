"""The solver reaches the exact optimum of the Crammer-Singer dual.

Every optimizer x selection x threshold combination is checked against an exact QP solution
(cvxpy + CLARABEL) on one small problem per kernel, both on the dual value and on the KKT
conditions of Aiolli-Sperduti 2005 Eq. 15 recomputed from scratch (F = K B).  Two classes must
reproduce a bias-free binary SVM, the linear kernel LIBLINEAR's Crammer-Singer solver, and the
optimum must not depend on the batch size, the number of threads or the partitioning.
"""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVC

from dmcsvm.kernels import KernelSpec, kernel_reference
from dmcsvm.numerics import pattern as pt
from dmcsvm.numerics.selection import THRESHOLDS

OPTIMIZERS = list(pt.OPTIMIZERS)
SELECTIONS = list(pt.SELECTIONS)

# one small problem per kernel: (seed, n, d, m, spec, C)
PROBLEMS = {
    "linear": (11, 45, 4, 3, KernelSpec("linear"), 0.7),
    "poly": (12, 50, 3, 4, KernelSpec("poly", gamma=0.2, degree=3, coef0=1.0), 1.0),
    "rbf": (13, 60, 5, 5, KernelSpec("rbf", gamma=0.3), 2.0),
}

SOLVER_TOL = 1e-8  # the solver stops when every psi (CS Eq. 32) is <= this
DUAL_RTOL = 1e-8  # the oracle agrees with itself to ~1e-13 on these problems
KKT_TOL = 2 * SOLVER_TOL  # psi bounds every Eq. 15 violation; 2x for recomputing F = K B


@pytest.fixture(scope="module")
def problems(cs):
    """Data, kernel matrix and the exact optimum (D*, B*) of every problem, solved once."""
    out = {}
    for name, (seed, n, d, m, spec, C) in PROBLEMS.items():
        X, y = cs.make_blobs_problem(seed, n, d, m, spread=1.2, scale=1.5)
        K = kernel_reference(spec, X, X)
        D_star, B_star = cs.cs_dual_qp(K, y, m, C)
        out[name] = dict(X=X, y=y, m=m, spec=spec, C=C, K=K, D=D_star, B=B_star)
    return out


def _check_optimal(cs, p, B, r, label):
    """Dual value within DUAL_RTOL of the exact optimum, feasibility, and no Eq. 15 violation
    beyond KKT_TOL (a solver that stopped at 100 x its tol would fail here)."""
    assert r.converged, f"{label}: not converged after {r.n_iter} rounds"
    cs.check_feasible(B, p["y"], p["C"], atol=1e-9)
    D = cs.dual_value(B, p["K"], p["y"])
    assert abs(D - p["D"]) <= DUAL_RTOL * abs(p["D"]), f"{label}: dual {D} vs exact {p['D']}"
    F = p["K"] @ B
    viol, _ = cs.kkt_violation(B, F, p["y"], p["C"])
    assert viol <= KKT_TOL, f"{label}: KKT (AS 2005 Eq. 15) violated by {viol:.3g}"
    # the solver's own last reported dual matches the recomputed one
    assert r.history["dual"][-1] == pytest.approx(D, rel=1e-8)
    # at the optimum the duality gap closes (primal recomputed from F)
    P = cs.primal_from_scores(F, np.sum(B * F), p["y"], p["C"])
    assert P - D <= 1e-5 * abs(P), f"{label}: primal {P} dual {D}"
    return D


@pytest.mark.parametrize("threshold", THRESHOLDS)
@pytest.mark.parametrize("selection", SELECTIONS)
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("kernel", list(PROBLEMS))
def test_every_combination_reaches_exact_optimum(
    cs, problems, kernel, optimizer, selection, threshold
):
    p = problems[kernel]
    # batch 7 (< n): the threshold decides which candidates enter a batch
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        B, r = cs.run_solver(
            p["X"],
            p["y"],
            p["m"],
            p["spec"],
            p["C"],
            optimizer=optimizer,
            selection=selection,
            threshold=threshold,
            batch_size=7,
            tol=SOLVER_TOL,
        )
    _check_optimal(cs, p, B, r, f"{kernel}/{optimizer}/{selection}/{threshold}")


@pytest.mark.parametrize("selection", SELECTIONS)
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("kernel", ["poly", "rbf"])
def test_working_set_solve_reaches_exact_optimum(cs, problems, kernel, optimizer, selection):
    """MulticlassSVC's round: the batch solved on K_BB by re-selection (inner_steps > 0),
    the kernel values kept between rounds.  No threshold parameter: this solve takes the best
    candidates and re-selects inside the batch, so every threshold takes the same rounds
    (:func:`test_working_set_solve_does_not_depend_on_the_threshold`)."""
    p = problems[kernel]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        B, r = _working_set_run(cs, p, optimizer, selection, "mean")
    _check_optimal(cs, p, B, r, f"working set {kernel}/{optimizer}/{selection}")
    assert sum(r.history["steps"]) >= sum(r.history["batch"])


@pytest.mark.parametrize("selection", SELECTIONS)
@pytest.mark.parametrize("kernel", ["poly", "rbf"])
def test_exact_step_working_set_reaches_exact_optimum(cs, problems, kernel, selection):
    """The working-set round with the exact optimizer's steps not over-relaxed
    (``inner_relax=1``; the default 1.4 is what the test above runs) reaches the same exact
    optimum."""
    p = problems[kernel]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        B, r = _working_set_run(cs, p, "exact", selection, "mean", inner_relax=1.0)
    _check_optimal(cs, p, B, r, f"exact-step working set {kernel}/{selection}")


def _working_set_run(cs, p, optimizer, selection, threshold, **extra):
    return cs.run_solver(
        p["X"],
        p["y"],
        p["m"],
        p["spec"],
        p["C"],
        optimizer=optimizer,
        selection=selection,
        threshold=threshold,
        batch_size=7,
        tol=SOLVER_TOL,
        inner_steps=20.0,
        **extra,
    )


@pytest.mark.parametrize("kernel", ["poly", "rbf"])
def test_working_set_solve_does_not_depend_on_the_threshold(cs, problems, kernel):
    """Every threshold gives the working-set solve the same rounds and coefficients bit for bit
    (the threshold only picks a one-pass batch), so the optimality shown above for one threshold
    holds for all of them."""
    p = problems[kernel]
    runs = {t: _working_set_run(cs, p, "fixed_point", "amg", t) for t in THRESHOLDS}
    B0, r0 = runs["mean"]
    for t, (B, r) in runs.items():
        assert r.n_iter == r0.n_iter, f"threshold {t}: {r.n_iter} rounds, mean: {r0.n_iter}"
        assert list(r.history["batch"]) == list(r0.history["batch"]), t
        assert list(r.history["steps"]) == list(r0.history["steps"]), t
        np.testing.assert_array_equal(B, B0, err_msg=f"threshold {t}")


@pytest.mark.parametrize("batch_size", [1, 7, 64])
@pytest.mark.parametrize("optimizer", ["exact", "fixed_point", "basic"])
def test_batch_size_does_not_change_the_optimum(cs, problems, optimizer, batch_size):
    p = problems["rbf"]
    B, r = cs.run_solver(
        p["X"],
        p["y"],
        p["m"],
        p["spec"],
        p["C"],
        optimizer=optimizer,
        selection="bmg",
        threshold="mean",
        batch_size=batch_size,
        tol=SOLVER_TOL,
    )
    _check_optimal(cs, p, B, r, f"batch {batch_size}")
    assert r.history["batch"].__len__() == r.n_iter
    assert max(r.history["batch"]) <= batch_size
    if batch_size == 1:
        # the papers' sequential algorithm: exactly one pattern per round that changed anything
        assert set(r.history["batch"]) <= {0, 1}


@pytest.mark.parametrize("kernel", list(PROBLEMS))
def test_shrinking_does_not_change_the_optimum(cs, problems, kernel):
    p = problems[kernel]
    n = p["X"].shape[0]
    B1, r1 = cs.run_solver(p["X"], p["y"], p["m"], p["spec"], p["C"], shrinking=True)
    B0, r0 = cs.run_solver(p["X"], p["y"], p["m"], p["spec"], p["C"], shrinking=False)
    assert min(r1.history["n_active"]) < n  # rows were shrunk ...
    assert r1.history["n_active"][-1] == n  # ... and restored for the final check
    assert min(r0.history["n_active"]) == n
    _check_optimal(cs, p, B1, r1, "shrinking")
    _check_optimal(cs, p, B0, r0, "no shrinking")


def test_batch_sweeps_reach_the_same_optimum(cs, problems):
    p = problems["poly"]
    B, r = cs.run_solver(
        p["X"], p["y"], p["m"], p["spec"], p["C"], batch_size=16, batch_sweeps=5, tol=SOLVER_TOL
    )
    _check_optimal(cs, p, B, r, "sweeps")


@pytest.mark.parametrize("n_threads,n_partitions", [(1, None), (2, None), (2, 5), (1, 3)])
def test_threads_and_partitions_give_the_same_optimum(cs, problems, n_threads, n_partitions):
    p = problems["rbf"]
    B, r = cs.run_solver(
        p["X"],
        p["y"],
        p["m"],
        p["spec"],
        p["C"],
        batch_size=7,
        tol=SOLVER_TOL,
        n_threads=n_threads,
        n_partitions=n_partitions,
    )
    D = _check_optimal(cs, p, B, r, f"{n_threads} threads, {n_partitions} partitions")
    B1, r1 = cs.run_solver(
        p["X"],
        p["y"],
        p["m"],
        p["spec"],
        p["C"],
        batch_size=7,
        tol=SOLVER_TOL,
        n_threads=1,
        n_partitions=1,
    )
    assert D == pytest.approx(cs.dual_value(B1, p["K"], p["y"]), rel=1e-9)
    # the optimal scores (hence the decision function) are unique
    np.testing.assert_allclose(p["K"] @ B, p["K"] @ B1, atol=1e-5)


def test_small_partitions_run_in_turn_with_the_pool_s_result(cs, problems, monkeypatch):
    """Partitions below InProcessExecutor.POOL_MIN_ROWS rows run in turn on the calling thread;
    on the thread pool (the limit lowered to 0) the solve is the same bit for bit."""
    from dmcsvm.engine import executor as ex_mod

    p = problems["rbf"]
    pools = []
    start = ex_mod.InProcessExecutor.start

    def recording_start(self, *args, **kwargs):
        out = start(self, *args, **kwargs)
        pools.append(self._pool is not None)
        return out

    monkeypatch.setattr(ex_mod.InProcessExecutor, "start", recording_start)
    kw = dict(batch_size=7, tol=SOLVER_TOL, n_threads=2, n_partitions=3)
    B1, r1 = cs.run_solver(p["X"], p["y"], p["m"], p["spec"], p["C"], **kw)
    monkeypatch.setattr(ex_mod.InProcessExecutor, "POOL_MIN_ROWS", 0)
    B2, r2 = cs.run_solver(p["X"], p["y"], p["m"], p["spec"], p["C"], **kw)
    assert pools == [False, True]
    assert r1.n_iter == r2.n_iter
    np.testing.assert_array_equal(B1, B2)


def test_in_process_result_is_deterministic(cs, problems):
    p = problems["linear"]
    B1, r1 = cs.run_solver(p["X"], p["y"], p["m"], p["spec"], p["C"], n_threads=2)
    B2, r2 = cs.run_solver(p["X"], p["y"], p["m"], p["spec"], p["C"], n_threads=2)
    assert r1.n_iter == r2.n_iter
    np.testing.assert_array_equal(r1.support, r2.support)
    np.testing.assert_allclose(B1, B2, rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------------
# two classes = bias-free binary SVM
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel", ["linear", "rbf"])
def test_two_classes_reproduce_bias_free_binary_svm(cs, kernel):
    """With m = 2 and ``B[i, y_i] = alpha_i = -B[i, other]`` the CS dual is
    ``sum alpha - sum_ij alpha_i alpha_j s_i s_j K_ij`` (s = +1 for class 1, -1 for class 0),
    i.e. with ``a = 2 alpha``: ``1/2 (sum a - 1/2 a^T (ss^T o K) a)``, ``0 <= a <= 2C``.  So the
    two-class CS machine with C is the bias-free binary SVM with ``C' = 2C``; its decision
    function ``f_1 - f_0 = sum_i 2 s_i alpha_i k(x_i, .)`` equals the binary
    ``g = sum_i a_i s_i k(x_i, .)`` exactly (factor 1), and ``D_CS = D_bin / 2``."""
    X, y = cs.make_blobs_problem(21, 50, 3, 2, spread=1.5, scale=1.0)
    spec = KernelSpec("linear") if kernel == "linear" else KernelSpec("rbf", gamma=0.4)
    C = 1.5
    K = kernel_reference(spec, X, X)
    s = np.where(y == 1, 1.0, -1.0)
    D_bin, a = cs.binary_svm_dual_qp(K, s, 2.0 * C)
    B, r = cs.run_solver(X, y, 2, spec, C, tol=1e-9)
    assert r.converged
    assert cs.dual_value(B, K, y) == pytest.approx(D_bin / 2.0, rel=1e-7)
    Xt = np.vstack([X, np.random.default_rng(0).normal(scale=2.0, size=(25, 3))])
    Kt = kernel_reference(spec, Xt, X)
    g = Kt @ (a * s)
    f = Kt @ B
    np.testing.assert_allclose(f[:, 1] - f[:, 0], g, atol=1e-5)
    # and the CS alphas are half the binary ones where the binary solution is unique (rbf: K > 0)
    if kernel == "rbf":
        np.testing.assert_allclose(B[np.arange(50), y], a / 2.0, atol=1e-5)


# ------------------------------------------------------------------------------------------------
# linear kernel = LIBLINEAR's Crammer-Singer solver
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("C", [0.05, 0.5, 3.0])
def test_linear_kernel_matches_liblinear_crammer_singer(cs, C):
    X, y = cs.make_blobs_problem(31, 60, 5, 4, spread=1.5, scale=2.0)
    n = X.shape[0]

    def primal(W):
        S = X @ W.T
        So = S.copy()
        So[np.arange(n), y] = -np.inf
        return 0.5 * np.sum(W * W) + C * np.maximum(0.0, 1.0 + So.max(1) - S[np.arange(n), y]).sum()

    lin = LinearSVC(
        multi_class="crammer_singer", fit_intercept=False, C=C, tol=1e-8, max_iter=100000
    ).fit(X, y)
    P_lib = primal(lin.coef_)
    B, r = cs.run_solver(X, y, 4, KernelSpec("linear"), C, tol=SOLVER_TOL)
    assert r.converged
    W = B.T @ X  # prototypes w_r = sum_i B[i, r] x_i
    P_ours = primal(W)
    assert P_ours == pytest.approx(P_lib, rel=1e-3)
    assert r.history["primal"][-1] == pytest.approx(P_ours, rel=1e-9)
    # our primal is at least as good as LIBLINEAR's (both are minimizers up to tolerance)
    assert P_ours <= P_lib * (1 + 1e-6)
    # the primal solution is unique: the prototypes agree too
    np.testing.assert_allclose(W, lin.coef_, atol=1e-3 * max(1.0, np.abs(W).max()))


# ------------------------------------------------------------------------------------------------
# degenerate data
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def degenerate(cs):
    """Linear kernel with a zero input (K_pp = 0: the pattern can never reach its margin, so its
    alpha must go to C), two exact duplicates with their label, and a class of one sample."""
    rng = np.random.default_rng(5)
    X, y = cs.make_blobs_problem(51, 30, 3, 3, spread=1.2, scale=1.5)
    X = np.vstack([X, np.zeros((1, 3)), X[:2], rng.normal(size=(1, 3))])
    y = np.r_[y, 0, y[:2], 3].astype(np.int64)
    spec = KernelSpec("linear")
    K = kernel_reference(spec, X, X)
    D, B = cs.cs_dual_qp(K, y, 4, 1.0)
    return dict(X=X, y=y, m=4, spec=spec, C=1.0, K=K, D=D, B=B)


@pytest.mark.parametrize("selection", SELECTIONS)
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_degenerate_problem_reaches_exact_optimum(cs, degenerate, optimizer, selection):
    p = degenerate
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        B, r = cs.run_solver(
            p["X"],
            p["y"],
            p["m"],
            p["spec"],
            p["C"],
            optimizer=optimizer,
            selection=selection,
            batch_size=4,
            tol=SOLVER_TOL,
        )
    _check_optimal(cs, p, B, r, f"degenerate/{optimizer}/{selection}")
    zero = p["X"].shape[0] - 4
    assert B[zero, p["y"][zero]] == pytest.approx(p["C"], abs=1e-12)


def _solve_keeping_partitions(p, sparse=False, **extra):
    """``solve`` on the in-process executor with every row in one working set (batch 500), the
    rows dense or CSR, returning ``(B, result, [(lo, hi, F) of every partition])``."""
    import scipy.sparse as sp

    from dmcsvm.coordinators.crammer_singer import SolverSettings, solve
    from dmcsvm.engine.executor import InProcessExecutor
    from dmcsvm.engine.partition import PartitionSettings

    X, y, m = p["X"], p["y"], p["m"]
    if sparse:
        X = sp.csr_matrix(X)
    s = SolverSettings(C=p["C"], tol=SOLVER_TOL, gap_tol=0.0, batch_size=500, **extra).check()
    pset = PartitionSettings(
        kernel=p["spec"].to_dict(),
        C=p["C"],
        selection=pt.SELECTIONS[s.selection],
        tol=s.tol,
        n_candidates=s.batch_size,
        pcls=np.arange(m),
        cache_bytes=10**6,
    )
    ex = InProcessExecutor(2, 3).start(X, y, y, pset)
    try:
        r = solve(ex, X.shape[0], np.arange(m), p["spec"], s, X.shape[1], sparse)
        parts = [(q.lo, q.hi, q.F.copy()) for q in ex.parts]
    finally:
        ex.close()
    B = np.zeros((X.shape[0], m))
    B[r.support] = r.coef
    return B, r, parts


@pytest.mark.parametrize(
    "kernel,sparse", [(k, False) for k in PROBLEMS] + [("rbf", True), ("poly", True)]
)
def test_rounds_in_the_gram_block_reach_the_exact_optimum(cs, problems, kernel, sparse):
    """A fresh fit whose working set holds every row runs its rounds in the coordinator's Gram
    block (coordinators.whole_block; for CSR rows one block computed at once): the partitions
    compute no kernel column, take the block's scores, which equal ``K B`` of the result, and
    their check ends the fit at the exact optimum, as the partitions' own rounds reach it."""
    p = problems[kernel]
    B, r, parts = _solve_keeping_partitions(p, sparse)
    _check_optimal(cs, p, B, r, "rounds in the block")
    assert r.history["rows_computed"][-1] == 0  # no partition computed a kernel column
    assert r.n_iter >= 3  # several rounds in the block, then the partitions' check
    for lo, hi, F in parts:
        np.testing.assert_allclose(F, p["K"][lo:hi] @ B, rtol=0, atol=1e-9)
    B0, r0, _ = _solve_keeping_partitions(p, sparse, whole_block=False)
    _check_optimal(cs, p, B0, r0, "the partitions' rounds")
    assert r0.history["rows_computed"][-1] > 0


def test_rounds_in_the_gram_block_stop_at_max_iter_with_the_partitions_in_step(cs, problems):
    """max_iter counts the rounds run in the block; the partitions still take their result, so
    the coefficients returned are the ones their scores describe."""
    p = problems["rbf"]
    with pytest.warns(ConvergenceWarning, match="max_iter=2 rounds"):
        B, r, parts = _solve_keeping_partitions(p, max_iter=2)
    assert r.n_iter == 2 and not r.converged
    assert np.any(B != 0.0)
    for lo, hi, F in parts:
        np.testing.assert_allclose(F, p["K"][lo:hi] @ B, rtol=0, atol=1e-9)
