"""``warm_start``: start a fit from the previous fit's coefficients where they are a feasible
point of the new problem.

Every constraint of the Crammer–Singer dual (docs/design.md, 'The Crammer-Singer dual') is
homogeneous except ``alpha_i^{y_i} <= C``: the previous ``B`` stays feasible for a larger ``C``, and
scaled by ``C_new / max alpha_y`` for a smaller one, whatever the kernel.  It must still describe
the same patterns: the same classes and features, support rows that are the rows of the new data at
the same indices (more rows appended after them are fine) with the same labels.  The partitions then
rebuild their scores from it in the first round, ``F = K(X, X_SV) B_SV`` (docs/design.md,
'Architecture'), and the solve goes on from there.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from ..coordinators.decomposition import SparseStart
from ..engine.messages import RoundMessage
from ._inputs import rows_of


def warm_start_kwargs(est, td, classes, y_idx, C, row_C=None) -> dict:
    """``state`` and ``first_msg`` for :func:`dmcsvm.coordinators.crammer_singer.solve`
    continuing from ``est``'s previous fit, or ``{}`` (with a warning saying why) when that fit
    does not describe this problem; ``{}`` silently when ``warm_start`` is off or there is no
    previous fit."""
    start = cs_start(est, td, classes, y_idx, classes.shape[0], C, row_C)
    if start is None or not start[0].size:
        return {}
    from ..coordinators.crammer_singer import CoordinatorState

    ids, XB, dB = start
    state = CoordinatorState.fresh(td.n, dB.shape[1])
    state.B[ids] = dB
    return {"state": state, "first_msg": RoundMessage(ids=ids, XB=XB, dB=dB.copy())}


def cs_start(est, td, classes, yp, P, C, row_C=None):
    """``(ids, rows, B_ids)``: the previous fit's support rows, read from the new data, and their
    coefficients as a feasible start of the new Crammer–Singer dual on ``P`` prototypes (one per
    class, ``yp`` the class index of every row, or MProtSVM's, ``yp`` the start assignment: the
    positive prototype of every row), or None (with a warning saying why when the previous fit
    does not describe this problem; silently when ``warm_start`` is off or there is no previous
    fit).

    With per-pattern bounds ``row_C`` (class / sample weights, possibly other than the previous
    fit's) the coefficients are scaled by ``min_i C_i / alpha_i^{y_i}`` (at most 1) so that
    every pattern is inside its new box; rows whose new bound is 0 start at 0 (and are left
    out: ``ids`` may be empty)."""
    if not getattr(est, "warm_start", False) or not hasattr(est, "dual_coef_"):
        return None
    why, XB = _mismatch(est, td, classes, yp, P)
    if why is not None:
        _say_cold(why)
        return None
    ids = np.asarray(est.support_, dtype=np.int64)
    coef = np.asarray(est.dual_coef_, dtype=np.float64).T  # (n_SV, P): B of the SVs
    alpha_y = coef[np.arange(ids.shape[0]), yp[ids]]
    Ci = np.full(ids.shape[0], float(C)) if row_C is None else np.asarray(row_C)[ids]
    keep = Ci > 0  # a weight-0 row's coefficients must be 0
    if not keep.all():
        coef, ids, alpha_y, Ci = coef[keep], ids[keep], alpha_y[keep], Ci[keep]
        XB = XB[np.flatnonzero(keep)] if XB is not None else None
    pos = alpha_y > 0
    # min_i C_i / alpha_i = C / max alpha_i without weights (division is monotone)
    scale = min(1.0, float(np.min(Ci[pos] / alpha_y[pos]))) if pos.any() else 1.0
    return ids, XB, coef * scale


def _mismatch(est, td, classes, yp, P):
    """``(why, rows)``: why the previous fit is no starting point for this data (None when it
    is), and the support rows read from the new data (read once: a store's chunks cost I/O).
    ``yp``: the positive prototype of every new row (its class, or MProtSVM's assignment)."""
    why = _data_mismatch(est, td, classes)
    if why is not None:
        return why, None
    ids = np.asarray(est.support_, dtype=np.int64)
    coef = np.asarray(est.dual_coef_).T
    if coef.shape[1] != P:
        return "the previous coefficients have another number of prototypes", None

    def labels_changed():
        # a row's positive coefficient sits on its positive prototype, every other is <= 0
        own = coef[np.arange(ids.shape[0]), yp[ids]]
        others = coef.copy()
        others[np.arange(ids.shape[0]), yp[ids]] = 0.0
        return np.any(own < 0) or np.any(others > 0)

    return _support_mismatch(est, td, ids, labels_changed)


def _data_mismatch(est, td, classes):
    """Why the previous fit's classes or feature count are not this data's, or None."""
    if not np.array_equal(np.asarray(est.classes_), classes):
        return f"classes {list(est.classes_)} before, {list(classes)} now"
    if est.n_features_in_ != td.d:
        return f"{est.n_features_in_} features before, {td.d} now"
    return None


def _say_cold(why):
    """Warn that the previous solution is no start for this fit, and why."""
    warnings.warn(
        f"warm_start: the previous solution does not fit this problem ({why}); starting from zero",
        UserWarning,
        stacklevel=4,
    )


def _support_mismatch(est, td, ids, labels_changed):
    """``(why, rows)`` for the previous support rows ``ids``: why they are not this data's (an
    index beyond its rows, ``labels_changed()``, other rows at those indices), None when they
    are; ``rows`` are those rows read from the new data (read once: a store's chunks cost I/O)."""
    if not ids.size:
        return None, None
    if ids.max() >= td.n:
        return f"a support row index {int(ids.max())} beyond the {td.n} rows given", None
    if labels_changed():
        return "the labels of the support rows changed", None
    return _same_rows(est, td, ids)


def _same_rows(est, td, ids):
    """``(why, rows)``: the rows ``ids`` of the new data, and None when they are the previous
    fit's support vectors (else why not)."""
    old = est.support_vectors_
    new = rows_of(td, ids)
    a = old.toarray() if sp.issparse(old) else np.asarray(old)
    b = new.toarray() if sp.issparse(new) else np.asarray(new)
    if a.shape != b.shape or not np.array_equal(a.astype(np.float64), b.astype(np.float64)):
        return "the support rows are not the rows at the same indices of this data", None
    return None, new


def smo_starts(est, td, classes, y_idx, C, problems, row_C=None):
    """Starts ``a0`` (one length-n vector per binary problem) of an SMO fit
    (:class:`~dmcsvm.BinarySVC`, :class:`~dmcsvm.OneVsRestSVC`, :class:`~dmcsvm.OneVsOneSVC`)
    from ``est``'s previous fit, or None (with a warning saying why when the previous fit does
    not describe these problems).  ``problems`` are the sign vectors (0: row not in the problem).

    Each binary dual's constraints are ``sum_i y_i a_i = 0`` and ``0 <= a_i <= C_i``: the
    previous ``a`` stays feasible for larger bounds, and ``a * min(1, min_i C_i / a_i)`` for
    smaller ones (one factor per problem, so its equality constraint holds)."""
    if not getattr(est, "warm_start", False) or not hasattr(est, "dual_coef_"):
        return None
    ids = np.asarray(est.support_, dtype=np.int64)
    coef = est.dual_coef_
    coef = coef.toarray() if sp.issparse(coef) else np.asarray(coef, dtype=np.float64)
    n_prob = len(problems)

    def signs_at_support():
        # the problems' signs at the support rows only, one problem's vector at a time
        return np.array(
            [np.asarray(problems[k][ids]) for k in range(n_prob)], dtype=np.float64
        ).reshape(n_prob, ids.shape[0])

    why = _data_mismatch(est, td, classes) or _smo_mismatch(
        est, td, ids, coef, n_prob, signs_at_support
    )
    Ci = np.full(ids.shape[0], float(C)) if row_C is None else np.asarray(row_C)[ids]
    if why is None and np.any((Ci <= 0) & np.any(coef != 0, axis=0)):
        why = "a support row now has weight 0"
    if why is not None:
        _say_cold(why)
        return None
    values = []
    for a in np.abs(coef):
        pos = a > 0
        scale = min(1.0, float(np.min(Ci[pos] / a[pos]))) if pos.any() else 1.0
        values.append(a * scale)
    # one SparseStart per problem: the support rows and their values, never an n-long vector
    return [SparseStart(ids, v) for v in values]


def _smo_mismatch(est, td, ids, coef, n_prob, signs_at_support):
    """Why the previous SMO fit's problems (``coef``: one row of ``y_i a_i`` per problem) do not
    describe the ``n_prob`` problems on this data (``signs_at_support()``: their signs at the
    support rows), or None."""
    if coef.shape[0] != n_prob:
        return f"{coef.shape[0]} binary problems before, {n_prob} now"

    def labels_changed():
        s = signs_at_support()
        return np.any(coef * s < 0) or np.any((coef != 0) & (s == 0))

    return _support_mismatch(est, td, ids, labels_changed)[0]


def scatter_start(est, td, classes, y_idx, box):
    """Start ``a0`` of a :class:`~dmcsvm.ScatterSVC` fit from ``est``'s previous fit, or None
    (with a warning saying why when that fit does not describe this data).  ``box`` is the new
    bound of every ``a_i``: ``mu``, or one ``mu w_i`` per row (weights).

    The mScatter dual's constraints are ``0 <= a_i <= mu_i`` and ``sum_{i in c} a_i = 1`` per
    class (docs/design.md, 'mScatter-SVM').  The previous ``a`` stays feasible for larger bounds;
    for smaller ones it is clipped to them, and each class's lost mass goes back to its rows with
    room, the previous support rows first, then the others in row order (as the cold start fills
    them)."""
    if not getattr(est, "warm_start", False) or not hasattr(est, "dual_coef_"):
        return None
    ids = np.asarray(est.support_, dtype=np.int64)
    why = (
        _data_mismatch(est, td, classes)
        or _support_mismatch(est, td, ids, lambda: np.any(np.asarray(est.sv_class_) != y_idx[ids]))[
            0
        ]
    )
    if why is not None:
        _say_cold(why)
        return None
    bound = np.broadcast_to(np.asarray(box, dtype=np.float64), (td.n,))
    a0 = np.zeros(td.n)
    a0[ids] = np.minimum(np.asarray(est.dual_coef_, dtype=np.float64).ravel(), bound[ids])
    for c in range(classes.shape[0]):
        rows = np.flatnonzero(y_idx == c)
        lost = 1.0 - a0[rows].sum()
        if lost <= 0.0:
            continue
        # the support rows first, then the others, each up to its room
        was_sv = np.isin(rows, ids)
        order = np.concatenate([rows[was_sv], rows[~was_sv]])
        room = bound[order] - a0[order]
        before = np.cumsum(room) - room
        a0[order] += np.clip(lost - before, 0.0, room)
    return a0


def mprot_start(est, td, classes, y_idx, q, pcls, yp0, C, row_C=None):
    """Where a :class:`~dmcsvm.MultiPrototypeSVC` fit starts from ``est``'s previous fit:
    ``(yp, start, epoch)`` — the assignment (the previous one for every row whose class is
    unchanged, ``yp0``'s draw for the others; ``yp0`` an array or a
    :class:`~dmcsvm.coordinators.multiprototype.RandomAssignment`), the coefficients of
    :func:`cs_start` on it (or None when there are none) and the last epoch of the previous
    search, at whose temperature the new search goes on.  None (with a warning saying why,
    unless ``warm_start`` is off or there is no previous fit) when the previous fit does not
    describe this problem.

    Any assignment of every row to a prototype of its own class is admissible (AS 2005 Eq. 11),
    so only the coefficients need the checks of the Crammer–Singer start."""
    if not getattr(est, "warm_start", False) or not hasattr(est, "dual_coef_"):
        return None
    why = _data_mismatch(est, td, classes)
    if why is None and not np.array_equal(np.asarray(est.n_prototypes_), q):
        why = f"n_prototypes {np.asarray(est.n_prototypes_).tolist()} before, {q.tolist()} now"
    if why is not None:
        _say_cold(why)
        return None
    prev = np.asarray(est.assignment_, dtype=np.int64)
    # a warm start reads every row's class and prototype here (a store's too: O(n), only for
    # a warm start); a RandomAssignment is drawn for all rows
    y_idx = np.asarray(y_idx, dtype=np.int64)
    yp = yp0.draw(y_idx) if hasattr(yp0, "draw") else np.array(yp0, dtype=np.int64, copy=True)
    k = min(prev.shape[0], td.n)
    same = pcls[prev[:k]] == y_idx[:k]
    yp[:k][same] = prev[:k][same]
    start = cs_start(est, td, classes, yp, pcls.shape[0], C, row_C)
    if start is None:
        return None  # warned: the support rows are not this data's
    if not start[0].size:
        start = None
    # a model file from before epoch_history_ (0.1.0) carries no epochs: start at T0 again
    epochs = np.asarray(getattr(est, "epoch_history_", {}).get("epoch", ()))
    return yp, start, int(epochs[-1]) if len(epochs) else 0
