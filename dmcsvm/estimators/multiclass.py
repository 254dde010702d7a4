"""MulticlassSVC: the Crammer-Singer family (one prototype per class) as a scikit-learn
estimator."""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

import numpy as np
from sklearn.base import _fit_context
from sklearn.utils.validation import check_is_fitted, validate_data

from ..coordinators import linear_cs
from ..coordinators.crammer_singer import SolverSettings, runs_in_block, solve
from ..engine.executor import partition_bounds
from ..engine.partition import PartitionSettings
from ..kernels import KERNELS, KernelSpec
from ..numerics import pattern as pt
from ._base import (
    OUT_OF_CORE_CONSTRAINTS,
    SVMEstimator,
    choices,
    integers,
    one_of,
    reals,
)
from ._checkpoint import CheckpointSession
from ._engine import (
    AUTO_BATCH_MIN,
    auto_batch,
    cache_mb,
    features_per_row,
    gram_mb,
    make_executor,
    n_threads,
    partition_cache_mb,
    release_executor,
    whole_block_mb,
)
from ._gram import check_in_process, gram_features, gram_of, is_gram_kernel
from ._inputs import (
    chunked_method,
    fit_inputs,
    in_kernel_precision,
    is_dask,
    is_store,
)
from ._scoring import ovo_from_scores, prototype_scores
from ._warm_start import cs_start, warm_start_kwargs
from ._weights import fit_bounds, weights_doc

#: Constraints of the Crammer-Singer solver's parameters, shared with MultiPrototypeSVC (its
#: options: :mod:`._options`).
CS_SOLVER_CONSTRAINTS = {
    "C": [reals(0)],
    "tol": [reals(0)],
    "max_iter": [integers(1), one_of(-1)],
    "shrinking": ["boolean"],
}


def cs_settings(est, opts: dict, **more) -> SolverSettings:
    """The Crammer–Singer solver's settings of ``est`` (MulticlassSVC, MultiPrototypeSVC) from
    its parameters and its resolved solver options ``opts``; ``more`` sets the rest."""
    return SolverSettings(
        C=float(est.C),
        optimizer=opts["optimizer"],
        selection=opts["pattern_selection"],
        threshold=opts["threshold"],
        threshold_fraction=float(opts["threshold_fraction"]),
        tol=float(est.tol),
        gap_tol=float(opts["gap_tol"]),
        max_iter=int(est.max_iter),
        shrinking=bool(est.shrinking),
        cache_size=cache_mb(est),
        gram_cache_size=gram_mb(est),
        **more,
    )


def fit_budgets(
    est, settings: SolverSettings, td, auto_size: bool = False, whole: bool = False
) -> SolverSettings:
    """``settings`` with the cache budgets for the training rows ``td``: 'auto' ones shrink on
    rows of few features (:func:`~._engine.cache_mb`), numbers stay; with ``auto_size`` (a
    ``batch_size`` of None) the working set sized by the data too (:func:`~._engine.auto_batch`).
    The Gram block grows past the cache budget (:func:`~._engine.gram_mb` given the rows) only
    for the working set it sizes: dense rows, a nonlinear kernel and ``auto_size``; sparse rows
    keep no block, a linear kernel none in the solve, and a given ``batch_size`` is not asked
    to grow.  With ``whole`` (a fresh fit) and ``auto_size``, the working set is every row when
    their block fits (:func:`~._engine.whole_block_mb`): the rounds then run in the block."""
    f = features_per_row(td)
    gram_block = not td.sparse and getattr(est, "kernel", "rbf") != "linear"
    sizes = auto_size and gram_block
    itemsize = np.dtype(td.dtype).itemsize
    gram = gram_mb(est, f, rows=int(td.n) if sizes else None, itemsize=itemsize)
    s = replace(settings, cache_size=cache_mb(est, f), gram_cache_size=gram)
    if auto_size:
        b = auto_batch(int(td.n), f, float(s.gram_mb), itemsize, gram_block)
        block = whole_block_mb(est, int(td.n), itemsize) if gram_block and whole else None
        if block is not None:  # one working set: the rounds run in the coordinator's block
            b = int(td.n)
            s = replace(s, gram_cache_size=max(float(s.gram_mb), block))
        s = replace(s, batch_size=b)
    return s


def cs_partition_settings(
    settings: SolverSettings, spec: KernelSpec, pcls, td, n_parts: int, cache_mb: float, **more
) -> PartitionSettings:
    """The partitions' settings of a Crammer–Singer-family fit (MulticlassSVC,
    MultiPrototypeSVC's rounds): its kernel, bounds, selection and shrinking, and a column cache
    of ``cache_mb`` split between the ``n_parts`` partitions; ``more`` sets the rest."""
    return PartitionSettings(
        kernel=spec.to_dict(),
        C=settings.C,
        selection=pt.SELECTIONS[settings.selection],
        tol=settings.tol,
        n_candidates=settings.batch_size,
        pcls=pcls,
        shrinking=settings.shrinking,
        shrink_after=settings.shrink_after,
        class_quota=settings.class_quota and settings.inner_steps > 0,
        cache_bytes=int(cache_mb * 2**20 / n_parts),
        kernel_dtype=str(td.dtype),
        **more,
    )


@weights_doc("Crammer–Singer 2001 Eq. 5; Aiolli–Sperduti 2005 Eq. 11: alpha_i^{y_i} <= C_i")
class MulticlassSVC(SVMEstimator):
    """Multiclass kernel SVM of Crammer and Singer (2001), trained by the decomposition algorithms
    of Aiolli and Sperduti (2002, 2005) on row partitions in batched rounds.

    One prototype per class; the decision for ``x`` is ``argmax_r f_r(x)`` with
    ``f_r(x) = sum_i B[i, r] k(x_i, x)`` (no bias, as in the papers).

    Parameters
    ----------
    C : float, default=1.0
        Upper bound on every pattern's total dual weight (``alpha_i^{y_i} <= C``); > 0.
    kernel : {'rbf', 'poly', 'linear', 'sigmoid', 'precomputed'} or callable, default='rbf'
        ``'sigmoid'`` is ``tanh(gamma <x, z> + coef0)`` (not positive semidefinite for every
        ``gamma`` and ``coef0``, as in LIBSVM).  ``'precomputed'``: ``X`` is the Gram matrix
        (``fit``: the square ``K(X_train, X_train)``; ``predict``: ``K(X_test, X_train)``), in
        memory and in this process only (no ``client``, store or dask array); the model then
        keeps no support vectors, only ``support_`` and ``dual_coef_``.  A callable
        ``kernel(A, B)`` returns that matrix for row arrays ``A``, ``B``; in this process only,
        and a model with one cannot be saved (a model file stores no code).  Both train on the
        eigenvectors of the Gram matrix (:mod:`dmcsvm.estimators._gram`): O(n^3) time, and
        ``warm_start`` does not apply.
    gamma : 'scale', 'auto' or float, default='scale'
        Kernel coefficient, resolved like scikit-learn's SVC (``'scale'`` = 1 / (d X.var())).
    degree : int, default=3
        Degree of the polynomial kernel.
    coef0 : float, default=0.0
        Independent term of the polynomial and sigmoid kernels.
    %(kernel_dtype)s
    tol : float, default=1e-3
        The stopping rule: stop when every pattern's KKT violation ``psi`` (CS 2001 Eq. 32,
        in margin units: how far a score is from satisfying the optimality conditions) is
        <= tol, checked with every row unshrunk.  The default is the cheapest rule after which
        held-out predictions stopped changing on every data set measured
        (benchmarks/results/stopping_rule.md).  A lower ``tol`` gives a more precise solution and
        always binds: nothing else needs changing.
    max_iter : int, default=-1
        Maximum number of rounds, -1 for no limit; hitting it raises a ConvergenceWarning.
    shrinking : bool, default=True
        Shrink the active set (CS 2001 §7), with a final unshrunk check.
    probability : bool, default=False
        Whether ``fit`` also calibrates class probabilities on held-out folds (internal
        stratified 5-fold cross-validation, as scikit-learn's SVC: five more trainings on 4/5 of
        the rows), so that ``predict_proba`` and ``predict_log_proba`` exist.  Two classes:
        Platt's sigmoid; more: multinomial logistic regression on all class scores
        (:mod:`dmcsvm.estimators._calibration`).
    random_state : int, RandomState or None, default=None
        Seeds the folds of the probability calibration (None: a fixed seed); the
        single-prototype solver itself is deterministic.
    warm_start : bool, default=False
        Start ``fit`` from the previous fit's coefficients (scaled down when ``C`` shrank) when
        they fit the new data: same classes and features, support rows at the same indices
        (rows appended after them are fine).  Otherwise a warning says why and the fit starts
        from zero.  The optimum is the same; a path of ``C`` values takes fewer rounds.
    decision_function_shape : {'ovr', 'ovo'}, default='ovr'
        Shape of ``decision_function``: ``'ovr'`` gives the class scores ``f_r(x)``,
        (n_samples, n_classes); ``'ovo'`` their pairwise differences ``f_i(x) - f_j(x)``,
        (n_samples, n_classes (n_classes - 1) / 2), in scikit-learn's SVC pair order
        ``(0, 1), (0, 2), ..., (1, 2), ...`` and with its sign (positive favours class
        ``i``).  The model is one multiclass problem, so these are differences of its scores,
        not the values of separately trained pairwise machines.  ``predict`` is the same for
        both; with two classes both give the one column ``f_1 - f_0``.
    %(where_it_runs)s
    %(out_of_core)s
    %(solver_options)s

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    support_ : ndarray of shape (n_SV,)
        Indices of the support patterns (rows with a non-zero coefficient).
    support_vectors_ : ndarray or CSR matrix of shape (n_SV, n_features)
    dual_coef_ : ndarray of shape (n_classes, n_SV)
        Signed coefficients ``B^T`` of the support patterns, one row per class, one column per
        support vector as in scikit-learn's SVC (``+alpha^y`` for the own class, ``-alpha^r``
        for the others; every column sums to zero).  Scores: ``K(X, SV) @ dual_coef_.T``.
    n_support_ : ndarray of shape (n_classes,)
        Support patterns per class.
    n_iter_ : int
        Rounds run.
    engine_stats_ : list of dict
        Per partition: rows, active rows, whether rows were held in memory, kernel columns
        computed / served from memory / from the zarr tier, bytes of X re-read, and where it
        ran (``'executor'``: ``'inprocess'`` or ``'dask'``; a fit whose rounds all run in the
        coordinator's block runs in process whatever its ``client``).
    history_ : dict of ndarray
        Per round: dual, primal, gap, max_V, max_psi, n_active, elapsed, kernel rows ...
        At most 10,000 rows (:mod:`dmcsvm.coordinators.history`): a longer fit keeps its older
        rounds thinned; ``round`` says which rounds the rows are.
    n_features_in_ : int
    gamma_ : float
        The resolved kernel coefficient.
    calibration_, calibration_coef_, calibration_intercept_ : str, ndarray, ndarray
        The probability map (``probability=True`` only): ``'sigmoid'`` (two classes, ``A, B``)
        or ``'multinomial'`` (``W`` of shape (n_classes, n_classes), ``b``).
    """

    _parameter_constraints: ClassVar[dict] = {
        **SVMEstimator._parameter_constraints,
        **OUT_OF_CORE_CONSTRAINTS,
        **CS_SOLVER_CONSTRAINTS,
        "warm_start": ["boolean"],
        "kernel": [choices(*KERNELS, "precomputed"), callable],
        "decision_function_shape": [choices("ovr", "ovo")],
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
        shrinking=True,
        cache_size="auto",
        max_iter=-1,
        class_weight=None,
        probability=False,
        decision_function_shape="ovr",
        random_state=None,
        warm_start=False,
        verbose=False,
        n_jobs=None,
        client=None,
        n_workers=None,
        threads_per_worker=None,
        memory_limit=None,
        checkpoint=None,
        checkpoint_every=10,
        resume=False,
        solver_options=None,
        **former,
    ):
        self._keep_params(locals())

    # ------------------------------------------------------------------ validation
    def _settings(self, opts: dict) -> SolverSettings:
        """The solver's settings from the parameters (checked by ``_parameter_constraints``) and
        the resolved solver options ``opts``."""
        return cs_settings(
            self,
            opts,
            # (None: sized by the data in fit, fit_budgets)
            batch_size=int(opts["batch_size"] or AUTO_BATCH_MIN),
            batch_sweeps=int(opts["batch_sweeps"]),
            verbose=bool(self.verbose),
            inner_steps=float(opts["inner_steps"]),
        ).check()

    @staticmethod
    def _disk_cache_mb(opts: dict) -> float:
        """Disk budget (MB) of the zarr kernel-column cache; 'auto' is 4096 MB for the partitions
        that stream their rows from a store and nothing for partitions holding them."""
        v = opts["disk_cache_size"]
        return 4096.0 if isinstance(v, str) else float(v)

    def _kernel_spec(self) -> KernelSpec:
        spec = getattr(self, "_spec", None)
        return spec or KernelSpec(self.kernel, self.gamma_, int(self.degree), float(self.coef0))

    def _check_X(self, X, reset):
        X = validate_data(self, X, accept_sparse="csr", dtype=[np.float64, np.float32], reset=reset)
        return X

    # ------------------------------------------------------------------ fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, sample_weight=None):
        """Train on ``X`` and labels ``y``.

        Parameters
        ----------
        X : ndarray, CSR matrix, dask array or str
            Training rows (n_samples, n_features), or the path/URL of a dmcsvm zarr data store
            (validated before any worker starts; its partitions are read by the workers).
            With ``kernel='precomputed'``: the Gram matrix (n_samples, n_samples).
        y : array-like of shape (n_samples,), optional
            Labels; must be None for a store (its ``y`` array is used).
        sample_weight : array-like of shape (n_samples,), optional
            Per-pattern weights: pattern ``i``'s box becomes ``C * class_weight[y_i] *
            sample_weight[i]``.

        Returns
        -------
        self : MulticlassSVC
            The fitted estimator.
        """
        if is_gram_kernel(self.kernel):
            return self._fit_gram(X, y, sample_weight)
        opts = self._solver_options()
        settings = self._settings(opts)
        # from a store the class index stays there: each partition reads its own rows' labels
        td, classes, y_idx = fit_inputs(self, X, y, lazy_store_labels=True)
        row_C = fit_bounds(self, td, settings.C, y_idx, classes, sample_weight)
        self.gamma_ = td.gamma(self.gamma) if self.kernel != "linear" else 1.0
        spec = KernelSpec(self.kernel, self.gamma_, int(self.degree), float(self.coef0))
        self._spec = spec
        m = classes.shape[0]
        sequential = opts["linear_solver"] != "rounds" and linear_cs.sequential_applies(
            self, td, spec
        )
        if opts["linear_solver"] == "sequential" and not sequential:
            raise ValueError(
                "linear_solver='sequential' needs kernel='linear' and in-memory rows "
                "(an array or CSR matrix, no client, no checkpoint)"
            )
        if sequential:  # in memory: explicit W
            start = cs_start(self, td, classes, y_idx, m, settings.C, row_C)
            return linear_cs.fit_multiclass(
                self, td, settings, classes, y_idx, row_C, start, threads=n_threads(self.n_jobs)
            )
        td = in_kernel_precision(self, td)  # float32 kernel values by default
        # (a checkpointed or warm-started fit keeps the partitions' rounds: .whole_block needs
        # a fresh solve of its own, so its working set is sized as for those rounds)
        fresh = getattr(self, "checkpoint", None) is None and not (
            self.warm_start and hasattr(self, "dual_coef_")
        )
        settings = fit_budgets(
            self, settings, td, auto_size=opts["batch_size"] is None, whole=fresh
        )
        pcls = np.arange(m, dtype=np.int64)
        disk_mb = self._disk_cache_mb(opts)
        # a fit whose rounds all run in the coordinator's block, on rows held in this process,
        # needs no workers (rows in a store or a dask array stay where the workers read them)
        in_block = fresh and td.in_process and runs_in_block(settings, int(td.n), td.dtype)
        executor, owned = make_executor(self, in_process=in_block)
        n_parts = max(1, min(executor.n_partitions, td.n))
        psettings = cs_partition_settings(
            settings,
            spec,
            pcls,
            td,
            n_parts,
            partition_cache_mb(self, executor, features_per_row(td), n_parts),
            disk_cache_bytes=int(disk_mb * 2**20 / n_parts),
            disk_cache_stream_only=isinstance(opts["disk_cache_size"], str),
            cache_dir=opts["cache_dir"],
            x_in_memory=opts["data_in_memory"],
        )
        bounds = partition_bounds(td.n, n_parts, td.align)
        try:
            executor.start(td.source, y_idx, y_idx, psettings, bounds=bounds, row_C=row_C)
            ck = CheckpointSession.for_estimator(self, td.source, y_idx, settings, row_C=row_C)
            kw = ck.solve_kwargs(td.n, m, td.sparse, td.dtype, executor)
            if "state" not in kw:  # a resumed checkpoint wins over warm_start
                kw.update(warm_start_kwargs(self, td, classes, y_idx, settings.C, row_C))
            res = solve(executor, td.n, pcls, spec, ck.settings, td.d, td.sparse, td.dtype, **kw)
            # (each partition's counters, and where it ran: 'inprocess' or 'dask')
            self.engine_stats_ = [{**st, "executor": executor.name} for st in executor.stats()]
        finally:
            release_executor(executor, owned)
        self.classes_ = classes
        self.support_ = res.support
        # the rows as given (the solver's may be their float32 copies)
        self.support_vectors_ = res.X_sv if td.original is None else td.original[res.support]
        self.dual_coef_ = np.ascontiguousarray(res.coef.T)  # (n_classes, n_SV), as SVC
        self.n_support_ = np.bincount(y_idx[res.support], minlength=m).astype(np.int32)
        self.n_iter_ = res.n_iter
        self.converged_ = res.converged
        self.history_ = {k: np.asarray(v) for k, v in res.history.items()}
        return self

    def _fit_gram(self, X, y, sample_weight):
        """``kernel='precomputed'`` or a callable: train the linear model of the rows ``Phi``
        of the Gram matrix (``Phi Phi^T = K``, :func:`~dmcsvm.estimators._gram.gram_features`),
        which has the same dual problem, and keep its support indices and coefficients."""
        check_in_process(self, X)
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=[np.float64, np.float32])
        K = gram_of(self, X, train=True)
        params = {
            **self.get_params(deep=False),
            "kernel": "linear",
            "probability": False,
            "warm_start": False,
            "decision_function_shape": "ovr",
        }
        inner = MulticlassSVC(**params).fit(gram_features(K), y, sample_weight=sample_weight)
        for k, v in vars(inner).items():
            if k.endswith("_") and not k.startswith("_") and k != "n_features_in_":
                setattr(self, k, v)
        self._spec = None
        self.gamma_ = 0.0  # the kernel has no coefficient here
        if isinstance(self.kernel, str):
            self.support_vectors_ = np.empty((self.support_.shape[0], 0))
        else:
            self.support_vectors_ = X[self.support_]
        self.shape_fit_ = tuple(int(v) for v in X.shape)
        return self

    # ------------------------------------------------------------------ predict
    def _scores(self, X) -> np.ndarray:
        """Prototype scores ``K(X, SV) @ dual_coef_.T`` in row chunks, on ``n_jobs`` threads."""
        n = X.shape[0]
        out = np.zeros((n, self.dual_coef_.shape[0]))
        if self.support_vectors_.shape[0] == 0 or n == 0:
            return out
        if is_gram_kernel(self.kernel):
            coef = np.asarray(self.dual_coef_, dtype=np.float64).T
            if isinstance(self.kernel, str):
                K = gram_of(self, X)[:, self.support_]
            else:
                K = gram_of(self, X, self.support_vectors_)
            return K @ coef
        return prototype_scores(
            X, self._kernel_spec(), self.support_vectors_, self.dual_coef_, self.n_jobs
        )

    def decision_function(self, X):
        """Scores ``f_r(x)`` of every class (n_samples, n_classes); for two classes, ``f_1 - f_0``.

        ``X`` may be an array, a CSR matrix, a dask array (the result is then a lazy dask array,
        one task per row block) or a zarr store path/URL (computed chunk-parallel, on the
        estimator's cluster when ``client`` names one, else on local threads); neither of the
        last two is ever gathered in one place.
        """
        S = self._decision_ovr(X)
        if (
            getattr(self, "decision_function_shape", "ovr") == "ovo"
            and not is_dask(S)
            and S.ndim == 2
        ):
            return ovo_from_scores(S)
        if is_dask(S) and S.ndim == 2 and self.decision_function_shape == "ovo":
            return S.map_blocks(
                ovo_from_scores,
                chunks=(S.chunks[0], (len(self.classes_) * (len(self.classes_) - 1) // 2,)),
                dtype=S.dtype,
            )
        return S

    def _decision_ovr(self, X):
        """The class scores (n_samples, n_classes), or ``f_1 - f_0`` for two classes: what
        ``predict`` and the probability map use, whatever ``decision_function_shape``."""
        check_is_fitted(self)
        if is_gram_kernel(self.kernel):
            check_in_process(self, X)
        if is_store(X) or is_dask(X):
            return chunked_method(self, X, "_decision_ovr")
        X = self._check_X(X, reset=False)
        S = self._scores(X)
        if S.shape[1] == 2:
            return S[:, 1] - S[:, 0]
        return S
