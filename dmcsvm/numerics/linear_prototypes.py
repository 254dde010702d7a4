"""Array kernels of the multi-prototype SVM (Aiolli & Sperduti 2005, §4-6): per-row slacks over the
positive prototypes, the annealed assignment draw of Eq. 17, and the explicit-prototype (``W``)
arithmetic of the linear fast path.

Prototype layout (docs/design.md, 'The Crammer-Singer dual'): the ``P = sum_c q_c`` prototypes are
grouped by class, class ``c`` owning the prototypes ``first[c] .. first[c] + count[c] - 1``.  A
pattern's assignment is stored both as its prototype index ``yp`` and as its *slot*
``yp - first[c]`` inside its class.

Linear kernels ``k(x, z) = a <x, z> + c0`` (``'linear'``: ``a = 1, c0 = 0``; ``'poly'`` of degree 1:
``a = gamma, c0 = coef0``, the paper's ``<x, z> + 1`` is ``a = c0 = 1``) give explicit prototypes:
``f_r(x) = sum_i B[i, r] k(x_i, x) = a <W_r, x> + c0 s_r`` with ``W = B^T X`` (P x d) and
``s = B^T 1``.  A batch step ``dB`` (rows ``X_B``) changes them by ``dW = dB^T X_B``,
``ds = dB^T 1``: the partitions score their rows with one ``X W^T`` GEMM and never compute a kernel
row.

Every kernel is a plain function on arrays, tested alone against a NumPy reference (the batch solve
against the ``K_BB`` solve of :mod:`dmcsvm.numerics.pattern`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, TypeAlias

import numba
import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from . import pattern as pt
from .passes import pass_cut
from .pattern import Bounds

if TYPE_CHECKING:
    from ..kernels import KernelSpec

#: X rows: dense (float32 or float64) or CSR
Rows: TypeAlias = NDArray[np.floating[Any]] | sp.csr_matrix


@numba.njit(cache=True, nogil=True, inline="always")
def row_slacks(
    f: NDArray[np.float64], th: float, f0: int, cnt: int, out: NDArray[np.float64], i: int
) -> None:
    """Row ``i``'s slacks w.r.t. its class's prototypes ``f0 .. f0 + cnt - 1`` (AS 2005 §4) from
    its scores ``f`` and the largest score ``th`` of another class; ``+inf`` in the unused
    slots.  :func:`positive_slacks` and the sequential dual method's primal checks
    (:mod:`dmcsvm.numerics.sequential_dual`) share it."""
    for q in range(out.shape[1]):
        if q < cnt:
            xi = th + 1.0 - f[f0 + q]
            out[i, q] = xi if xi > 0.0 else 0.0
        else:
            out[i, q] = np.inf


@numba.njit(cache=True, nogil=True)
def positive_slacks(
    F: NDArray[np.float64],
    cls: NDArray[np.int64],
    pcls: NDArray[np.int64],
    first: NDArray[np.int64],
    count: NDArray[np.int64],
    out: NDArray[np.float64],
) -> NDArray[np.float64]:
    """Slack of every row w.r.t. each of its positive prototypes (AS 2005 §4):
    ``out[i, s] = max(0, theta_i + 1 - F[i, first[c_i] + s])`` with
    ``theta_i = max_{r in N_i} F[i, r]``, for ``s < count[c_i]``; ``+inf`` in the unused slots
    (classes with fewer prototypes than ``out.shape[1]``)."""
    n, P = F.shape
    for i in range(n):
        c = cls[i]
        th = -np.inf
        for r in range(P):
            if pcls[r] != c and F[i, r] > th:
                th = F[i, r]
        row_slacks(F[i], th, first[c], count[c], out, i)
    return out


def epoch_uniforms(seed: int, lo: int, hi: int) -> NDArray[np.float64]:
    """``u[lo:hi]`` of the uniform stream ``u`` of one re-assignment (Eq. 17's draws), the same
    whoever computes which slice: PCG64 skips ahead ``lo`` outputs (one per double), so a
    partition draws its own rows' values and the draw does not depend on the partitioning."""
    bits = np.random.PCG64(int(seed))
    bits.advance(int(lo))
    return np.random.Generator(bits).random(int(hi) - int(lo))


def epoch_seed(rng: np.random.RandomState) -> int:
    """The seed of one epoch's draws, from the estimator's ``RandomState``."""
    return int(rng.randint(0, 2**62, dtype=np.int64))


def slack_term(xi_own: NDArray[np.float64], C: float, row_C: NDArray[np.float64] | None) -> float:
    """The primal's slack term ``C sum_i xi_i``, or ``sum_i C_i xi_i`` with per-pattern bounds
    ``row_C`` (class / sample weights)."""
    return C * float(xi_own.sum()) if row_C is None else float(row_C @ xi_own)


def redraw_slots(
    xi: NDArray[np.float64],
    slot: NDArray[np.int64],
    seed: int,
    lo: int,
    T: float,
    C: float,
    row_C: NDArray[np.float64] | None,
) -> tuple[NDArray[np.int64], float]:
    """The re-assignment of Eq. 17 for the rows ``lo, lo + 1, ...`` whose slacks are ``xi`` and
    current slots ``slot``, with their slice of the epoch's uniforms (:func:`epoch_uniforms`):
    ``(new slots, the slack term at them)``.  The coordinator's in-memory path (``lo = 0``, all
    rows) and every partition (its own rows) draw through it."""
    n = slot.shape[0]
    u = epoch_uniforms(seed, lo, lo + n)
    new_slot = draw_assignment(
        xi, slot, u, float(T), C if row_C is None else row_C, np.empty(n, dtype=np.int64)
    )
    return new_slot, slack_term(xi[np.arange(n), new_slot], C, row_C)


@numba.njit(cache=True, nogil=True)
def draw_assignment(
    xi: NDArray[np.float64],
    cur: NDArray[np.int64],
    u: NDArray[np.float64],
    T: float,
    C: Bounds,
    out: NDArray[np.int64],
) -> NDArray[np.int64]:
    """New slot of every row by the annealed rule of AS 2005 Eq. 17:
    ``p_i(s) = exp(-C (xi_i^s - xi_i^0) / T) / Z_i`` with ``xi_i^0 = min_s xi_i^s``, sampled by
    inverting the cumulative distribution at ``u[i]`` (uniform in [0, 1), drawn by the caller).

    ``T = 0`` is the greedy step of §6.1: a slot of minimal slack, the current slot ``cur[i]`` when
    it is one of them (no needless re-assignment).  Unused slots hold ``+inf`` (probability 0).
    ``C`` is a scalar or one bound per row (weighted patterns: ``Delta E_s = C_i (xi^s - xi^0)``).
    Returns ``out`` (the new slots)."""
    n, qmax = xi.shape
    for i in range(n):
        Ci = pt.bound_at(C, i)
        x0 = np.inf
        arg = 0
        for s in range(qmax):
            if xi[i, s] < x0:
                x0 = xi[i, s]
                arg = s
        if T <= 0.0:
            out[i] = cur[i] if xi[i, cur[i]] <= x0 else arg
            continue
        Z = 0.0
        for s in range(qmax):
            if xi[i, s] < np.inf:
                Z += math.exp(-Ci * (xi[i, s] - x0) / T)
        target = u[i] * Z
        acc = 0.0
        pick = arg
        for s in range(qmax):
            if xi[i, s] < np.inf:
                acc += math.exp(-Ci * (xi[i, s] - x0) / T)
                pick = s
                if acc > target:
                    break
        out[i] = pick
    return out


def linear_coefficients(spec: KernelSpec) -> tuple[float, float] | None:
    """``(a, c0)`` of a linear kernel ``a <x, z> + c0`` (``'linear'`` or ``'poly'`` of degree 1);
    ``None`` for any other kernel."""
    if spec.name == "linear":
        return 1.0, 0.0
    if spec.name == "poly" and int(spec.degree) == 1:
        return float(spec.gamma), float(spec.coef0)
    return None


def has_coefficients(
    B: NDArray[np.float64], rows: NDArray[np.int64], yp: NDArray[np.int64]
) -> NDArray[np.bool_]:
    """Which of ``rows`` have any non-zero coefficient, from ``B[i, yp_i]`` alone: a row's
    coefficients sum to zero and all but its positive prototype's are ``<= 0``, so they are all
    zero unless ``alpha_i^{y_i} > 0`` (O(len(rows)), not a scan of the rows' P entries)."""
    return B[rows, yp[rows]] != 0.0  # type: ignore[no-any-return]  # (numpy: fancy index is Any)


def move_step(
    B: NDArray[np.float64], rows: NDArray[np.int64], old: NDArray[np.int64], new: NDArray[np.int64]
) -> NDArray[np.float64]:
    """``dB`` (len(rows) x P) moving each row's positive coefficient ``B[i, old_i]`` to its new
    prototype ``new_i`` (the restore after a re-assignment,
    :mod:`dmcsvm.coordinators.multiprototype`)."""
    a = B[rows, old]
    dB = np.zeros((rows.shape[0], B.shape[1]))
    k = np.arange(rows.shape[0])
    dB[k, old] = -a
    dB[k, new] += a
    return dB


def prototype_step(
    dB: NDArray[np.float64], XB: Rows
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``(dW, ds) = (dB^T X_B, dB^T 1)``: the change of the explicit prototypes (P x d) and of their
    coefficient sums caused by the batch change ``dB`` (len(ids) x P) of rows ``X_B``
    (dense/CSR)."""
    if sp.issparse(XB):
        dW = np.asarray((XB.T @ dB).T, dtype=np.float64)
    else:
        dW = dB.T @ np.asarray(XB, dtype=np.float64)
    return np.ascontiguousarray(dW), dB.sum(axis=0)


def linear_scores(
    X: Rows,
    W: NDArray[np.float64],
    s: NDArray[np.float64],
    a: float,
    c0: float,
    out: NDArray[np.float64] | None = None,
) -> NDArray[np.float64]:
    """Prototype scores ``a X W^T + c0 s`` of the rows of ``X`` (dense or CSR), float64."""
    G = X @ W.T
    # (sp.issparse does not narrow for mypy: scipy ships no types)
    G = np.asarray(G.toarray() if sp.issparse(G) else G, dtype=np.float64)  # type: ignore[union-attr]
    if out is None:
        out = np.empty((X.shape[0], W.shape[0]))
    np.multiply(G, a, out=out)
    out += c0 * s
    return out


# --------------------------------------------------------------------------------------------
# the coordinator's batch solve with explicit prototypes
# --------------------------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True)
def _csr_row_dot(
    dW: NDArray[np.float64],
    indptr: NDArray[np.int64],
    indices: NDArray[np.int64],
    data: NDArray[np.float64],
    j: int,
    r: int,
) -> float:
    acc = 0.0
    for t in range(indptr[j], indptr[j + 1]):
        acc += dW[r, indices[t]] * data[t]
    return acc


@numba.njit(cache=True, nogil=True)
def _csr_row_axpy(
    dW: NDArray[np.float64],
    indptr: NDArray[np.int64],
    indices: NDArray[np.int64],
    data: NDArray[np.float64],
    j: int,
    r: int,
    v: float,
) -> None:
    for t in range(indptr[j], indptr[j + 1]):
        dW[r, indices[t]] += v * data[t]


@numba.njit(cache=True, nogil=True)
def _row_scores(
    j: int,
    Fb: NDArray[np.float64],
    Xd: NDArray[np.float64],
    indptr: NDArray[np.int64],
    indices: NDArray[np.int64],
    data: NDArray[np.float64],
    dense: bool,
    dW: NDArray[np.float64],
    dWT: NDArray[np.float64],
    ds: NDArray[np.float64],
    touched: NDArray[np.bool_],
    a: float,
    c0: float,
    gx: NDArray[np.float64],
    f: NDArray[np.float64],
) -> None:
    """Current scores of batch row ``j`` into ``f``: its reported scores plus the batch's change so
    far, ``a dW x_j + c0 ds`` (only the prototypes the batch touched)."""
    P = f.shape[0]
    if dense:
        gx[:] = 0.0
        for k in range(Xd.shape[1]):
            xk = Xd[j, k]
            if xk != 0.0:
                for r in range(P):
                    gx[r] += dWT[k, r] * xk
        for r in range(P):
            fr = Fb[j, r]
            if touched[r]:
                fr += a * gx[r] + c0 * ds[r]
            f[r] = fr
    else:
        for r in range(P):
            fr = Fb[j, r]
            if touched[r]:
                fr += a * _csr_row_dot(dW, indptr, indices, data, j, r) + c0 * ds[r]
            f[r] = fr


@numba.njit(cache=True, nogil=True)
def _optimize_row(
    code: int,
    j: int,
    Bb: NDArray[np.float64],
    dB: NDArray[np.float64],
    f: NDArray[np.float64],
    Xd: NDArray[np.float64],
    indptr: NDArray[np.int64],
    indices: NDArray[np.int64],
    data: NDArray[np.float64],
    dense: bool,
    dW: NDArray[np.float64],
    dWT: NDArray[np.float64],
    ds: NDArray[np.float64],
    touched: NDArray[np.bool_],
    yb: NDArray[np.int64],
    cb: NDArray[np.int64],
    pcls: NDArray[np.int64],
    kdiag: NDArray[np.float64],
    Cj: float,
    tol: float,
    fp_eps: float,
    b: NDArray[np.float64],
    b0: NDArray[np.float64],
    relax: float,
) -> tuple[float, bool]:
    """Optimize batch row ``j`` exactly (``optimize_pattern``) at scores ``f`` and fold its change
    into ``dB``, ``dW`` (or ``dWT``) and ``ds``; ``relax > 1`` over-relaxes an exact step
    (:func:`dmcsvm.numerics.pattern.relaxed_step`).  Returns the gain and whether anything moved."""
    P = f.shape[0]
    for r in range(P):
        b[r] = Bb[j, r] + dB[j, r]
        b0[r] = b[r]
    kpp = kdiag[j]
    phi = (0.1 * tol) ** 2 / (2.0 * kpp) if kpp > 0.0 else 0.0
    g = pt.relaxed_step(code, b, b0, f, yb[j], cb[j], pcls, kpp, Cj, phi, fp_eps, relax)
    moved = False
    for r in range(P):
        v = b[r] - b0[r]
        if v != 0.0:
            moved = True
            dB[j, r] += v
            touched[r] = True
            ds[r] += v
            if dense:
                for k in range(Xd.shape[1]):
                    dWT[k, r] += v * Xd[j, k]
            else:
                _csr_row_axpy(dW, indptr, indices, data, j, r, v)
    return g, moved


@numba.njit(cache=True, nogil=True)
def _batch_linear(
    code: int,
    Bb: NDArray[np.float64],
    Fb: NDArray[np.float64],
    Xd: NDArray[np.float64],
    indptr: NDArray[np.int64],
    indices: NDArray[np.int64],
    data: NDArray[np.float64],
    d: int,
    yb: NDArray[np.int64],
    cb: NDArray[np.int64],
    pcls: NDArray[np.int64],
    kdiag: NDArray[np.float64],
    C: Bounds,
    tol: float,
    fp_eps: float,
    sweeps: int,
    a: float,
    c0: float,
    max_steps: int,
    inner_tol: float,
    relax: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]]:
    """Shared body of the dense / CSR batch solves (``Xd`` empty for CSR).

    ``max_steps == 0``: ``sweeps`` passes in order (:func:`dmcsvm.numerics.pattern.solve_batch`).
    ``max_steps > 0``: the working-set solve by re-selection
    (:func:`dmcsvm.numerics.working_set.solve_working_set`, same passes, cuts and stops) on explicit
    prototypes, its exact steps over-relaxed by ``relax``.  Returns ``(dB, gains, steps)``."""
    nb, P = Bb.shape
    dense = Xd.shape[0] > 0
    dB = np.zeros((nb, P))
    gains = np.zeros(nb)
    steps = np.zeros(nb, dtype=np.int64)
    # change of the prototypes by the batch so far, sum_k dB[k] x_k: P x d for CSR rows, d x P
    # for dense rows (all P scores of a row are then one pass over d with SIMD across P)
    dW = np.zeros((P, d)) if not dense else np.zeros((1, 1))
    dWT = np.zeros((d, P)) if dense else np.zeros((1, 1))
    gx = np.empty(P)
    ds = np.zeros(P)
    touched = np.zeros(P, dtype=np.bool_)
    f = np.empty(P)
    b = np.empty(P)  # the row's coefficients and their copy, reused (no allocation
    b0 = np.empty(P)  # per row visit)
    bc = np.empty(P)
    if max_steps > 0:
        psi0 = np.empty(nb)  # every row's psi at the start of the pass
        total = 0
        first = True
        for _ in range(pt._MAX_INNER):
            mx = 0.0
            for k in range(nb):
                _row_scores(
                    k, Fb, Xd, indptr, indices, data, dense, dW, dWT, ds, touched, a, c0, gx, f
                )
                for r in range(P):
                    bc[r] = Bb[k, r] + dB[k, r]
                psi0[k] = pt.psi_value(bc, f, yb[k], cb[k], pcls, pt.bound_at(C, k))
                if psi0[k] > mx:
                    mx = psi0[k]
            cut = pass_cut(mx, tol, inner_tol, first, total, max_steps)
            if cut < 0.0:
                break
            first = False
            moved = False
            for j in range(nb):
                if total >= max_steps:
                    break
                if not moved and psi0[j] <= cut:
                    continue  # nothing moved since the scan: its psi is still psi0[j]
                _row_scores(
                    j, Fb, Xd, indptr, indices, data, dense, dW, dWT, ds, touched, a, c0, gx, f
                )
                for r in range(P):
                    bc[r] = Bb[j, r] + dB[j, r]
                Cj = pt.bound_at(C, j)
                if pt.psi_value(bc, f, yb[j], cb[j], pcls, Cj) <= cut:
                    continue
                g, ch = _optimize_row(
                    code,
                    j,
                    Bb,
                    dB,
                    f,
                    Xd,
                    indptr,
                    indices,
                    data,
                    dense,
                    dW,
                    dWT,
                    ds,
                    touched,
                    yb,
                    cb,
                    pcls,
                    kdiag,
                    Cj,
                    tol,
                    fp_eps,
                    b,
                    b0,
                    relax,
                )
                total += 1
                steps[j] += 1
                gains[j] += g
                moved = moved or ch
            if not moved:
                break
        return dB, gains, steps
    # A sweep after the first checks every row before optimizing it and skips rows with
    # psi <= tol, so a sweep that finds no violator changed nothing: it ends the solve.  That is
    # the same dB as checking the whole batch after every sweep (pattern.solve_batch), without a
    # second O(P d) score pass per row and sweep.
    for sweep in range(sweeps):
        worst = 0.0
        for j in range(nb):
            _row_scores(j, Fb, Xd, indptr, indices, data, dense, dW, dWT, ds, touched, a, c0, gx, f)
            Cj = pt.bound_at(C, j)
            if sweep > 0:
                for r in range(P):
                    bc[r] = Bb[j, r] + dB[j, r]
                p = pt.psi_value(bc, f, yb[j], cb[j], pcls, Cj)
                if p > worst:
                    worst = p
                if p <= tol:
                    continue
            g, ch = _optimize_row(
                code,
                j,
                Bb,
                dB,
                f,
                Xd,
                indptr,
                indices,
                data,
                dense,
                dW,
                dWT,
                ds,
                touched,
                yb,
                cb,
                pcls,
                kdiag,
                Cj,
                tol,
                fp_eps,
                b,
                b0,
                1.0,
            )
            gains[j] += g
            steps[j] += 1
        if sweep > 0 and worst <= tol:
            break
    return dB, gains, steps


def solve_batch_linear(
    code: int,
    Bb: NDArray[np.float64],
    Fb: NDArray[np.float64],
    XB: Rows,
    yb: NDArray[np.int64],
    cb: NDArray[np.int64],
    pcls: NDArray[np.int64],
    kdiag: NDArray[np.float64],
    C: Bounds,
    tol: float,
    fp_eps: float,
    sweeps: int,
    a: float,
    c0: float,
    max_steps: int = 0,
    inner_tol: float = 0.0,
    relax: float = 1.0,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]]:
    """The coordinator's batch solve (as :func:`dmcsvm.numerics.pattern.solve_batch`) for a linear
    kernel ``a <x, z> + c0``, with explicit prototypes instead of ``K_BB``: the batch patterns are
    optimized in order, each scored as ``F_reported + a dW x_j + c0 ds`` where ``dW = sum_k dB_k
    x_k`` (P x d) and ``ds`` are the changes made by the earlier batch patterns.  O(P d) per
    pattern instead of O(batch size), so a batch may hold every violator (LIBLINEAR-style passes).
    With ``max_steps > 0`` it is the working-set solve of
    :func:`dmcsvm.numerics.working_set.solve_working_set` instead (``sweeps`` unused; ``relax`` as
    there).
    ``XB`` is dense or CSR; ``C`` a scalar or one bound per batch row (weighted patterns).
    Returns ``(dB, gains, steps)``."""
    C = float(C) if np.ndim(C) == 0 else np.ascontiguousarray(C, dtype=np.float64)
    Bb = np.ascontiguousarray(Bb, dtype=np.float64)
    Fb = np.ascontiguousarray(Fb, dtype=np.float64)
    yb = np.ascontiguousarray(yb, dtype=np.int64)
    cb = np.ascontiguousarray(cb, dtype=np.int64)
    pcls = np.ascontiguousarray(pcls, dtype=np.int64)
    kdiag = np.ascontiguousarray(kdiag, dtype=np.float64)
    d = XB.shape[1]
    opts = (
        float(tol),
        float(fp_eps),
        int(sweeps),
        float(a),
        float(c0),
        int(max_steps),
        float(inner_tol),
        float(relax),
    )
    if sp.issparse(XB):
        Xc = XB.tocsr()  # type: ignore[union-attr]  # (sp.issparse does not narrow)
        return _batch_linear(
            code,
            Bb,
            Fb,
            np.zeros((0, d)),
            Xc.indptr.astype(np.int64),
            Xc.indices.astype(np.int64),
            Xc.data.astype(np.float64),
            d,
            yb,
            cb,
            pcls,
            kdiag,
            C,
            *opts,
        )
    Xd = np.ascontiguousarray(XB, dtype=np.float64)
    empty_i = np.zeros(1, dtype=np.int64)
    return _batch_linear(
        code, Bb, Fb, Xd, empty_i, empty_i, np.zeros(1), d, yb, cb, pcls, kdiag, C, *opts
    )


class LinearBatchSolver:
    """``solve(..., batch_solver=LinearBatchSolver(a, c0))``: the coordinator's batch solves with
    explicit prototypes (called with the batch's X rows where the kernel solves take ``K_BB``):
    one pass in order (``__call__``) or the working-set solve (``working_set``)."""

    def __init__(self, a: float, c0: float) -> None:
        self.a, self.c0 = float(a), float(c0)

    def __call__(
        self,
        code: int,
        Bb: NDArray[np.float64],
        Fb: NDArray[np.float64],
        XB: Rows,
        yb: NDArray[np.int64],
        cb: NDArray[np.int64],
        pcls: NDArray[np.int64],
        kdiag: NDArray[np.float64],
        C: Bounds,
        tol: float,
        fp_eps: float,
        sweeps: int,
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        dB, gains, _ = solve_batch_linear(
            code, Bb, Fb, XB, yb, cb, pcls, kdiag, C, tol, fp_eps, sweeps, self.a, self.c0
        )
        return dB, gains

    def working_set(
        self,
        code: int,
        Bb: NDArray[np.float64],
        Fb: NDArray[np.float64],
        XB: Rows,
        yb: NDArray[np.int64],
        cb: NDArray[np.int64],
        pcls: NDArray[np.int64],
        kdiag: NDArray[np.float64],
        C: Bounds,
        tol: float,
        fp_eps: float,
        max_steps: int,
        inner_tol: float,
        relax: float = 1.0,
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]]:
        return solve_batch_linear(
            code,
            Bb,
            Fb,
            XB,
            yb,
            cb,
            pcls,
            kdiag,
            C,
            tol,
            fp_eps,
            1,
            self.a,
            self.c0,
            max(1, int(max_steps)),
            inner_tol,
            relax,
        )
