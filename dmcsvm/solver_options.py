"""The solver options of every estimator: their names, meanings and defaults, in one place.

An estimator's ``solver_options`` dict (dask-ml's ``solver_kwargs``) sets how its solver works
inside: working-set sizes, selection rules, row partitions, the on-disk cache.  An SVC user never
needs them; each has a default that fits.  This module is the one source of those defaults: the
estimators (:mod:`dmcsvm.estimators._options`, which also validates the values), the solver's own
settings (:class:`~dmcsvm.coordinators.crammer_singer.SolverSettings`) and the command line read
them from :data:`DEFAULTS`, and every estimator's docstring shows :data:`OPTIONS` filtered to its
own options.

The same name means the same thing in every estimator: ``pattern_selection`` chooses a
Crammer-Singer pattern by its KKT / AMG / BMG value, ``pair_selection`` an SMO pair by WSS2 / MVP
(both were called ``selection`` before 0.3, :mod:`dmcsvm.param_history`).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["DEFAULTS", "OPTIONS", "SolverOption", "defaults_of", "table_of"]


class SolverOption(NamedTuple):
    """One solver option: its name, the values it takes and what it does (one short paragraph,
    shown in the estimators' docstrings and ``dmcsvm train --help``)."""

    name: str
    values: str
    meaning: str


OPTIONS = (
    SolverOption(
        "batch_size",
        "int >= 1 (SMO: >= 2)",
        "Working-set size: patterns (Crammer-Singer family) or dual variables (SMO "
        "family) optimized in one round.  Crammer-Singer: each partition reports up "
        "to this many candidates and the coordinator solves them on their kernel "
        "block; 1 is the papers' sequential algorithm.  MulticlassSVC: None sizes it "
        "by the data: every row when the kernel block of all of them fits the cache "
        "budget (dense rows, a nonlinear kernel: the rounds then run in the "
        "coordinator's block); else half the training rows, at least 5000 and at most "
        "the rows the coordinator's kernel block holds within its budget (cache_size), "
        "on dense rows of 256 features or more with a nonlinear kernel; 5000 otherwise.  "
        "MultiPrototypeSVC: None is "
        "1000 on the kernel path and every violator on the linear fast path.  SMO: "
        "the batch_size / 2 top violators of each side; 2 is plain SMO.",
    ),
    SolverOption(
        "pattern_selection",
        "'bmg', 'amg' or 'kkt'",
        "Pattern selection value V_p of the Crammer-Singer family (AS 2005 §5.3).  "
        "MultiPrototypeSVC's default, 'kkt', scans O(P) per pattern where BMG solves "
        "every violator's reduced problem (O(P log P)).",
    ),
    SolverOption(
        "pair_selection",
        "'wss2' or 'mvp'",
        "Pair selection of the SMO family inside a working set: LIBSVM's "
        "second-order rule (Fan, Chen, Lin 2005; per class for ScatterSVC) or the "
        "maximal violating pair.",
    ),
    SolverOption(
        "optimizer",
        "'exact', 'opt_kkt', 'fixed_point', 'basic' or 'all_pairs'",
        "Per-pattern optimizer of the Crammer-Singer family: the exact sort-based "
        "solution of the reduced problem / AS 2005 Fig. 6 / CS 2001 Fig. 3 / AS Fig. 4 "
        "/ AS Fig. 5.",
    ),
    SolverOption(
        "gap_tol",
        "float >= 0",
        "Optional early stop: also stop when the relative duality gap (P - D) / P is "
        "<= gap_tol (0 disables it, so that tol alone decides).  MultiPrototypeSVC: "
        "the tolerance of the final convex solve, with tol.",
    ),
    SolverOption(
        "threshold",
        "'mean', 'max', 'exp', 'linear' or 'log'",
        "Per-round threshold on V_p of the one-pass batch solve (inner_steps=0, or "
        "the linear explicit-prototype rounds): AS's MEAN / MAX (threshold_fraction "
        "* max) or CS's cooling schemes.",
    ),
    SolverOption(
        "threshold_fraction",
        "float in [0, 1]",
        "Fraction of the largest value used by threshold='max' (AS 2005 §5.3's mu).",
    ),
    SolverOption(
        "batch_sweeps",
        "int >= 1",
        "Sweeps over a batch in one round of the one-pass batch solve.  "
        "MultiPrototypeSVC: None is 1, except 20 for the final convex solve on the "
        "linear fast path.",
    ),
    SolverOption(
        "inner_steps",
        "float >= 0",
        "The coordinator's working-set solve: at most this many per-pattern "
        "optimizations per batch row, by re-selection (the most violated first); 0 "
        "optimizes the batch once in order instead.  MultiPrototypeSVC: None is 20 on "
        "the kernel path and 0 on the linear fast path.",
    ),
    SolverOption(
        "class_batch", "int >= 1", "ScatterSVC: candidates per class and side in a working set."
    ),
    SolverOption(
        "fast_linear",
        "bool",
        "MultiPrototypeSVC: keep explicit prototypes W for linear kernels ('linear' "
        "or 'poly' of degree 1) and score by W x (False: the kernel path; the same "
        "model up to rounding).",
    ),
    SolverOption(
        "linear_solver",
        "'auto', 'sequential' or 'rounds'",
        "How a linear kernel on in-memory rows is solved: 'sequential', the "
        "sequential dual method of Keerthi et al. (2008) on explicit prototypes in "
        "this process (max_iter then bounds passes); 'rounds', the batched rounds of "
        "the partition engine that Dask clusters and stores use; 'auto', "
        "'sequential' where it applies.",
    ),
    SolverOption(
        "n_partitions",
        "int >= 1 or None",
        "Row partitions (None: one per thread / worker thread).  The partitioning is "
        "part of the solver's trajectory: set it for the same model everywhere.",
    ),
    SolverOption(
        "data_in_memory",
        "'auto', True or False",
        "Whether partitions hold their rows of a zarr store in memory.  False "
        "re-reads them chunk by chunk every time (data larger than the workers' "
        "memory); 'auto' streams when a worker's partitions would take over a quarter "
        "of its memory limit.",
    ),
    SolverOption(
        "disk_cache_size",
        "'auto' or float >= 0 (MB)",
        "Budget of the on-disk zarr tier of the kernel-column cache.  'auto': 4096 "
        "MB, used only by partitions that stream their rows from a store; a number: "
        "used by every partition; 0 disables it.",
    ),
    SolverOption(
        "cache_dir",
        "str or None",
        "Directory of the on-disk column cache (a private temporary directory is made "
        "inside and removed after training); None: the system temporary directory.",
    ),
)

_CS_COMMON = {
    "optimizer": "exact",
    "threshold": "mean",
    "threshold_fraction": 0.5,
    "n_partitions": None,
}
_SMO = {"pair_selection": "wss2", "batch_size": 128, "n_partitions": None}

#: estimator -> {option: default}; the options an estimator takes are the keys of its entry.
DEFAULTS: dict[str, dict] = {
    "MulticlassSVC": {
        "batch_size": None,
        "pattern_selection": "bmg",
        "gap_tol": 0.0,
        **_CS_COMMON,
        "batch_sweeps": 1,
        "inner_steps": 20.0,
        "linear_solver": "auto",
        "data_in_memory": "auto",
        "disk_cache_size": "auto",
        "cache_dir": None,
    },
    "MultiPrototypeSVC": {
        "batch_size": None,
        "pattern_selection": "kkt",
        "gap_tol": 1e-2,
        **_CS_COMMON,
        "batch_sweeps": None,
        "inner_steps": None,
        "fast_linear": True,
        "linear_solver": "auto",
    },
    "ScatterSVC": {
        "batch_size": 1000,
        "pair_selection": "wss2",
        "class_batch": 4,
        "n_partitions": None,
    },
    "BinarySVC": dict(_SMO),
    "OneVsRestSVC": dict(_SMO),
    "OneVsOneSVC": dict(_SMO),
}


def defaults_of(estimator: str) -> dict:
    """A fresh ``{option: default}`` of ``estimator`` (empty for an estimator without
    options)."""
    return dict(DEFAULTS.get(estimator, {}))


def table_of(estimator: str, indent: str = "    ") -> str:
    """The numpydoc text of ``estimator``'s ``solver_options`` parameter: one entry per option
    with its values, default and meaning (what the docstrings show)."""
    import textwrap

    defaults = DEFAULTS[estimator]
    lines = [
        f"{indent}solver_options : dict or None, default=None",
        *textwrap.wrap(
            "How the solver works inside; no SVC user needs these.  Keys (an "
            "unknown key or a bad value raises ValueError naming it; missing "
            "keys take their defaults; the dict is never changed):",
            96 - 2 * len(indent),
            initial_indent=2 * indent,
            subsequent_indent=2 * indent,
        ),
        "",
    ]
    for opt in OPTIONS:
        if opt.name not in defaults:
            continue
        lines += textwrap.wrap(
            f"- ``{opt.name}`` ({opt.values}; default ``{defaults[opt.name]!r}``): {opt.meaning}",
            100 - 2 * len(indent),
            initial_indent=2 * indent,
            subsequent_indent=2 * indent + "  ",
            break_on_hyphens=False,
        )
    return "\n".join(lines) + "\n"
