"""``warm_start``: start a fit from the previous fit's coefficients where they are a feasible
point of the new problem.

Every constraint of the Crammer–Singer dual (DESIGN §1) is homogeneous except ``alpha_i^{y_i} <=
C``: the previous ``B`` stays feasible for a larger ``C``, and scaled by ``C_new / max alpha_y``
for a smaller one, whatever the kernel.  It must still describe the same patterns: the same
classes and features, support rows that are the rows of the new data at the same indices (more
rows appended after them are fine) with the same labels.  The partitions then rebuild their scores
from it in the first round, ``F = K(X, X_SV) B_SV`` (DESIGN §4), and the solve goes on from there.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from ._inputs import rows_of


def warm_start_kwargs(est, td, classes, y_idx, C, row_C=None) -> dict:
    """``state`` and ``first_msg`` for :func:`dmcsvm.coordinators.crammer_singer.solve`
    continuing from ``est``'s previous fit, or ``{}`` (with a warning saying why) when that fit
    does not describe this problem; ``{}`` silently when ``warm_start`` is off or there is no
    previous fit.

    With per-pattern bounds ``row_C`` (class / sample weights, possibly other than the previous
    fit's) the coefficients are scaled by ``min_i C_i / alpha_i^{y_i}`` (at most 1) so that
    every pattern is inside its new box; rows whose new bound is 0 start at 0."""
    if not getattr(est, "warm_start", False) or not hasattr(est, "dual_coef_"):
        return {}
    why, XB = _mismatch(est, td, classes, y_idx)
    if why is not None:
        warnings.warn(f"warm_start: the previous solution does not fit this problem ({why}); "
                      f"starting from zero", UserWarning, stacklevel=3)
        return {}
    from ..coordinators.crammer_singer import CoordinatorState
    ids = np.asarray(est.support_, dtype=np.int64)
    coef = np.asarray(est.dual_coef_, dtype=np.float64)
    if ids.shape[0] == 0:
        return {}
    alpha_y = coef[np.arange(ids.shape[0]), y_idx[ids]]
    Ci = np.full(ids.shape[0], float(C)) if row_C is None else np.asarray(row_C)[ids]
    keep = Ci > 0                         # a weight-0 row's coefficients must be 0
    if not keep.all():
        coef, ids, alpha_y, Ci = coef[keep], ids[keep], alpha_y[keep], Ci[keep]
        XB = XB[np.flatnonzero(keep)]
        if ids.shape[0] == 0:
            return {}
    pos = alpha_y > 0
    # min_i C_i / alpha_i = C / max alpha_i without weights (division is monotone)
    scale = min(1.0, float(np.min(Ci[pos] / alpha_y[pos]))) if pos.any() else 1.0
    dB = coef * scale
    state = CoordinatorState.fresh(td.n, coef.shape[1])
    state.B[ids] = dB
    return {"state": state, "first_msg": {"ids": ids, "XB": XB, "dB": dB.copy()}}


def _mismatch(est, td, classes, y_idx):
    """``(why, rows)``: why the previous fit is no starting point for this data (None when it
    is), and the support rows read from the new data (read once: a store's chunks cost I/O)."""
    if not np.array_equal(np.asarray(est.classes_), classes):
        return f"classes {list(est.classes_)} before, {list(classes)} now", None
    if est.n_features_in_ != td.d:
        return f"{est.n_features_in_} features before, {td.d} now", None
    ids = np.asarray(est.support_, dtype=np.int64)
    coef = np.asarray(est.dual_coef_)
    if coef.shape[1] != classes.shape[0]:
        return "the previous coefficients have another number of prototypes", None
    if ids.size and ids.max() >= td.n:
        return f"a support row index {int(ids.max())} beyond the {td.n} rows given", None
    new = None
    if ids.size:
        own = coef[np.arange(ids.shape[0]), y_idx[ids]]
        others = coef.copy()
        others[np.arange(ids.shape[0]), y_idx[ids]] = 0.0
        if np.any(own < 0) or np.any(others > 0):
            return "the labels of the support rows changed", None
        old = est.support_vectors_
        new = rows_of(td, ids)
        a = old.toarray() if sp.issparse(old) else np.asarray(old)
        b = new.toarray() if sp.issparse(new) else np.asarray(new)
        if a.shape != b.shape or not np.array_equal(a.astype(np.float64), b.astype(np.float64)):
            return "the support rows are not the rows at the same indices of this data", None
    return None, new
