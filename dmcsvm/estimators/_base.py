"""SVMEstimator: what every dmcsvm estimator shares.

The tags, the "where it runs" parameters (their constraints and ONE docstring text), the kernel
parameters' constraints, and hyper-parameter validation by declared constraints, scikit-learn's
habit: each estimator lists ``_parameter_constraints`` (merged with this class's) and its ``fit``
is wrapped by ``sklearn.base._fit_context``, so a bad value raises
:class:`~sklearn.utils._param_validation.InvalidParameterError` (a ``ValueError`` and
``TypeError``) naming the parameter and the estimator before any data is touched.  The entries of
``solver_options`` are checked the same way (:mod:`._options`).
"""

from __future__ import annotations

import inspect
import os
from numbers import Integral, Real
from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils._param_validation import HasMethods, Interval, Options, StrOptions

from ..kernels import KERNELS
from ..solver_options import table_of
from . import _options
from ._calibration import ProbabilityMixin
from ._engine import THREAD_POLICY
from ._inputs import KERNEL_DTYPE_DOC, KERNEL_DTYPES, ChunkedPredictMixin

__all__ = [
    "OUT_OF_CORE_DOC",
    "OUT_OF_CORE_MARK",
    "WHERE_IT_RUNS_DOC",
    "WHERE_IT_RUNS_MARK",
    "SVMEstimator",
    "integers",
    "one_of",
    "reals",
]


class _NoBool:
    """Refuse ``bool`` / ``np.bool_``: scikit-learn's Interval and Options take ``True`` as the
    integer 1, while dmcsvm has always refused a bool where a number is meant."""

    def is_satisfied_by(self, val):
        return not isinstance(val, (bool, np.bool_)) and super().is_satisfied_by(val)


class _Interval(_NoBool, Interval):
    pass


class _Options(_NoBool, Options):
    def __str__(self):
        vals = sorted(self.options)
        return (
            repr(vals[0]) if len(vals) == 1 else "an int among {" + ", ".join(map(repr, vals)) + "}"
        )


class _StrChoices(StrOptions):
    """StrOptions that name the strings in a fixed order (a set's order varies per process)."""

    def __init__(self, values):
        super().__init__(set(values))
        self._order = tuple(values)

    def __str__(self):
        return "a str among {" + ", ".join(map(repr, self._order)) + "}"


def choices(*values):
    """One of these strings; an error message lists them in this order."""
    return _StrChoices(values)


def integers(left=None, right=None, closed="left"):
    """Integers (Python or numpy, never bool) in ``[left, right]`` (``closed`` as Interval's)."""
    return _Interval(Integral, left, right, closed=closed)


def reals(left=-np.inf, right=np.inf, closed="neither"):
    """Real numbers (Python or numpy, never bool, never NaN) between ``left`` and ``right``;
    the default bounds make it "any finite number"."""
    return _Interval(Real, left, right, closed=closed)


def one_of(*values):
    """Exactly one of these integers (never bool)."""
    return _Options(Integral, set(values))


#: The line of a class docstring (Parameters section) that :data:`WHERE_IT_RUNS_DOC` replaces.
WHERE_IT_RUNS_MARK = "    %(where_it_runs)s\n"
#: The line that :data:`~._inputs.KERNEL_DTYPE_DOC` replaces (every kernel estimator).
KERNEL_DTYPE_MARK = "    %(kernel_dtype)s\n"
#: The line that :data:`OUT_OF_CORE_DOC` replaces (estimators with checkpoints only).
OUT_OF_CORE_MARK = "    %(out_of_core)s\n"
#: The line that the estimator's ``solver_options`` table replaces
#: (:func:`dmcsvm.solver_options.table_of`).
SOLVER_OPTIONS_MARK = "    %(solver_options)s\n"

#: numpydoc text of the parameters that choose where and how a fit runs, never its solution
#: (:mod:`dmcsvm.runtime_params`); every estimator's docstring carries it verbatim.
WHERE_IT_RUNS_DOC = (
    THREAD_POLICY
    + """
    client : None, 'local', str or distributed.Client, default=None
        Where training runs: None in-process; a ``distributed.Client`` or a scheduler address on
        that Dask cluster; ``'local'`` a ``LocalCluster`` of worker processes, started by the
        first such fit and kept for this process's later fits of the same size (its start
        and close cost seconds); ``dmcsvm.close_local_clusters()`` or the end of the process
        closes it.  A MulticlassSVC fit of rows in memory whose rounds all run in the
        coordinator's kernel block (every row in one working set: ``batch_size=None`` whenever
        the block of all rows fits ``cache_size``) needs no workers: it runs in this process,
        reaches no cluster and starts none (``engine_stats_`` says ``'inprocess'``), and gives
        the in-process model.  A ``batch_size`` below the rows runs it on the cluster.
    n_workers, threads_per_worker, memory_limit : optional
        Size of the ``LocalCluster`` of ``client='local'``: workers, threads of each, and each
        worker's memory limit (bytes, or a string such as ``'4GB'``).
    cache_size : 'auto' or float, default='auto'
        Kernel cache budget in MB; 'auto' is an eighth of the machine's memory, at most 4096.
        It holds the partitions' kernel columns (shared by every binary problem of one fit)
        and, for the Crammer-Singer family, the coordinator's kernel block of the working
        sets (at most 800 MB of an 'auto' budget on rows of fewer than 256 features, all of it
        on more, where it bounds the working set, and more still, to hold a working set of
        half the rows, up to a third of the machine's memory: 100,000 deformed digits fitted
        in 375 s with 8 GB against 488 s with 3 GB); both grow to it only as they need.  With
        a ``client``, 'auto' gives the partitions an eighth of their workers' memory limit (at
        most 4096 MB a worker; 200 MB where a worker has no limit), and the coordinator's
        block, in this process, keeps this machine's rule.  A larger cache computes fewer
        kernel columns again: on 25,000 deformed MNIST digits 2,000 MB instead of 200 MB
        halved the fit.  On rows of fewer than 256 features (nonzeros, when
        sparse) 'auto' takes features / 256 of both budgets, at least 200 MB: a kernel value
        then costs less to compute than the memory to keep it (shuttle, 9 features: 1.5 GB
        held and 2.6-4.3 s, 200 MB and 1.5-1.7 s).  Explicit linear prototypes use none.
    verbose : bool, default=False
        Report the fit's progress (a bar of the solver's rounds: gap, active set, kernel rows
        computed / cached; MultiPrototypeSVC prints one line per annealing epoch).
"""
)

#: numpydoc text of the checkpoint and out-of-core parameters.
OUT_OF_CORE_DOC = """\
    checkpoint : str, optional
        Directory for checkpoints of the solve (:mod:`dmcsvm.checkpoint`); None writes none.
    checkpoint_every : int or str, default=10
        Checkpoint every this many rounds, or every so many seconds given as ``'30s'``.
    resume : bool, default=False
        Continue from the newest checkpoint in ``checkpoint`` (when there is one).
"""

_PATH = [None, str, os.PathLike]

#: Constraints of the checkpoint and out-of-core parameters (:data:`OUT_OF_CORE_DOC`);
#: ``checkpoint_every``'s string form ('30s') is parsed by :func:`dmcsvm.checkpoint.parse_every`.
OUT_OF_CORE_CONSTRAINTS = {
    "checkpoint": _PATH,
    "checkpoint_every": [integers(1), str],
    "resume": ["boolean"],
}


class SVMEstimator(ProbabilityMixin, ChunkedPredictMixin, ClassifierMixin, BaseEstimator):
    """Base of the dmcsvm classifiers: tags, shared parameter constraints and docstring text.

    A subclass writes :data:`WHERE_IT_RUNS_MARK` (and :data:`OUT_OF_CORE_MARK` where it has
    those options) as a line of its Parameters section; the texts replace them at class
    creation.
    """

    _parameter_constraints: ClassVar[dict] = {
        # where it runs
        "client": [None, str, HasMethods(["submit", "gather"])],
        "n_workers": [integers(1), None],
        "threads_per_worker": [integers(1), None],
        "memory_limit": [None, str, reals(0, closed="left")],
        "n_jobs": [integers(None, -1, closed="right"), integers(1), None],
        "cache_size": [choices("auto"), reals(0, closed="left")],
        "verbose": ["verbose"],
        # kernel (every estimator has the same four)
        "kernel": [choices(*KERNELS)],
        "gamma": [choices("scale", "auto"), reals(0)],
        "degree": [integers(None, None, closed="neither")],  # >= 1 for 'poly': KernelSpec
        "coef0": [reals()],
        "kernel_dtype": [choices(*KERNEL_DTYPES)],
        # the rest shared by all
        "probability": ["boolean"],
        "random_state": ["random_state"],
        "class_weight": [dict, choices("balanced"), None],
        "solver_options": [dict, None],  # its entries: _options.resolve
    }

    def _keep_params(self, args: dict) -> None:
        """Store every ``__init__`` argument unchanged under its own name (scikit-learn's rule:
        no logic in ``__init__``; the values are checked in ``fit``).  ``args`` is the
        ``locals()`` of ``__init__``; its ``former`` (the ``**former`` keywords) are parameters
        that moved into ``solver_options`` in 0.3, taken there with a ``FutureWarning``."""
        for name in self._get_param_names():
            setattr(self, name, args[name])
        _options.take_former_names(self, args.get("former") or {})

    def set_params(self, **params):
        """scikit-learn's ``set_params``; a parameter that moved into ``solver_options`` in 0.3
        is set there, with a ``FutureWarning``."""
        return super().set_params(**_options.set_former_names(self, params))

    def _validate_params(self):
        """scikit-learn's check of the parameters by ``_parameter_constraints`` (run by
        ``fit`` before any data is touched), and of the entries of ``solver_options``."""
        super()._validate_params()
        _options.resolve(self)

    def _solver_options(self) -> dict:
        """``solver_options`` checked and completed with the defaults (a new dict)."""
        return _options.resolve(self)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None:
            # the signature shows the parameters, not the ``**former`` names of dmcsvm 0.2
            # (taken with a FutureWarning, _keep_params): what help() and scikit-learn's
            # checks see
            sig = inspect.signature(init)
            cls.__signature__ = sig.replace(
                parameters=[
                    p
                    for p in sig.parameters.values()
                    if p.name != "self" and p.kind is not p.VAR_KEYWORD
                ]
            )
        doc = cls.__dict__.get("__doc__")
        if doc:
            doc = (
                doc.replace(WHERE_IT_RUNS_MARK, WHERE_IT_RUNS_DOC)
                .replace(KERNEL_DTYPE_MARK, KERNEL_DTYPE_DOC + "\n")
                .replace(OUT_OF_CORE_MARK, OUT_OF_CORE_DOC)
            )
            if SOLVER_OPTIONS_MARK in doc:
                doc = doc.replace(SOLVER_OPTIONS_MARK, table_of(_options.options_key(cls)))
            cls.__doc__ = doc

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # every estimator trains on CSR rows
        return tags
