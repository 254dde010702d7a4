"""Coordinator of the SMO decomposition for duals with per-group equality constraints
(docs/design.md: 'mScatter-SVM', 'Binary SMO', 'Architecture').

The partitions (:class:`~dmcsvm.engine.gradient_partition.GradientPartition`) own ``tot``/``own``
(hence the gradient) of their rows and report, per group, the ``k`` best candidates of ``I_up`` and
of ``I_low`` and the per-group extremes ``max_{I_up} -y g`` / ``min_{I_low} -y g``.  Each round the
coordinator

1. stops when every group's violation ``m(a) - M(a)`` (Fan, Chen, Lin 2005) is <= ``tol``;
2. builds a batched working set: the groups in order of decreasing violation, each with its ``k``
   top candidates of both sides, until ``batch_size`` variables;
3. solves that subproblem exactly (to ``tol / 2``) by SMO on ``K_BB``
   (:func:`dmcsvm.numerics.grouped_smo.smo_subproblem`: WSS2 per group, the best group's pair
   each step, Platt's analytic step) -- updates inside the batch touch only batch variables;
4. sends ``(ids, X_B, new a_B, da_B)`` to every partition, which applies it with one pass over
   ``K(X_part, X_B)``.

The working set always contains the maximal violating pair, so every round decreases the objective
(the decomposition converges, Lin 2001); batch size 2 is plain SMO with first-order selection of the
pair and ``batch_size`` = n is one exact solve.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..engine.messages import GradientMessage, merge
from ..engine.threads import BlasThreadHold
from ..errors import check_finite_round
from ..kernels import KernelSpec, kernel_block
from ..numerics import grouped_smo as sc
from ..numerics.binary_smo import rho_from_parts
from .coefficients import CoefficientRows
from .crammer_singer import batch_bounds
from .history import RoundHistory

HISTORY_KEYS = (
    "round",
    "objective",
    "violation",
    "batch",
    "steps",
    "elapsed",
    "rows_computed",
    "rows_cached",
    "t_round",
    "t_solve",
    "t_parts",
)


@dataclass
class DecompositionSettings:
    """One SMO-decomposition solve: the dual (``U``, ``w_same``, ``w_diff``, ``p``, groups) and the
    solver options."""

    U: float
    w_same: float = 1.0
    w_diff: float = 1.0
    p: float = -1.0
    n_groups: int = 1
    tol: float = 1e-3
    selection: str = "wss2"
    batch_size: int = 256
    per_group: int = 128
    max_iter: int = -1
    max_inner_steps: int = 10**7
    verbose: bool = False

    def check(self) -> DecompositionSettings:
        if not (np.isfinite(self.tol) and self.tol > 0):
            raise ValueError(f"tol must be a positive number, got {self.tol!r}")
        if self.selection not in sc.SELECTIONS:
            raise ValueError(
                f"selection must be one of {tuple(sc.SELECTIONS)}, got {self.selection!r}"
            )
        if int(self.batch_size) != self.batch_size or self.batch_size < 2:
            raise ValueError(f"batch_size must be an integer >= 2, got {self.batch_size!r}")
        if int(self.max_iter) != self.max_iter or (self.max_iter < 1 and self.max_iter != -1):
            raise ValueError(
                f"max_iter must be a positive integer or -1 (no limit), got {self.max_iter!r}"
            )
        self.per_group = int(max(1, min(self.per_group, self.batch_size // 2)))
        return self

    def partition_extra(self, with_own: bool) -> dict:
        return {
            "w_same": float(self.w_same),
            "w_diff": float(self.w_diff),
            "p": float(self.p),
            "n_groups": int(self.n_groups),
            "with_own": bool(with_own),
        }


@dataclass
class DecompositionResult:
    """The solution (``support``: sorted ids of the rows with ``a_i > 0``, ``alpha``: their
    ``a_i``), convergence facts, LIBSVM's ``rho`` (first group), Platt's bias, the per-group sums
    of the partitions' :meth:`summary`, and the history."""

    support: np.ndarray
    alpha: np.ndarray
    objective: float
    violation: float
    n_iter: int
    converged: bool
    rho: float
    platt_b: float
    class_sums: np.ndarray
    history: dict = field(default_factory=dict)


def group_violations(gmax, gmin):
    """Per-group ``max(0, gmax - gmin)`` (0 where a side is empty)."""
    v = gmax - gmin
    v[~np.isfinite(v)] = 0.0
    return np.maximum(v, 0.0)


def _rank_in_group(grp, key):
    """Rank of every entry within its group when sorted by ``key`` ascending (ties by position)."""
    o = np.lexsort((np.arange(grp.shape[0]), key, grp))
    gs = grp[o]
    start = np.searchsorted(gs, gs, side="left")
    rank = np.empty(grp.shape[0], dtype=np.int64)
    rank[o] = np.arange(gs.shape[0]) - start
    return rank


def select_batch(agg, viol, tol, batch_size, k):
    """Indices into the merged candidate arrays forming the working set (see module doc)."""
    grp = agg.cand_grp
    vup, vlow = agg.cand_vup, agg.cand_vlow
    take = np.zeros(grp.shape[0], dtype=bool)
    fin = np.isfinite(vup)
    take[fin] |= _rank_in_group(grp[fin], -vup[fin]) < k
    fin = np.isfinite(vlow)
    take[fin] |= _rank_in_group(grp[fin], vlow[fin]) < k
    take &= viol[grp] > tol
    idx = np.flatnonzero(take)
    if idx.shape[0] == 0:
        return idx
    # groups by decreasing violation (ties by group index), whole groups until batch_size
    gorder = np.lexsort((np.arange(viol.shape[0]), -viol))
    grank = np.empty(viol.shape[0], dtype=np.int64)
    grank[gorder] = np.arange(viol.shape[0])
    idx = idx[np.lexsort((agg.cand_ids[idx], grank[grp[idx]]))]
    if idx.shape[0] > batch_size:
        last_grp = grp[idx[batch_size - 1]]
        cut = batch_size
        # do not split a group unless it is the first one
        first_of_last = np.searchsorted(grank[grp[idx]], grank[last_grp], side="left")
        if first_of_last > 0 and grp[idx[batch_size]] == last_grp:
            cut = first_of_last
        idx = idx[:cut]
    return idx


def solve_decomposition(
    executor,
    n: int,
    y: np.ndarray,
    grp: np.ndarray,
    spec: KernelSpec,
    s: DecompositionSettings,
    X=None,
    a0=None,
) -> DecompositionResult:
    """Run decomposition rounds on ``executor`` (already started with GradientPartitions on the
    problem ``y``/``grp``) until every group's violation is <= ``s.tol``.

    Parameters
    ----------
    executor : InProcessExecutor or DaskExecutor
    n : int
        Number of rows of the training set (rows with ``y = 0`` are outside the problem).
    y : ndarray (n,) or problem_rows values
        Signs (+1/-1, 0 = not in the problem): an array, or values computed where they are read
        (:mod:`dmcsvm.engine.problem_rows`; only the rows of a batch and of the support are read
        here).
    grp : ndarray (n,) int or problem_rows values
        Group (equality constraint) of each row, likewise.
    spec : KernelSpec
    s : DecompositionSettings
    X : ndarray or CSR, optional
        Training rows; needed only for a non-zero start ``a0`` (the first message carries them).
    a0 : ndarray (n,) or SparseStart, optional
        Feasible start (default 0): a dense vector, or its non-zero rows and values.
    """
    # the coefficients of the rows that have any (docs/design.md, 'The coordinator's size': not a
    # dense n-vector)
    a = CoefficientRows(n, 1)
    msg = GradientMessage()
    ids, a0B = nonzero_start(a0)
    if ids.shape[0]:
        XB = X[ids]
        a[ids] = a0B[:, None]
        msg = GradientMessage(
            ids=ids,
            XB=XB,
            da=a0B.copy(),
            a_new=a0B.copy(),
            yB=np.asarray(y[ids], dtype=np.float64),
            grpB=np.asarray(grp[ids], dtype=np.int64),
        )
    register_snapshot(executor, y, grp, a, s, X)  # rebuilds a lost partition (Dask)
    sel_code = sc.SELECTIONS[s.selection]
    hist = RoundHistory(HISTORY_KEYS)
    rounds = 0
    max_rounds = s.max_iter if s.max_iter > 0 else 10**12
    converged = False
    platt_b = 0.0
    t_start = time.perf_counter()
    bar = None
    if s.verbose:
        from tqdm.auto import tqdm

        bar = tqdm(desc="dmcsvm smo rounds", unit="round")
    limits = BlasThreadHold()  # coordinator BLAS on one thread: same bits on every executor
    try:
        while True:
            t_round = time.perf_counter()
            agg = merge(executor.step(msg))
            t0 = time.perf_counter()
            viol_g = group_violations(agg.gmax, agg.gmin)
            viol = float(viol_g.max()) if viol_g.shape[0] else 0.0
            objective = 0.5 * agg.obj2
            check_finite_round(rounds, objective=objective, violation=viol)
            msg = GradientMessage()
            nb = steps = 0
            stalled = False
            if viol <= s.tol:
                converged = True
            elif rounds < max_rounds:
                pick = select_batch(agg, viol_g, s.tol, s.batch_size, s.per_group)
                ids = agg.cand_ids[pick]
                XB = agg.cand_X[pick]
                gB = np.ascontiguousarray(agg.cand_g[pick])
                yB = np.ascontiguousarray(agg.cand_y[pick])
                grpB = agg.cand_grp[pick]
                ug, gl = np.unique(grpB, return_inverse=True)
                gl = np.ascontiguousarray(gl, dtype=np.int64)
                Kbb = kernel_block(spec, XB, XB)
                aB = a[ids][:, 0]
                a_new = aB.copy()
                steps, _, platt_b = sc.smo_subproblem(
                    Kbb,
                    yB,
                    gl,
                    a_new,
                    gB,
                    batch_bounds(agg, pick, s.U, "cand_U"),
                    float(s.w_same),
                    float(s.w_diff),
                    int(ug.shape[0]),
                    0.5 * s.tol,
                    sel_code,
                    int(s.max_inner_steps),
                    platt_b,
                )
                da = a_new - aB
                check_finite_round(rounds, coefficients=da)
                moved = np.flatnonzero(da != 0.0)
                nb = moved.shape[0]
                if nb == 0:
                    stalled = True
                else:
                    ids = ids[moved]
                    a[ids] = a_new[moved][:, None]
                    msg = GradientMessage(
                        ids=ids,
                        XB=XB[moved],
                        da=da[moved],
                        a_new=a_new[moved],
                        yB=yB[moved],
                        grpB=grpB[moved],
                    )
            t_end = time.perf_counter()
            if rounds % 50 == 0:
                a.compact()  # rows back at zero leave the store
            row = dict(
                round=rounds,
                objective=objective,
                violation=viol,
                batch=nb,
                steps=steps,
                elapsed=t_end - t_start,
                rows_computed=agg.rows_computed,
                rows_cached=agg.rows_cached,
                t_round=t_end - t_round,
                t_solve=t_end - t0,
                t_parts=agg.t_total,
            )
            hist.append(row)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(viol=f"{viol:.2e}", obj=f"{objective:.6g}", batch=nb)
            if converged:
                break
            if stalled:
                warnings.warn(
                    f"dmcsvm SMO stopped: no working-set variable can move in floating "
                    f"point although the violation {viol:.3g} > tol={s.tol}; the "
                    f"solution is optimal to machine precision",
                    ConvergenceWarning,
                    stacklevel=3,
                )
                break
            rounds += 1
            if rounds >= max_rounds:
                agg = merge(executor.step(msg))  # apply the last batch
                viol = float(group_violations(agg.gmax, agg.gmin).max())
                objective = 0.5 * agg.obj2
                if viol <= s.tol:
                    converged = True
                else:
                    warnings.warn(
                        f"dmcsvm SMO stopped at max_iter={s.max_iter} rounds before "
                        f"reaching tol={s.tol} (violation {viol:.3g})",
                        ConvergenceWarning,
                        stacklevel=3,
                    )
                break
    finally:
        limits.release()
        if bar is not None:
            bar.close()
    summ = executor.call("summary")
    cs = np.sum([r["class_sums"] for r in summ], axis=0)
    rho = rho_from_parts([r["rho"] for r in summ])
    sv = a.support()
    alpha = a[sv][:, 0]
    keep = alpha > 0.0
    return DecompositionResult(
        support=sv[keep],
        alpha=alpha[keep],
        objective=objective,
        violation=viol,
        n_iter=rounds,
        converged=converged,
        rho=rho,
        platt_b=platt_b,
        class_sums=cs,
        history={k: np.asarray(v) for k, v in hist.items()},
    )


def register_snapshot(executor, y, grp, a, s: DecompositionSettings, X) -> None:
    """Let ``executor`` rebuild a lost :class:`GradientPartition` from the coordinator's problem
    (signs ``y``, groups ``grp``, ``s.U`` and the dual's weights) and its coefficients ``a`` (a
    :class:`CoefficientRows` of one column; ``DaskExecutor.set_snapshot``; other executors
    ignore it).  ``a`` is updated in place by
    :func:`solve_decomposition` *before* a batch is sent, so a snapshot taken while a round is in
    flight already holds that round's change (the rebuilt partition only answers the round).  The
    support rows are read from ``X`` when a partition is lost."""
    setter = getattr(executor, "set_snapshot", None)
    if setter is None:
        return

    def snapshot(lo, hi):
        sv = a.support()
        if X is None and sv.shape[0]:
            raise RuntimeError(
                "a lost partition cannot be rebuilt: solve_decomposition was "
                "called without X, so the support rows are not available"
            )
        Xsv = X[sv] if sv.shape[0] else None
        if Xsv is None:
            Xsv = np.zeros((0, 1))
        # the partition's own signs and groups travel as the coordinator holds them (values
        # computed where they are read stay a few numbers; an array slice is copied)
        return {
            "signs": _rows(y, lo, hi),
            "grp": _rows(grp, lo, hi),
            "U": float(s.U),
            "extra": {
                "w_same": float(s.w_same),
                "w_diff": float(s.w_diff),
                "p": float(s.p),
                "n_groups": int(s.n_groups),
            },
            "sv_ids": sv,
            "sv_a": a[sv][:, 0],
            "sv_y": np.asarray(y[sv], dtype=np.float64),
            "sv_grp": np.asarray(grp[sv], dtype=np.int64),
            "sv_X": Xsv,
        }

    setter(snapshot)


def _rows(values, lo, hi):
    """Rows ``[lo, hi)`` of an array (a copy) or of :mod:`~dmcsvm.engine.problem_rows` values
    (another such value, nothing computed)."""
    part = values[lo:hi]
    return part.copy() if isinstance(part, np.ndarray) else part


class SparseStart(NamedTuple):
    """A start ``a0`` given by its non-zero rows ``ids`` and their values (an n-long vector
    would make the coordinator grow with n)."""

    ids: np.ndarray
    values: np.ndarray


def nonzero_start(a0) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, values)`` of the non-zero coefficients of a start (None, a dense vector or a
    :class:`SparseStart`)."""
    if a0 is None:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    if isinstance(a0, SparseStart):
        ids, vals = np.asarray(a0.ids, dtype=np.int64), np.asarray(a0.values, dtype=np.float64)
    else:
        ids = np.flatnonzero(a0).astype(np.int64)
        vals = np.asarray(a0[ids], dtype=np.float64)
    nz = vals != 0
    return ids[nz], vals[nz]
