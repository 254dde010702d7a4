"""``solver_options``: validated, with defaults from :mod:`dmcsvm.solver_options`, and the former
constructor names of its keys taken with a ``FutureWarning`` (:mod:`dmcsvm.param_history`).

Constraints are scikit-learn's (the ones ``_parameter_constraints`` uses), so a bad value gets
the same kind of message as a bad parameter, naming the key: ``The 'batch_size' entry of
MulticlassSVC's solver_options must be an int in the range [1, inf). Got 0 instead.``
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping

from sklearn.utils._param_validation import InvalidParameterError, make_constraint

from ..numerics import grouped_smo as sc
from ..numerics import pattern as pt
from ..numerics.selection import THRESHOLDS
from ..param_history import MOVED, move_options, moved_message
from ..solver_options import DEFAULTS, defaults_of

_PATH = [None, str, os.PathLike]


def _constraints(choices, integers, reals, one_of):
    """``{option: constraints}`` shared by every estimator, and the per-estimator differences
    (the helpers of :mod:`._base`, passed in: this module is imported by it)."""
    shared = {
        "batch_size": [integers(1)],
        "pattern_selection": [choices(*pt.SELECTIONS)],
        "pair_selection": [choices(*sc.SELECTIONS)],
        "optimizer": [choices(*pt.OPTIMIZERS)],
        "gap_tol": [reals(0, closed="left")],
        "threshold": [choices(*THRESHOLDS)],
        "threshold_fraction": [reals(0, 1, closed="both")],
        "batch_sweeps": [integers(1)],
        "inner_steps": [reals(0, closed="left")],
        "class_batch": [integers(1)],
        "fast_linear": ["boolean"],
        "linear_solver": [choices("auto", "sequential", "rounds")],
        "n_partitions": [integers(1), None],
        "data_in_memory": [choices("auto"), "boolean"],
        "disk_cache_size": [choices("auto"), reals(0, closed="left")],
        "cache_dir": _PATH,
    }
    smo = {"batch_size": [integers(2)]}
    per = {
        "MulticlassSVC": {"batch_size": [integers(1), None]},
        "MultiPrototypeSVC": {
            "batch_size": [integers(1), None],
            "batch_sweeps": [integers(1), None],
            "inner_steps": [reals(0, closed="left"), None],
        },
        "ScatterSVC": smo,
        "BinarySVC": smo,
        "OneVsRestSVC": smo,
        "OneVsOneSVC": smo,
    }
    return {
        name: {k: per.get(name, {}).get(k, shared[k]) for k in DEFAULTS[name]} for name in DEFAULTS
    }


_CONSTRAINTS: dict = {}


def options_key(est) -> str:
    """The entry of :data:`~dmcsvm.solver_options.DEFAULTS` of ``est`` (an estimator or its
    class): its class's name, or the first base class that has one (a user's subclass)."""
    cls = est if isinstance(est, type) else type(est)
    for c in cls.__mro__:
        if c.__name__ in DEFAULTS:
            return c.__name__
    raise TypeError(f"{cls.__name__} has no solver options")


def _check(name: str, key: str, value) -> None:
    if not _CONSTRAINTS:
        from ._base import choices, integers, one_of, reals

        _CONSTRAINTS.update(_constraints(choices, integers, reals, one_of))
    cons = [make_constraint(c) for c in _CONSTRAINTS[name][key]]
    if any(c.is_satisfied_by(value) for c in cons):
        return
    shown = [c for c in cons if not c.hidden]
    text = (
        str(shown[0])
        if len(shown) == 1
        else f"{', '.join(str(c) for c in shown[:-1])} or {shown[-1]}"
    )
    raise InvalidParameterError(
        f"The {key!r} entry of {name}'s solver_options must be {text}. Got {value!r} instead."
    )


def resolve(est) -> dict:
    """``est.solver_options`` checked (unknown keys and bad values raise, naming them) and
    completed with the defaults; a new dict (the parameter is never changed)."""
    name = options_key(est)
    given = getattr(est, "solver_options", None)
    if given is None:
        given = {}
    if not isinstance(given, Mapping):
        raise InvalidParameterError(
            f"The 'solver_options' parameter of {name} must be an "
            f"instance of 'dict' or None. Got {given!r} instead."
        )
    defaults = defaults_of(name)
    unknown = [k for k in given if k not in defaults]
    if unknown:
        k = unknown[0]
        moved = MOVED.get(name, {})
        hint = f" (it is called {moved[k]!r} now)" if moved.get(k, k) != k else ""
        raise ValueError(
            f"{name}'s solver_options has no key {k!r}{hint}; its keys are "
            f"{', '.join(map(repr, defaults))}"
        )
    for k, v in given.items():
        _check(name, k, v)
    return {**defaults, **given}


def take_former_names(est, former: dict) -> None:
    """Constructor keywords of ``est`` that were parameters before 0.3 (:data:`MOVED`) go into a
    new ``solver_options`` dict, each with a ``FutureWarning``; any other keyword is the
    ``TypeError`` Python raises for it.  A key already in ``solver_options`` wins."""
    if not former:
        return
    name = options_key(est)
    moved = MOVED.get(name, {})
    for k in former:
        if k not in moved:
            raise TypeError(
                f"{type(est).__name__}.__init__() got an unexpected keyword argument {k!r}"
            )
    for k in former:
        warnings.warn(moved_message(name, k), FutureWarning, stacklevel=4)
    _, options = move_options(name, former)
    est.solver_options = {**options, **(est.solver_options or {})}


def set_former_names(est, params: dict) -> dict:
    """``set_params`` keywords with the former names moved into ``solver_options`` (each with a
    ``FutureWarning``); the others as given."""
    name = options_key(est)
    moved = MOVED.get(name, {})
    former = {k: params[k] for k in params if k in moved}
    if not former:
        return params
    for k in former:
        warnings.warn(moved_message(name, k), FutureWarning, stacklevel=4)
    rest, options = move_options(name, params)
    base = rest.get("solver_options", est.solver_options) or {}
    rest["solver_options"] = {**base, **options}
    return rest
