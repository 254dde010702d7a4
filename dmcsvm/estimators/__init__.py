"""scikit-learn estimators of dmcsvm, one module per formulation.

Each estimator's module is imported when the estimator is first asked for (PEP 562), so that
loading a saved ``MulticlassSVC`` to predict does not import the SMO family's solvers."""

from __future__ import annotations

import importlib

#: estimator -> its module
_MODULES = {
    "MulticlassSVC": "multiclass",
    "MultiPrototypeSVC": "multiprototype",
    "ScatterSVC": "scatter",
    "BinarySVC": "binary",
    "OneVsRestSVC": "binary",
    "OneVsOneSVC": "binary",
}

__all__ = [
    "MulticlassSVC",
    "MultiPrototypeSVC",
    "ScatterSVC",
    "BinarySVC",
    "OneVsRestSVC",
    "OneVsOneSVC",
]


def __getattr__(name):
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_MODULES[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
