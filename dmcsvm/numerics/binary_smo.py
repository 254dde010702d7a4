"""Platt's SMO step for the binary C-SVM with bias (Platt 1998; docs/design.md, 'Binary SMO'), as
plain numba functions.

Notation follows LIBSVM / Fan, Chen and Lin (2005): the dual is

    min_a  1/2 a' Q a + p' a,   Q_ij = y_i y_j K_ij,  p = -1,   y' a = 0,   0 <= a_i <= C

with gradient ``g = Q a + p``.  Platt's error ``E_i = f(x_i) - y_i`` (``f`` with bias ``b``) is
``E_i = y_i g_i + b``, so ``E_i - E_j = y_i g_i - y_j g_j`` and the step does not depend on ``b``.

The same step serves every dual of the form ``min 1/2 a'Qa + p'a`` with one equality constraint per
group ``sum_{i in group} y_i a_i = const`` and a box ``[0, U]`` once ``Q`` inside a group is a
positive multiple ``w`` of ``y_i y_j K_ij``: the mScatter dual (Jenssen et al. 2009, Eq. 6) is such
a dual with ``y = +1``, one group per class and ``w = (m - 1) / m`` (see
:mod:`dmcsvm.numerics.grouped_smo`).
"""

from __future__ import annotations

import numba
import numpy as np
from numpy.typing import ArrayLike, NDArray

from .pattern import Bounds, bound_at

# Note: numba's on-disk cache (cache=True) of the functions in numerics/grouped_smo.py that call
# these does not notice edits made here; after changing this file remove
# dmcsvm/numerics/__pycache__/grouped_smo.*.nb[ic] (or touch grouped_smo.py) so that they are
# recompiled.

#: LIBSVM's TAU: the curvature used when ``K_ii + K_jj - 2 K_ij <= 0`` (non-PSD or duplicate points)
TAU = 1e-12


@numba.njit(cache=True, nogil=True)
def platt_step(
    ai: float,
    aj: float,
    yi: float,
    yj: float,
    gi: float,
    gj: float,
    kii: float,
    kjj: float,
    kij: float,
    U: float,
    w: float,
) -> tuple[float, float]:
    """Platt's analytic solution of the two-variable problem on ``(a_i, a_j)`` with one box
    ``[0, U]`` for both (:func:`platt_step_box` with ``U_i = U_j = U``)."""
    return platt_step_box(ai, aj, yi, yj, gi, gj, kii, kjj, kij, U, U, w)


@numba.njit(cache=True, nogil=True)
def platt_step_box(
    ai: float,
    aj: float,
    yi: float,
    yj: float,
    gi: float,
    gj: float,
    kii: float,
    kjj: float,
    kij: float,
    Ui: float,
    Uj: float,
    w: float,
) -> tuple[float, float]:
    """Platt's analytic solution of the two-variable problem on ``(a_i, a_j)``, ``a_i`` in
    ``[0, U_i]`` and ``a_j`` in ``[0, U_j]`` (per-pattern bounds of weighted patterns, as
    LIBSVM's ``C_i``; equal bounds give exactly the arithmetic of one ``U``).

    Parameters
    ----------
    ai, aj : float
        Current values (feasible, in ``[0, U]``).
    yi, yj : float
        Signs (+1 / -1).
    gi, gj : float
        Gradients of the dual ``g = Q a + p`` at ``i`` and ``j``.
    kii, kjj, kij : float
        Kernel values.
    Ui, Uj : float
        Upper bounds of ``a_i`` and ``a_j``.
    w : float
        Scale of ``Q`` inside the group (1 for the C-SVM).

    Returns
    -------
    (ai_new, aj_new) : tuple of float
        Platt 1998: ``a_j^new = a_j + y_j (E_i - E_j) / eta`` with
        ``eta = w (K_ii + K_jj - 2 K_ij)`` clipped to ``[L, H]``
        (``L = max(0, a_i + a_j - U_i), H = min(U_j, a_i + a_j)`` when ``y_i = y_j``, else
        ``L = max(0, a_j - a_i), H = min(U_j, U_i + a_j - a_i)``), then
        ``a_i^new = a_i + y_i y_j (a_j - a_j^new)``.
    """
    eta = w * (kii + kjj - 2.0 * kij)
    if eta <= 0.0:
        eta = TAU
    dE = yi * gi - yj * gj  # E_i - E_j
    # bounds of a_j, and the value a_i takes when a_j sits on that bound because a_i hit its own
    # bound (set exactly: a_i recomputed from a_j would be off by rounding, e.g. 1e-18 instead of
    # 0, and such a variable would look movable while no step can move it)
    if yi == yj:
        s = ai + aj
        L, ai_at_L = (s - Ui, Ui) if s - Ui > 0.0 else (0.0, -1.0)
        H, ai_at_H = (s, 0.0) if s < Uj else (Uj, -1.0)
    else:
        dd = aj - ai
        L, ai_at_L = (dd, 0.0) if dd > 0.0 else (0.0, -1.0)
        # Uj - Ui is exactly 0 for equal bounds: the test is then dd < 0, as with one U
        H, ai_at_H = (Ui + dd, Ui) if dd < Uj - Ui else (Uj, -1.0)
    aj_new = aj + yj * dE / eta
    ai_fixed = -1.0
    if aj_new <= L:
        aj_new = L
        ai_fixed = ai_at_L
    elif aj_new >= H:
        aj_new = H
        ai_fixed = ai_at_H
    if ai_fixed >= 0.0:
        ai_new = ai_fixed
    else:
        ai_new = ai + yi * yj * (aj - aj_new)
        # keep the box exact against rounding in the last line
        if ai_new < 0.0:
            ai_new = 0.0
        elif ai_new > Ui:
            ai_new = Ui
    return ai_new, aj_new


@numba.njit(cache=True, nogil=True)
def platt_bias(
    b: float,
    ai: float,
    aj: float,
    ai_new: float,
    aj_new: float,
    yi: float,
    yj: float,
    gi: float,
    gj: float,
    kii: float,
    kjj: float,
    kij: float,
    U: float,
) -> float:
    """:func:`platt_bias_box` with one bound ``U`` for both variables."""
    return platt_bias_box(b, ai, aj, ai_new, aj_new, yi, yj, gi, gj, kii, kjj, kij, U, U)


@numba.njit(cache=True, nogil=True)
def platt_bias_box(
    b: float,
    ai: float,
    aj: float,
    ai_new: float,
    aj_new: float,
    yi: float,
    yj: float,
    gi: float,
    gj: float,
    kii: float,
    kjj: float,
    kij: float,
    Ui: float,
    Uj: float,
) -> float:
    """Platt's bias update after a step on ``(i, j)`` (``f(x) = sum a y K + b``), ``a_i`` in
    ``[0, U_i]``, ``a_j`` in ``[0, U_j]``.

    ``b_i = -E_i - y_i K_ii (a_i^new - a_i) - y_j K_ij (a_j^new - a_j) + b`` makes ``f(x_i) = y_i``,
    likewise ``b_j``; the new bias is ``b_i`` when ``0 < a_i^new < U_i``, else ``b_j`` when
    ``0 < a_j^new < U_j``, else their mean.  With ``E = y g + b`` the old ``b`` cancels.
    """
    Ei = yi * gi + b
    Ej = yj * gj + b
    dai = ai_new - ai
    daj = aj_new - aj
    bi = -Ei - yi * kii * dai - yj * kij * daj + b
    bj = -Ej - yi * kij * dai - yj * kjj * daj + b
    if 0.0 < ai_new < Ui:
        return bi
    if 0.0 < aj_new < Uj:
        return bj
    return 0.5 * (bi + bj)


@numba.njit(cache=True, nogil=True)
def rho_parts(
    a: NDArray[np.float64],
    y: NDArray[np.float64],
    g: NDArray[np.float64],
    U: Bounds,
    rows: NDArray[np.int64],
    out: NDArray[np.float64],
) -> NDArray[np.float64]:
    """LIBSVM's ``calculate_rho`` pieces over ``rows``: ``out = [sum_free y g, n_free, ub, lb]``.

    ``U`` is a scalar or one bound per row (weighted patterns; a row whose bound is 0 is fixed
    at 0 and bounds nothing).
    Free variables (``0 < a < U``) give ``rho = mean(y g)``; without any, ``rho = (ub + lb) / 2``
    with ``ub = min`` / ``lb = max`` of ``y g`` over the bounded variables on the respective side.
    The intercept is ``b = -rho``.  Partial results of several partitions combine by sum / sum /
    min / max (see :func:`rho_from_parts`).
    """
    s = 0.0
    nf = 0.0
    ub = np.inf
    lb = -np.inf
    for t in range(rows.shape[0]):
        i = rows[t]
        Ui = bound_at(U, i)
        if Ui <= 0.0:
            continue
        yg = y[i] * g[i]
        if a[i] >= Ui:
            if y[i] < 0:
                ub = min(ub, yg)
            else:
                lb = max(lb, yg)
        elif a[i] <= 0.0:
            if y[i] > 0:
                ub = min(ub, yg)
            else:
                lb = max(lb, yg)
        else:
            s += yg
            nf += 1.0
    out[0] = s
    out[1] = nf
    out[2] = ub
    out[3] = lb
    return out


def rho_from_parts(parts: ArrayLike) -> float:
    """Combine :func:`rho_parts` outputs (rows of ``parts``) into LIBSVM's ``rho``."""
    parts = np.asarray(parts, dtype=np.float64).reshape(-1, 4)
    nf = parts[:, 1].sum()
    if nf > 0:
        return float(parts[:, 0].sum() / nf)
    ub, lb = parts[:, 2].min(), parts[:, 3].max()
    if not np.isfinite(ub) or not np.isfinite(lb):
        return float(ub if np.isfinite(ub) else (lb if np.isfinite(lb) else 0.0))
    return float(0.5 * (ub + lb))
