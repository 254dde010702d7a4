"""dmcsvm: multiclass kernel SVMs (Crammer-Singer family, multi-prototype, mScatter, binary SMO)
trained in-process or on a Dask cluster, with data and kernel-row blocks in zarr."""

from __future__ import annotations

import importlib

__version__ = "0.3.0"

# Loaded on first use (PEP 562): `import dmcsvm` and the command line's `--help`, `--version`,
# `info` and `convert` then skip scikit-learn, SciPy's statistics and numba (seconds per process)
_LAZY = {
    "MulticlassSVC": "estimators",
    "MultiPrototypeSVC": "estimators",
    "ScatterSVC": "estimators",
    "BinarySVC": "estimators",
    "OneVsRestSVC": "estimators",
    "OneVsOneSVC": "estimators",
    "save": "model_io",
    "load": "model_io",
    "close_local_clusters": "engine.dask.local",
    "release_memory": "engine.kept_block",
}
_RENAMED = {"save": "save_model", "load": "load_model"}

__all__ = [
    "save",
    "load",
    "MulticlassSVC",
    "MultiPrototypeSVC",
    "ScatterSVC",
    "BinarySVC",
    "OneVsRestSVC",
    "OneVsOneSVC",
    "close_local_clusters",
    "release_memory",
    "__version__",
]


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'dmcsvm' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), _RENAMED.get(name, name))
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
