"""Binary C-SVM with bias by Platt's SMO (docs/design.md, 'Binary SMO') and one-vs-rest / one-vs-one
on top of it.

All three estimators run the SMO decomposition of :mod:`dmcsvm.coordinators.decomposition` on
:class:`~dmcsvm.engine.gradient_partition.GradientPartition` row partitions, in-process or on Dask.
One-vs-rest and one-vs-one keep the partitions alive across their binary problems (each problem is a
``reset`` of the partitions' signs and row subset), so one kernel-column cache keyed by global
pattern index serves every binary problem.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from sklearn.base import _fit_context
from sklearn.utils.validation import check_is_fitted, validate_data

from ..coordinators.decomposition import DecompositionSettings, solve_decomposition
from ..engine.executor import partition_bounds
from ..engine.gradient_partition import GradientPartition
from ..engine.partition import PartitionSettings
from ..engine.problem_rows import ConstantRows, PairSigns
from ..kernels import KernelSpec
from ._base import SVMEstimator, integers, one_of, reals
from ._engine import features_per_row, make_executor, partition_cache_mb, release_executor
from ._inputs import (
    RowsView,
    TrainingData,
    chunked_method,
    fit_inputs,
    in_kernel_precision,
    is_dask,
    is_store,
    rows_of,
)
from ._scoring import kernel_times, ovo_votes
from ._warm_start import smo_starts
from ._weights import fit_bounds, weights_doc

# ------------------------------------------------------------------------------------------------
# shared machinery (also used by ScatterSVC)
# ------------------------------------------------------------------------------------------------


class SMOEngine:
    """Partitions of one training set, started once and reused by successive SMO solves.

    Parameters
    ----------
    est : estimator
        Supplies the executor switch (``client``, ``n_jobs``, ``n_partitions``, ...) and
        ``cache_size`` (MB, shared by the partitions).
    td : TrainingData
        The training input (arrays, CSR, a store or a dask array: partitions read their rows
        where they live).
    signs, groups : ndarray (n,) or problem_rows values
        The first problem's signs (+1/-1, 0 = row not in the problem) and groups: arrays, or
        values computed where they are read (:mod:`dmcsvm.engine.problem_rows`), which keep the
        coordinator free of n-long vectors.
    spec : KernelSpec
    settings : DecompositionSettings
    with_own : bool
        Whether the dual couples rows of the same group differently (mScatter).
    row_U : ndarray (n,), optional
        Per-row box bounds ``U_i`` (class / sample weights, :mod:`._weights`) in place of
        ``settings.U`` for every problem; each partition holds its rows'.
    """

    def __init__(
        self, est, td: TrainingData, signs, groups, spec, settings, with_own=False, row_U=None
    ):
        td = in_kernel_precision(est, td)  # float32 kernel values by default
        self.X = RowsView(td)  # rows the coordinator needs (a dense start's batch)
        self.n = td.n
        self.spec = spec
        self.settings = settings
        self.groups = groups
        self.executor, self._owned = make_executor(est)
        self._fresh = True
        try:
            n_parts = max(1, min(self.executor.n_partitions, self.n))
            cache = partition_cache_mb(est, self.executor, features_per_row(td), n_parts)
            ps = PartitionSettings(
                kernel=spec.to_dict(),
                C=float(settings.U),
                selection=0,
                tol=float(settings.tol),
                n_candidates=int(settings.per_group),
                shrinking=False,
                cache_bytes=int(cache * 2**20 / n_parts),
                kernel_dtype=str(td.dtype),
                extra=settings.partition_extra(with_own),
                x_in_memory=True,
            )
            self.executor.start(
                td.source,
                signs,
                self.groups,
                ps,
                bounds=partition_bounds(td.n, n_parts, td.align),
                partition_cls=GradientPartition,
                row_C=row_U,
            )
        except BaseException:
            self.close()
            raise

    def solve(self, signs, a0=None):
        """Solve the problem with these signs (the first call uses the signs of the constructor):
        each partition reads its own rows of them."""
        if not self._fresh:
            self.executor.call("reset", signs)
        self._fresh = False
        return solve_decomposition(
            self.executor, self.n, signs, self.groups, self.spec, self.settings, X=self.X, a0=a0
        )

    def stats(self):
        return self.executor.stats()

    def close(self):
        release_executor(self.executor, self._owned)


#: Constraints of the SMO decomposition's parameters, shared by ScatterSVC (its options:
#: :mod:`._options`).
SMO_CONSTRAINTS = {
    "tol": [reals(0)],
    "max_iter": [integers(1), one_of(-1)],
}

#: Why the SMO estimators offer no checkpoints or out-of-core options (their class docstrings).
NO_OUT_OF_CORE_DOC = """
    Checkpoints and the out-of-core options (``checkpoint``, and the solver options
    ``data_in_memory``, ``disk_cache_size``, ``cache_dir``) are not offered: the SMO
    decomposition's coordinator writes no checkpoint, and its partitions hold their rows in
    memory with no on-disk cache.
"""


def kernel_of(est, td: TrainingData) -> KernelSpec:
    est.gamma_ = td.gamma(est.gamma) if est.kernel != "linear" else 1.0
    return KernelSpec(est.kernel, est.gamma_, int(est.degree), float(est.coef0))


class _SMOParams(SVMEstimator):
    """Parameters shared by BinarySVC, OneVsRestSVC and OneVsOneSVC."""

    _parameter_constraints: ClassVar[dict] = {
        **SVMEstimator._parameter_constraints,
        **SMO_CONSTRAINTS,
        "C": [reals(0)],
        "warm_start": ["boolean"],
    }

    def __init__(
        self,
        *,
        C=1.0,
        kernel="rbf",
        gamma="scale",
        degree=3,
        coef0=0.0,
        kernel_dtype="float32",
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

    def _decomposition_settings(self) -> DecompositionSettings:
        """The SMO settings (the parameters are checked by ``_parameter_constraints``, the
        solver options by :mod:`._options`)."""
        opts = self._solver_options()
        return DecompositionSettings(
            U=float(self.C),
            w_same=1.0,
            w_diff=1.0,
            p=-1.0,
            n_groups=1,
            tol=float(self.tol),
            selection=opts["pair_selection"],
            batch_size=int(opts["batch_size"]),
            per_group=int(opts["batch_size"]) // 2,
            max_iter=int(self.max_iter),
            verbose=bool(self.verbose),
        ).check()

    def _fit_problems(self, td, problems, row_C=None, starts=None):
        """Solve the binary problems ``problems`` (a list of sign vectors over all rows, arrays
        or :class:`~dmcsvm.engine.problem_rows.PairSigns`) on one set of partitions, with per-row
        bounds ``row_C`` (weights) when given, each from its start in ``starts`` (None: zero).
        Returns per problem ``(support, y*a of the support, intercept, result)``."""
        s = self._decomposition_settings()
        spec = kernel_of(self, td)
        self._spec = spec
        engine = SMOEngine(self, td, problems[0], ConstantRows(td.n, 0), spec, s, row_U=row_C)
        out = []
        try:
            for k, signs in enumerate(problems):
                r = engine.solve(signs, a0=None if starts is None else starts[k])
                sv = r.support
                out.append((sv, np.asarray(signs[sv], dtype=np.float64) * r.alpha, -r.rho, r))
            self.engine_stats_ = engine.stats()
        finally:
            engine.close()
        return out

    def _check_X(self, X):
        check_is_fitted(self)
        return validate_data(
            self, X, accept_sparse="csr", dtype=[np.float64, np.float32], reset=False
        )


_PARAMS_DOC = (
    NO_OUT_OF_CORE_DOC
    + """
    Parameters
    ----------
    C : float, default=1.0
        Upper bound of every dual variable (box ``[0, C]``); > 0.
    kernel : {'rbf', 'poly', 'linear'}, default='rbf'
    gamma : 'scale', 'auto' or float, default='scale'
        Kernel coefficient, resolved like scikit-learn's SVC.
    degree : int, default=3
    coef0 : float, default=0.0
    %(kernel_dtype)s
    tol : float, default=1e-3
        Stop when the maximal violation ``max_{I_up} -y g - min_{I_low} -y g`` is <= tol
        (LIBSVM's ``eps``).
    max_iter : int, default=-1
        Maximum number of decomposition rounds per binary problem, -1 for no limit
        (ConvergenceWarning when hit).
    probability : bool, default=False
        Whether ``fit`` also calibrates class probabilities on held-out folds (internal
        stratified 5-fold cross-validation, as scikit-learn's SVC), so that ``predict_proba``
        and ``predict_log_proba`` exist: Platt's sigmoid for two classes, multinomial logistic
        regression on all class scores for more (:mod:`dmcsvm.estimators._calibration`).
    random_state : int, RandomState or None, default=None
        Seeds the folds of the probability calibration (None: a fixed seed); SMO itself is
        deterministic.
    warm_start : bool, default=False
        Start every binary problem from the previous fit's coefficients when they describe the
        new data (same classes, features and problems, support rows that are the rows at the
        same indices with the same labels; more rows appended are fine), scaled into the new
        boxes ``[0, C_i]`` when ``C`` or the weights shrank; otherwise warn and start from zero
        (:func:`dmcsvm.estimators._warm_start.smo_starts`).
    %(where_it_runs)s
    %(solver_options)s
"""
)


# ------------------------------------------------------------------------------------------------
# BinarySVC
# ------------------------------------------------------------------------------------------------


@weights_doc("Platt 1998 / LIBSVM's C_i: 0 <= a_i <= C_i, y'a = 0")
class BinarySVC(_SMOParams):
    """Binary C-SVM with bias trained by Platt's SMO (Platt 1998) with LIBSVM's working-set
    selection, on row partitions in batched rounds.

    Dual: ``min 1/2 a'Qa - sum a``, ``Q_ij = y_i y_j K_ij``, ``y'a = 0``, ``0 <= a <= C`` with
    ``y = +1`` for ``classes_[1]``; decision ``f(x) = sum_i y_i a_i k(x_i, x) + b``.
    """

    __doc__ += (
        _PARAMS_DOC
        + """
    Attributes
    ----------
    classes_ : ndarray of shape (2,)
    support_ : ndarray of shape (n_SV,)
    support_vectors_ : ndarray or CSR of shape (n_SV, n_features)
    dual_coef_ : ndarray of shape (1, n_SV)
        ``y_i a_i`` of the support vectors (as scikit-learn's SVC).
    intercept_ : ndarray of shape (1,)
        ``b = -rho`` with LIBSVM's rule (mean of ``-y g`` over free support vectors).
    platt_intercept_ : float
        The bias after the last step by Platt's update rule (agrees with ``intercept_`` up to
        ``tol`` at convergence).
    n_support_ : ndarray of shape (2,)
    n_iter_ : int
    objective_ : float
        Dual objective ``1/2 a'Qa - sum a`` at the solution.
    history_ : dict of ndarray
    gamma_ : float
    n_features_in_ : int
    """
    )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, sample_weight=None):
        """Train on ``X`` (n_samples, n_features: dense, CSR, a dask array, or the path/URL of a
        dmcsvm zarr store whose ``y`` holds the labels) and two-class labels ``y``."""
        # from a store the class index stays there: each partition reads its own rows' labels
        td, classes, y_idx = fit_inputs(self, X, y, lazy_store_labels=True)
        if classes.shape[0] != 2:
            raise ValueError(
                f"Only binary classification is supported. The type of the target "
                f"is multiclass ({classes.shape[0]} classes); use OneVsRestSVC or "
                f"OneVsOneSVC for more than two classes"
            )
        row_C = fit_bounds(self, td, float(self.C), y_idx, classes, sample_weight)
        signs = PairSigns(y_idx, 1, -1)
        starts = smo_starts(self, td, classes, y_idx, float(self.C), [signs], row_C)
        ((sv, coef, b, r),) = self._fit_problems(td, [signs], row_C, starts)
        self.classes_ = classes
        self.support_ = sv
        self.support_vectors_ = rows_of(td, sv)
        self.dual_coef_ = coef[None, :]
        self.intercept_ = np.array([b])
        self.platt_intercept_ = float(r.platt_b)
        self.n_support_ = np.bincount(y_idx[sv], minlength=2).astype(np.int32)
        self.n_iter_ = r.n_iter
        self.converged_ = r.converged
        self.objective_ = r.objective
        self.history_ = r.history
        return self

    def decision_function(self, X):
        """``f(x) = sum_i y_i a_i k(x_i, x) + b``; positive means ``classes_[1]``.  A dask array
        gives a lazy dask array, a zarr store path/URL is scored chunk by chunk."""
        if is_store(X) or is_dask(X):
            return chunked_method(self, X, "decision_function")
        X = self._check_X(X)
        return (
            kernel_times(self, X, self.support_vectors_, self.dual_coef_.T)[:, 0]
            + self.intercept_[0]
        )


# ------------------------------------------------------------------------------------------------
# one-vs-rest and one-vs-one
# ------------------------------------------------------------------------------------------------


def _pair_signs(y_idx, pairs) -> list:
    """The signs of every binary problem ``pairs[k] = (i, j)`` (class ``i`` positive, class ``j``
    negative, or every other class when ``j`` is -1) over the class indices ``y_idx`` (an array
    or a store's class index): a :class:`~dmcsvm.engine.problem_rows.PairSigns` each, a few
    numbers that every partition turns into its own rows' signs, so the coordinator holds no
    sign vector (docs/design.md, 'The coordinator's size')."""
    return [PairSigns(y_idx, i, j) for i, j in np.asarray(pairs, dtype=np.int64).reshape(-1, 2)]


@weights_doc("Platt 1998 / LIBSVM's C_i in every binary problem: 0 <= a_i <= C_i", class_doc=False)
class _Decomposed(_SMOParams):
    """Several binary SMO problems sharing partitions and kernel cache."""

    def _problems(self, y_idx, m):
        raise NotImplementedError

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, sample_weight=None):
        """Train on ``X`` (n_samples, n_features: dense, CSR, a dask array, or the path/URL of a
        dmcsvm zarr store whose ``y`` holds the labels) and labels ``y``."""
        # from a store the class index stays there: each partition reads its own rows' labels
        td, classes, y_idx = fit_inputs(self, X, y, lazy_store_labels=True)
        m = classes.shape[0]
        row_C = fit_bounds(self, td, float(self.C), y_idx, classes, sample_weight)
        problems, pairs = self._problems(y_idx, m)
        starts = smo_starts(self, td, classes, y_idx, float(self.C), problems, row_C)
        res = self._fit_problems(td, problems, row_C, starts)
        sv = np.unique(np.concatenate([r[0] for r in res])) if res else np.zeros(0, np.int64)
        rows = np.concatenate([np.full(r[0].shape[0], k) for k, r in enumerate(res)])
        cols = np.concatenate([np.searchsorted(sv, r[0]) for r in res])
        vals = np.concatenate([r[1] for r in res])
        self.classes_ = classes
        self.pairs_ = pairs
        self.support_ = sv
        self.support_vectors_ = rows_of(td, sv)
        self.dual_coef_ = sp.csr_matrix((vals, (rows, cols)), shape=(len(res), sv.shape[0]))
        self.intercept_ = np.array([r[2] for r in res])
        self.n_support_ = np.bincount(y_idx[sv], minlength=m).astype(np.int32)
        self.n_iter_ = np.array([r[3].n_iter for r in res])
        self.converged_ = bool(all(r[3].converged for r in res))
        return self

    def _binary_decisions(self, X):
        """Decision values of every binary problem, (n_samples, n_problems)."""
        X = self._check_X(X)
        return (
            kernel_times(self, X, self.support_vectors_, self.dual_coef_.T.tocsr())
            + self.intercept_[None, :]
        )

    def decision_function(self, X):
        """Decision values (see the subclass); a dask array gives a lazy dask array, a zarr store
        path/URL is scored chunk by chunk."""
        if is_store(X) or is_dask(X):
            return chunked_method(self, X, "decision_function")
        return self._decision(X)


@weights_doc("Platt 1998 / LIBSVM's C_i: 0 <= a_i <= C_i, in every binary problem")
class OneVsRestSVC(_Decomposed):
    """One-vs-rest multiclass SVM: one :class:`BinarySVC` problem per class (class ``c`` against
    all others), solved in turn on the same partitions with one shared kernel cache; the class of
    ``x`` is ``argmax_c f_c(x)``.  With two classes a single problem (``classes_[1]`` positive).
    """

    __doc__ += (
        _PARAMS_DOC
        + """
    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    pairs_ : ndarray of shape (n_problems, 2)
        ``(positive class, -1)`` of every binary problem.
    support_ : ndarray of shape (n_SV,)
        Union of the support vectors of all problems.
    support_vectors_ : ndarray or CSR of shape (n_SV, n_features)
    dual_coef_ : scipy.sparse CSR of shape (n_problems, n_SV)
        ``y_i a_i`` of every problem over the union of support vectors.
    intercept_ : ndarray of shape (n_problems,)
    n_support_ : ndarray of shape (n_classes,)
    n_iter_ : ndarray of shape (n_problems,)
    engine_stats_ : list of dict
        Per partition: kernel columns computed and served from the shared cache.
    gamma_ : float
    n_features_in_ : int
    """
    )

    def _problems(self, y_idx, m):
        pairs = np.array([[1, -1]]) if m == 2 else np.array([[c, -1] for c in range(m)])
        return _pair_signs(y_idx, pairs), pairs

    def _decision(self, X):
        """``f_c(x)`` of every class (n_samples, n_classes); for two classes a vector (positive
        means ``classes_[1]``)."""
        D = self._binary_decisions(X)
        return D[:, 0] if len(self.classes_) == 2 else D


@weights_doc("Platt 1998 / LIBSVM's C_i: 0 <= a_i <= C_i, in every binary problem")
class OneVsOneSVC(_Decomposed):
    """One-vs-one multiclass SVM: one :class:`BinarySVC` problem per pair of classes ``(i, j)``,
    ``i < j`` (class ``i`` positive), on the rows of the two classes, solved in turn on the same
    partitions with one shared kernel cache.  Prediction by votes, ties broken by the summed
    confidences (as ``decision_function`` returns them).
    """

    __doc__ += (
        _PARAMS_DOC
        + """
    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    pairs_ : ndarray of shape (n_problems, 2)
        ``(i, j)`` class indices of every problem (``i`` positive).
    support_, support_vectors_, dual_coef_, intercept_, n_support_, n_iter_, engine_stats_,
    gamma_, n_features_in_ :
        As in :class:`OneVsRestSVC`.
    """
    )

    def _problems(self, y_idx, m):
        pairs = np.array(
            [(i, j) for i in range(m) for j in range(i + 1, m)], dtype=np.int64
        ).reshape(-1, 2)
        return _pair_signs(y_idx, pairs), pairs

    def _decision(self, X):
        """Votes of every class plus its summed pairwise confidences squashed into (-1/3, 1/3)
        (n_samples, n_classes), so that ``argmax`` is the vote winner with ties broken by
        confidence; for two classes the binary decision value (positive means ``classes_[1]``)."""
        return ovo_votes(self._binary_decisions(X), self.pairs_, len(self.classes_))
