"""SMO kernels for duals with one equality constraint per group (docs/design.md: 'mScatter-SVM',
'Binary SMO'), as numba functions.

Both remaining seeds of the project are instances of

    min_a  1/2 a' Q a + p' a
    s.t.   sum_{i in group G} y_i a_i = const_G   for every group,   0 <= a_i <= U,
    Q_ij = y_i y_j K_ij * (w_same if group(i) = group(j) else w_diff)

* binary C-SVM with bias (Platt 1998): one group, signs ``y``, ``w_same = w_diff = 1``, ``p = -1``,
  ``U = C``;
* mScatter-SVM (Jenssen et al. 2009, Eq. 6): one group per class, ``y = +1``,
  ``Q_ij = K_ij (m [c_i = c_j] - 1) / m`` i.e. ``w_same = (m - 1) / m``, ``w_diff = -1 / m``,
  ``p = 0``, ``U = mu`` and ``sum_{i in c} a_i = 1``.

With ``tot = K (y o a)`` and ``own_i = sum_{j in group(i)} K_ij y_j a_j`` the gradient is
``g_i = y_i (w_diff tot_i + (w_same - w_diff) own_i) + p_i``; for mScatter that is
``g_i = S[i, c_i] - (1/m) sum_c S[i, c]`` with ``S = K A`` (docs/design.md, 'mScatter-SVM').  An SMO
step changes two variables of one group (a pair from different groups cannot move: each group's sum
is fixed).

Working-set selection is LIBSVM's (Fan, Chen and Lin 2005) run per group: ``i`` maximises
``-y_t g_t`` over ``I_up = {a_t < U, y_t = 1} u {a_t > 0, y_t = -1}``; ``j`` minimises
``-b_it^2 / a_it`` (WSS2, second order) or maximises ``y_t g_t`` (maximal violating pair) over
``I_low = {a_t < U, y_t = -1} u {a_t > 0, y_t = 1}`` with ``-y_t g_t < -y_i g_i``, where
``b_it = -y_i g_i + y_t g_t`` and ``a_it = w_same (K_ii + K_tt - 2 K_it)``.  Across groups the pair
with the largest second-order decrease ``b^2 / (2 a)`` is taken (the nu-SVM rule of LIBSVM's
``Solver_NU`` generalised from two sign classes to ``m`` classes), or with maximal violation.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from numpy.typing import NDArray

from .binary_smo import TAU, platt_bias_box, platt_step_box
from .pattern import Bounds, bound_at

SEL_MVP = 0  # maximal violating pair (first order)
SEL_WSS2 = 1  # LIBSVM's second-order rule (Fan, Chen, Lin 2005, WSS 2)
SELECTIONS = {"mvp": SEL_MVP, "wss2": SEL_WSS2}


@numba.njit(cache=True, nogil=True)
def in_up(a: float, y: float, U: float) -> bool:
    """``t in I_up``: ``a_t`` can move so that ``y_t a_t`` grows."""
    return (y > 0 and a < U) or (y < 0 and a > 0.0)


@numba.njit(cache=True, nogil=True)
def in_low(a: float, y: float, U: float) -> bool:
    """``t in I_low``: ``a_t`` can move so that ``y_t a_t`` shrinks."""
    return (y < 0 and a < U) or (y > 0 and a > 0.0)


@numba.njit(cache=True, nogil=True)
def select_pair(
    K: NDArray[np.float64],
    y: NDArray[np.float64],
    grp: NDArray[np.int64],
    a: NDArray[np.float64],
    g: NDArray[np.float64],
    U: Bounds,
    w_same: float,
    n_groups: int,
    selection: int,
    gmax: NDArray[np.float64],
    imax: NDArray[np.int64],
    gmin: NDArray[np.float64],
) -> tuple[int, int, float]:
    """Pick the working pair over all groups.

    Parameters
    ----------
    K : ndarray (nb, nb)
        Kernel matrix of the variables.
    y, grp : ndarray (nb,)
        Signs (float +-1) and group index (int) of each variable.
    a, g : ndarray (nb,)
        Current values and gradient.
    U : float or ndarray (nb,)
        Box bound, or one per variable (weighted patterns).
    w_same : float
        In-group scale of ``Q``.
    n_groups : int
    selection : int
        :data:`SEL_WSS2` or :data:`SEL_MVP`.
    gmax, imax, gmin : ndarray (n_groups,)
        Work arrays (float, int, float), overwritten with each group's ``max_{I_up} -y g``, its
        argmax and ``min_{I_low} -y g``.

    Returns
    -------
    (i, j, viol) : (int, int, float)
        The pair (``-1, -1`` when no group has a violating pair) and the largest violation
        ``max_G (gmax_G - gmin_G)`` (``m(a) - M(a)`` of Fan, Chen, Lin; 0 when nothing can move).
    """
    nb = a.shape[0]
    for c in range(n_groups):
        gmax[c] = -np.inf
        imax[c] = -1
        gmin[c] = np.inf
    for t in range(nb):
        c = grp[t]
        v = -y[t] * g[t]
        Ut = bound_at(U, t)
        if in_up(a[t], y[t], Ut) and v > gmax[c]:
            gmax[c] = v
            imax[c] = t
        if in_low(a[t], y[t], Ut) and v < gmin[c]:
            gmin[c] = v
    viol = 0.0
    for c in range(n_groups):
        if imax[c] >= 0 and gmin[c] < np.inf and gmax[c] - gmin[c] > viol:
            viol = gmax[c] - gmin[c]
    best_i = -1
    best_j = -1
    best = np.inf  # WSS2: most negative -b^2/a; MVP: most negative -(violation)
    for t in range(nb):
        c = grp[t]
        i = imax[c]
        if i < 0 or not in_low(a[t], y[t], bound_at(U, t)):
            continue
        b = gmax[c] + y[t] * g[t]
        if b <= 0.0:
            continue
        if selection == SEL_WSS2:
            quad = w_same * (K[i, i] + K[t, t] - 2.0 * K[i, t])
            if quad <= 0.0:
                quad = TAU
            obj = -(b * b) / quad
        else:
            obj = -b
        if obj < best:
            best = obj
            best_i = i
            best_j = t
    return best_i, best_j, viol


@numba.njit(cache=True, nogil=True)
def smo_subproblem(
    K: NDArray[np.float64],
    y: NDArray[np.float64],
    grp: NDArray[np.int64],
    a: NDArray[np.float64],
    g: NDArray[np.float64],
    U: Bounds,
    w_same: float,
    w_diff: float,
    n_groups: int,
    tol: float,
    selection: int,
    max_steps: int,
    b: float,
) -> tuple[int, float, float]:
    """Solve the subproblem on the variables given (all others fixed) by SMO, in place.

    Each step selects a pair with :func:`select_pair` and moves it by :func:`platt_step`; the
    gradient of every variable of the subproblem is updated with the two kernel rows
    (``g_t += Q_ti da_i + Q_tj da_j``).  Stops when the largest per-group violation is <= ``tol``,
    when a step cannot move in floating point, or after ``max_steps`` steps.

    Parameters
    ----------
    K : ndarray (nb, nb)
    y : ndarray (nb,) float
    grp : ndarray (nb,) int
    a, g : ndarray (nb,) float
        Values and gradients; updated in place.
    U : float or ndarray (nb,)
        Box bound, or one per variable (weighted patterns).
    w_same, w_diff : float
    n_groups : int
    tol : float
    selection : int
    max_steps : int
    b : float
        Platt's bias before the first step (only meaningful for the C-SVM).

    Returns
    -------
    (steps, viol, b) : (int, float, float)
        Steps taken, the largest violation left and Platt's bias after the last step.
    """
    gmax = np.empty(n_groups)
    imax = np.empty(n_groups, dtype=np.int64)
    gmin = np.empty(n_groups)
    nb = a.shape[0]
    steps = 0
    viol = 0.0
    while True:
        i, j, viol = select_pair(K, y, grp, a, g, U, w_same, n_groups, selection, gmax, imax, gmin)
        if i < 0 or viol <= tol or steps >= max_steps:
            break
        ai, aj = a[i], a[j]
        Ui = bound_at(U, i)
        Uj = bound_at(U, j)
        ai_new, aj_new = platt_step_box(
            ai, aj, y[i], y[j], g[i], g[j], K[i, i], K[j, j], K[i, j], Ui, Uj, w_same
        )
        dai = ai_new - ai
        daj = aj_new - aj
        if dai == 0.0 and daj == 0.0:
            break
        b = platt_bias_box(
            b, ai, aj, ai_new, aj_new, y[i], y[j], g[i], g[j], K[i, i], K[j, j], K[i, j], Ui, Uj
        )
        a[i] = ai_new
        a[j] = aj_new
        ci = grp[i]
        yi_dai = y[i] * dai
        yj_daj = y[j] * daj
        for t in range(nb):
            wt = w_same if grp[t] == ci else w_diff  # i and j share a group
            g[t] += y[t] * wt * (K[t, i] * yi_dai + K[t, j] * yj_daj)
        steps += 1
    return steps, viol, b


@numba.njit(cache=True, nogil=True)
def accumulate_columns_T(
    KT: NDArray[np.floating[Any]],
    rows: NDArray[np.int64],
    grp: NDArray[np.int64],
    grp_b: NDArray[np.int64],
    dcoef: NDArray[np.float64],
    s: NDArray[np.float64],
    so: NDArray[np.float64],
    with_own: bool,
) -> None:
    """Score update of a batch, one column group at a time: with ``dcoef = y_B o da_B`` and
    ``KT = K(X_B, X_part)`` (group x all partition rows, as computed: no transposed copy), adds
    ``KT[j, i] dcoef[j]`` to the per-row sum ``s`` (``tot`` part) and, for ``with_own``, to
    ``so`` when ``grp_b[j] = grp[i]`` (``own`` part); :func:`finish_columns` then adds the sums to
    ``tot`` / ``own``.  A plain loop (not BLAS), every row summing its terms in batch order and
    adding the sum once, so the result does not depend on the grouping or the executor."""
    nb = dcoef.shape[0]
    nr = rows.shape[0]
    for j in range(nb):
        dj = dcoef[j]
        gj = grp_b[j]
        for r in range(nr):
            i = rows[r]
            v = np.float64(KT[j, i]) * dj
            s[r] += v
            if with_own and grp[i] == gj:
                so[r] += v


@numba.njit(cache=True, nogil=True)
def finish_columns(
    rows: NDArray[np.int64],
    s: NDArray[np.float64],
    so: NDArray[np.float64],
    tot: NDArray[np.float64],
    own: NDArray[np.float64],
    with_own: bool,
) -> None:
    """``tot[rows] += s``, and ``own[rows] += so`` for ``with_own`` (see accumulate_columns_T)."""
    for r in range(rows.shape[0]):
        i = rows[r]
        tot[i] += s[r]
        if with_own:
            own[i] += so[r]


@numba.njit(cache=True, nogil=True)
def scan(
    rows: NDArray[np.int64],
    y: NDArray[np.float64],
    grp: NDArray[np.int64],
    a: NDArray[np.float64],
    tot: NDArray[np.float64],
    own: NDArray[np.float64],
    w_same: float,
    w_diff: float,
    p: float,
    U: Bounds,
    n_groups: int,
    g: NDArray[np.float64],
    vup: NDArray[np.float64],
    vlow: NDArray[np.float64],
    gmax: NDArray[np.float64],
    gmin: NDArray[np.float64],
) -> float:
    """Gradient and selection statistics of ``rows``.

    Writes ``g[i] = y_i (w_diff tot_i + (w_same - w_diff) own_i) + p``, ``vup[i] = -y_i g_i`` for
    ``i in I_up`` (``-inf`` otherwise), ``vlow[i] = -y_i g_i`` for ``i in I_low`` (``+inf``
    otherwise), per-group ``gmax = max vup`` and ``gmin = min vlow``; returns
    ``sum_i a_i (g_i + p)`` (twice the objective ``1/2 a'Qa + p'a`` restricted to the rows).
    """
    for c in range(n_groups):
        gmax[c] = -np.inf
        gmin[c] = np.inf
    dq = w_same - w_diff
    obj = 0.0
    for r in range(rows.shape[0]):
        i = rows[r]
        gi = y[i] * (w_diff * tot[i] + dq * own[i]) + p
        g[i] = gi
        v = -y[i] * gi
        c = grp[i]
        Ui = bound_at(U, i)
        if in_up(a[i], y[i], Ui):
            vup[i] = v
            if v > gmax[c]:
                gmax[c] = v
        else:
            vup[i] = -np.inf
        if in_low(a[i], y[i], Ui):
            vlow[i] = v
            if v < gmin[c]:
                gmin[c] = v
        else:
            vlow[i] = np.inf
        obj += a[i] * (gi + p)
    return obj


@numba.njit(cache=True, nogil=True)
def class_sums(
    rows: NDArray[np.int64],
    grp: NDArray[np.int64],
    a: NDArray[np.float64],
    g: NDArray[np.float64],
    tot: NDArray[np.float64],
    own: NDArray[np.float64],
    U: Bounds,
    n_groups: int,
    out: NDArray[np.float64],
) -> NDArray[np.float64]:
    """Per group (class) sums for the mScatter test rules, over ``rows``: ``out[c] = [
    sum a own (= ||m_c||^2), sum a tot (= m_c' sum_k m_k), sum_msv a g, sum_msv a,
    sum a g, sum a]`` where ``msv`` are the margin support vectors ``0 < a < U`` and ``g_i``
    equals ``(m_c - mbar)' phi(x_i)`` (Jenssen et al. §3, test rule 2)."""
    for c in range(n_groups):
        for k in range(6):
            out[c, k] = 0.0
    for r in range(rows.shape[0]):
        i = rows[r]
        c = grp[i]
        ai = a[i]
        if ai == 0.0:
            continue
        out[c, 0] += ai * own[i]
        out[c, 1] += ai * tot[i]
        if ai < bound_at(U, i):
            out[c, 2] += ai * g[i]
            out[c, 3] += ai
        out[c, 4] += ai * g[i]
        out[c, 5] += ai
    return out


def feasible_start(cls: NDArray[np.int64], n_classes: int, mu: Bounds) -> NDArray[np.float64]:
    """Sparse feasible start of the mScatter dual (docs/design.md, 'mScatter-SVM'): in every class,
    its first points (in row order) get ``mu`` (or their own bound ``mu[i]``, weighted patterns)
    until the class's weights sum to 1 (the last one gets the rest).

    Needs ``mu * N_c >= 1`` for every class (checked by the estimator).  Only ``ceil(1 / mu)``
    points per class are non-zero, so the initial gradient needs that many kernel columns instead of
    the whole kernel matrix that the dense start ``1 / N_c`` would need.
    """
    a = np.zeros(cls.shape[0])
    left = np.ones(n_classes)
    for i in range(cls.shape[0]):
        c = cls[i]
        if left[c] > 0.0:
            v = min(bound_at(mu, i), left[c])
            a[i] = v
            left[c] -= v
    return a
