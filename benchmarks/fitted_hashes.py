"""sha256 of every fitted array of every estimator on small fixed data, as JSON.

Run before and after a change that must not move a model (a refactor, a renamed parameter):
the two outputs are equal when every fitted array, history column (timings left out), decision
value and probability is the same bit for bit::

    python benchmarks/fitted_hashes.py > before.json
    ... change ...
    python benchmarks/fitted_hashes.py > after.json && cmp before.json after.json

Each case is an estimator and its parameters, fitted on a fixed subset of scikit-learn's digits
or iris, in this process and, for a few, on a ``LocalCluster(processes=False)``.  The cases name
solver options by the parameter names of dmcsvm 0.2.0 (``selection``, ``batch_size``, ...);
:func:`make` passes them the way the installed dmcsvm takes them.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import sys
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_digits, load_iris

import dmcsvm

#: history columns that measure time, not the solve
_TIMING = re.compile(r"(^t_|elapsed|time|seconds)")


def make(cls, params: dict, options: dict | None = None):
    """``cls`` with ``params`` (0.2.0 names) and the solver ``options`` that 0.2.0 set only through
    the private ``_extra`` (``inner_steps``)."""
    accepts = "solver_options" in inspect.signature(cls).parameters
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        if accepts:
            so = dict(options or {})
            est = cls(**params, **({"solver_options": so} if so else {}))
        else:
            est = cls(**params)
            if options:
                est._extra = dict(options)
    return est


def _digest(v) -> str | dict | None:
    if v is None or isinstance(v, (bool, int, float, str)):
        return repr(v)
    if isinstance(v, (np.generic,)):
        return repr(v.item()) + ":" + str(v.dtype)
    if sp.issparse(v):
        v = v.tocsr()
        return {
            "data": _digest(v.data),
            "indices": _digest(v.indices),
            "indptr": _digest(v.indptr),
            "shape": repr(v.shape),
        }
    if isinstance(v, dict):
        return {str(k): _digest(x) for k, x in sorted(v.items()) if not _TIMING.search(str(k))}
    if isinstance(v, (list, tuple)):
        try:
            v = np.asarray(v)
        except Exception:  # noqa: BLE001 - ragged: hash every item
            return [_digest(x) for x in v]
    if isinstance(v, np.ndarray):
        if v.dtype == object:
            return [_digest(x) for x in v.tolist()]
        a = np.ascontiguousarray(v)
        h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode() + a.tobytes()).hexdigest()
        return h[:24]
    return type(v).__name__


def fitted(est, X_test) -> dict:
    """Digest of every public fitted attribute (``engine_stats_``: counters of the cache, not
    the model, left out) and of the decision values, predictions and probabilities."""
    out = {}
    for k in sorted(vars(est)):
        if k.endswith("_") and not k.startswith("_") and k != "engine_stats_":
            out[k] = _digest(getattr(est, k))
    out["decision_function(X_test)"] = _digest(np.asarray(est.decision_function(X_test)))
    out["predict(X_test)"] = _digest(np.asarray(est.predict(X_test)))
    if getattr(est, "probability", False):
        out["predict_proba(X_test)"] = _digest(est.predict_proba(X_test))
    return out


def cases():
    """(name, class, 0.2.0 parameters, _extra options, data name)."""
    M, P = dmcsvm.MulticlassSVC, dmcsvm.MultiPrototypeSVC
    out = []
    for opt in ("exact", "opt_kkt", "fixed_point", "basic", "all_pairs"):
        out.append((f"mc_rbf_opt_{opt}", M, {"optimizer": opt, "batch_size": 64}, None, "digits"))
    for sel in ("bmg", "amg", "kkt"):
        out.append((f"mc_rbf_sel_{sel}", M, {"selection": sel}, None, "digits"))
    out += [
        ("mc_rbf_default", M, {}, None, "digits"),
        ("mc_rbf_csr", M, {"C": 10.0}, None, "digits_csr"),
        (
            "mc_rbf_gap_noshrink",
            M,
            {"gap_tol": 1e-3, "shrinking": False, "batch_size": 100, "n_partitions": 3},
            None,
            "digits",
        ),
        (
            "mc_rbf_one_pass",
            M,
            {"batch_size": 50, "batch_sweeps": 2, "threshold": "max", "threshold_fraction": 0.3},
            {"inner_steps": 0.0},
            "digits",
        ),
        (
            "mc_poly_float64",
            M,
            {"kernel": "poly", "degree": 2, "kernel_dtype": "float64"},
            None,
            "digits",
        ),
        ("mc_linear", M, {"kernel": "linear", "C": 0.1}, None, "digits"),
        ("mc_linear_csr", M, {"kernel": "linear", "C": 0.1}, None, "digits_csr"),
        ("mc_precomputed", M, {"kernel": "precomputed"}, None, "iris_gram"),
        (
            "mc_ovo_weighted",
            M,
            {"decision_function_shape": "ovo", "class_weight": "balanced"},
            None,
            "iris",
        ),
        ("mc_probability", M, {"probability": True, "random_state": 0}, None, "iris"),
        ("mc_binary", M, {}, None, "iris2"),
        (
            "mp_rbf",
            P,
            {
                "kernel": "rbf",
                "gamma": "scale",
                "n_prototypes": 2,
                "max_epochs": 5,
                "random_state": 0,
            },
            None,
            "digits",
        ),
        (
            "mp_rbf_bmg_batch",
            P,
            {
                "kernel": "rbf",
                "gamma": "scale",
                "n_prototypes": 2,
                "max_epochs": 3,
                "selection": "bmg",
                "batch_size": 200,
                "batch_sweeps": 2,
                "random_state": 1,
            },
            None,
            "digits",
        ),
        (
            "mp_linear_sequential",
            P,
            {"n_prototypes": 3, "max_epochs": 10, "random_state": 0},
            None,
            "digits",
        ),
        (
            "mp_linear_rounds",
            P,
            {"n_prototypes": 2, "max_epochs": 5, "solver": "rounds", "random_state": 0},
            None,
            "digits",
        ),
        (
            "mp_linear_rounds_ws",
            P,
            {"n_prototypes": 2, "max_epochs": 5, "solver": "rounds", "random_state": 0},
            {"inner_steps": 20.0},
            "digits",
        ),
        (
            "mp_kernel_path_linear",
            P,
            {"n_prototypes": 2, "max_epochs": 3, "fast_linear": False, "random_state": 0},
            None,
            "iris",
        ),
        (
            "mp_probability",
            P,
            {"n_prototypes": 2, "max_epochs": 3, "probability": True, "random_state": 0},
            None,
            "iris",
        ),
        ("scatter_default", dmcsvm.ScatterSVC, {}, None, "digits"),
        (
            "scatter_mvp_rule2",
            dmcsvm.ScatterSVC,
            {"selection": "mvp", "test_rule": 2, "batch_size": 64, "class_batch": 2, "mu": 0.05},
            None,
            "digits",
        ),
        (
            "scatter_probability",
            dmcsvm.ScatterSVC,
            {"probability": True, "random_state": 0},
            None,
            "iris",
        ),
        ("binary_default", dmcsvm.BinarySVC, {}, None, "iris2"),
        ("binary_mvp", dmcsvm.BinarySVC, {"selection": "mvp", "batch_size": 2}, None, "iris2"),
        ("ovr_default", dmcsvm.OneVsRestSVC, {}, None, "digits"),
        (
            "ovr_probability",
            dmcsvm.OneVsRestSVC,
            {"probability": True, "random_state": 0},
            None,
            "iris",
        ),
        ("ovo_default", dmcsvm.OneVsOneSVC, {"n_partitions": 2}, None, "digits"),
        ("ovo_mvp", dmcsvm.OneVsOneSVC, {"selection": "mvp", "batch_size": 16}, None, "iris"),
    ]
    return out


#: cases also fitted on a LocalCluster(processes=False)
DASK_CASES = (
    "mc_rbf_default",
    "mc_rbf_gap_noshrink",
    "mp_rbf",
    "mp_linear_rounds",
    "scatter_default",
    "ovr_default",
    "ovo_default",
)


def data():
    d = load_digits()
    rng = np.random.RandomState(0)
    idx = rng.permutation(d.data.shape[0])
    X = d.data[idx] / 16.0
    y = d.target[idx]
    Xtr, ytr, Xte = X[:500], y[:500], X[500:700]
    iris = load_iris()
    i = rng.permutation(150)
    Xi, yi = iris.data[i], iris.target[i]
    two = yi != 0
    G = Xi[:100] @ Xi[:100].T
    return {
        "digits": (Xtr, ytr, Xte),
        "digits_csr": (sp.csr_matrix(Xtr), ytr, sp.csr_matrix(Xte)),
        "iris": (Xi[:100], yi[:100], Xi[100:]),
        "iris2": (Xi[two][:70], yi[two][:70], Xi[two][70:]),
        "iris_gram": (G, yi[:100], Xi[100:] @ Xi[:100].T),
    }


def main(with_dask: bool = True) -> dict:
    sets = data()
    out = {}
    for name, cls, params, options, dname in cases():
        X, y, Xt = sets[dname]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = make(cls, params, options).fit(X, y)
            out[name] = fitted(est, Xt)
        print(name, file=sys.stderr, flush=True)
    if with_dask:
        from distributed import Client, LocalCluster

        with (
            LocalCluster(
                n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
            ) as cluster,
            Client(cluster) as client,
        ):
            for name, cls, params, options, dname in cases():
                if name not in DASK_CASES:
                    continue
                X, y, Xt = sets[dname]
                kw = {"n_partitions": 2, **params, "client": client}
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    est = make(cls, kw, options).fit(X, y)
                    out["dask_" + name] = fitted(est, Xt)
                print("dask_" + name, file=sys.stderr, flush=True)
    return out


if __name__ == "__main__":
    json.dump(main("--no-dask" not in sys.argv), sys.stdout, indent=1, sort_keys=True)
    print()
