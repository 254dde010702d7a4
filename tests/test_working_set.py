"""The coordinator's working-set solve: re-selection on K_BB, the kept Gram block, and
the stopping rule (``tol`` alone decides the precision).

* :func:`dmcsvm.numerics.working_set.solve_working_set` against a NumPy recomputation: every batch
  row ends with ``psi <= inner_tol`` on the scores ``F_B + K_BB dB`` recomputed from scratch, the
  rows stay feasible, the dual never drops, and reading ``K_BB`` through positions of a larger
  Gram matrix gives the same result bit for bit;
* :class:`dmcsvm.coordinators.crammer_singer._GramCache` returns ``K(X_B, X_B)`` for overlapping
  batches, also after it ran out of budget and started over;
* ``tol`` binds: the relative dual error against the exact QP optimum shrinks with ``tol``
  (default stopping, no second parameter) and stays below it;
* every optimizer x selection x threshold reaches the QP optimum within the default ``tol``.
"""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from dmcsvm import MulticlassSVC
from dmcsvm.coordinators.crammer_singer import SolverSettings, _GramCache
from dmcsvm.kernels import KernelSpec, kernel_block, kernel_reference
from dmcsvm.numerics import passes
from dmcsvm.numerics import pattern as pt
from dmcsvm.numerics import working_set as ws
from dmcsvm.numerics.selection import THRESHOLDS


def _batch_problem(seed, nb=40, P=5, C=2.0, gamma=0.4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(nb, 4))
    K = kernel_reference(KernelSpec("rbf", gamma=gamma), X, X)
    y = rng.integers(0, P, nb).astype(np.int64)
    # a feasible start: some rows with coefficients, scores of an outside part plus K B
    B = np.zeros((nb, P))
    for i in range(0, nb, 3):
        a = rng.uniform(0, C)
        r = (y[i] + 1 + rng.integers(0, P - 1)) % P
        B[i, y[i]], B[i, r] = a, -a
    F = K @ B + rng.normal(scale=0.3, size=(nb, P))
    return B, F, K, y, np.diag(K).copy(), C


def _batch_dual(B, F, K, y):
    """The batch's share of the dual as a function of its coefficients: ``sum alpha_y -
    1/2 ||M||^2`` with the scores ``F`` (at ``B``) minus the batch's own part as the outside."""
    F_out = F - K @ B
    rows = np.arange(B.shape[0])

    def dual(Bx):
        return Bx[rows, y].sum() - 0.5 * np.sum(Bx * (K @ Bx)) - np.sum(Bx * F_out)

    return dual


def _psi_rows(B, F, y, pcls, C):
    return np.array([pt.psi_value(B[k], F[k], y[k], y[k], pcls, C) for k in range(B.shape[0])])


@pytest.mark.parametrize("relax", [1.0, 1.4])
@pytest.mark.parametrize("code", sorted(set(pt.OPTIMIZERS.values())))
@pytest.mark.parametrize("inner_tol", [1e-2, 1e-6])
def test_working_set_solve_reaches_inner_tol(code, inner_tol, relax):
    B, F, K, y, kd, C = _batch_problem(3)
    pcls = np.arange(B.shape[1])
    gpos = np.arange(B.shape[0])
    dB, gains, steps = ws.solve_working_set(
        code, B, F, K, gpos, y, y, pcls, kd, C, 1e-8, 1e-10, 10**6, inner_tol, relax
    )
    B1 = B + dB
    F1 = F + K @ dB
    assert _psi_rows(B1, F1, y, pcls, C).max() <= inner_tol * (1 + 1e-6) + 1e-12
    # feasible: rows sum to zero, own coefficient in [0, C], others <= 0
    n = B.shape[0]
    assert np.abs(B1.sum(1)).max() <= 1e-9 * C
    own = B1[np.arange(n), y]
    assert own.min() >= -1e-12 and own.max() <= C * (1 + 1e-12)
    other = B1.copy()
    other[np.arange(n), y] = 0.0
    assert other.max() <= 1e-12
    # the batch's share of the dual (sum alpha_y - 1/2 ||M||^2 with F as the outside part) rises
    dual = _batch_dual(B, F, K, y)
    assert dual(B1) >= dual(B) - 1e-12
    if code == pt.OPT_EXACT:
        # the reported gains (of 2 alpha_y - ||M||^2, twice the dual) add up to the dual's rise
        # (over-relaxed: g t (2 - t) each)
        assert gains.sum() == pytest.approx(2.0 * (dual(B1) - dual(B)), rel=1e-8)
    assert steps.sum() >= 1 and np.all(steps >= 0)
    assert np.all(steps[~np.any(dB != 0, axis=1)] >= 0)


def test_working_set_reads_kbb_through_gram_positions():
    B, F, K, y, kd, C = _batch_problem(5)
    nb = B.shape[0]
    pcls = np.arange(B.shape[1])
    ref = ws.solve_working_set(
        pt.OPT_EXACT, B, F, K, np.arange(nb), y, y, pcls, kd, C, 1e-6, 1e-8, 10**6, 1e-6
    )
    # the same K_BB inside a larger Gram matrix, rows shuffled
    perm = np.random.default_rng(0).permutation(nb + 7)
    G = np.zeros((nb + 7, nb + 7))
    pos = perm[:nb]
    G[np.ix_(pos, pos)] = K
    out = ws.solve_working_set(
        pt.OPT_EXACT, B, F, G, pos, y, y, pcls, kd, C, 1e-6, 1e-8, 10**6, 1e-6
    )
    for a, b in zip(ref, out, strict=False):
        np.testing.assert_array_equal(a, b)


def _full_scan_solve(code, B, F, K, y, pcls, kd, C, tol, fp_eps, max_steps, inner_tol):
    """The working-set solve's rule with every row's psi computed afresh wherever the rule reads
    it (passes, cuts, steps in batch order, scores moved by ``K[:, j] dB_j``): what the library's
    bounded scan must reproduce exactly."""
    nb = B.shape[0]
    Bc, Fc = B.copy(), F.copy()
    steps, gains = np.zeros(nb, dtype=np.int64), np.zeros(nb)
    bound = (lambda k: C) if np.ndim(C) == 0 else (lambda k: C[k])

    def psi(k):
        return pt.psi_value(Bc[k], Fc[k], y[k], y[k], pcls, bound(k))

    total, first = 0, True
    while True:
        mx = max(psi(k) for k in range(nb))
        cut = passes.pass_cut(mx, tol, inner_tol, first, total, max_steps)
        if cut < 0.0:
            break
        first, moved = False, False
        for j in range(nb):
            if total >= max_steps:
                break
            if psi(j) <= cut:
                continue
            b0, f = Bc[j].copy(), Fc[j].copy()
            phi = (0.1 * tol) ** 2 / (2.0 * kd[j]) if kd[j] > 0.0 else 0.0
            gains[j] += pt.optimize_pattern(
                code, Bc[j], f, y[j], y[j], pcls, kd[j], bound(j), phi, fp_eps
            )
            d = Bc[j] - b0
            for r in np.flatnonzero(d):
                Fc[:, r] += K[:, j] * d[r]
            total += 1
            steps[j] += 1
            moved = moved or bool(d.any())
        if not moved:
            break
    return Bc - B, gains, steps


def test_psi_columns_equal_psi_value():
    """Every column's psi taken prototype by prototype equals :func:`pattern.psi_value` bit for
    bit: classes of 2 / 1 / 3 prototypes (the positive class's other prototypes do not count),
    positive coefficients at, near and below their bound, negatives at 0 and below, per-column
    bounds; over all columns and over a range that starts and ends inside its blocks."""
    rng = np.random.default_rng(21)
    pcls = np.array([0, 0, 1, 2, 2, 2], dtype=np.int64)
    m, P = 700, pcls.shape[0]
    cls = rng.integers(0, 3, m).astype(np.int64)
    first = np.array([0, 2, 3])
    yp = first[cls] + (rng.integers(0, 3, m) % np.array([2, 1, 3])[cls])
    Cc = rng.uniform(0.5, 2.0, m)
    B = np.where(rng.random((m, P)) < 0.5, -rng.uniform(0.0, 1.0, (m, P)), 0.0)
    rows = np.arange(m)
    B[rows, yp] = np.choose(rng.integers(0, 3, m), [Cc, Cc * (1 - 1e-13), 0.5 * Cc])
    F = rng.normal(size=(m, P))
    FT, BT = np.ascontiguousarray(F.T), np.ascontiguousarray(B.T)
    out = np.empty(m)
    passes.psi_columns(FT, BT, yp, cls, Cc, pcls, 0, m, out)
    want = np.array([pt.psi_value(B[k], F[k], yp[k], cls[k], pcls, Cc[k]) for k in rows])
    assert np.array_equal(out, want)
    assert (want == 0.0).any() and (want > 0.0).any()
    lo, hi = 37, 601
    part = np.full(m, -1.0)
    passes.psi_columns(FT, BT, yp, cls, Cc, pcls, lo, hi, part)
    assert np.array_equal(part[: hi - lo], want[lo:hi]) and (part[hi - lo :] == -1.0).all()


@pytest.mark.parametrize("gamma", [0.4, 6.0])
@pytest.mark.parametrize("code", [pt.OPT_EXACT, pt.OPT_BASIC, pt.OPT_FIXED_POINT])
@pytest.mark.parametrize("weighted", [False, True])
def test_bounded_scan_takes_the_full_scans_steps_bit_for_bit(gamma, code, weighted):
    """The solve evaluates psi only where its running upper bound exceeds what the rule asks
    (narrow kernels: most rows are never looked at again); the passes, steps, coefficients and
    gains are those of evaluating every row every time, bit for bit."""
    B, F, K, y, kd, C = _batch_problem(11, nb=60, gamma=gamma)
    if weighted:
        C = np.random.default_rng(1).uniform(0.5, 3.0, B.shape[0])
        B = np.clip(B, -C[:, None], C[:, None])
        B[np.arange(B.shape[0]), y] = -(B.sum(1) - B[np.arange(B.shape[0]), y])
    pcls = np.arange(B.shape[1])
    for inner_tol, max_steps in ((1e-6, 10**6), (1e-3, 10**6), (1e-8, 37)):
        want = _full_scan_solve(code, B, F, K, y, pcls, kd, C, 1e-8, 1e-10, max_steps, inner_tol)
        got = ws.solve_working_set(
            code,
            B,
            F,
            K,
            np.arange(B.shape[0]),
            y,
            y,
            pcls,
            kd,
            C,
            1e-8,
            1e-10,
            max_steps,
            inner_tol,
        )
        for a, b in zip(got, want, strict=False):
            np.testing.assert_array_equal(a, b)
        assert want[2].sum() > 0


def test_working_set_respects_max_steps():
    B, F, K, y, kd, C = _batch_problem(7)
    pcls = np.arange(B.shape[1])
    _, _, steps = ws.solve_working_set(
        pt.OPT_EXACT, B, F, K, np.arange(B.shape[0]), y, y, pcls, kd, C, 1e-8, 1e-10, 5, 1e-8
    )
    assert steps.sum() == 5


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gram_cache_returns_the_batch_kernel(dtype, monkeypatch):
    import dmcsvm.coordinators.crammer_singer as csmod

    computed = []

    def counting(spec, A, B, **kw):
        computed.append(A.shape[0] * B.shape[0])
        return kernel_block(spec, A, B, **kw)

    monkeypatch.setattr(csmod, "kernel_block", counting)
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 5)).astype(dtype)
    spec = KernelSpec("rbf", gamma=0.3)
    # budget for a 40 x 40 block: the third batch overflows it, and only its own cached rows
    # (30..34) stay, copied; the fourth fits beside them (5 new rows); the last batch, larger
    # than the budget alone, keeps nothing
    cache = _GramCache(spec, 40 * 40 * np.dtype(dtype).itemsize, dtype)
    batches = [
        np.arange(0, 20),
        np.arange(10, 35),
        np.arange(30, 60),
        np.arange(25, 45),
        np.arange(0, 45),
    ]
    tol = 1e-6 if dtype == np.float32 else 1e-12
    for ids in batches:
        before = len(computed)
        G, p = cache.block(ids, X[ids])
        assert len(computed) == before and len(set(p.tolist())) == len(ids)  # placed only
        cache.ensure(p)
        np.testing.assert_allclose(
            G[np.ix_(cache.slot[p], p)], kernel_block(spec, X[ids], X[ids]), atol=tol
        )
        assert np.all(cache.stamp[p] == cache.m)
        computed.append("|")
    # values per call: the new rows over every placed column, the rows computed before
    # completed over the columns placed since, the rows kept through the eviction not at all
    assert computed == [
        20 * 20,
        "|",
        15 * 35,
        10 * 15,
        "|",
        25 * 30,
        5 * 25,
        "|",
        5 * 35,
        15 * 5,
        "|",
        45 * 45,
        "|",
    ]


def test_gram_cache_rows_are_taken_in_the_order_computed_and_reused_after_an_eviction():
    """The rows of ``G`` go to places in the order their values are computed, so the memory
    written is that of the rows computed (a first working set of every fourth place wrote into
    every page of the block); an eviction keeps the kept places' rows where they are, with
    their columns moved left, and the rows it frees are taken again before any new one."""
    rng = np.random.default_rng(8)
    X = rng.normal(size=(60, 4))
    spec = KernelSpec("rbf", gamma=0.3)
    cache = _GramCache(spec, 40 * 40 * 8, np.float64)  # 40 places
    G, p = cache.block(np.arange(40), X[:40])
    first = p[[33, 2, 17]]
    cache.ensure(first)
    assert cache.n_slots == 3 and cache.slot[first].tolist() == [0, 1, 2]
    np.testing.assert_allclose(G[:3, :40], kernel_block(spec, X[[33, 2, 17]], X[:40]), atol=1e-12)
    # the next batch overflows the 40 places: places 30..39 stay (33's row among them), the
    # rows of 2 and 17 are freed and taken first by the next rows computed
    ids = np.arange(30, 60)
    G, p = cache.block(ids, X[ids])
    assert cache.slot[p[3:4]].tolist() == [0]  # id 33 keeps its row
    cache.ensure(p[[0, 10, 20]])  # ids 30, 40, 50
    assert sorted(cache.slot[p[[0, 10, 20]]].tolist()) == [1, 2, 3] and cache.n_slots == 4
    cache.ensure(p)
    assert cache.n_slots == 30
    np.testing.assert_allclose(
        G[np.ix_(cache.slot[p], p)], kernel_block(spec, X[ids], X[ids]), atol=1e-12
    )


def test_gram_cache_takes_its_places_once_and_no_more_than_the_problem_has():
    """The block is allocated once, at the budget's places or the problem's rows if fewer (a
    growth copied the block into fresh pages), and still holds ``K_BB`` as batches come."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(50, 6)).astype(np.float32)
    spec = KernelSpec("rbf", gamma=0.2)
    small = _GramCache(spec, 1e9, np.float32, n_rows=50)  # the budget would hold 15,811
    big = _GramCache(spec, 40 * 40 * 4, np.float32)  # 40 places, no problem size
    for cache, cap in ((small, 50), (big, 40)):
        blocks = []
        for ids in (np.arange(0, 10), np.arange(5, 35), np.arange(20, 50)):
            G, p = cache.block(ids, X[ids])
            blocks.append(G)
            cache.ensure(p)
            ref = kernel_block(spec, X[ids], X[ids], dtype=np.float32)
            np.testing.assert_allclose(G[np.ix_(cache.slot[p], p)], ref, atol=1e-6)
        assert all(G is blocks[0] for G in blocks) and blocks[0].shape == (cap, cap)


def test_gram_cache_places_rows_and_computes_only_those_asked():
    """A working set whose solve steps a few rows computes those rows (and the solve's request
    around them), not the whole block: a batch of 200 where only row 3 violates (and a narrow
    kernel keeps its step from moving the others)."""
    rng = np.random.default_rng(5)
    nb, P = 200, 3
    X = rng.normal(size=(nb, 4))
    spec = KernelSpec("rbf", gamma=50.0)
    y = np.arange(nb) % P
    cache = _GramCache(spec, 10**7, np.float64)
    G, p = cache.block(np.arange(nb), X)
    K = kernel_block(spec, X, X)
    pcls = np.arange(P)
    C = np.full(nb, 1.0)
    # every row optimal (all coefficients 0, scores f_y = 1, others 0: psi = 0) but row 3
    B = np.zeros((nb, P))
    F = np.zeros((nb, P))
    F[np.arange(nb), y] = 1.0
    F[3, y[3]] = -2.0
    dB, gains, steps = ws.solve_working_set(
        pt.OPT_EXACT, B, F, G, p, y, y, pcls, np.ones(nb), C, 1e-3, 5e-4, 20 * nb, 1e-3, rows=cache
    )
    assert steps[3] >= 1
    stepped = p[steps > 0]
    assert np.all(cache.stamp[stepped] == nb)
    # two requests (16 and 32 rows): row 3's, then that of row 37, the one neighbour its step
    # pushed over inner_tol
    assert np.flatnonzero(steps).tolist() == [3, 37]
    assert cache.rows_computed == 3 * ws.ROWS_FIRST_REQUEST
    assert np.count_nonzero(cache.stamp[:nb] == nb) == cache.rows_computed < nb
    np.testing.assert_allclose(
        G[cache.slot[stepped]][:, p],
        K[np.ix_(np.flatnonzero(steps > 0), np.arange(nb))],
        atol=1e-12,
    )


class _RowsFromMatrix:
    """A ``rows`` argument of :func:`solve_working_set` that copies requested rows of a full
    matrix into an initially unknown one (NaN), recording the requests."""

    def __init__(self, G):
        self.full = G
        self.G = np.full_like(G, np.nan)
        self.m = G.shape[0]
        self.stamp = np.full(self.m, -1, dtype=np.int64)
        self.requests = []

    def ensure(self, rows):
        self.requests.append(len(rows))
        self.G[rows] = self.full[rows]
        self.stamp[rows] = self.m


@pytest.mark.parametrize("code", sorted(set(pt.OPTIMIZERS.values())))
def test_working_set_on_requested_rows_equals_the_whole_block(code):
    """The solve stops before a step whose kernel row is missing, asks for it (and the rows it
    will step next) and goes on where it stopped: the same passes, steps and coefficients, bit
    for bit, as with the whole ``K_BB`` given; no unknown value is ever read (NaN would show)."""
    rng = np.random.default_rng(11)
    nb, P, d = 300, 4, 5
    X = rng.normal(size=(nb, d))
    y = rng.integers(0, P, nb).astype(np.int64)
    K = kernel_reference(KernelSpec("rbf", gamma=0.5), X, X)
    gpos = rng.permutation(nb).astype(np.int64)  # the batch's places in the cache
    G = np.empty_like(K)
    G[np.ix_(gpos, gpos)] = K
    pcls = np.arange(P)
    B, F, C = np.zeros((nb, P)), np.zeros((nb, P)), np.full(nb, 1.0)
    args = (B, F)
    rest = (gpos, y, y, pcls, np.ones(nb), C, 1e-3, 5e-4, 20 * nb, 1e-3)
    whole = ws.solve_working_set(code, *args, G, *rest)
    rows = _RowsFromMatrix(G)
    asked = ws.solve_working_set(code, *args, rows.G, *rest, rows=rows)
    for a, b in zip(whole, asked, strict=False):
        np.testing.assert_array_equal(a, b)
    assert len(rows.requests) > 2 and rows.requests[0] == ws.ROWS_FIRST_REQUEST
    assert max(rows.requests) <= ws.ROWS_MOST_REQUEST
    assert not np.isnan(asked[0]).any()


# ------------------------------------------------------------------------------------------------
# the stopping rule
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def qp(cs):
    X, y = cs.make_blobs_problem(61, 70, 4, 4, spread=1.3, scale=1.5)
    spec = KernelSpec("rbf", gamma=0.3)
    K = kernel_reference(spec, X, X)
    D, _ = cs.cs_dual_qp(K, y, 4, 2.0)
    return dict(X=X, y=y, K=K, D=D, C=2.0, gamma=0.3)


def _model_B(m, n):
    B = np.zeros((n, len(m.classes_)))
    B[m.support_] = m.dual_coef_.T
    return B


def test_defaults_stop_by_tol_alone():
    s = SolverSettings()
    assert s.gap_tol == 0.0 and s.tol == 1e-3
    m = MulticlassSVC()
    assert m._solver_options()["gap_tol"] == 0.0 and m.tol == 1e-3


def test_tol_binds(cs, qp):
    """Only ``tol`` changes: the relative dual error to the QP optimum shrinks with it and the
    last round's max psi (every row unshrunk) is within it."""
    errs = []
    for tol in (1e-1, 1e-3, 1e-5, 1e-8):
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConvergenceWarning)
            m = MulticlassSVC(
                C=qp["C"], gamma=qp["gamma"], tol=tol, n_jobs=2, solver_options={"batch_size": 16}
            ).fit(qp["X"], qp["y"])
        h = m.history_
        assert m.converged_
        assert h["max_psi"][-1] <= tol
        assert h["n_active"][-1] == qp["X"].shape[0]
        B = _model_B(m, qp["X"].shape[0])
        cs.check_feasible(B, qp["y"], qp["C"], atol=1e-9)
        D = cs.dual_value(B, qp["K"], qp["y"])
        errs.append((qp["D"] - D) / abs(qp["D"]))
    assert errs[-1] <= 1e-9
    assert errs[1] <= 1e-2
    assert all(b <= a for a, b in zip(errs, errs[1:], strict=False)), errs
    assert errs[0] > 10 * errs[2]


@pytest.mark.parametrize("threshold", THRESHOLDS)
@pytest.mark.parametrize("selection", list(pt.SELECTIONS))
@pytest.mark.parametrize("optimizer", list(pt.OPTIMIZERS))
def test_every_combination_with_default_stopping(cs, qp, optimizer, selection, threshold):
    """Default ``tol`` (1e-3, gap_tol off): converged, feasible, every recomputed KKT violation
    (AS 2005 Eq. 15) within 2 tol and the dual within 1e-2 relative of the QP optimum."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        m = MulticlassSVC(
            C=qp["C"],
            gamma=qp["gamma"],
            n_jobs=2,
            solver_options={
                "optimizer": optimizer,
                "pattern_selection": selection,
                "threshold": threshold,
                "batch_size": 16,
            },
        ).fit(qp["X"], qp["y"])
    assert m.converged_
    B = _model_B(m, qp["X"].shape[0])
    cs.check_feasible(B, qp["y"], qp["C"], atol=1e-9)
    viol, _ = cs.kkt_violation(B, qp["K"] @ B, qp["y"], qp["C"])
    assert viol <= 2e-3
    D = cs.dual_value(B, qp["K"], qp["y"])
    assert (qp["D"] - D) / abs(qp["D"]) <= 1e-2


def test_dask_executor_equals_in_process_bit_for_bit(cs, local_client):
    """The working-set solve and the kept Gram block live on the coordinator: a LocalCluster run
    gives the very same rounds and coefficients as the in-process one."""
    X, y = cs.make_blobs_problem(71, 120, 5, 4, spread=1.3, scale=1.5)
    kw = dict(C=2.0, gamma=0.3, tol=1e-6)
    opts = {"batch_size": 24, "n_partitions": 3}
    a = MulticlassSVC(n_jobs=2, **kw, solver_options=opts).fit(X, y)
    b = MulticlassSVC(client=local_client, **kw, solver_options=opts).fit(X, y)
    assert a.n_iter_ == b.n_iter_
    np.testing.assert_array_equal(a.support_, b.support_)
    np.testing.assert_array_equal(a.dual_coef_, b.dual_coef_)
    np.testing.assert_array_equal(a.history_["steps"], b.history_["steps"])


@pytest.mark.parametrize("wide", [False, True])
def test_gram_cache_chunks_on_threads_give_the_serial_values(wide, monkeypatch):
    """Rows are computed in chunks of ``_GramCache.CHUNK`` (a GEMM's rounding depends on its
    shape), or, on many placed values, chunks of ``WIDE_CHUNK`` rows cut into column blocks; on
    a thread pool the chunks give the same block bit for bit as in turn."""
    monkeypatch.setattr(_GramCache, "CHUNK", 128)
    if wide:
        _wide_gram(monkeypatch)
    rng = np.random.default_rng(2)
    # float32 GEMMs of these shapes round differently when computed whole (checked: the test
    # fails if the threaded path computes the block in one piece)
    X = rng.normal(size=(900, 16)).astype(np.float32)
    spec = KernelSpec("rbf", gamma=0.05)
    batches = [np.arange(0, 500), np.arange(300, 850), np.arange(100, 700)]
    serial = _GramCache(spec, 10**6, np.float32)
    threaded = _GramCache(spec, 10**6, np.float32, threads=2)
    for ids in batches:
        G1, p1 = serial.block(ids, X[ids])
        G2, p2 = threaded.block(ids, X[ids])
        np.testing.assert_array_equal(p1, p2)
        serial.ensure(p1)
        threaded.ensure(p2)
        K1, K2 = G1[np.ix_(serial.slot[p1], p1)], G2[np.ix_(threaded.slot[p2], p2)]
        np.testing.assert_array_equal(K1, K2)
        np.testing.assert_allclose(K1, kernel_block(spec, X[ids], X[ids]), atol=1e-6)
    assert not serial._pool.started and threaded._pool.started
    threaded.close()


def _wide_gram(monkeypatch) -> None:
    """Gram rows on the wide path (chunks of rows cut into column blocks) from a few placed
    values on, in blocks of at least 7 columns."""
    monkeypatch.setattr(_GramCache, "WIDE_VALUES", 2000)
    monkeypatch.setattr(_GramCache, "WIDE_CHUNK", 96)
    monkeypatch.setattr(_GramCache, "WIDE_MIN_COLS", 7)


def test_gram_cache_wide_blocks_cover_the_missing_columns_once(monkeypatch):
    """On many placed values a chunk of rows is cut into column blocks that cover the columns
    each row lacks once, none of one column (a GEMV rounds differently), and the cut is the
    same whatever the threads; below the threshold the chunks are whole rows."""
    _wide_gram(monkeypatch)
    X = np.random.default_rng(3).normal(size=(400, 10)).astype(np.float32)
    spec = KernelSpec("rbf", gamma=0.1)
    for threads in (1, 2):
        cache = _GramCache(spec, 10**6, np.float32, threads=threads)
        cache.block(np.arange(300), X[:300])
        tasks = cache._tasks(np.arange(200), cache.m)
        rows = {len(r) for r, _, _ in tasks}
        assert rows == {96, 200 - 2 * 96}
        for r0 in (0, 96, 192):
            cuts = [(lo, hi) for r, lo, hi in tasks if r[0] == r0]
            assert cuts[0][0] == 0 and cuts[-1][1] == 300 and len(cuts) == 16
            assert all(a[1] == b[0] for a, b in zip(cuts[:-1], cuts[1:], strict=True))
            assert min(hi - lo for lo, hi in cuts) >= 7
        # rows lacking 190 of the 300 columns (x 10 features: 1,900 < 2,000 values): whole rows
        cache.stamp[:5] = 110
        ((r, lo, hi),) = cache._tasks(np.arange(5), 300)
        np.testing.assert_array_equal(r, np.arange(5))
        assert (lo, hi) == (110, 300)
        cache.close()


def test_solve_with_wide_gram_blocks_on_threads_equals_one_thread(cs, monkeypatch):
    """A solve whose Gram rows take the wide path gives the same coefficients on one thread or
    two, bit for bit."""
    _wide_gram(monkeypatch)
    X, y = cs.make_blobs_problem(7, 150, 4, 3, spread=1.4, scale=1.5)
    spec = KernelSpec("rbf", gamma=0.4)
    kw = dict(batch_size=80, tol=1e-6, n_partitions=2, inner_steps=20.0)
    B1, r1 = cs.run_solver(X, y, 3, spec, 2.0, n_threads=1, **kw)
    B2, r2 = cs.run_solver(X, y, 3, spec, 2.0, n_threads=2, **kw)
    assert r1.n_iter == r2.n_iter
    np.testing.assert_array_equal(B1, B2)


def _record_gram_pools(monkeypatch) -> list:
    """Gram rows in chunks of 5 rows; the returned list gets, at each ``_GramCache.ensure``,
    whether its thread pool has started."""
    monkeypatch.setattr(_GramCache, "CHUNK", 5)
    pooled = []
    ensure = _GramCache.ensure

    def recording_ensure(self, rows):
        ensure(self, rows)
        pooled.append(self._pool.started)

    monkeypatch.setattr(_GramCache, "ensure", recording_ensure)
    return pooled


def test_solve_with_threaded_gram_rows_equals_one_thread(cs, monkeypatch):
    """The coordinator computes its Gram rows on the in-process executor's threads: the same
    partitions on one thread or two give the same solve bit for bit."""
    pooled = _record_gram_pools(monkeypatch)
    X, y = cs.make_blobs_problem(7, 90, 4, 3, spread=1.4, scale=1.5)
    spec = KernelSpec("rbf", gamma=0.4)
    kw = dict(batch_size=40, tol=1e-6, n_partitions=2, inner_steps=20.0)
    B1, r1 = cs.run_solver(X, y, 3, spec, 2.0, n_threads=1, **kw)
    n1 = len(pooled)
    B2, r2 = cs.run_solver(X, y, 3, spec, 2.0, n_threads=2, **kw)
    assert n1 > 0 and not any(pooled[:n1]) and all(pooled[n1:])
    assert r1.n_iter == r2.n_iter
    np.testing.assert_array_equal(B1, B2)


def _split_problem(seed, nb, P):
    """A batch at shuffled cache places, with feasible coefficients and scores off the optimum."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(nb, 5))
    y = rng.integers(0, P, nb).astype(np.int64)
    K = kernel_reference(KernelSpec("rbf", gamma=float(rng.uniform(0.1, 2.0))), X, X)
    gpos = rng.permutation(nb).astype(np.int64)
    G = np.empty_like(K)
    G[np.ix_(gpos, gpos)] = K
    B = np.zeros((nb, P))
    for i in range(0, nb, 4):
        a = rng.uniform(0.0, 1.0)
        B[i, y[i]], B[i, (y[i] + 1) % P] = a, -a
    F = K @ B + rng.normal(scale=0.3, size=(nb, P))
    return B, F, G, gpos, y


@pytest.mark.parametrize("threads", [2, 3, 4])
@pytest.mark.parametrize(
    ("code", "max_steps", "on_request"),
    [
        (pt.OPT_EXACT, None, False),
        (pt.OPT_EXACT, None, True),
        (pt.OPT_BASIC, 37, True),
        (pt.OPT_FIXED_POINT, "half", True),
    ],
)
def test_split_passes_take_the_one_thread_steps_bit_for_bit(
    threads, code, max_steps, on_request, monkeypatch
):
    """The passes split over threads (each owning a block of the batch and its score columns,
    :mod:`dmcsvm.numerics.passes`) give the one-thread coefficients, gains and steps bit
    for bit: with the whole ``K_BB``, with its rows asked for on the way (the passes stop and go
    on where they stopped, on every thread), and when ``max_steps`` ends them inside a pass."""
    from dmcsvm.engine.threads import LazyPool

    monkeypatch.setattr(ws, "SPLIT_MIN_BLOCK", 16)
    for seed, nb, P in ((3, 150, 3), (5, 413, 7)):
        B, F, G, gpos, y = _split_problem(seed, nb, P)
        steps = {None: 20 * nb, "half": nb // 2}.get(max_steps, max_steps)
        rest = (gpos, y, y, np.arange(P), np.ones(nb), np.full(nb, 1.0), 1e-3, 5e-4, steps, 1e-3)
        one = ws.solve_working_set(code, B, F, G, *rest)
        pool = LazyPool(threads, "test")
        rows = _RowsFromMatrix(G) if on_request else None
        try:
            split = ws.solve_working_set(
                code, B, F, G if rows is None else rows.G, *rest, rows=rows, pool=pool
            )
            assert pool.started  # (the passes ran on the pool's threads)
        finally:
            pool.close()
        for a, b in zip(one, split, strict=True):
            np.testing.assert_array_equal(a, b)
        assert one[2].sum() > 0
        if on_request:
            assert len(rows.requests) > 1
        if max_steps is not None:
            assert one[2].sum() == steps


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("on_request", [False, True])
def test_solve_on_its_own_copy_of_kbb_takes_the_same_steps(threads, on_request, monkeypatch):
    """A batch at scattered places among more columns of ``G`` reads each row's values from
    its own copy (made on the row's first step) from its second step on: the coefficients,
    gains and steps of the solve that reads ``G`` every time, bit for bit, on one thread or
    three, with the rows given whole or asked for on the way (NaN in rows never asked for
    would show)."""
    from dmcsvm.engine.threads import LazyPool

    monkeypatch.setattr(ws, "SPLIT_MIN_BLOCK", 16)
    nb, P, extra = 301, 5, 500
    B, F, K, gpos, y = _split_problem(21, nb, P)
    K = K[np.ix_(gpos, gpos)]  # (K_BB in batch order)
    places = np.sort(np.random.default_rng(4).choice(nb + extra, nb, replace=False))
    gpos = np.random.default_rng(5).permutation(places).astype(np.int64)
    G = np.zeros((nb + extra, nb + extra))
    G[np.ix_(gpos, gpos)] = K
    rest = (gpos, y, y, np.arange(P), np.ones(nb), np.full(nb, 1.0), 1e-3, 5e-4, 20 * nb, 1e-3)
    monkeypatch.setattr(ws, "COPY_MOST_BYTES", 0)
    ref = ws.solve_working_set(pt.OPT_EXACT, B, F, G, *rest)
    # a row stepped more than once reads its copy
    assert ref[2].max() > 1 and ref[2].sum() > nb
    made = []
    real_empty = np.empty

    def empty(shape, dtype=float):
        if shape == (nb, nb):
            made.append(shape)
            return np.full(shape, np.nan, dtype=dtype)  # (a value read before it is copied shows)
        return real_empty(shape, dtype=dtype)

    monkeypatch.setattr(ws.np, "empty", empty)
    monkeypatch.setattr(ws, "COPY_MOST_BYTES", 2**30)
    pool = LazyPool(threads, "test") if threads > 1 else None
    rows = _RowsFromMatrix(G) if on_request else None
    try:
        got = ws.solve_working_set(
            pt.OPT_EXACT, B, F, G if rows is None else rows.G, *rest, rows=rows, pool=pool
        )
    finally:
        if pool is not None:
            pool.close()
        monkeypatch.setattr(ws.np, "empty", real_empty)
    assert made  # (the copy was kept: 301 of 801 columns)
    for a, b in zip(ref, got, strict=True):
        np.testing.assert_array_equal(a, b)
    # no copy where the batch holds more than COPY_MOST_SHARE of G's columns
    monkeypatch.setattr(ws.np, "empty", empty)
    monkeypatch.setattr(ws, "COPY_MOST_SHARE", 0.25)
    made.clear()
    ws.solve_working_set(pt.OPT_EXACT, B, F, G, *rest)
    monkeypatch.setattr(ws.np, "empty", real_empty)
    assert not made


def test_split_passes_need_a_block_per_thread(monkeypatch):
    """A batch below SPLIT_MIN_BLOCK rows per thread runs on one thread (the pool stays unused)."""
    from dmcsvm.engine.threads import LazyPool

    monkeypatch.setattr(ws, "SPLIT_MIN_BLOCK", 100)
    B, F, G, gpos, y = _split_problem(9, 150, 3)
    rest = (gpos, y, y, np.arange(3), np.ones(150), 1.0, 1e-3, 5e-4, 3000, 1e-3)
    pool = LazyPool(2, "test")
    ws.solve_working_set(pt.OPT_EXACT, B, F, G, *rest, pool=pool)
    assert not pool.started


def test_fit_with_split_passes_equals_one_thread(cs, monkeypatch):
    """In a fit the passes borrow the Gram rows' threads: ``n_threads`` 1 and 3 give the same
    solve bit for bit, and the three-thread one ran its passes on three threads."""
    monkeypatch.setattr(ws, "SPLIT_MIN_BLOCK", 8)
    calls = []
    real = passes.run_passes

    def counting(*a):
        calls.append(a[0])
        return real(*a)

    monkeypatch.setattr(ws, "run_passes", counting)
    X, y = cs.make_blobs_problem(5, 120, 4, 4, spread=1.4, scale=1.5)
    spec = KernelSpec("rbf", gamma=0.4)
    kw = dict(batch_size=60, tol=1e-6, n_partitions=2, inner_steps=20.0)
    B1, r1 = cs.run_solver(X, y, 4, spec, 2.0, n_threads=1, **kw)
    assert set(calls) == {0}
    calls.clear()
    B3, r3 = cs.run_solver(X, y, 4, spec, 2.0, n_threads=3, **kw)
    assert set(calls) == {0, 1, 2}
    assert r1.n_iter == r3.n_iter
    np.testing.assert_array_equal(B1, B3)


def test_on_dask_the_coordinators_gram_rows_use_n_jobs_threads(cs, local_client, monkeypatch):
    """With a client the workers wait while the coordinator solves: its Gram rows run on
    ``n_jobs`` threads of the fitting process (``n_jobs=1``: none started), and the model is
    the same bit for bit."""
    from dmcsvm.engine.dask import DaskExecutor
    from dmcsvm.estimators._engine import make_executor, release_executor

    pooled = _record_gram_pools(monkeypatch)
    X, y = cs.make_blobs_problem(11, 120, 5, 4, spread=1.3, scale=1.5)
    opts = {"batch_size": 40, "n_partitions": 2}
    ex, owned = make_executor(MulticlassSVC(client=local_client, n_jobs=3))
    assert isinstance(ex, DaskExecutor) and ex.n_threads == 3
    release_executor(ex, owned)
    a = MulticlassSVC(client=local_client, n_jobs=1, tol=1e-6, solver_options=opts).fit(X, y)
    n1 = len(pooled)
    b = MulticlassSVC(client=local_client, n_jobs=2, tol=1e-6, solver_options=opts).fit(X, y)
    assert n1 > 0 and not any(pooled[:n1]) and all(pooled[n1:])
    assert a.n_iter_ == b.n_iter_
    np.testing.assert_array_equal(a.dual_coef_, b.dual_coef_)


def test_over_relaxed_step_stays_feasible_and_gains_what_it_reports():
    """``_over_relax`` lengthens an exact step by ``relax`` unless a bound stops it first; the
    dual along the step's line is ``D0 + g (2t - t^2)``, so the step gains ``g t (2 - t)``."""
    B, F, K, y, kd, C = _batch_problem(4)
    pcls = np.arange(B.shape[1])
    n = B.shape[0]
    dual = _batch_dual(B, F, K, y)
    lengthened = capped = 0
    for j in range(n):
        b0 = B[j].copy()
        b = b0.copy()
        f = F[j].copy()
        g = pt.optimize_pattern(pt.OPT_EXACT, b, f, y[j], y[j], pcls, kd[j], C, 0.0, 1e-10)
        if not np.any(b != b0):
            continue
        exact = b.copy()
        g2 = pt._over_relax(b, b0, y[j], C, 1.4, g)
        assert abs(b.sum()) <= 1e-12 * C and b[y[j]] <= C and np.delete(b, y[j]).max() <= 0.0
        t = (b - b0) @ (exact - b0) / ((exact - b0) @ (exact - b0))
        assert 1.0 - 1e-12 <= t <= 1.4 + 1e-12
        np.testing.assert_allclose(b - b0, t * (exact - b0), rtol=0, atol=1e-12 * C)
        Bx, Bt = B.copy(), B.copy()
        Bx[j], Bt[j] = exact, b
        # gains are of 2 alpha_y - ||M||^2: twice the dual
        assert 2.0 * (dual(Bx) - dual(B)) == pytest.approx(g, rel=1e-8)
        assert 2.0 * (dual(Bt) - dual(B)) == pytest.approx(g2, rel=1e-8)
        lengthened += t > 1.4 - 1e-9
        capped += 1.0 + 1e-9 < t < 1.4 - 1e-9
    assert lengthened and capped  # the problem exercises both cases


def test_over_relax_holds_a_coefficient_that_rounding_moves_at_its_bound():
    """An exact step that leaves ``alpha_y`` at ``C`` but, by rounding, an ulp above where it
    started must relax like the step that leaves it exactly there: ``t = (C - b0) / d`` is 0 / 0
    there, and letting it cap ``t`` at 1 steered dense and CSR fits (scores an ulp apart) onto
    paths 5e-3 apart."""
    C, g = 1.2, 0.5
    exact = np.array([C, -0.8, -0.4])
    out = {}
    for name, by in (("at bound", C), ("an ulp below", np.nextafter(C, 0.0))):
        b0 = np.array([by, -0.5, -0.7])
        b = exact.copy()
        out[name] = (b, pt._over_relax(b, b0, 0, C, 1.4, g))
    for b, gain in out.values():
        np.testing.assert_allclose(b, [C, -0.5 - 1.4 * 0.3, -0.7 + 1.4 * 0.3], rtol=0, atol=1e-15)
        assert gain == pytest.approx(g * 1.4 * 0.6, rel=1e-12)


def test_inner_relax_outside_one_to_two_is_refused():
    from dmcsvm.coordinators.crammer_singer import SolverSettings

    for bad in (0.5, 2.0):
        with pytest.raises(ValueError, match=rf"inner_relax must be in \[1, 2\), got {bad}"):
            SolverSettings(inner_relax=bad).check()


@pytest.mark.parametrize("n", [1, 7, 999, 1000, 1001, 46_340])
@pytest.mark.parametrize("skip", [0.0, 0.001, 0.01, 0.5])
def test_reference_violation_sets_aside_the_largest(n, skip):
    from dmcsvm.numerics.selection import reference_violation

    psi = np.random.default_rng(n).exponential(size=n)
    k = min(int(skip * n), n - 1)
    assert reference_violation(psi, skip) == np.sort(psi)[::-1][k]
    assert reference_violation(psi, 0.0) == psi.max()


def test_a_few_outlying_violators_do_not_end_the_working_set_solve():
    """The round's stopping point is taken below the working set's 0.1 % most violated rows: a
    working set of 2,000 violators at psi ~0.3 with 2 rows at psi 1.5 ran only the outliers'
    steps when the tolerance was 0.3 x the largest psi (deformed digits at 200,000 rows: rounds
    of 1-356 steps in a 46,000-row working set)."""
    from dmcsvm.numerics.selection import reference_violation

    rng = np.random.default_rng(5)
    nb, P = 2000, 4
    X = rng.normal(size=(nb, 8))
    G = kernel_block(KernelSpec("rbf", 10.0), X, X)  # narrow: steps barely move other rows
    y = rng.integers(0, P, nb)
    F = np.zeros((nb, P))
    # scores that leave every row violating by about 0.3, two rows by 1.5 (psi = 1 - F_y + max
    # of the others at zero coefficients)
    F[np.arange(nb), y] = 0.7 + 0.02 * rng.random(nb)
    F[:2, y[:2]] = -0.5
    B = np.zeros((nb, P))
    pcls = np.arange(P, dtype=np.int64)
    psi = 1.0 - F[np.arange(nb), y]
    assert np.sort(psi)[-3] < 0.31 and psi[:2].min() == pytest.approx(1.5)

    def steps(skip):
        inner = max(1e-3, 0.3 * reference_violation(psi, skip))
        _, _, st = ws.solve_working_set(
            pt.OPT_EXACT, B, F, G, np.arange(nb), y, y, pcls, np.diag(G).copy(), 1.0, 1e-3,
            5e-4, 10 * nb, inner,
        )  # fmt: skip
        return int(st.sum()), int(np.count_nonzero(st))

    total_max, rows_max = steps(0.0)
    total_skip, rows_skip = steps(0.001)
    assert rows_max <= 10 < 1000 < rows_skip
    assert total_skip > total_max
