"""Parameters renamed or moved between dmcsvm versions, so that model files and checkpoints written
before a change are read with today's names, and old constructor keywords still work (with a
``FutureWarning``) for a release.

* 0.1.0 (model format 2) called ``MulticlassSVC`` / ``MultiPrototypeSVC``'s ``threshold_fraction``
  ``mu``, the name ``ScatterSVC`` keeps for its bound on the coefficients (one name per meaning).
* 0.3.0 moved the solver's internals into one ``solver_options`` dict
  (:mod:`dmcsvm.solver_options`): :data:`MOVED` lists, per estimator, each former constructor
  parameter and its key there.  ``selection`` became ``pattern_selection`` (Crammer-Singer
  family: kkt / amg / bmg) or ``pair_selection`` (SMO family: wss2 / mvp), and
  MultiPrototypeSVC's ``solver`` became ``linear_solver``.
"""

from __future__ import annotations

RENAMED = {
    "MulticlassSVC": {"mu": "threshold_fraction"},
    "MultiPrototypeSVC": {"mu": "threshold_fraction"},
}

_CS = {
    "optimizer": "optimizer",
    "selection": "pattern_selection",
    "threshold": "threshold",
    "threshold_fraction": "threshold_fraction",
    "gap_tol": "gap_tol",
    "batch_size": "batch_size",
    "batch_sweeps": "batch_sweeps",
    "n_partitions": "n_partitions",
}
_SMO = {"selection": "pair_selection", "batch_size": "batch_size", "n_partitions": "n_partitions"}

#: estimator -> {former constructor parameter: its key in ``solver_options``} (0.3.0)
MOVED = {
    "MulticlassSVC": {
        **_CS,
        "data_in_memory": "data_in_memory",
        "disk_cache_size": "disk_cache_size",
        "cache_dir": "cache_dir",
    },
    "MultiPrototypeSVC": {**_CS, "fast_linear": "fast_linear", "solver": "linear_solver"},
    "ScatterSVC": {**_SMO, "class_batch": "class_batch"},
    "BinarySVC": dict(_SMO),
    "OneVsRestSVC": dict(_SMO),
    "OneVsOneSVC": dict(_SMO),
}

#: the release that stops taking the former names in constructors
REMOVED_IN = "0.4.0"


def moved_message(estimator: str, old: str) -> str:
    """The ``FutureWarning`` of ``estimator(old=...)``."""
    new = MOVED[estimator][old]
    what = f"solver_options={{'{new}': ...}}"
    renamed = "" if new == old else f" (renamed {new!r})"
    return (
        f"{estimator}({old}=...) is deprecated since 0.3.0 and will be removed in "
        f"{REMOVED_IN}: pass {what} instead{renamed}"
    )


def move_options(estimator: str, params: dict) -> tuple[dict, dict]:
    """``(params without the former names, {solver option: value} of those names)``; a key
    already in ``params['solver_options']`` wins over its former name."""
    moved = MOVED.get(estimator, {})
    rest = {k: v for k, v in params.items() if k not in moved}
    options = {moved[k]: v for k, v in params.items() if k in moved}
    return rest, options


def upgrade_params(estimator: str, params: dict) -> dict:
    """``params`` of ``estimator`` as written by an older dmcsvm, with today's names (a name that
    is already today's is kept): 0.1's ``mu`` is ``threshold_fraction``, and the parameters
    that 0.3 moved go into ``solver_options`` under their keys there."""
    renamed = RENAMED.get(estimator, {})
    out = {}
    for k, v in params.items():
        new = renamed.get(k, k)
        if new != k and new in params:
            continue  # both names present: today's wins
        out[new] = v
    out, options = move_options(estimator, out)
    if options:
        given = out.get("solver_options") or {}
        out["solver_options"] = {**options, **given}
    return out
