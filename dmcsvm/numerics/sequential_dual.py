"""Sequential dual method for the Crammer-Singer family with explicit prototypes (linear kernels).

Keerthi, Sundararajan, Chang, Hsieh & Lin (2008), "A sequential dual method for large scale
multi-class linear SVMs" (LIBLINEAR's ``-s 4`` solver), on the dual of docs/design.md, 'The
Crammer-Singer dual' with ``q >= 1`` prototypes per class and a *fixed* assignment ``yp`` (the
convex problem of one MProtSVM epoch; ``q = 1`` is Crammer-Singer).  For a kernel
``k(x, z) = a <x, z> + c0`` the scores are ``f_r(x) = a W_r . x + c0 s_r`` with ``W = B^T X``
(P x d) and ``s = B^T 1`` kept explicitly:

* a *pass* visits the active patterns in a random order; pattern ``i`` gets its scores on its
  active prototypes (O(|A_i| d)), its KKT violation ``psi`` (CS 2001 Eq. 32, margin units), and
  the exact solution of its reduced problem (sort-based, as
  :func:`dmcsvm.numerics.pattern.opt_exact`), after which ``W`` and ``s`` are updated in place
  (O(changed d)): no score matrix, no rounds;
* shrinking (Keerthi et al. §4 / LIBLINEAR): a prototype at its bound whose score is below every
  free one leaves the pattern's active list, a pattern with one active prototype leaves the pass;
  once a pass's largest violation drops below ``eps_shrink`` everything is re-activated and
  ``eps_shrink`` halves (down to ``tol``); the solve ends on a pass that started from every
  pattern and prototype and saw no violation above ``tol``.

Stopping: ``MulticlassSVC`` stops on LIBLINEAR's rule alone, ``tol`` bounding the largest KKT
violation ``psi`` seen in a pass over every pattern and prototype (its ``gap_tol`` does not apply
here: at the default ``tol=1e-3`` the relative duality gap ends between 4e-6 and 3e-4 on digits,
letter, usps and dna, primal within 0.03 % of LIBLINEAR's at ``tol=1e-4``); ``max_iter`` counts
passes (-1: :data:`~dmcsvm.coordinators.linear_cs.DEFAULT_MAX_PASSES`).  MProtSVM's epochs stop
when the exact primal beats the last energy, its final solve on ``tol`` or ``gap_tol``, whichever
comes first.

The kernels here are plain functions on arrays (numba), tested alone against NumPy references;
the orchestration (:class:`~dmcsvm.coordinators.linear_cs.SequentialState`,
:func:`~dmcsvm.coordinators.linear_cs.solve_fixed`, the estimator hooks) is
:mod:`dmcsvm.coordinators.linear_cs`.  This is the in-memory path: Dask clusters and zarr stores
stay on the batched-round machinery (:mod:`dmcsvm.coordinators.crammer_singer`), which scales past
one machine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import numba
import numpy as np
from numba.extending import overload
from numpy.typing import NDArray

from . import pattern as pt
from .linear_prototypes import row_slacks
from .pattern import Bounds
from .prefetch import prefetch2, prefetch_row  # (calls of prefetch2: see prefetch's typing note)

_C_REL = pt._C_REL  # alpha_y within C * (1 - _C_REL) of C is at the bound


# --------------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------------

#: reassociation lets LLVM vectorize the dot products (4x on this box); no nnan/ninf flags, the
#: kernels compare with infinities
_FM = {"reassoc", "contract", "nsz", "arcp"}

# Rows reach the kernels as a tuple: ``(Xd,)`` for dense rows (n x d, float64) or
# ``(indptr, indices, data)`` for CSR rows.  The two are different numba types, so every kernel
# is compiled once per layout with the row access resolved at compile time (a run-time
# ``dense`` flag in the inner loop kept LLVM from vectorizing it: 10x slower).
XRows: TypeAlias = (
    tuple[NDArray[np.float64]] | tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]
)


# row_dot and row_axpy have no Python body: numba compiles their @overload; the typing functions
# and their implementations take Any, as numba requires them to have equal parameters, annotations
# included, and the one is called with numba types and the other with arrays
def row_dot(W: NDArray[np.float64], r: int, rows: XRows, i: int) -> float:  # type: ignore[empty-body]
    """``W[r] . x_i`` (numba only)."""


def row_axpy(W: NDArray[np.float64], r: int, rows: XRows, i: int, v: float) -> None:
    """``W[r] += v x_i`` (numba only)."""


@overload(row_dot, jit_options={"fastmath": _FM})
def _row_dot(W: Any, r: Any, rows: Any, i: Any) -> Callable[[Any, Any, Any, Any], float]:
    if len(rows) == 1:

        def impl(W: Any, r: Any, rows: Any, i: Any) -> float:
            Xd = rows[0]
            acc = 0.0
            for k in range(Xd.shape[1]):
                acc += W[r, k] * Xd[i, k]
            return acc
    else:

        def impl(W: Any, r: Any, rows: Any, i: Any) -> float:
            indptr, indices, data = rows
            acc = 0.0
            for t in range(indptr[i], indptr[i + 1]):
                acc += W[r, indices[t]] * data[t]
            return acc

    return impl


@overload(row_axpy, jit_options={"fastmath": _FM})
def _row_axpy(
    W: Any, r: Any, rows: Any, i: Any, v: Any
) -> Callable[[Any, Any, Any, Any, Any], None]:
    if len(rows) == 1:

        def impl(W: Any, r: Any, rows: Any, i: Any, v: Any) -> None:
            Xd = rows[0]
            for k in range(Xd.shape[1]):
                W[r, k] += v * Xd[i, k]
    else:

        def impl(W: Any, r: Any, rows: Any, i: Any, v: Any) -> None:
            indptr, indices, data = rows
            for t in range(indptr[i], indptr[i + 1]):
                W[r, indices[t]] += v * data[t]

    return impl


@numba.njit(cache=True, nogil=True)
def subproblem(
    G: NDArray[np.float64],
    b: NDArray[np.float64],
    k: int,
    ypos: int,
    Ai: float,
    C: float,
    work: NDArray[np.float64],
    out: NDArray[np.float64],
) -> None:
    """Exact solution of one pattern's reduced problem on its ``k`` active prototypes
    (LIBLINEAR's ``solve_sub_problem``; the sort-based method of CS 2001 §6).

    ``G[t]`` are the gradients ``f_r + [r != y]`` and ``b[t]`` the signed coefficients of the
    active prototypes, ``ypos`` the slot of the positive prototype (``-1`` when it is not
    active: then it sits at its bound ``C``), ``Ai = k(x_i, x_i) > 0``.  Minimizes
    ``Ai/2 |b'|^2 + sum_t (G_t - Ai b_t) b'_t`` subject to ``b'_t <= C [t = ypos]`` and
    ``sum_t b'_t = sum_t b_t``: ``b'_t = min(bound_t, (beta - G_t + Ai b_t) / Ai)`` with ``beta``
    solving ``sum_t max(0, D_t - beta) = Ai C``, ``D_t = G_t - Ai b_t + Ai C [t = ypos]``.
    Writes ``out[:k]``; ``work`` is scratch of length >= k."""
    AC = Ai * C
    mx = -np.inf
    for t in range(k):
        dt = G[t] - Ai * b[t]
        if t == ypos:
            dt += AC
        out[t] = dt
        if dt > mx:
            mx = dt
    # beta >= max D - Ai C, so only D_t above that take part: insertion-sort just those
    lo = mx - AC - 1e-12 * (1.0 + abs(mx))
    m = 0
    for t in range(k):
        dt = out[t]
        if dt > lo:
            j = m
            while j > 0 and work[j - 1] < dt:
                work[j] = work[j - 1]
                j -= 1
            work[j] = dt
            m += 1
    beta = work[0] - AC
    r = 1
    while r < m and beta < r * work[r]:
        beta += work[r]
        r += 1
    beta /= r
    for t in range(k):
        v = (beta - G[t] + Ai * b[t]) / Ai
        bound = C if t == ypos else 0.0
        out[t] = v if v < bound else bound


@numba.njit(cache=True, nogil=True)
def seed(s: int) -> None:
    """Seed numba's generator (the pass order) of this thread."""
    np.random.seed(s)


@numba.njit(cache=True, nogil=True)
def reset_active(
    yp: NDArray[np.int64],
    cls: NDArray[np.int64],
    pcls: NDArray[np.int64],
    act: NDArray[np.int32],
    asz: NDArray[np.int64],
    nfull: NDArray[np.int64],
    rows: NDArray[np.int64],
) -> None:
    """Active prototype list of every row in ``rows``: its positive prototype ``yp[i]`` first,
    then the prototypes of the other classes (``nfull[i]`` of them in all)."""
    P = pcls.shape[0]
    for j in range(rows.shape[0]):
        i = rows[j]
        act[i, 0] = yp[i]
        k = 1
        for r in range(P):
            if pcls[r] != cls[i]:
                act[i, k] = r
                k += 1
        nfull[i] = k
        asz[i] = k


@numba.njit(cache=True, nogil=True)
def passes(
    rows: XRows,
    xsq: NDArray[np.float64],
    a: float,
    c0: float,
    yp: NDArray[np.int64],
    B: NDArray[np.float64],
    W: NDArray[np.float64],
    s: NDArray[np.float64],
    C: Bounds,
    act: NDArray[np.int32],
    asz: NDArray[np.int64],
    nfull: NDArray[np.int64],
    order: NDArray[np.int64],
    ctl: NDArray[np.float64],
    tol: float,
    max_passes: int,
    shrinking: bool,
    stage: bool,
) -> tuple[int, bool, float, int]:
    """Up to ``max_passes`` passes of the sequential dual method (module docstring).

    State carried between calls (so a caller may stop after any pass, e.g. to check the primal):
    ``B`` (n x P), ``W`` (P x d), ``s`` (P), the active prototype lists ``act`` / ``asz`` (full
    length ``nfull``), the pattern order ``order`` whose first ``ctl[0]`` entries are active,
    ``ctl[1] = eps_shrink``, ``ctl[2] = 1`` when the current pass starts from everything.
    With ``stage`` the call also returns after a pass that re-activates everything (the end of
    a shrinking stage).
    ``rows`` are the X rows (``(Xd,)`` or ``(indptr, indices, data)``), ``xsq`` their squared
    norms; ``C`` the bound of every row, or one per row (weighted patterns; a row with bound 0
    keeps its coefficients at 0).

    Returns ``(passes run, converged, largest violation of the last pass, prototypes visited)``.
    """
    n, P = B.shape
    G = np.empty(P)
    bb = np.empty(P)
    nb = np.empty(P)
    work = np.empty(P)
    stopping = 0.0
    visited = 0
    for it in range(max_passes):
        n_act = int(ctl[0])
        for j in range(n_act):
            t = j + np.random.randint(n_act - j)
            o = order[j]
            order[j] = order[t]
            order[t] = o
        stopping = -np.inf
        j = 0
        while j < n_act:
            i = order[j]
            # the order is random and B, act and X far larger than the caches: ask for the X
            # row and active list of the pattern after next and the active coefficients of the
            # next one now (prefetch: no value changes; 25-30 % less time per pass on letter,
            # q = 5)
            if j + 2 < n_act:
                i2 = order[j + 2]
                prefetch_row(rows, i2)
                for t in range(0, asz[i2], 16):
                    prefetch2(act, i2, t)  # type: ignore[call-arg, arg-type]
            if j + 1 < n_act:
                i2 = order[j + 1]
                for t in range(asz[i2]):
                    prefetch2(B, i2, act[i2, t])  # type: ignore[call-arg, arg-type]
            Ai = a * xsq[i] + c0
            y = yp[i]
            Ci = pt.bound_at(C, i)
            if Ci <= 0.0:
                # a weight-0 row: its coefficients stay 0; it leaves the pass
                n_act -= 1
                order[j] = order[n_act]
                order[n_act] = i
                continue
            if Ai <= 0.0:
                # k(x_i, x_i) = 0: the row never changes a score and its dual term is linear,
                # maximal at alpha_y = Ci against any negative prototype (the kernel path's
                # pair steps end there too).  Set once, then the row leaves the pass.
                if B[i, y] < Ci:
                    r = act[i, 1] if act[i, 0] == y else act[i, 0]
                    for t in range(nfull[i]):
                        q = act[i, t]
                        s[q] -= B[i, q]
                        B[i, q] = 0.0
                    B[i, y] = Ci
                    B[i, r] = -Ci
                    s[y] += Ci
                    s[r] -= Ci
                n_act -= 1
                order[j] = order[n_act]
                order[n_act] = i
                continue
            k = asz[i]
            visited += k
            mn = np.inf
            mxg = -np.inf
            for t in range(k):
                r = act[i, t]
                g = a * row_dot(W, r, rows, i) + c0 * s[r]
                if r != y:
                    g += 1.0
                G[t] = g
                bt = B[i, r]
                bb[t] = bt
                bound = Ci if r == y else 0.0
                if bt < bound and g < mn:
                    mn = g
                if g > mxg:
                    mxg = g
            if shrinking:
                t = 0
                while t < k:
                    r = act[i, t]
                    bound = Ci if r == y else 0.0
                    if bb[t] == bound and G[t] < mn:
                        k -= 1
                        act[i, t] = act[i, k]
                        act[i, k] = r
                        gt = G[t]
                        G[t] = G[k]
                        G[k] = gt
                        gt = bb[t]
                        bb[t] = bb[k]
                        bb[k] = gt
                    else:
                        t += 1
                asz[i] = k
                if k <= 1:
                    n_act -= 1
                    order[j] = order[n_act]
                    order[n_act] = i
                    continue
            viol = mxg - mn
            if viol > stopping:
                stopping = viol
            if viol <= 1e-12:
                j += 1
                continue
            ypos = -1
            for t in range(k):
                if act[i, t] == y:
                    ypos = t
                    break
            subproblem(G, bb, k, ypos, Ai, Ci, work, nb)
            if ypos >= 0:
                # rounding leaves no ~1e-17 coefficients (patterns that only look like support
                # vectors) and alpha_y at Ci is exactly Ci (the bound tests compare with Ci)
                tot = 0.0
                for t in range(k):
                    if t != ypos:
                        if nb[t] > -1e-14 * Ci:
                            nb[t] = 0.0
                        tot -= nb[t]
                if nb[ypos] < Ci and tot < Ci * (1.0 - _C_REL):
                    nb[ypos] = tot
                else:
                    nb[ypos] = Ci
            for t in range(k):
                dv = nb[t] - bb[t]
                if dv != 0.0:
                    r = act[i, t]
                    B[i, r] = nb[t]
                    s[r] += dv
                    row_axpy(W, r, rows, i, dv)
            j += 1
        ctl[0] = n_act
        if stopping < 0.0:
            stopping = 0.0
        if not shrinking:
            if stopping <= tol:
                return it + 1, True, stopping, visited
            continue
        if stopping < ctl[1]:
            if stopping <= tol and ctl[2] == 1.0:
                return it + 1, True, stopping, visited
            ctl[0] = n
            for i in range(n):
                asz[i] = nfull[i]
            ctl[1] = max(ctl[1] / 2.0, tol)
            ctl[2] = 1.0
            if stage:
                return it + 1, False, stopping, visited
        else:
            ctl[2] = 0.0
    return max_passes, False, stopping, visited


@numba.njit(cache=True, nogil=True)
def slacks(
    rows: XRows,
    a: float,
    c0: float,
    W: NDArray[np.float64],
    s: NDArray[np.float64],
    cls: NDArray[np.int64],
    pcls: NDArray[np.int64],
    first: NDArray[np.int64],
    count: NDArray[np.int64],
    out: NDArray[np.float64],
) -> NDArray[np.float64]:
    """Slack of every row w.r.t. each of its positive prototypes, as
    :func:`~dmcsvm.numerics.linear_prototypes.positive_slacks` gives from a score matrix, with
    the scores ``a <W_r, x_i> + c0 s_r`` made row by row (no n x P score matrix: one pass over
    the rows, n P d flops, the cost of the primal checks of
    :func:`dmcsvm.coordinators.linear_cs.solve_fixed`)."""
    return slacks_range(rows, a, c0, W, s, cls, pcls, first, count, out, 0, out.shape[0])


@numba.njit(cache=True, nogil=True)
def _range_max(f: NDArray[np.float64], lo: int, hi: int, m: float) -> float:
    """``max(m, f[lo:hi])`` on four running maxima (one serial chain of compares kept the
    slack pass at ~1 ns per score; a maximum is exact, so the value is the same)."""
    m0 = m
    m1 = m
    m2 = m
    m3 = m
    r = lo
    while r + 4 <= hi:
        m0 = max(m0, f[r])
        m1 = max(m1, f[r + 1])
        m2 = max(m2, f[r + 2])
        m3 = max(m3, f[r + 3])
        r += 4
    while r < hi:
        m0 = max(m0, f[r])
        r += 1
    return max(max(m0, m1), max(m2, m3))


@numba.njit(cache=True, nogil=True)
def slacks_of_scores(
    G: NDArray[np.float64],
    a: float,
    c0: float,
    s: NDArray[np.float64],
    cls: NDArray[np.int64],
    pcls: NDArray[np.int64],
    first: NDArray[np.int64],
    count: NDArray[np.int64],
    out: NDArray[np.float64],
    lo: int,
) -> NDArray[np.float64]:
    """:func:`slacks` of rows ``lo..lo+len(G)-1`` from their products with the prototypes,
    ``G[i - lo, r] = <x_i, W_r>`` (a GEMM of a block of dense rows; the scores are
    ``a G + c0 s``).  On dense rows the GEMM and this pass take about half the time of
    :func:`slacks_range`'s row-by-row dots (letter, q = 5: 3.8 against 7.1 ms).  The scores
    are made in one branch-free (vectorized) loop and the largest score of another class is
    the maximum over the prototypes before and after the row's class's group (``pcls`` is
    grouped by class)."""
    m, P = G.shape
    f = np.empty(P)
    for k in range(m):
        i = lo + k
        c = cls[i]
        for r in range(P):
            f[r] = a * G[k, r] + c0 * s[r]
        f0 = first[c]
        th = _range_max(f, f0 + count[c], P, _range_max(f, 0, f0, -np.inf))
        row_slacks(f, th, f0, count[c], out, i)
    return out


@numba.njit(cache=True, nogil=True)
def slacks_range(
    rows: XRows,
    a: float,
    c0: float,
    W: NDArray[np.float64],
    s: NDArray[np.float64],
    cls: NDArray[np.int64],
    pcls: NDArray[np.int64],
    first: NDArray[np.int64],
    count: NDArray[np.int64],
    out: NDArray[np.float64],
    lo: int,
    hi: int,
) -> NDArray[np.float64]:
    """:func:`slacks` of rows ``lo..hi-1`` only (threads split the rows; each row alone)."""
    P = W.shape[0]
    f = np.empty(P)
    for i in range(lo, hi):
        c = cls[i]
        th = -np.inf
        for r in range(P):
            fr = a * row_dot(W, r, rows, i) + c0 * s[r]
            f[r] = fr
            if pcls[r] != c and fr > th:
                th = fr
        row_slacks(f, th, first[c], count[c], out, i)
    return out
