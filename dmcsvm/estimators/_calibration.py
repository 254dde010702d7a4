"""Probability estimates for every dmcsvm classifier (``probability=True``), as scikit-learn's SVC.

``fit`` of an estimator built with ``probability=True`` trains the model on all rows and then
calibrates a small map from its decision values to class probabilities on *held-out* decision
values: a stratified ``k``-fold split (``k = 5``, fewer when a class is smaller; shuffled with
``random_state``) trains a copy of the estimator (same parameters, ``probability=False``) on
``k - 1`` folds and scores the held-out fold, so every training row gets one out-of-fold decision
value (what LIBSVM does for ``SVC(probability=True)``).  The map is then fitted on those values:

- two classes (a decision *vector*): Platt's sigmoid ``P(classes_[1] | f) = 1 / (1 + exp(A f +
  B))`` fitted by the Newton method of Lin, Lin and Weng (2007) with Platt's smoothed targets
  (LIBSVM's ``sigmoid_train``);
- more classes (a decision *matrix* ``D``, one column per class): multinomial logistic
  regression on all class scores, ``P = softmax(D W' + b)`` (scikit-learn's
  ``LogisticRegression``, lbfgs).  It was chosen over one-vs-rest Platt scaling plus
  normalisation (what ``CalibratedClassifierCV(method='sigmoid')`` does) by measured log-loss on
  letter and usps (``benchmarks/bench_probability.py``): every class's probability sees every
  class's score, so a runner-up score close to the winner lowers the winner's probability.

The fitted map is stored in plain arrays (``calibration_``, ``calibration_coef_``,
``calibration_intercept_``), which :mod:`dmcsvm.model_io` saves like any other fitted attribute,
and ``predict_proba`` applies it to the decision values of every block, so a zarr store or a dask
array is handled chunk by chunk exactly like ``predict``.

The fold trainings run where the estimator trains (same parameters): with a ``distributed.Client``
or a scheduler address they share that cluster, and with ``client='local'`` the LocalCluster
this process keeps.  The folds of a dense zarr store are dask arrays of
its chunks (read by the tasks, never gathered); a sparse store's fold rows are read into memory.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

from ._inputs import chunked_method, decision_scores, is_dask, is_store
from ._scoring import apply_calibration  # noqa: F401 - public here (tests, benchmarks)

#: folds of the internal cross-validation (LIBSVM / SVC use 5)
N_FOLDS = 5
#: map for more than two classes: 'multinomial' or 'ovr_sigmoid' (chosen by measured log-loss,
#: see the module docstring and benchmarks/bench_probability.py)
MULTICLASS_METHOD = "multinomial"
#: inverse L2 strength of the multinomial map (the decision values are O(1); measured)
MULTINOMIAL_C = 1.0

CALIBRATION_ATTRS = ("calibration_", "calibration_coef_", "calibration_intercept_")


# ---------------------------------------------------------------------------------- the maps


def platt_sigmoid(f, pos, max_iter=100):
    """``(A, B)`` of Platt's sigmoid ``P(pos | f) = 1 / (1 + exp(A f + B))``, fitted to decision
    values ``f`` and boolean targets ``pos`` by the Newton method with backtracking of Lin, Lin
    and Weng (2007), with Platt's smoothed targets (LIBSVM's ``sigmoid_train``)."""
    f = np.asarray(f, dtype=np.float64)
    pos = np.asarray(pos, dtype=bool)
    prior1 = float(pos.sum())
    prior0 = float(pos.shape[0] - prior1)
    t = np.where(pos, (prior1 + 1.0) / (prior1 + 2.0), 1.0 / (prior0 + 2.0))
    A, B = 0.0, float(np.log((prior0 + 1.0) / (prior1 + 1.0)))
    min_step, sigma, eps = 1e-10, 1e-12, 1e-5

    def objective(A, B):
        z = f * A + B
        return float(
            np.sum(
                np.where(
                    z >= 0,
                    t * z + np.log1p(np.exp(-np.abs(z))),
                    (t - 1.0) * z + np.log1p(np.exp(-np.abs(z))),
                )
            )
        )

    fval = objective(A, B)
    for _ in range(max_iter):
        z = f * A + B
        e = np.exp(-np.abs(z))
        p = np.where(z >= 0, e / (1.0 + e), 1.0 / (1.0 + e))  # 1 / (1 + exp(z))
        q = 1.0 - p
        d2 = p * q
        h11 = sigma + float(np.dot(f * f, d2))
        h22 = sigma + float(d2.sum())
        h21 = float(np.dot(f, d2))
        d1 = t - p
        g1 = float(np.dot(f, d1))
        g2 = float(d1.sum())
        if abs(g1) < eps and abs(g2) < eps:
            break
        det = h11 * h22 - h21 * h21
        dA = -(h22 * g1 - h21 * g2) / det
        dB = -(-h21 * g1 + h11 * g2) / det
        gd = g1 * dA + g2 * dB
        step = 1.0
        while step >= min_step:
            nA, nB = A + step * dA, B + step * dB
            nf = objective(nA, nB)
            if nf < fval + 1e-4 * step * gd:
                A, B, fval = nA, nB, nf
                break
            step /= 2.0
        else:
            break  # line search failed
    return A, B


def fit_calibration(D, y_idx, n_classes, method=None, C=None):
    """Fit the map from decision values ``D`` (a vector for two classes, else (n, n_classes)) to
    the class indices ``y_idx``.  Returns ``(method, coef, intercept)`` (plain float64 arrays)."""
    D = np.asarray(D, dtype=np.float64)
    y_idx = np.asarray(y_idx)
    if D.ndim == 1:
        A, B = platt_sigmoid(D, y_idx == 1)
        return "sigmoid", np.array([A]), np.array([B])
    method = method or MULTICLASS_METHOD
    if method == "ovr_sigmoid":
        ab = np.array([platt_sigmoid(D[:, c], y_idx == c) for c in range(n_classes)])
        return method, ab[:, 0].copy(), ab[:, 1].copy()
    if method != "multinomial":
        raise ValueError(f"unknown calibration method {method!r}")
    if np.unique(y_idx).shape[0] != n_classes or n_classes < 3:
        raise ValueError("the multinomial map needs every one of >= 3 classes in the targets")
    from sklearn.linear_model import LogisticRegression

    lr = LogisticRegression(C=MULTINOMIAL_C if C is None else C, max_iter=1000, tol=1e-8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lbfgs ConvergenceWarning on separable folds
        lr.fit(D, y_idx)
    return method, np.array(lr.coef_, dtype=np.float64), np.array(lr.intercept_, dtype=np.float64)


# ---------------------------------------------------------------------------------- folds


def _labels(X, y):
    """The label vector of a training input (read from a store when ``X`` is one)."""
    if is_store(X):
        from ..store import open_store, read_labels

        info = open_store(X)
        labels = read_labels(info)
        if info.classes is not None:
            labels = np.asarray(info.classes, dtype=object)[labels]
        return labels
    if is_dask(y):
        return np.asarray(y.compute())
    return np.asarray(y)


def _rows_input(X):
    """Something indexable by row ids that ``fit`` and ``decision_function`` take: a dense store
    becomes a dask array of its chunks (read by the tasks; never gathered), a sparse store is
    read into memory (CSR), a sparse matrix becomes CSR, a list an array."""
    if is_store(X):
        from ..store import open_store, read_all, read_rows

        info = open_store(X)
        if info.sparse:
            return read_all(info.url)[0].tocsr()
        import dask.array as da
        from dask import delayed

        blocks = [
            da.from_delayed(
                delayed(read_rows, pure=True)(info.url, lo, hi),
                shape=(hi - lo, info.n_features),
                dtype=np.float32,
            )
            for lo, hi in info.chunk_bounds
        ]
        return da.concatenate(blocks, axis=0)
    if is_dask(X):
        return X
    if sp.issparse(X):
        return X.tocsr()
    if hasattr(X, "iloc"):
        return X
    return np.asarray(X) if isinstance(X, (list, tuple)) else X


def _take(X, idx):
    if hasattr(X, "iloc"):
        return X.iloc[idx]
    return X[idx]


def _n_rows(X):
    return X.shape[0] if hasattr(X, "shape") else len(X)


def out_of_fold_decisions(est, X, y, fit_kwargs):
    """Decision values of every training row from a copy of ``est`` (``probability=False``)
    trained on the other folds; returns ``(D, labels)``."""
    from sklearn.model_selection import StratifiedKFold

    labels = _labels(X, y)
    Xr = _rows_input(X)
    _, y_idx = np.unique(labels, return_inverse=True)
    counts = np.bincount(y_idx)
    k = int(min(N_FOLDS, counts.min()))
    n = _n_rows(Xr)
    m = counts.shape[0]
    if k < 2:
        raise ValueError(
            f"probability=True needs at least 2 samples of every class for the "
            f"internal cross-validation; the smallest class has {counts.min()}"
        )
    rs = est.random_state if "random_state" in est.get_params(deep=False) else None
    if rs is None:
        rs = 0  # deterministic without a seed, as LIBSVM's SVC
    skf = StratifiedKFold(n_splits=k, shuffle=True, random_state=rs)
    if is_store(X) and fit_kwargs.get("sample_weight") is None:
        # the folds train on the store's rows as arrays: give them its weights explicitly
        from ..store import read_sample_weight

        sw = read_sample_weight(X)
        if sw is not None:
            fit_kwargs = {**fit_kwargs, "sample_weight": sw}
    D = None
    for tr, te in skf.split(np.zeros((n, 1)), y_idx):
        # the same parameters (a live Client is shared, not deep-copied as clone() would)
        sub = type(est)(**est.get_params(deep=False)).set_params(probability=False)
        kw = {key: (_take(v, tr) if _is_row_vector(v, n) else v) for key, v in fit_kwargs.items()}
        if isinstance(getattr(est, "kernel", None), str) and est.kernel == "precomputed":
            # a Gram matrix: a fold trains on K[tr, tr] and scores K[te, tr]
            sub.fit(_take(Xr, tr)[:, tr], labels[tr], **kw)
            d = decision_scores(sub, _take(Xr, te)[:, tr])
        else:
            sub.fit(_take(Xr, tr), labels[tr], **kw)
            d = decision_scores(sub, _take(Xr, te))
        d = np.asarray(d.compute() if is_dask(d) else d, dtype=np.float64)
        if D is None:
            D = np.zeros((n,) + d.shape[1:])
        if d.ndim != D.ndim or (d.ndim == 2 and d.shape[1] != m):
            raise RuntimeError("a fold lost a class: its decision values have another shape")
        D[te] = d
    return D, labels


def _is_row_vector(v, n):
    return (
        v is not None
        and hasattr(v, "__len__")
        and not isinstance(v, (str, dict))
        and np.ndim(v) == 1
        and len(v) == n
    )


# ---------------------------------------------------------------------------------- the mixin


def _check_proba(self):
    if not getattr(self, "probability", False):
        raise AttributeError("predict_proba is not available when probability=False")
    return True


def _calibrating(fit):
    """Wrap a class's own ``fit`` so that ``probability=True`` calibrates after it."""

    @functools.wraps(fit)
    def wrapper(self, X, y=None, **kwargs):
        if self.__dict__.get("_dmcsvm_in_fit"):  # a subclass's fit calling super().fit
            return fit(self, X, y, **kwargs)
        prob = self.probability  # a bool: checked by fit's _parameter_constraints
        for name in CALIBRATION_ATTRS:
            self.__dict__.pop(name, None)
        self.__dict__["_dmcsvm_in_fit"] = True
        try:
            out = fit(self, X, y, **kwargs)
        finally:
            self.__dict__.pop("_dmcsvm_in_fit", None)
        if prob:
            D, labels = out_of_fold_decisions(self, X, y, kwargs)
            y_idx = np.unique(labels, return_inverse=True)[1]  # fit's classes_ order
            method, coef, intercept = fit_calibration(D, y_idx, len(self.classes_))
            self.calibration_ = method
            self.calibration_coef_ = coef
            self.calibration_intercept_ = intercept
        return out

    wrapper._dmcsvm_calibrating = True
    return wrapper


class ProbabilityMixin:
    """``probability=True``: ``fit`` calibrates on held-out folds; ``predict_proba`` and
    ``predict_log_proba`` apply the map to the decision values (chunk by chunk for a zarr store
    or a dask array, like ``predict``).  Every subclass's own ``fit`` is wrapped."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        fit = cls.__dict__.get("fit")
        if fit is not None and not getattr(fit, "_dmcsvm_calibrating", False):
            cls.fit = _calibrating(fit)

    def _proba(self, X, log):
        check_is_fitted(self, "calibration_")
        name = "predict_log_proba" if log else "predict_proba"
        if is_store(X) or is_dask(X):
            return chunked_method(self, X, name)
        D = decision_scores(self, X)
        return apply_calibration(
            self.calibration_, self.calibration_coef_, self.calibration_intercept_, D, log=log
        )

    @available_if(_check_proba)
    def predict_proba(self, X):
        """Calibrated class probabilities, (n_samples, n_classes) in the order of ``classes_``;
        rows sum to one.  Only with ``probability=True``.  A dask array gives a lazy dask array
        (one task per row block), a zarr store path/URL is computed chunk-parallel."""
        return self._proba(X, log=False)

    @available_if(_check_proba)
    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba` (computed in log space)."""
        return self._proba(X, log=True)
