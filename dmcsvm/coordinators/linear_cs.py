"""The sequential dual method's orchestration: the problem, the solve state kept across
MProtSVM epochs, the pass loop with its stopping rules, and the estimator hooks.

The method itself and its numba kernels (``passes``, ``subproblem``, ``reset_active``) are
:mod:`dmcsvm.numerics.sequential_dual`.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from ..engine.prototype_partition import prototype_groups
from ..engine.threads import LazyPool, limit_blas
from ..numerics import linear_prototypes as lp
from ..numerics.sequential_dual import passes, reset_active, seed, slacks_of_scores, slacks_range
from .history import RoundHistory

#: passes when ``max_iter = -1`` (LIBLINEAR's own cap is 1000 in scikit-learn, 100000 in its CLI)
DEFAULT_MAX_PASSES = 100000

PASS_KEYS = (
    "round",
    "dual",
    "primal",
    "gap",
    "max_psi",
    "n_active",
    "n_active_protos",
    "n_sv",
    "elapsed",
    "t_pass",
    "t_check",
)


# --------------------------------------------------------------------------------------------
# orchestration
# --------------------------------------------------------------------------------------------


@dataclass
class LinearProblem:
    """The training rows in the form the kernels take (``rows``: ``(Xd,)`` or ``(indptr,
    indices, data)``, float64), their squared norms and the kernel ``a <x, z> + c0``."""

    rows: tuple
    xsq: np.ndarray
    a: float
    c0: float
    X: object  # the float64 rows (dense or CSR)

    @classmethod
    def of(cls, X, a, c0):
        # float64 rows: W is float64 and a mixed-precision dot does not vectorize
        if sp.issparse(X):
            Xc = sp.csr_matrix(X, dtype=np.float64)
            Xc.sort_indices()
            xsq = np.asarray(Xc.multiply(Xc).sum(axis=1), dtype=np.float64).ravel()
            rows = (
                Xc.indptr.astype(np.int64),
                Xc.indices.astype(np.int64),
                np.ascontiguousarray(Xc.data),
            )
            return cls(rows, xsq, float(a), float(c0), Xc)
        Xd = np.ascontiguousarray(X, dtype=np.float64)
        xsq = np.einsum("ij,ij->i", Xd, Xd)
        return cls((Xd,), xsq, float(a), float(c0), Xd)


#: dense rows per GEMM block of a primal check: a block's scores stay in cache between the GEMM
#: and the slack pass; the blocks start at multiples of it whatever the threads, so a row's
#: products come from the same GEMM call however the rows are shared
CHECK_BLOCK_ROWS = 1024


def _check_rows(st: SequentialState, xi, lo, hi, WT):
    """Slacks of rows ``lo..hi-1`` into ``xi`` (one thread's share of a primal check): dense rows
    by block GEMMs ``X_block W^T`` and :func:`slacks_of_scores`, CSR rows by the row-by-row
    :func:`slacks_range`."""
    p = st.prob
    if len(p.rows) != 1:
        slacks_range(p.rows, p.a, p.c0, st.W, st.s, st.cls, st.pcls, st.first, st.count, xi, lo, hi)
        return
    X = p.rows[0]
    G = np.empty((min(CHECK_BLOCK_ROWS, hi - lo), WT.shape[1]))
    for a in range(lo, hi, CHECK_BLOCK_ROWS):
        b = min(a + CHECK_BLOCK_ROWS, hi)
        g = G[: b - a]
        np.matmul(X[a:b], WT, out=g)
        slacks_of_scores(g, p.a, p.c0, st.s, st.cls, st.pcls, st.first, st.count, xi, a)


class SequentialState:
    """``B``, ``W``, ``s`` and the shrinking state of a sequential-dual solve (kept across the
    epochs of an MProtSVM search)."""

    #: rows per thread of a primal check at least (fewer: a thread's start costs more than them)
    CHECK_SHARE_MIN_ROWS = 1024

    def __init__(
        self,
        prob: LinearProblem,
        yp,
        cls,
        pcls,
        C,
        tol,
        shrinking,
        seed_value,
        row_C=None,
        threads: int = 1,
    ):
        n = prob.xsq.shape[0]
        # the primal checks' slacks are per row: ``threads`` split them (the passes are serial)
        self.threads = max(1, int(threads))
        P = pcls.shape[0]
        self.prob = prob
        self.yp = np.ascontiguousarray(yp, dtype=np.int64)
        self.cls = np.ascontiguousarray(cls, dtype=np.int64)
        self.pcls = np.ascontiguousarray(pcls, dtype=np.int64)
        self.first, self.count = prototype_groups(self.pcls)
        self.C, self.tol, self.shrinking = float(C), float(tol), bool(shrinking)
        # per-pattern bounds C_i (class / sample weights) or None (every bound is C)
        self.row_C = None if row_C is None else np.ascontiguousarray(row_C, dtype=np.float64)
        self.B = np.zeros((n, P))
        d = prob.X.shape[1]
        self.W = np.zeros((P, d))
        self.s = np.zeros(P)
        self.act = np.empty((n, P), dtype=np.int32)
        self.asz = np.empty(n, dtype=np.int64)
        self.nfull = np.empty(n, dtype=np.int64)
        reset_active(
            self.yp,
            self.cls,
            self.pcls,
            self.act,
            self.asz,
            self.nfull,
            np.arange(n, dtype=np.int64),
        )
        self.order = np.arange(n, dtype=np.int64)
        self.ctl = np.array([n, max(10.0 * self.tol, 1.0), 1.0])
        self.passes = 0
        self.visited = 0
        self.last = None  # the objective() computed after the last pass, if any
        # the checks' row shares (fixed by n and threads) and their threads, started at the
        # first check that shares
        n_blocks = -(-n // CHECK_BLOCK_ROWS)
        shares = min(self.threads, max(1, n // self.CHECK_SHARE_MIN_ROWS), n_blocks)
        self._cuts = [
            min(n, int(c) * CHECK_BLOCK_ROWS)
            for c in np.round(np.linspace(0, n_blocks, shares + 1))
        ]
        self._pool = LazyPool(max(1, len(self._cuts) - 2), "check")
        seed(int(seed_value))

    def close(self) -> None:
        """Stop the primal checks' threads (a later check starts them again)."""
        self._pool.close()

    def run(self, max_passes, stage=False):
        p = self.prob
        C = self.C if self.row_C is None else self.row_C
        k, conv, viol, vis = passes(
            p.rows,
            p.xsq,
            p.a,
            p.c0,
            self.yp,
            self.B,
            self.W,
            self.s,
            C,
            self.act,
            self.asz,
            self.nfull,
            self.order,
            self.ctl,
            self.tol,
            int(max_passes),
            self.shrinking,
            bool(stage),
        )
        self.passes += int(k)
        self.visited += int(vis)
        return bool(conv), float(viol)

    def add(self, rows, dB):
        """Add ``dB`` to the coefficients of ``rows`` (a warm start); ``W`` and ``s`` follow."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size:
            dW, ds = lp.prototype_step(dB, self.prob.X[rows])
            self.W += dW
            self.s += ds
            self.B[rows] += dB

    def reassign(self, rows, new_yp):
        """Give ``rows`` new positive prototypes: each row's positive coefficient moves to its
        new prototype (the restore of :mod:`dmcsvm.coordinators.multiprototype`; ``W``, ``s``
        follow), rebuild their active lists, re-activate every pattern and restart the
        shrinking schedule."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size:
            old = self.yp[rows]
            has = self.B[rows, old] != 0.0
            if has.any():
                r = rows[has]
                self.add(r, lp.move_step(self.B, r, old[has], new_yp[has]))
            self.yp[rows] = new_yp
            reset_active(self.yp, self.cls, self.pcls, self.act, self.asz, self.nfull, rows)
        n = self.B.shape[0]
        self.asz[:] = self.nfull
        self.ctl[:] = [n, max(10.0 * self.tol, 1.0), 1.0]

    def objective(self):
        """``(xi, primal, dual, ||M||^2)`` of the current state: the slacks (rows x max q) of
        :func:`~dmcsvm.numerics.sequential_dual.slacks` (:func:`_check_rows`: block GEMMs on
        dense rows, half the time of row-by-row dots on letter with q = 5), on ``threads``
        threads."""
        p = self.prob
        n = self.B.shape[0]
        xi = np.empty((n, int(self.count.max())))
        WT = np.ascontiguousarray(self.W.T)
        cuts = self._cuts
        # rows apart in nogil numba and BLAS, the first share on this thread: the same values
        # whatever the number of threads (each row's slack comes from the same block GEMM and
        # is computed alone); ``result()`` raises an error of another share here rather than
        # leave its rows of ``xi`` unwritten
        if len(cuts) == 2:
            _check_rows(self, xi, 0, n, WT)
        else:
            rest = [
                self._pool.submit(_check_rows, self, xi, lo, hi, WT)
                for lo, hi in zip(cuts[1:-1], cuts[2:], strict=False)
            ]
            try:
                _check_rows(self, xi, cuts[0], cuts[1], WT)
            finally:
                for f in rest:
                    f.result()
        rows = np.arange(self.B.shape[0])
        sa = float(self.B[rows, self.yp].sum())
        xi_own = xi[rows, self.yp - self.first[self.cls]]
        slack = lp.slack_term(xi_own, self.C, self.row_C)
        mM = p.a * float(np.sum(self.W * self.W)) + p.c0 * float(self.s @ self.s)
        return xi, 0.5 * mM + slack, sa - 0.5 * mM, mM


def max_passes_of(max_iter) -> int:
    return DEFAULT_MAX_PASSES if int(max_iter) == -1 else int(max_iter)


def solve_fixed(
    st: SequentialState,
    max_iter,
    history=None,
    stop=None,
    t0=None,
    warn=True,
    gap_tol=0.0,
    gap_every=10,
):
    """Passes until converged, ``max_iter`` passes, or ``stop(primal)`` is True.

    Converged: a pass over every pattern and prototype saw no KKT violation above ``tol``
    (LIBLINEAR's rule), or, with ``gap_tol > 0``, the relative duality gap is at most
    ``gap_tol`` (checked at the end of every shrinking stage and every ``gap_every`` passes).
    ``stop(primal)`` (MProtSVM: the primal beats the last energy) is checked after the first
    pass and then on a schedule predicted from the primal's descent so far (each check is a
    pass over the rows, as costly as an unshrunk pass): the next check comes when the linear
    extrapolation of the last two checks reaches the target, at most twice the last interval
    later.  Every check writes a row of ``history`` (keys :data:`PASS_KEYS`).  Returns
    ``(converged, stopped)``."""
    t0 = time.perf_counter() if t0 is None else t0
    limit = max_passes_of(max_iter)
    done = 0
    conv = stopped = False
    interval = 1
    prev = None  # (passes, primal) of the previous stop check
    while done < limit:
        t = time.perf_counter()
        before = st.passes
        k = limit - done
        if stop is not None:
            k = min(k, interval)
        if gap_tol > 0.0:
            k = min(k, gap_every)
        conv, viol = st.run(k, stage=history is not None or gap_tol > 0.0)
        done += st.passes - before
        t_pass = time.perf_counter() - t
        if history is None and stop is None and gap_tol <= 0.0 and not conv and done < limit:
            continue
        t = time.perf_counter()
        st.last = st.objective()
        _, primal, dual, _ = st.last
        gap = (primal - dual) / max(abs(primal), 1e-300)
        if history is not None:
            row = dict(
                round=st.passes,
                dual=dual,
                primal=primal,
                gap=gap,
                max_psi=viol,
                n_active=int(st.ctl[0]),
                n_active_protos=int(st.asz[st.order[: int(st.ctl[0])]].sum()),
                n_sv=int(
                    np.count_nonzero(lp.has_coefficients(st.B, np.arange(st.B.shape[0]), st.yp))
                ),
                elapsed=time.perf_counter() - t0,
                t_pass=t_pass,
                t_check=time.perf_counter() - t,
            )
            history.append(row)
        if not conv and gap_tol > 0.0 and gap <= gap_tol:
            conv = True
        if conv:
            break
        if stop is not None:
            if stop(primal):
                stopped = True
                break
            if prev is not None and prev[1] > primal:
                rate = (prev[1] - primal) / max(st.passes - prev[0], 1)
                target = getattr(stop, "target", None)
                need = (primal - target) / rate if target is not None else interval
                interval = int(max(1, min(need, 2 * interval)))
            prev = (st.passes, primal)
    if not conv and not stopped and warn:
        warnings.warn(
            f"dmcsvm linear solver stopped at max_iter={limit} passes before reaching tol={st.tol}",
            ConvergenceWarning,
            stacklevel=3,
        )
    return conv, stopped


class Below:
    """``stop`` for :func:`solve_fixed`: the primal is below ``target``."""

    def __init__(self, target):
        self.target = float(target)

    def __call__(self, primal):
        return primal < self.target


def new_history() -> RoundHistory:
    """The per-check history of :func:`solve_fixed` (bounded: :mod:`.history`)."""
    return RoundHistory(PASS_KEYS)


# --------------------------------------------------------------------------------------------
# estimator hooks
# --------------------------------------------------------------------------------------------


def in_memory(est, td) -> bool:
    """Rows in this process (ndarray / CSR), no cluster, no checkpointing: where the sequential
    method applies.  Dask clusters, dask arrays and zarr stores keep the batched rounds."""
    if getattr(est, "client", None) is not None or getattr(est, "checkpoint", None):
        return False
    return td.in_process


def seed_of(random_state) -> int:
    """Seed of the pass order: 0 for ``None`` (a deterministic default), else drawn from
    ``random_state``."""
    if random_state is None:
        return 0
    from sklearn.utils import check_random_state

    return int(check_random_state(random_state).randint(2**31 - 1))


def sequential_applies(est, td, spec) -> bool:
    """MulticlassSVC routes ``kernel='linear'`` on in-memory rows here (its solver option
    ``linear_solver='rounds'`` forces the batched rounds instead)."""
    return spec.name == "linear" and in_memory(est, td)


def fit_multiclass(est, td, settings, classes, y_idx, row_C=None, start=None, threads=1):
    """Fit :class:`~dmcsvm.MulticlassSVC` with a linear kernel by the sequential dual method and
    fill its fitted attributes as the batched solver does (``n_iter_`` and ``history_`` count
    passes instead of rounds; ``history_`` has a row per pass).  ``start = (ids, X_ids, B_ids)``:
    coefficients to start from (``warm_start``), or None; ``threads`` for the primal checks."""
    t0 = time.perf_counter()
    m = classes.shape[0]
    pcls = np.arange(m, dtype=np.int64)
    prob = LinearProblem.of(td.source, 1.0, 0.0)
    st = SequentialState(
        prob,
        y_idx,
        y_idx,
        pcls,
        settings.C,
        settings.tol,
        settings.shrinking,
        seed_of(est.random_state),
        row_C=row_C,
        threads=threads,
    )
    if start is not None:
        st.add(start[0], start[2])
    hist = new_history()
    try:
        with limit_blas(1):  # the checks' small GEMMs: threads cost more than they save
            conv, _ = solve_fixed(st, settings.max_iter, history=hist, t0=t0)
    finally:
        st.close()
    sv = np.flatnonzero(np.any(st.B != 0.0, axis=1))
    X = td.source
    est.classes_ = classes
    est.support_ = sv
    est.support_vectors_ = X[sv]
    est.dual_coef_ = np.ascontiguousarray(st.B[sv].T)  # (n_classes, n_SV), as SVC
    est.n_support_ = np.bincount(y_idx[sv], minlength=m).astype(np.int32)
    est.n_iter_ = int(st.passes)
    est.converged_ = bool(conv)
    est.history_ = {k: np.asarray(v) for k, v in hist.items()}
    est.engine_stats_ = [
        {
            "part": 0,
            "rows": int(td.n),
            "active": int(st.ctl[0]),
            "in_memory": True,
            "solver": "sequential_dual",
            "passes": st.passes,
            "prototypes_visited": int(st.visited),
            "rows_computed": 0,
            "rows_cached": 0,
            "rows_disk": 0,
        }
    ]
    return est
