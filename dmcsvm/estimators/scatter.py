"""ScatterSVC: the mScatter-SVM of Jenssen et al. (2009) as a scikit-learn estimator
(docs/design.md, 'mScatter-SVM')."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from sklearn.base import _fit_context
from sklearn.utils.validation import check_is_fitted, validate_data

from ..coordinators.decomposition import DecompositionSettings
from ..numerics import grouped_smo as sc
from ._base import SVMEstimator, choices, one_of, reals
from ._inputs import chunked_method, fit_inputs, is_dask, is_store, rows_of
from ._scoring import kernel_times
from ._warm_start import scatter_start
from ._weights import fit_bounds, weights_doc
from .binary import (
    NO_OUT_OF_CORE_DOC,
    SMO_CONSTRAINTS,
    SMOEngine,
    kernel_of,
)


@weights_doc(
    "the mScatter dual, Jenssen et al. 2009 Eq. 6, with a per-pattern cap: "
    "0 <= a_i <= mu_i, sum_{i in c} a_i = 1",
    bound="mu",
)
class ScatterSVC(SVMEstimator):
    """Multiclass mScatter-SVM (Jenssen, Kloft, Zien, Sonnenburg, Müller 2009): one variable per
    training pattern, trained by SMO over pairs of the same class.

    Dual (Eq. 6 of the paper, docs/design.md, 'mScatter-SVM')::

        min_a 1/2 a' Q a,   Q_ij = K_ij (m [c_i = c_j] - 1) / m,
        sum_{i in class c} a_i = 1  for every class,   0 <= a_i <= mu

    i.e. the between-class scatter ``1/2 sum_c ||m_c - mbar||^2`` of the weighted class means
    ``m_c = sum_{i in c} a_i phi(x_i)`` around their mean ``mbar``.  With two classes it is the dual
    of the mu-SVM of the paper's Eq. 1 (objective halved).
    %(no_out_of_core)s
    Parameters
    ----------
    mu : float or 'auto', default='auto'
        Upper bound of every ``a_i``; must satisfy ``1 / N_min <= mu <= 1`` (``N_min``: size of
        the smallest class), the only range in which the constraints are feasible.  Small ``mu``
        spreads each class mean over many points (soft margin); ``mu = 1`` is the hard-margin
        (convex-hull) case.  The nu of the paper's §4 relates as ``mu = m / (nu N)``; ``'auto'``
        is ``nu = 0.5`` (scikit-learn's NuSVC default), i.e. ``mu = 2 m / N`` clipped into the
        valid range.
    kernel : {'rbf', 'poly', 'linear'}, default='rbf'
    gamma : 'scale', 'auto' or float, default='scale'
    degree : int, default=3
    coef0 : float, default=0.0
    %(kernel_dtype)s
    test_rule : {1, 2}, default=1
        Prediction rule of the paper's §3: 1 = ``argmax_c m_c' phi(x) / ||m_c||`` (angular);
        2 = ``argmax_c [(m_c - mbar)' phi(x) - (m_c - mbar)' m_c^msv] / ||m_c - mbar||`` with
        ``m_c^msv`` the weighted mean of the margin support vectors (``0 < a_i < mu``) of class
        ``c`` (of all its support vectors when it has none).
    tol : float, default=1e-3
        Stop when in every class ``max_{a_t < mu} -g_t - min_{a_t > 0} -g_t <= tol``.
    max_iter : int, default=-1
        Maximum number of decomposition rounds, -1 for no limit (ConvergenceWarning when hit).
        A round's working set: the classes in order of decreasing violation, each with its
        ``class_batch`` top violators of both sides (solver options), up to ``batch_size``
        variables, solved exactly by SMO on ``K_BB``.
    probability : bool, default=False
        Whether ``fit`` also calibrates class probabilities on held-out folds (internal
        stratified 5-fold cross-validation, as scikit-learn's SVC), so that ``predict_proba``
        and ``predict_log_proba`` exist (:mod:`dmcsvm.estimators._calibration`).
    random_state : int, RandomState or None, default=None
        Seeds the folds of the probability calibration (None: a fixed seed); the solver is
        deterministic.
    warm_start : bool, default=False
        Start from the previous fit's ``a`` when it describes the new data (same classes and
        features, support rows that are the rows at the same indices with the same labels; more
        rows appended are fine): clipped into the new boxes ``[0, mu_i]`` when ``mu`` or the
        weights shrank, each class's lost mass given back to its rows with room; otherwise warn
        and start cold (:func:`dmcsvm.estimators._warm_start.scatter_start`).
    %(where_it_runs)s
    %(solver_options)s

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    support_ : ndarray of shape (n_SV,)
        Rows with ``a_i > 0``.
    support_vectors_ : ndarray or CSR of shape (n_SV, n_features)
    dual_coef_ : ndarray of shape (1, n_SV)
        ``a_i`` of the support vectors (one row, as in scikit-learn's SVC; the class of each
        column is ``sv_class_``).
    sv_class_ : ndarray of shape (n_SV,)
        Class index of every support vector.
    class_norms_ : ndarray of shape (n_classes,)
        ``||m_c||``.
    centered_norms_ : ndarray of shape (n_classes,)
        ``||m_c - mbar||``.
    msv_offsets_ : ndarray of shape (n_classes,)
        ``(m_c - mbar)' m_c^msv`` (test rule 2).
    n_support_ : ndarray of shape (n_classes,)
    mu_ : float
        The box bound used (``mu`` resolved).
    objective_ : float
        ``1/2 a'Qa`` at the solution.
    n_iter_ : int
    converged_ : bool
    history_ : dict of ndarray
    gamma_ : float
    n_features_in_ : int
    """

    __doc__ = __doc__.replace("    %(no_out_of_core)s\n", NO_OUT_OF_CORE_DOC + "\n")

    _parameter_constraints: ClassVar[dict] = {
        **SVMEstimator._parameter_constraints,
        **SMO_CONSTRAINTS,
        "mu": [choices("auto"), reals(0)],  # its range by the data: _check_mu
        "test_rule": [one_of(1, 2)],
        "warm_start": ["boolean"],
    }

    def __init__(
        self,
        *,
        mu="auto",
        kernel="rbf",
        gamma="scale",
        degree=3,
        coef0=0.0,
        kernel_dtype="float32",
        test_rule=1,
        tol=1e-3,
        cache_size="auto",
        max_iter=-1,
        class_weight=None,
        probability=False,
        random_state=None,
        warm_start=False,
        verbose=False,
        n_jobs=None,
        client=None,
        n_workers=None,
        threads_per_worker=None,
        memory_limit=None,
        solver_options=None,
        **former,
    ):
        self._keep_params(locals())

    # ------------------------------------------------------------------ validation
    def _check_mu(self, counts, weighted=False):
        """``mu`` resolved and checked against the class sizes ``counts`` (with weights: the
        summed weights ``W_c``; then ``mu`` has no upper limit, since caps ``mu w_i >= 1`` are
        inactive, and 1/W_min may exceed 1 when weights are small)."""
        n_min = counts.min()
        n_min = int(n_min) if float(n_min).is_integer() else float(n_min)
        lo = 1.0 / n_min
        if isinstance(self.mu, str):  # 'auto': nu = 0.5 (lo <= 1 without weights)
            return float(max(lo, min(1.0, 2.0 * counts.shape[0] / counts.sum())))
        if weighted:
            if not lo * (1.0 - 1e-12) <= self.mu:
                raise ValueError(
                    f"mu must satisfy mu >= 1/W_min with weights; for this data "
                    f"(smallest summed class weight W_min = {n_min}) that is mu >= "
                    f"{lo:.6g}, got {self.mu!r}"
                )
            return float(max(self.mu, lo))
        if not (lo * (1.0 - 1e-12) <= self.mu <= 1.0):
            raise ValueError(
                f"mu must satisfy 1/N_min <= mu <= 1; for this data (smallest class: "
                f"N_min = {n_min} samples) that is {lo:.6g} <= mu <= 1, got "
                f"{self.mu!r}"
            )
        return float(max(self.mu, lo))

    # ------------------------------------------------------------------ fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, sample_weight=None):
        """Train on ``X`` (n_samples, n_features: dense, CSR, a dask array, or the path/URL of a
        dmcsvm zarr store whose ``y`` holds the labels) and labels ``y``.

        With weights ``w_i = class_weight[y_i] * sample_weight[i]`` the box of ``a_i`` is
        ``mu_i = mu w_i`` and the class sizes in the range of ``mu`` (and in ``'auto'``) are the
        summed weights ``W_c = sum_{i in c} w_i``: an integer weight is that many copies of the
        row (copies share one class-mean weight, so only their sum matters)."""
        td, classes, y_idx = fit_inputs(self, X, y)
        m = classes.shape[0]
        w = fit_bounds(self, td, 1.0, y_idx, classes, sample_weight)
        counts = (
            np.bincount(y_idx, minlength=m)
            if w is None
            else np.bincount(y_idx, weights=w, minlength=m)
        )
        mu = self._check_mu(counts, weighted=w is not None)
        row_mu = None if w is None else mu * w
        opts = self._solver_options()
        s = DecompositionSettings(
            U=mu,
            w_same=(m - 1) / m,
            w_diff=-1.0 / m,
            p=0.0,
            n_groups=m,
            tol=float(self.tol),
            selection=opts["pair_selection"],
            batch_size=int(opts["batch_size"]),
            per_group=int(opts["class_batch"]),
            max_iter=int(self.max_iter),
            verbose=bool(self.verbose),
        ).check()
        spec = kernel_of(self, td)
        signs = np.ones(td.n, dtype=np.int64)
        box = mu if row_mu is None else row_mu
        a0 = scatter_start(self, td, classes, y_idx, box)
        if a0 is None:
            a0 = sc.feasible_start(y_idx, m, box)
        engine = SMOEngine(self, td, signs, y_idx, spec, s, with_own=True, row_U=row_mu)
        try:
            r = engine.solve(signs, a0=a0)
            self.engine_stats_ = engine.stats()
        finally:
            engine.close()
        cs = r.class_sums
        sv = r.support
        self.classes_ = classes
        self.support_ = sv
        self.support_vectors_ = rows_of(td, sv)
        self.dual_coef_ = r.alpha[None, :]  # (1, n_SV), as SVC
        self.sv_class_ = y_idx[sv]
        self.n_support_ = np.bincount(y_idx[sv], minlength=m).astype(np.int32)
        # ||m_c||^2 = sum_{i in c} a_i own_i ;  m_c' mbar = (1/m) sum_{i in c} a_i tot_i
        mm = cs[:, 0]
        mc_mbar = cs[:, 1] / m
        mbar2 = cs[:, 1].sum() / m**2
        self.class_norms_ = np.sqrt(np.maximum(mm, 0.0))
        self.centered_norms_ = np.sqrt(np.maximum(mm - 2.0 * mc_mbar + mbar2, 0.0))
        # (m_c - mbar)' m_c^msv = sum_msv a_i g_i / sum_msv a_i, since g_i = (m_c - mbar)' phi(x_i)
        has_msv = cs[:, 3] > 0
        self.msv_offsets_ = np.where(
            has_msv,
            cs[:, 2] / np.where(has_msv, cs[:, 3], 1.0),
            cs[:, 4] / np.maximum(cs[:, 5], 1e-300),
        )
        self.objective_ = r.objective
        self.n_iter_ = r.n_iter
        self.converged_ = r.converged
        self.history_ = r.history
        self.mu_ = mu
        return self

    # ------------------------------------------------------------------ predict
    def class_scores(self, X):
        """``m_c' phi(x)`` for every class, (n_samples, n_classes)."""
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=[np.float64, np.float32], reset=False)
        m = self.classes_.shape[0]
        a = np.asarray(self.dual_coef_).ravel()
        A = sp.csr_matrix((a, (np.arange(a.shape[0]), self.sv_class_)), shape=(a.shape[0], m))
        return kernel_times(self, X, self.support_vectors_, A)

    def decision_function(self, X):
        """Scores of the chosen test rule (n_samples, n_classes); for two classes the difference
        class 1 minus class 0 (positive means ``classes_[1]``).  A dask array gives a lazy dask
        array, a zarr store path/URL is scored chunk by chunk."""
        if is_store(X) or is_dask(X):
            return chunked_method(self, X, "decision_function")
        S = self.class_scores(X)
        tiny = 1e-300
        if self.test_rule == 1:
            D = S / np.maximum(self.class_norms_, tiny)
        else:
            D = (S - S.mean(axis=1, keepdims=True) - self.msv_offsets_) / np.maximum(
                self.centered_norms_, tiny
            )
        if D.shape[1] == 2:
            return D[:, 1] - D[:, 0]
        return D
