"""MultiPrototypeSVC: the multi-prototype SVM of Aiolli & Sperduti (2005) as a scikit-learn
estimator."""

from __future__ import annotations

import numbers
from dataclasses import replace
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from sklearn.base import _fit_context
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from ..coordinators import linear_cs as lcs
from ..coordinators.crammer_singer import SolverSettings
from ..coordinators.multiprototype import (
    AnnealSettings,
    RandomAssignment,
    anneal,
    anneal_sequential,
    prototype_classes,
)
from ..engine.executor import partition_bounds
from ..engine.prototype_partition import LinearPrototypePartition, PrototypePartition
from ..engine.threads import limit_blas
from ..kernels import KernelSpec
from ..numerics import linear_prototypes as lp
from ..numerics.linear_prototypes import linear_coefficients
from ..store.class_index import class_counts
from ._base import SVMEstimator, integers, reals
from ._engine import (
    features_per_row,
    make_executor,
    n_threads,
    partition_cache_mb,
    release_executor,
)
from ._inputs import chunked_method, fit_inputs, in_kernel_precision, is_dask, is_store
from ._scoring import best_prototype_per_class, multiprototype_scores
from ._warm_start import mprot_start
from ._weights import fit_bounds, weights_doc
from .multiclass import CS_SOLVER_CONSTRAINTS, cs_partition_settings, cs_settings, fit_budgets


@weights_doc(
    "Aiolli–Sperduti 2005 Eq. 8 / Eq. 11: the primal's slack term becomes "
    "sum_i C_i xi_i, and the annealing's energy differences of Eq. 17 weigh each "
    "pattern's slacks by its own C_i"
)
class MultiPrototypeSVC(SVMEstimator):
    """Multi-prototype multiclass SVM (MProtSVM, Aiolli & Sperduti 2005) with annealed assignments.

    Every class ``c`` has ``q_c`` prototypes; a pattern is classified by the class of the prototype
    of largest score (winner-take-all, Eq. 2).  Training minimizes the primal of Eq. 8 over the
    prototypes and the assignment of each training pattern to one prototype of its class: with
    the assignment fixed the problem is the convex Crammer-Singer-type dual of Eq. 11 (solved by the
    same engine as :class:`~dmcsvm.MulticlassSVC`); the assignments are searched by the annealed
    iterated local search of Fig. 11.  Each epoch optimizes the dual until the primal drops below
    the last energy, re-draws every assignment by Eq. 17 at temperature ``T0 (1 - tau)^t`` and
    moves the positive coefficient of every pattern whose prototype changed to its new prototype
    (§6.1 zeroes them; the move keeps the row feasible and halves the passes).  After
    ``max_epochs`` epochs (or earlier, at a stationary point) the convex problem of the final
    assignment is solved to ``tol`` / ``gap_tol``.

    The default kernel is the paper's linear kernel ``<x, z> + 1`` (``kernel='poly', degree=1,
    gamma=1, coef0=1``: a linear model with a bias).  Linear kernels (``'linear'`` or ``'poly'`` of
    degree 1) run on the explicit-prototype fast path: the prototypes ``W`` (P x d) are kept
    explicitly and scores are ``W x``, no kernel row is computed.

    Checkpoints and the out-of-core options (``checkpoint``, and the solver options
    ``data_in_memory``, ``disk_cache_size``, ``cache_dir``) are not offered: the annealing's state
    (assignment, temperature, random stream) is not checkpointed, the linear path holds every row in
    memory and the kernel path streams a store's rows by the ``'auto'`` rule with no on-disk cache.

    Parameters
    ----------
    n_prototypes : int or list of int, default=3
        Prototypes per class ``q`` (>= 1), or one count per class (in the order of ``classes_``).
        Every class needs at least as many training patterns as prototypes.  ``q = 1`` for every
        class is the single-prototype model of :class:`~dmcsvm.MulticlassSVC`.
    C : float, default=1.0
        Upper bound on each pattern's dual weight ``alpha_i^{y_i}``; > 0.
    kernel : {'poly', 'linear', 'rbf'}, default='poly'
        With the defaults ``degree=1, gamma=1, coef0=1``: ``<x, z> + 1`` (AS 2005 §8).
    gamma : 'scale', 'auto' or float, default=1.0
        Kernel coefficient (``'poly'``: ``(gamma <x, z> + coef0)^degree``; ``'rbf'``:
        ``exp(-gamma |x - z|^2)``); ignored by ``'linear'``.
    degree : int, default=1
    coef0 : float, default=1.0
    %(kernel_dtype)s
    T0 : float, default=10.0
        Initial temperature of the annealing (>= 0; 0 is the greedy search of §6.1).
    tau : float, default=0.05
        Cooling rate, ``T(t) = T0 (1 - tau)^t``, in (0, 1).
    max_epochs : int, default=200
        Epochs of the search (re-assignments); 0 solves the convex problem of the initial random
        assignment only.
    tol, max_iter, shrinking :
        Options of the inner solver, as in :class:`~dmcsvm.MulticlassSVC`; ``tol`` (with the
        solver option ``gap_tol``) is the tolerance of the final convex solve (inner solves of
        the epochs stop as soon as the primal beats the last energy, or when their problem is
        solved to it first), ``max_iter`` bounds the rounds of every solve.  With the
        sequential linear solver (solver option ``linear_solver``), ``max_iter`` bounds the
        passes of every solve and ``tol`` is LIBLINEAR's stopping rule (largest KKT violation of
        a pass over every pattern).
    probability : bool, default=False
        Whether ``fit`` also calibrates class probabilities on held-out folds (internal
        stratified 5-fold cross-validation, as scikit-learn's SVC), so that ``predict_proba``
        and ``predict_log_proba`` exist; the map works on the per-class scores of
        ``decision_function`` (:mod:`dmcsvm.estimators._calibration`).
    random_state : int, RandomState or None, default=None
        Seeds the initial assignment (every pattern to a prototype of its class, uniformly),
        the draws of Eq. 17 and the folds of the probability calibration.  Each partition draws
        its own rows from a stream indexed by the row's number, so the in-process and Dask
        executors, any partitioning and any input form (array, CSR, dask array, store) give the
        same model for the same seed.
    warm_start : bool, default=False
        Start ``fit`` from the previous fit: its assignment (rows whose class changed, and rows
        appended, are drawn afresh), its coefficients (scaled down when ``C`` shrank, as in
        :class:`~dmcsvm.MulticlassSVC`) and its temperature, the search going on for up to
        ``max_epochs`` more epochs from where it stopped (``T(t)`` with ``t`` after the last
        epoch of ``epoch_history_``).  Needs the same classes, features and ``n_prototypes``, and
        the support rows at the same indices; otherwise a warning says why and the fit starts from
        a random assignment.  With ``max_epochs=0`` a refit solves the convex problem of the
        previous assignment, to the optimum a cold fit of that assignment reaches.
    %(where_it_runs)s
    %(solver_options)s

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    n_prototypes_ : ndarray of shape (n_classes,)
        Prototypes per class.
    prototype_class_ : ndarray of shape (n_prototypes_total,)
        Class label of every prototype (prototypes are grouped by class).
    assignment_ : ndarray of shape (n_samples,)
        Prototype each training pattern is assigned to at the end.  During a fit the partitions
        own the assignment (the coordinator holds no per-row array, whatever ``n``); it is
        gathered once, at the end, for this attribute.
    prototypes_ : ndarray of shape (n_prototypes_total, n_features) or None
        Explicit prototypes for linear kernels: ``f_r(x) = prototypes_[r] . x + intercept_[r]``;
        None for other kernels.
    intercept_ : ndarray of shape (n_prototypes_total,) or None
        The ``coef0`` part of the linear scores (``coef0 * sum_i B[i, r]``).
    support_ : ndarray of shape (n_SV,)
    support_vectors_ : ndarray or CSR matrix of shape (n_SV, n_features)
    dual_coef_ : ndarray of shape (n_prototypes_total, n_SV)
        Signed coefficients ``B^T`` of the support patterns, one row per prototype, one column
        per support vector as in scikit-learn's SVC: ``f_r(x) = sum_i dual_coef_[r, i]
        k(x_i, x)``.
    energy_ : float
        Primal value (Eq. 8) of the final model and assignment.
    history_ : dict of ndarray
        Per solver round (every epoch's and the final solve's), as ``MulticlassSVC.history_``
        (per pass of the sequential solver), with ``epoch``: the epoch each round belongs to
        (1, 2, ...; 0 for the final convex solve).
    epoch_history_ : dict of ndarray
        Per epoch: ``epoch``, ``energy`` (the primal ``E(t+1)`` after the epoch's re-assignment),
        ``primal`` and ``dual`` (before it), ``temperature``, ``n_changed`` (re-assigned
        patterns), ``n_moved`` (of which had coefficients, moved to the new prototype),
        ``rounds``, ``inner_converged``, ``elapsed``.
    n_epochs_ : int
        Epochs that ended with a re-assignment (rows of ``epoch_history_``).
    n_iter_ : int
        Solver rounds in total.
    converged_ : bool
        Whether the final convex solve reached its tolerances.
    gamma_ : float
    n_features_in_ : int
    """

    _parameter_constraints: ClassVar[dict] = {
        **SVMEstimator._parameter_constraints,
        **CS_SOLVER_CONSTRAINTS,
        "n_prototypes": [integers(1), list, tuple, np.ndarray],  # entries: _prototype_counts
        "T0": [reals(0, closed="left")],
        "tau": [reals(0, 1)],
        "max_epochs": [integers(0)],
        "warm_start": ["boolean"],
    }

    def __init__(
        self,
        *,
        n_prototypes=3,
        C=1.0,
        kernel="poly",
        gamma=1.0,
        degree=1,
        coef0=1.0,
        kernel_dtype="float32",
        T0=10.0,
        tau=0.05,
        max_epochs=200,
        tol=1e-3,
        shrinking=True,
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
    def _settings(self, opts: dict) -> tuple[SolverSettings, AnnealSettings]:
        """The inner solver's settings and the annealing schedule from the parameters (checked
        by ``_parameter_constraints``) and the resolved solver options ``opts``."""
        steps = opts["inner_steps"]
        # kernel rows: the rounds solve their working set by re-selection, as MulticlassSVC's
        # (one pass in order took far more rounds on small weighted problems); the linear fast
        # path resets it in fit
        solver = cs_settings(
            self,
            opts,
            batch_size=int(opts["batch_size"] or 1000),
            batch_sweeps=int(opts["batch_sweeps"] or 1),
            verbose=False,
            inner_steps=20.0 if steps is None else float(steps),
        ).check()
        schedule = AnnealSettings(T0=self.T0, tau=self.tau, max_epochs=self.max_epochs).check()
        return solver, schedule

    def _prototype_counts(self, classes, counts) -> np.ndarray:
        """``q_c`` of every class from ``n_prototypes``, checked against the class sizes."""
        m = classes.shape[0]
        v = self.n_prototypes
        msg = (
            f"n_prototypes must be an integer >= 1 or a list of such integers (one per "
            f"class), got {v!r}"
        )
        if isinstance(v, numbers.Integral) and not isinstance(v, bool):
            q = np.full(m, int(v), dtype=np.int64)
        elif isinstance(v, (list, tuple, np.ndarray)):
            if not all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in v):
                raise ValueError(msg)
            if len(v) != m:
                raise ValueError(f"n_prototypes has {len(v)} entries but the data has {m} classes")
            q = np.asarray(v, dtype=np.int64)
        else:
            raise ValueError(msg)
        if np.any(q < 1):
            raise ValueError(msg)
        for c in range(m):
            if counts[c] < q[c]:
                raise ValueError(
                    f"class {classes[c].tolist()!r} has {counts[c]} training patterns, "
                    f"fewer than its {q[c]} prototypes (n_prototypes)"
                )
        return q

    # ------------------------------------------------------------------ fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, sample_weight=None):
        """Train on ``X`` and labels ``y``: the inputs of :meth:`MulticlassSVC.fit` (an array,
        CSR matrix, dask array, or the path/URL of a dmcsvm zarr store with ``y=None``; each
        partition reads its own rows and scores them where it lives), and ``sample_weight``."""
        opts = self._solver_options()
        settings, schedule = self._settings(opts)
        # from a store the class index stays there: each partition reads its own rows' labels
        # and draws its rows' initial prototypes (the coordinator holds no per-row array)
        td, classes, y_idx = fit_inputs(self, X, y, lazy_store_labels=True)
        m = classes.shape[0]
        q = self._prototype_counts(classes, class_counts(y_idx, m))
        row_C = fit_bounds(self, td, settings.C, y_idx, classes, sample_weight)
        self.gamma_ = td.gamma(self.gamma) if self.kernel != "linear" else 1.0
        spec = KernelSpec(self.kernel, self.gamma_, int(self.degree), float(self.coef0))
        linear = bool(opts["fast_linear"]) and linear_coefficients(spec) is not None
        sequential = linear and opts["linear_solver"] != "rounds" and lcs.in_memory(self, td)
        if opts["linear_solver"] == "sequential" and not sequential:
            raise ValueError(
                "linear_solver='sequential' needs a linear kernel ('linear' or "
                "'poly' of degree 1) with fast_linear=True and in-memory rows (an "
                "array or CSR matrix, no client, no checkpoint)"
            )
        pcls = prototype_classes(q)
        rng = check_random_state(self.random_state)
        yp0 = RandomAssignment(lp.epoch_seed(rng), pcls, 0, td.n)
        if sequential:
            yp0 = yp0.draw(y_idx)
        warm = {}
        ws = mprot_start(self, td, classes, y_idx, q, pcls, yp0, settings.C, row_C)
        if ws is not None:
            yp0, warm["start"], warm["epoch0"] = ws
        if sequential:
            return self._fit_sequential(
                td, settings, schedule, spec, classes, q, pcls, y_idx, yp0, rng, row_C, warm
            )
        if not linear:
            td = in_kernel_precision(self, td)  # float32 kernel values by default
        # the batch of the best by V alone (no class shares, messages.pick_order): the shares
        # were measured on MulticlassSVC only, and with them the explicit-prototype and kernel
        # paths of the annealed search parted after 7 epochs on a small problem (rounding of
        # the scores deciding a share), where they step the same search without
        settings = fit_budgets(self, replace(settings, class_quota=False), td)
        final = settings
        if linear:  # resolve the defaults of the fast path (see batch_size, batch_sweeps)
            if opts["batch_size"] is None:
                settings = replace(settings, batch_size=int(td.n))
            if opts["inner_steps"] is None:
                # one pass in order: the working set (LinearBatchSolver.working_set) rescores a
                # row in O(P d) at every check and took 1.0-1.6x the time (benchmarks/results/
                # mprot_working_set.md) for 20x fewer rounds
                settings = replace(settings, inner_steps=0.0)
            final = replace(settings, batch_sweeps=20) if opts["batch_sweeps"] is None else settings
        executor, owned = make_executor(self)
        n_parts = max(1, min(executor.n_partitions, td.n))
        # explicit prototypes compute no kernel column and score every row each round: no
        # cache, and the rows stay in memory
        psettings = cs_partition_settings(
            settings,
            spec,
            pcls,
            td,
            n_parts,
            0.0 if linear else partition_cache_mb(self, executor, features_per_row(td), n_parts),
            x_in_memory=True if linear else "auto",
        )
        progress = self._print_epoch if self.verbose else None
        try:
            executor.start(
                td.source,
                yp0,
                y_idx,
                psettings,
                bounds=partition_bounds(td.n, n_parts, td.align),
                partition_cls=LinearPrototypePartition if linear else PrototypePartition,
                row_C=row_C,
            )
            res = anneal(
                executor,
                td.n,
                pcls,
                spec,
                settings,
                schedule,
                td.d,
                td.sparse,
                rng,
                x_dtype=td.dtype,
                linear=linear,
                progress=progress,
                final_settings=final,
                row_C=row_C,
                **warm,
            )
        finally:
            release_executor(executor, owned)
        state = res.state
        sv = state.support()
        self.classes_ = classes
        self.n_prototypes_ = q
        self.prototype_class_ = classes[pcls]
        self.assignment_ = res.yp
        self.support_ = sv
        self.support_vectors_ = (
            state.bank.stack(sv, td.d, td.sparse, td.dtype)
            if td.original is None
            else td.original[sv]
        )  # the rows as given
        self.dual_coef_ = np.ascontiguousarray(state.B[sv].T)  # (P, n_SV), as SVC
        self.prototypes_, self.intercept_ = self._explicit(spec)
        self.energy_ = float(res.energy)
        self.history_ = {
            "epoch": res.round_epoch,
            **{k: np.asarray(v) for k, v in state.history.items()},
        }
        self.epoch_history_ = res.epochs
        self.n_epochs_ = int(res.n_epochs)
        self.n_iter_ = int(state.rounds)
        self.converged_ = bool(res.final.converged)
        self._spec = spec
        return self

    def _fit_sequential(
        self, td, settings, schedule, spec, classes, q, pcls, y_idx, yp0, rng, row_C=None, warm=None
    ):
        """The in-memory linear path: :func:`anneal_sequential` (no executor, no rounds)."""
        a, c0 = linear_coefficients(spec)
        prob = lcs.LinearProblem.of(td.source, a, c0)
        with limit_blas(1):  # the checks' small GEMMs: threads cost more than they save
            res = anneal_sequential(
                prob,
                y_idx,
                pcls,
                yp0,
                settings,
                schedule,
                rng,
                lcs.seed_of(self.random_state),
                progress=self._print_epoch if self.verbose else None,
                row_C=row_C,
                threads=n_threads(self.n_jobs),
                **(warm or {}),
            )
        st = res.state
        sv = np.flatnonzero(np.any(st.B != 0.0, axis=1))
        self.classes_ = classes
        self.n_prototypes_ = q
        self.prototype_class_ = classes[pcls]
        self.assignment_ = st.yp.copy()
        self.support_ = sv
        self.support_vectors_ = td.source[sv]
        self.dual_coef_ = np.ascontiguousarray(st.B[sv].T)
        self.prototypes_, self.intercept_ = self._explicit(spec)
        self.energy_ = float(res.energy)
        self.history_ = {"epoch": res.round_epoch, **res.passes}
        self.epoch_history_ = res.epochs
        self.n_epochs_ = int(res.n_epochs)
        self.n_iter_ = int(st.passes)
        self.converged_ = bool(res.converged)
        self._spec = spec
        return self

    def _explicit(self, spec):
        """``(W, b)`` with ``f_r(x) = W_r . x + b_r`` for linear kernels (``a <x, z> + c0``:
        ``W = a B^T X``, ``b = c0 B^T 1``); ``(None, None)`` otherwise."""
        ac = linear_coefficients(spec)
        if ac is None:
            return None, None
        a, c0 = ac
        SV, Bs = self.support_vectors_, np.asarray(self.dual_coef_, dtype=np.float64).T
        W = np.asarray(SV.T @ Bs).T if sp.issparse(SV) else Bs.T @ np.asarray(SV, np.float64)
        return np.ascontiguousarray(a * W), c0 * Bs.sum(axis=0)

    def _print_epoch(self, row):
        print(
            f"epoch {row['epoch']:4d}  T={row['temperature']:.4g}  energy={row['energy']:.6g}  "
            f"primal={row['primal']:.6g}  dual={row['dual']:.6g}  changed={row['n_changed']}  "
            f"rounds={row['rounds']}",
            flush=True,
        )

    # ------------------------------------------------------------------ predict
    def _check_X(self, X):
        return validate_data(
            self, X, accept_sparse="csr", dtype=[np.float64, np.float32], reset=False
        )

    def _kernel_spec(self) -> KernelSpec:
        spec = getattr(self, "_spec", None)
        return spec or KernelSpec(self.kernel, self.gamma_, int(self.degree), float(self.coef0))

    def prototype_scores(self, X):
        """Scores ``f_r(x)`` of every prototype, shape (n_samples, n_prototypes_total), on
        ``n_jobs`` threads (the thread policy of ``n_jobs``)."""
        check_is_fitted(self)
        return self._prototype_scores(self._check_X(X))

    def _prototype_scores(self, X):
        return multiprototype_scores(X, self, self._kernel_spec())

    def decision_function(self, X):
        """Score of every class: the largest score of its prototypes, (n_samples, n_classes);
        for two classes, ``score_1 - score_0``.  A dask array gives a lazy dask array (one task
        per row block), a zarr store path/URL is scored chunk-parallel (on the estimator's
        cluster when ``client`` names one); neither is gathered in one place."""
        check_is_fitted(self)
        if is_store(X) or is_dask(X):
            return chunked_method(self, X, "decision_function")
        S = self.prototype_scores(X)
        return best_prototype_per_class(S, self.n_prototypes_, self.classes_.shape[0])

    def predict(self, X):
        """Class of the prototype of largest score (winner-take-all, AS 2005 Eq. 2): the class
        of the largest per-class score; a dask array for a dask-array input."""
        return super().predict(X)
