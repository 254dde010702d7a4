"""Per-pattern optimizers and pattern-selection values of the Crammer-Singer family (numba).

Notation (docs/design.md, 'The Crammer-Singer dual'): one pattern's signed coefficients
``b = B[p, :]`` (length P), its scores ``f = F[p, :]``, its assigned positive prototype ``y``, its
class ``c`` and the class of every prototype ``pcls``.  ``N_p = {r : pcls[r] != c}``; positive
prototypes other than ``y`` keep ``b[r] = 0``.  ``alpha_y = b[y] >= 0`` and ``alpha_r = -b[r] >= 0``
for ``r`` in ``N_p``.

All gains are in the units of the Aiolli-Sperduti Lagrangian (2005, Eq. 11:
``sum alpha - ||M||^2``), which is twice the dual ``D = sum_i alpha_i^{y_i} - 1/2 ||M||^2`` of
docs/design.md, 'The Crammer-Singer dual'.

Every function works on plain arrays and mutates ``b`` and ``f`` in place where it optimizes, so it
can be tested alone against a NumPy reference and run unchanged on the coordinator.
"""

from __future__ import annotations

from typing import TypeAlias

import numba
import numpy as np
from numba import types
from numba.extending import overload
from numpy.typing import NDArray

# optimizer codes
OPT_BASIC, OPT_ALL_PAIRS, OPT_KKT, OPT_FIXED_POINT, OPT_EXACT = 0, 1, 2, 3, 4
OPTIMIZERS = {
    "basic": OPT_BASIC,
    "all_pairs": OPT_ALL_PAIRS,
    "opt_kkt": OPT_KKT,
    "fixed_point": OPT_FIXED_POINT,
    "exact": OPT_EXACT,
}
# selection codes
SEL_KKT, SEL_AMG, SEL_BMG = 0, 1, 2
SELECTIONS = {"kkt": SEL_KKT, "amg": SEL_AMG, "bmg": SEL_BMG}

_C_REL = 1e-12  # alpha_y within C * (1 - _C_REL) of C counts as "at the upper bound"
_MAX_INNER = 100000  # guard on inner loops (never reached on sane inputs)

#: the upper bound of a dual variable: one ``C`` for every row, or one per row (weighted patterns)
Bounds: TypeAlias = float | NDArray[np.float64]


def bound_at(C: Bounds, i: int) -> float:
    """Row ``i``'s upper bound: ``C`` itself when it is a scalar (every row has the same box),
    else ``C[i]`` (per-pattern bounds ``C_i = C * class_weight[y_i] * sample_weight_i``,
    :mod:`dmcsvm.estimators._weights`).  The functions over many rows take either."""
    # (np.ndim does not narrow the union for mypy; the jitted callers use _bound_at_nb)
    return C if np.ndim(C) == 0 else C[i]  # type: ignore[index,return-value]


# Unannotated: numba requires an implementation's parameters to equal its typing function's,
# annotations included, and these implementations are lambdas.  numba's stubs leave ``cache`` out
# of the jit options (overload passes them on to jit, which takes it).
@overload(bound_at, jit_options={"cache": True})  # type: ignore[typeddict-unknown-key]
def _bound_at_nb(C, i):  # type: ignore[no-untyped-def]
    if isinstance(C, types.Array):
        return lambda C, i: C[i]
    return lambda C, i: C


@numba.njit(cache=True, nogil=True)
def pair_step(
    b: NDArray[np.float64], f: NDArray[np.float64], y: int, ra: int, rb: int, kpp: float, C: float
) -> tuple[float, float]:
    """Optimal clipped step ``v`` and its gain for the pair (ra, rb), rb in N_p (AS 2005 Eq. 14).

    ``alpha^ra += y^ra v``, ``alpha^rb -= y^rb v``; for ``ra = y`` this is Case 1 (Eq. 12),
    for ``ra`` in N_p Case 2 (Eq. 13).  Returns ``(v, gain)``.
    """
    if ra == y:
        num = 1.0 - f[y] + f[rb]
        lo = max(-b[y], b[rb])  # alpha_y + v >= 0, alpha_rb + v >= 0
        hi = C - b[y]  # alpha_y + v <= C
    else:
        num = f[rb] - f[ra]
        lo = b[rb]  # alpha_rb + v >= 0
        hi = -b[ra]  # alpha_ra - v >= 0
    if kpp > 0.0:
        v = num / (2.0 * kpp)
    elif num > 0.0:
        v = hi
    elif num < 0.0:
        v = lo
    else:
        v = 0.0
    if v > hi:
        v = hi
    if v < lo:
        v = lo
    gain = 2.0 * v * (num - v * kpp)
    return v, gain


@numba.njit(cache=True, nogil=True)
def apply_step(
    b: NDArray[np.float64],
    f: NDArray[np.float64],
    y: int,
    ra: int,
    rb: int,
    v: float,
    kpp: float,
    C: float,
) -> None:
    """BasicUpdate restricted to the pattern's own row: ``B[p,ra] += v``, ``B[p,rb] -= v`` and the
    matching change ``v K_pp`` of its own scores (docs/design.md, 'The Crammer-Singer dual')."""
    b[ra] += v
    b[rb] -= v
    if ra == y and b[y] > C:
        b[y] = C
    if ra == y and abs(b[y] - C) <= _C_REL * C:
        b[y] = C
    f[ra] += v * kpp
    f[rb] -= v * kpp


@numba.njit(cache=True, nogil=True)
def _is_neg(pcls: NDArray[np.int64], c: int, r: int) -> bool:
    return pcls[r] != c  # type: ignore[no-any-return]  # (numpy types an element as Any)


@numba.njit(cache=True, nogil=True)
def best_pair(
    b: NDArray[np.float64],
    f: NDArray[np.float64],
    y: int,
    c: int,
    pcls: NDArray[np.int64],
    kpp: float,
    C: float,
) -> tuple[float, float, int, int]:
    """The basic step of largest gain over every admissible pair (Eq. 14): ``(gain, v, ra, rb)``,
    ``ra = -1`` when no pair gains.  Pairs inside N_p are unordered (``v`` is signed)."""
    P = b.shape[0]
    best_g = 0.0
    best_v = 0.0
    best_a = -1
    best_b = -1
    for ra in range(P):
        if ra != y and not _is_neg(pcls, c, ra):
            continue
        for rb in range(P):
            if rb == ra or not _is_neg(pcls, c, rb):
                continue
            if ra != y and rb < ra:
                continue
            v, g = pair_step(b, f, y, ra, rb, kpp, C)
            if g > best_g:
                best_g, best_v, best_a, best_b = g, v, ra, rb
    return best_g, best_v, best_a, best_b


@numba.njit(cache=True, nogil=True)
def opt_basic(
    b: NDArray[np.float64],
    f: NDArray[np.float64],
    y: int,
    c: int,
    pcls: NDArray[np.int64],
    kpp: float,
    C: float,
    phi: float,
) -> float:
    """BasicOptimizeOnPattern (AS 2005 Fig. 4): one basic step on the pair of largest gain."""
    g, v, ra, rb = best_pair(b, f, y, c, pcls, kpp, C)
    if ra >= 0 and g > phi:
        apply_step(b, f, y, ra, rb, v, kpp, C)
        return g
    return 0.0


@numba.njit(cache=True, nogil=True)
def opt_all_pairs(
    b: NDArray[np.float64],
    f: NDArray[np.float64],
    y: int,
    c: int,
    pcls: NDArray[np.int64],
    kpp: float,
    C: float,
    phi: float,
) -> float:
    """AllPairsOptimizeOnPattern (AS 2005 Fig. 5): sweep basic steps over every pair until one
    sweep gains no more than ``phi``."""
    P = b.shape[0]
    total = 0.0
    for _ in range(_MAX_INNER):
        sweep = 0.0
        for ra in range(P):
            if ra != y and not _is_neg(pcls, c, ra):
                continue
            for rb in range(P):
                if rb == ra or not _is_neg(pcls, c, rb):
                    continue
                if ra != y and rb < ra:
                    continue
                v, g = pair_step(b, f, y, ra, rb, kpp, C)
                if v != 0.0:
                    apply_step(b, f, y, ra, rb, v, kpp, C)
                    sweep += g
        total += sweep
        if sweep <= phi:
            break
    return total


@numba.njit(cache=True, nogil=True)
def opt_kkt(
    b: NDArray[np.float64],
    f: NDArray[np.float64],
    y: int,
    c: int,
    pcls: NDArray[np.int64],
    kpp: float,
    C: float,
    phi: float,
) -> float:
    """OptKKTOptimizeOnPattern (AS 2005 Fig. 6): at each step try the three pairs that witness the
    non-optimality conditions of Eq. 15 (a, b, c) and take the one of largest gain; O(P) a step."""
    P = b.shape[0]
    total = 0.0
    for _ in range(_MAX_INNER):
        r1 = -1
        r2 = -1
        r3 = -1
        for r in range(P):
            if not _is_neg(pcls, c, r):
                continue
            if r1 < 0 or f[r] > f[r1]:
                r1 = r
            if b[r] < 0.0:
                if r2 < 0 or f[r] > f[r2]:
                    r2 = r
                if r3 < 0 or f[r] < f[r3]:
                    r3 = r
        if r1 < 0:
            break
        v1, g1 = pair_step(b, f, y, y, r1, kpp, C)
        k = 1
        gk = g1
        vk = v1
        if b[y] > 0.0:
            if r2 >= 0:
                v2, g2 = pair_step(b, f, y, y, r2, kpp, C)
                if g2 > gk:
                    k, gk, vk = 2, g2, v2
            if r3 >= 0 and r3 != r1:
                v3, g3 = pair_step(b, f, y, r1, r3, kpp, C)
                if g3 > gk:
                    k, gk, vk = 3, g3, v3
        if gk <= phi:
            break
        if k == 1:
            apply_step(b, f, y, y, r1, vk, kpp, C)
        elif k == 2:
            apply_step(b, f, y, y, r2, vk, kpp, C)
        else:
            apply_step(b, f, y, r1, r3, vk, kpp, C)
        total += gk
    return total


@numba.njit(cache=True, nogil=True)
def _lagrangian_change(
    b_old: NDArray[np.float64],
    b_new: NDArray[np.float64],
    f_other: NDArray[np.float64],
    y: int,
    kpp: float,
) -> float:
    """Change of ``2 alpha_y - ||M||^2`` when the row goes from ``b_old`` to ``b_new``."""
    P = b_old.shape[0]
    dq = 0.0
    for r in range(P):
        dq += (
            kpp * (b_new[r] * b_new[r] - b_old[r] * b_old[r])
            + 2.0 * (b_new[r] - b_old[r]) * f_other[r]
        )
    return 2.0 * (b_new[y] - b_old[y]) - dq  # type: ignore[no-any-return]  # (as _is_neg)


@numba.njit(cache=True, nogil=True)
def _reduced_D(
    b: NDArray[np.float64],
    f: NDArray[np.float64],
    y: int,
    c: int,
    pcls: NDArray[np.int64],
    kpp: float,
    C: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Crammer-Singer's reduced problem (CS 2001 Eqs. 20, 33) for this pattern: returns
    ``f_other`` (scores without the pattern's own term) and ``D`` over the participating
    prototypes, in CS units (``tau = b / C``, ``beta = 1 / C``)."""
    P = b.shape[0]
    f_other = np.empty(P)
    D = np.empty(P)
    for r in range(P):
        f_other[r] = f[r] - kpp * b[r]
        # D_r = B_r / A + delta_{r,y},  B_r = (f_other_r - delta_{r,y}) / C,  A = K_pp
        dy = 1.0 if r == y else 0.0
        D[r] = (f_other[r] - dy) / (C * kpp) + dy
    return f_other, D


@numba.njit(cache=True, nogil=True)
def _finish_reduced(
    b: NDArray[np.float64],
    f: NDArray[np.float64],
    y: int,
    c: int,
    pcls: NDArray[np.int64],
    kpp: float,
    C: float,
    f_other: NDArray[np.float64],
    tau: NDArray[np.float64],
    exact: bool,
) -> float:
    """Install ``b = C tau`` (always when ``exact``, else only if it does not lower the Lagrangian;
    the exact minimizer is installed even when rounding makes its tiny gain look negative)."""
    P = b.shape[0]
    b_new = np.zeros(P)
    for r in range(P):
        if r == y or _is_neg(pcls, c, r):
            b_new[r] = C * tau[r]
    if b_new[y] > C:
        b_new[y] = C
    gain = _lagrangian_change(b, b_new, f_other, y, kpp)
    if not exact and gain <= 0.0:
        return 0.0
    if gain < 0.0:
        gain = 0.0
    for r in range(P):
        b[r] = b_new[r]
        f[r] = f_other[r] + kpp * b_new[r]
    return gain


@numba.njit(cache=True, nogil=True)
def _sift_down(v: NDArray[np.float64], root: int, end: int) -> None:
    """Min-heap sift of ``v[root]`` within ``v[:end]`` (for :func:`sort_descending`)."""
    while True:
        child = 2 * root + 1
        if child >= end:
            return
        if child + 1 < end and v[child + 1] < v[child]:
            child += 1
        if v[child] < v[root]:
            v[root], v[child] = v[child], v[root]
            root = child
        else:
            return


@numba.njit(cache=True, nogil=True)
def sort_descending(v: NDArray[np.float64]) -> NDArray[np.float64]:
    """Sort ``v`` in place, largest first: insertion sort for the handful of values the exact
    optimizer usually sorts, heapsort (O(k log k)) beyond.  Written out because numba's generic
    ``np.sort`` costs seconds of compilation on every first run, more than all the rest of the
    per-pattern optimizer."""
    k = v.shape[0]
    if k <= 16:
        for i in range(1, k):
            x = v[i]
            j = i - 1
            while j >= 0 and v[j] < x:
                v[j + 1] = v[j]
                j -= 1
            v[j + 1] = x
        return v
    for root in range(k // 2 - 1, -1, -1):  # min-heap, then pop the minimum to the back
        _sift_down(v, root, k)
    for end in range(k - 1, 0, -1):
        v[0], v[end] = v[end], v[0]
        _sift_down(v, 0, end)
    return v


@numba.njit(cache=True, nogil=True)
def theta_sorted(s: NDArray[np.float64]) -> float:
    """``theta`` solving ``sum_r max(s_r - theta, 0) = 1`` (CS 2001 Eq. 37) from the candidate
    values ``s`` in decreasing order (the sort-based method)."""
    csum = 0.0
    theta = 0.0
    for j in range(s.shape[0]):
        csum += s[j]
        t = (csum - 1.0) / (j + 1)
        if s[j] - t > 0.0:
            theta = t
        else:
            break
    return theta


@numba.njit(cache=True, nogil=True)
def opt_exact(
    b: NDArray[np.float64],
    f: NDArray[np.float64],
    y: int,
    c: int,
    pcls: NDArray[np.int64],
    kpp: float,
    C: float,
    phi: float,
) -> float:
    """Exact solution of the reduced problem by sorting ``D`` (the sort-based method CS 2001 §6
    mentions): ``theta`` solves ``sum_r max(D_r - theta, 0) = 1`` (Eq. 37),
    ``nu_r = min(theta, D_r)``."""
    if C <= 0.0:  # a weight-0 row: alpha fixed at 0
        return 0.0
    if kpp <= 0.0:
        return opt_kkt(b, f, y, c, pcls, kpp, C, phi)
    P = b.shape[0]
    f_other, D = _reduced_D(b, f, y, c, pcls, kpp, C)
    # theta >= max D - 1 (the largest term alone is at most 1), so only D_r above that can be
    # active: sort just those (a handful, where P can be hundreds of prototypes).  The margin
    # keeps any rounding on the safe side; an extra value never changes theta.
    mx = -np.inf
    for r in range(P):
        if (r == y or _is_neg(pcls, c, r)) and D[r] > mx:
            mx = D[r]
    lo = mx - 1.0 - 1e-9 * (1.0 + abs(mx))
    vals = np.empty(P)
    k = 0
    for r in range(P):
        if (r == y or _is_neg(pcls, c, r)) and D[r] > lo:
            vals[k] = D[r]
            k += 1
    theta = theta_sorted(sort_descending(vals[:k]))
    tau = np.zeros(P)
    for r in range(P):
        if r == y or _is_neg(pcls, c, r):
            tau[r] = min(theta, D[r]) - (D[r] - (1.0 if r == y else 0.0))
    return _finish_reduced(b, f, y, c, pcls, kpp, C, f_other, tau, True)


@numba.njit(cache=True, nogil=True)
def opt_fixed_point(
    b: NDArray[np.float64],
    f: NDArray[np.float64],
    y: int,
    c: int,
    pcls: NDArray[np.int64],
    kpp: float,
    C: float,
    eps: float,
) -> float:
    """Crammer-Singer's fixed-point algorithm (CS 2001 Fig. 3, started as in Fig. 4):
    ``theta <- (1/k) sum_r max(theta, D_r) - 1/k`` until the relative change is at most ``eps``.

    An approximate ``theta`` leaves ``sum tau`` slightly off zero, which would make the dual
    infeasible; the negative part is kept and the positive coefficient absorbs the difference
    (scaled back onto ``tau_y <= 1`` when needed), so every step stays feasible.
    """
    if kpp <= 0.0:
        return opt_kkt(b, f, y, c, pcls, kpp, C, 0.0)
    P = b.shape[0]
    f_other, D = _reduced_D(b, f, y, c, pcls, kpp, C)
    k = 0
    sumD = 0.0
    for r in range(P):
        if r == y or _is_neg(pcls, c, r):
            k += 1
            sumD += D[r]
    theta = sumD / k - 1.0 / k
    for _ in range(_MAX_INNER):
        acc = 0.0
        for r in range(P):
            if r == y or _is_neg(pcls, c, r):
                acc += max(theta, D[r])
        new = acc / k - 1.0 / k
        done = abs(theta - new) <= eps * max(abs(theta), 1e-300)
        theta = new
        if done:
            break
    tau = np.zeros(P)
    S = 0.0
    for r in range(P):
        if r != y and _is_neg(pcls, c, r):
            tau[r] = min(theta - D[r], 0.0)
            S -= tau[r]
    if S <= 1.0:
        tau[y] = S
    else:
        for r in range(P):
            if r != y:
                tau[r] /= S
        tau[y] = 1.0
    return _finish_reduced(b, f, y, c, pcls, kpp, C, f_other, tau, False)


@numba.njit(cache=True, nogil=True)
def optimize_pattern(
    code: int,
    b: NDArray[np.float64],
    f: NDArray[np.float64],
    y: int,
    c: int,
    pcls: NDArray[np.int64],
    kpp: float,
    C: float,
    phi: float,
    fp_eps: float,
) -> float:
    """Dispatch to the per-pattern optimizer ``code``; returns the Lagrangian gain.  A row whose
    bound is ``C <= 0`` (weight 0) keeps its coefficients at 0: no step, no gain."""
    if C <= 0.0:
        return 0.0
    if code == OPT_BASIC:
        return opt_basic(b, f, y, c, pcls, kpp, C, phi)
    if code == OPT_ALL_PAIRS:
        return opt_all_pairs(b, f, y, c, pcls, kpp, C, phi)
    if code == OPT_KKT:
        return opt_kkt(b, f, y, c, pcls, kpp, C, phi)
    if code == OPT_FIXED_POINT:
        return opt_fixed_point(b, f, y, c, pcls, kpp, C, fp_eps)
    return opt_exact(b, f, y, c, pcls, kpp, C, phi)


# --------------------------------------------------------------------------------------------
# selection values
# --------------------------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True)
def psi_value(
    b: NDArray[np.float64],
    f: NDArray[np.float64],
    y: int,
    c: int,
    pcls: NDArray[np.int64],
    C: float,
) -> float:
    """Crammer-Singer's KKT violation ``psi`` (CS 2001 Eq. 32) in margin units (``C`` times CS's):
    ``max_r (f_r - d_ry) - min_{r: tau_r < d_ry} (f_r - d_ry)``; zero iff the row is optimal.

    Written with selects, not branches (the same values): which prototypes count and which are
    free is data, and the branches' mispredictions made an evaluation 1.3-1.45x slower (10 and
    26 prototypes), the working-set passes' largest serial cost."""
    P = b.shape[0]
    mx = -np.inf
    mn = np.inf
    cy = C * (1.0 - _C_REL)
    for r in range(P):
        isy = r == y
        ok = isy or _is_neg(pcls, c, r)  # y, or a prototype of another class
        g = f[r] - 1.0 if isy else f[r]
        free = b[r] < (cy if isy else 0.0)
        mx = g if ok and g > mx else mx
        mn = g if ok and free and g < mn else mn
    v = mx - mn
    return v if v > 0.0 else 0.0


@numba.njit(cache=True, nogil=True)
def amg_value(
    b: NDArray[np.float64],
    f: NDArray[np.float64],
    y: int,
    c: int,
    pcls: NDArray[np.int64],
    kpp: float,
    C: float,
) -> float:
    """Approximate Maximum Gain: the best single basic step ``max V^p_{ra,rb}`` (AS 2005 §5.3)."""
    return best_pair(b, f, y, c, pcls, kpp, C)[0]


@numba.njit(cache=True, nogil=True)
def bmg_value(
    b: NDArray[np.float64],
    f: NDArray[np.float64],
    y: int,
    c: int,
    pcls: NDArray[np.int64],
    kpp: float,
    C: float,
) -> float:
    """True Maximum Gain: the whole gain of solving the pattern's reduced problem (AS 2005 §5.3),
    computed exactly on a copy."""
    bb = b.copy()
    ff = f.copy()
    return opt_exact(bb, ff, y, c, pcls, kpp, C, 0.0)


@numba.njit(cache=True, nogil=True)
def row_value(
    sel: int,
    b: NDArray[np.float64],
    f: NDArray[np.float64],
    y: int,
    c: int,
    pcls: NDArray[np.int64],
    kpp: float,
    C: float,
    p: float,
    tol: float,
) -> float:
    """Selection value of one row whose KKT violation is ``p``: 0 unless ``p > tol``, then ``psi``
    (KKT), the best single step (AMG) or the whole reduced-problem gain (BMG)."""
    if p <= tol:
        return 0.0
    if sel == SEL_KKT:
        return p
    if sel == SEL_AMG:
        return amg_value(b, f, y, c, pcls, kpp, C)
    return bmg_value(b, f, y, c, pcls, kpp, C)


@numba.njit(cache=True, nogil=True)
def selection_values(
    sel: int,
    B: NDArray[np.float64],
    F: NDArray[np.float64],
    yp: NDArray[np.int64],
    cls: NDArray[np.int64],
    pcls: NDArray[np.int64],
    kdiag: NDArray[np.float64],
    C: Bounds,
    rows: NDArray[np.int64],
    V: NDArray[np.float64],
    psi: NDArray[np.float64],
    tol: float = 0.0,
) -> None:
    """``V[j]`` (the selection value ``sel``, 0 unless ``psi[j] > tol``) and ``psi[j]`` for every
    row index ``rows[j]`` (``C``: a scalar or one bound per row of ``B``)."""
    for j in range(rows.shape[0]):
        i = rows[j]
        Ci = bound_at(C, i)
        psi[j] = psi_value(B[i], F[i], yp[i], cls[i], pcls, Ci)
        V[j] = row_value(sel, B[i], F[i], yp[i], cls[i], pcls, kdiag[i], Ci, psi[j], tol)


@numba.njit(cache=True, nogil=True)
def objective_parts(
    B: NDArray[np.float64],
    F: NDArray[np.float64],
    yp: NDArray[np.int64],
    cls: NDArray[np.int64],
    pcls: NDArray[np.int64],
) -> tuple[float, float, float]:
    """Per-partition pieces of the dual and primal (docs/design.md, 'The Crammer-Singer dual'):
    ``sum alpha_y``, ``sum B*F`` (= this partition's share of ``||M||^2``) and ``sum xi`` with ``xi
    = max(0, max_N F + 1 - F_y)``."""
    n, P = B.shape
    sa = 0.0
    sbf = 0.0
    sxi = 0.0
    for i in range(n):
        y = yp[i]
        sa += B[i, y]
        th = -np.inf
        for r in range(P):
            sbf += B[i, r] * F[i, r]
            if pcls[r] != cls[i] and F[i, r] > th:
                th = F[i, r]
        xi = th + 1.0 - F[i, y]
        if xi > 0.0:
            sxi += xi
    return sa, sbf, sxi


@numba.njit(cache=True, nogil=True)
def weighted_slack(
    F: NDArray[np.float64],
    yp: NDArray[np.int64],
    cls: NDArray[np.int64],
    pcls: NDArray[np.int64],
    C: NDArray[np.float64],
) -> float:
    """``sum_i C_i xi_i`` (the primal's slack term with per-pattern bounds ``C``, one per row;
    ``xi_i = max(0, max_N F + 1 - F_y)``)."""
    n, P = F.shape
    s = 0.0
    for i in range(n):
        if C[i] == 0.0:
            continue
        th = -np.inf
        for r in range(P):
            if pcls[r] != cls[i] and F[i, r] > th:
                th = F[i, r]
        xi = th + 1.0 - F[i, yp[i]]
        if xi > 0.0:
            s += C[i] * xi
    return s


@numba.njit(cache=True, nogil=True)
def scan_rows(
    sel: int,
    B: NDArray[np.float64],
    F: NDArray[np.float64],
    yp: NDArray[np.int64],
    cls: NDArray[np.int64],
    pcls: NDArray[np.int64],
    kdiag: NDArray[np.float64],
    C: Bounds,
    tol: float,
    active: NDArray[np.int64],
    shrink_margin: float,
    calm: NDArray[np.int64],
    V: NDArray[np.float64],
    psi: NDArray[np.float64],
) -> tuple[float, float, float, float, float, float, int]:
    """One fused pass over a partition (the per-round work of docs/design.md, 'Batched rounds'):

    ``C`` is a scalar or one bound per row of ``B`` (weighted patterns).

    * for every row: the pieces of the dual and primal (``sum alpha_y``, ``sum B*F``, ``sum xi``);
    * for every active row ``active[j]``: ``psi[j]`` and the selection value ``V[j]`` (only
      violators, ``psi > tol``, pay for AMG/BMG), and the shrinking counter ``calm``: a row with
      no coefficients whose margin exceeds ``shrink_margin`` (LIBSVM's rule: farther from the
      margin than the largest current violation) counts one more calm round, any other resets.

    Returns ``(sum_alpha, sum_BF, sum_xi, max_V, sum_V, max_psi, n_viol)``.
    """
    n, P = B.shape
    sa, sbf, sxi = objective_parts(B, F, yp, cls, pcls)
    maxv = 0.0
    sumv = 0.0
    maxp = 0.0
    nviol = 0
    for j in range(active.shape[0]):
        i = active[j]
        y = yp[i]
        Ci = bound_at(C, i)
        p = psi_value(B[i], F[i], y, cls[i], pcls, Ci)
        psi[j] = p
        if p > tol:
            nviol += 1
        v = row_value(sel, B[i], F[i], y, cls[i], pcls, kdiag[i], Ci, p, tol)
        V[j] = v
        sumv += v
        if v > maxv:
            maxv = v
        if p > maxp:
            maxp = p
        zero = True
        th = -np.inf
        for r in range(P):
            if B[i, r] != 0.0:
                zero = False
            if pcls[r] != cls[i] and F[i, r] > th:
                th = F[i, r]
        if zero and F[i, y] - 1.0 - th > shrink_margin:
            calm[i] += 1
        else:
            calm[i] = 0
    return sa, sbf, sxi, maxv, sumv, maxp, nviol


@numba.njit(cache=True, nogil=True)
def scan_all_rows(
    sel: int,
    B: NDArray[np.float64],
    F: NDArray[np.float64],
    yp: NDArray[np.int64],
    cls: NDArray[np.int64],
    pcls: NDArray[np.int64],
    kdiag: NDArray[np.float64],
    C: NDArray[np.float64],
    tol: float,
    V: NDArray[np.float64],
    psi: NDArray[np.float64],
) -> tuple[float, float, float]:
    """``psi`` and the selection value ``V`` (0 unless ``psi > tol``) of every row (one bound
    ``C[i]`` per row), as a partition's report takes them (:func:`scan_rows`), and the dual's and
    primal's pieces ``(sum alpha_y, sum B*F, sum C_i xi_i)``: the rounds the coordinator runs in
    its Gram block (:mod:`dmcsvm.coordinators.whole_block`)."""
    sa, sbf, _ = objective_parts(B, F, yp, cls, pcls)
    sxi = weighted_slack(F, yp, cls, pcls, C)
    rows = np.arange(B.shape[0])
    selection_values(sel, B, F, yp, cls, pcls, kdiag, C, rows, V, psi, tol)
    return sa, sbf, sxi


@numba.njit(cache=True, nogil=True)
def solve_batch(
    code: int,
    Bb: NDArray[np.float64],
    Fb: NDArray[np.float64],
    Kbb: NDArray[np.float64],
    yb: NDArray[np.int64],
    cb: NDArray[np.int64],
    pcls: NDArray[np.int64],
    kdiag: NDArray[np.float64],
    C: Bounds,
    tol: float,
    fp_eps: float,
    sweeps: int,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Coordinator's batch solve (docs/design.md, 'Batched rounds'): optimize the batch patterns one
    after the other in the given order, each seeing the exact scores left by the earlier ones (``F_j
    += K_jk dB_k``), using only ``K_BB``.  With ``sweeps > 1`` the batch is swept again while any of
    its patterns still violates ``psi > tol`` (a working-set decomposition step); ``sweeps = 1`` is
    the papers' order. ``C`` is a scalar or one bound per batch row.
    Returns ``dB`` (the change of every batch row) and the gains."""
    nb, P = Bb.shape
    dB = np.zeros((nb, P))
    gains = np.zeros(nb)
    Fc = Fb.copy()  # current scores of the batch rows: Fb + Kbb @ dB
    # element loops, not array expressions: those compile numba's shape-error formatting
    b = np.empty(P)
    b0 = np.empty(P)
    f = np.empty(P)
    for sweep in range(sweeps):
        worst = 0.0
        for j in range(nb):
            for r in range(P):
                b[r] = Bb[j, r] + dB[j, r]
                f[r] = Fc[j, r]
            Cj = bound_at(C, j)
            if sweep > 0:
                p = psi_value(b, f, yb[j], cb[j], pcls, Cj)
                if p <= tol:
                    continue
            kpp = kdiag[j]
            phi = (0.1 * tol) ** 2 / (2.0 * kpp) if kpp > 0.0 else 0.0
            for r in range(P):
                b0[r] = b[r]
            g = optimize_pattern(code, b, f, yb[j], cb[j], pcls, kpp, Cj, phi, fp_eps)
            gains[j] += g
            for r in range(P):
                d = b[r] - b0[r]
                if d != 0.0:
                    dB[j, r] += d
                    for k in range(nb):
                        Fc[k, r] += Kbb[k, j] * d
        if sweeps > 1:
            for j in range(nb):
                for r in range(P):
                    b[r] = Bb[j, r] + dB[j, r]
                p = psi_value(b, Fc[j], yb[j], cb[j], pcls, bound_at(C, j))
                if p > worst:
                    worst = p
            if worst <= tol:
                break
    return dB, gains


@numba.njit(cache=True, nogil=True)
def _over_relax(
    b: NDArray[np.float64], b0: NDArray[np.float64], y: int, C: float, relax: float, g: float
) -> float:
    """Lengthen the exact step ``b - b0`` of one pattern to ``t (b - b0)``, ``t = relax`` or less
    where a coefficient would pass its bound (``alpha_y <= C``, the others ``<= 0``).  The exact
    step maximizes the concave dual over the pattern's feasible set, so along its line the dual is
    ``D0 + g (2t - t^2)`` and any ``t`` in ``(1, 2)`` still gains ``g t (2 - t)``: successive
    over-relaxation of the pattern-wise coordinate ascent.  Returns the gain of the step taken.
    The default (``SolverSettings.inner_relax`` 1.4) takes 12-40 % fewer optimizations on the
    vs_libsvm sets than exact steps (benchmarks/results/vs_libsvm.md)."""
    P = b.shape[0]
    t = relax
    # a coefficient at its bound that the exact step "moves" by rounding (|d| ~ 1e-16) would set
    # t = 0 / 0 (measured: it blocked one path's relaxation and not another's whose scores were
    # an ulp apart, 0.1 apart after one step); below ``tiny`` it is held at its bound instead
    tiny = 1e-12 * C
    for r in range(P):
        d = b[r] - b0[r]
        if d > tiny:
            ub = C if r == y else 0.0
            t = min(t, (ub - b0[r]) / d)
    if t <= 1.0:
        return g
    rest = 0.0
    for r in range(P):
        if r == y:
            continue
        d = b[r] - b0[r]
        v = b0[r] + t * d
        # a coefficient whose bound (0) set t lands on it exactly, not an ulp either side: a
        # pattern that leaves the support must hold exact zeros
        b[r] = 0.0 if v >= 0.0 or (d > 0.0 and (0.0 - b0[r]) / d <= t) else v
        rest += b[r]
    # alpha_y closes the pattern's equality constraint (sum_r alpha_r = 0) exactly, within C
    # (the others are <= 0, so -rest >= 0)
    b[y] = min(-rest, C)
    return g * t * (2.0 - t)


@numba.njit(cache=True, nogil=True)
def relaxed_step(
    code: int,
    b: NDArray[np.float64],
    b0: NDArray[np.float64],
    f: NDArray[np.float64],
    y: int,
    c: int,
    pcls: NDArray[np.int64],
    kpp: float,
    C: float,
    phi: float,
    fp_eps: float,
    relax: float,
) -> float:
    """One working-set step of a pattern: ``optimize_pattern`` from ``b`` (``b0``: a copy of
    it), then, for the exact optimizer, the step over-relaxed by ``relax`` (:func:`_over_relax`;
    the other optimizers' steps are not exact maximizers along their line).  The kernel and the
    explicit-prototype working sets both step this way.  Returns the gain."""
    g = optimize_pattern(code, b, f, y, c, pcls, kpp, C, phi, fp_eps)
    if relax > 1.0 and code == OPT_EXACT:
        g = _over_relax(b, b0, y, C, relax, g)
    return g
