"""``dmcsvm demo``: train and evaluate on scikit-learn's bundled digits (works anywhere, no
download)."""

from __future__ import annotations

import json
import logging
import time

import numpy as np

from ..runtime_params import CLI_OPTIONS
from ._params import add_param_options, estimator_params, param_defaults, solver_option_names
from ._warmup import start_warmup

_log = logging.getLogger(__name__)

#: where the demo's defaults differ from MulticlassSVC's, and why (said in --help): a first run
#: on digits should be quick and accurate
DEMO_DEFAULTS = {
    "C": (10.0, "digits wants a larger C"),
    "gap_tol": (1e-2, "a first run stops at a 1% duality gap"),
    "batch_size": (1000, "digits has 1347 training rows"),
}


def _model_from_args(a):
    from ..estimators import MulticlassSVC

    return MulticlassSVC(**estimator_params(a), verbose=a.verbose)


def _add_model_args(p):
    """One option per parameter of MulticlassSVC, as ``dmcsvm train`` makes them, but those of
    where it runs (the demo starts its own cluster) and with :data:`DEMO_DEFAULTS`."""
    from ..estimators import MulticlassSVC

    sig = {**param_defaults(MulticlassSVC), **solver_option_names(MulticlassSVC)}
    g = p.add_argument_group("parameters of MulticlassSVC (as in the Python API and dmcsvm train)")
    add_param_options(
        g,
        MulticlassSVC,
        MulticlassSVC,
        skip=CLI_OPTIONS,
        defaults={k: v for k, (v, _) in DEMO_DEFAULTS.items()},
        notes={
            k: f"the demo's: {why}; MulticlassSVC's is {sig[k]!r}"
            for k, (_, why) in DEMO_DEFAULTS.items()
        },
    )
    g.add_argument(
        "--verbose", action="store_true", help="show a progress bar of the rounds (default: off)"
    )


def _report(model, fit_s, pred_s, acc, n_train, n_test, name):
    out = {
        "dataset": name,
        "n_train": n_train,
        "n_test": n_test,
        "accuracy": round(float(acc), 4),
        "fit_seconds": round(fit_s, 3),
        "predict_seconds": round(pred_s, 3),
        "support_vectors": int(len(model.support_)),
        "support_per_class": [int(c) for c in model.n_support_],
        "rounds": int(model.n_iter_),
        "final_gap": float(model.history_["gap"][-1]),
    }
    print(
        f"dataset          {name} ({n_train} train / {n_test} test, "
        f"{model.n_features_in_} features, {len(model.classes_)} classes)"
    )
    print(f"test accuracy    {acc:.4f}")
    print(
        f"fit time         {fit_s:.2f} s ({model.n_iter_} rounds, final gap {out['final_gap']:.2e})"
    )
    print(f"predict time     {pred_s:.3f} s")
    print(
        f"support vectors  {out['support_vectors']} of {n_train} "
        f"(per class {out['support_per_class']})"
    )
    return out


def cmd_demo(a) -> int:
    """Train and evaluate on scikit-learn's bundled digits (works anywhere, no download)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
    model = _model_from_args(a)
    import os

    workers = a.local_workers or min(os.cpu_count() or 1, 4)
    options = model.solver_options or {}
    if options.get("n_partitions") is None:
        # the model depends on the row partitioning (shrinking decisions are per partition):
        # both ways of running the demo use the same partitions, so they train the same model
        model.set_params(solver_options={**options, "n_partitions": workers})
    where = "in-process threads"
    t = time.perf_counter()
    warm = None if (a.in_process or a.no_warmup) else start_warmup(model, Xtr, ytr)
    if a.in_process:
        model.fit(Xtr, ytr)
    else:
        # the product's main job: a LocalCluster of worker processes started for this run
        from distributed import Client, LocalCluster

        if warm is not None:
            warm.join()
            _log.info(
                "numba code ready (compiled once here, cached for the workers) after %.1f s",
                time.perf_counter() - t,
            )
        with (
            LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster,
            Client(cluster) as client,
        ):
            where = f"LocalCluster, {workers} workers x 1 thread"
            _log.info("started %s after %.1f s", where, time.perf_counter() - t)
            t = time.perf_counter()
            model.set_params(client=client).fit(Xtr, ytr)
            fit_s = time.perf_counter() - t
            t = time.perf_counter()
            acc = float(np.mean(model.predict(Xte) == yte))
            pred_s = time.perf_counter() - t
        model.set_params(client=None)
    if a.in_process:
        fit_s = time.perf_counter() - t
        t = time.perf_counter()
        acc = float(np.mean(model.predict(Xte) == yte))
        pred_s = time.perf_counter() - t
    out = _report(model, fit_s, pred_s, acc, len(ytr), len(yte), "digits (scikit-learn bundled)")
    out["executor"] = where
    print(f"trained on       {where}")
    if a.json:
        print(json.dumps(out))
    return 0


def add_parser(sub, full=True):
    """The ``demo`` sub-command; ``full=False``: its name and help only (another command runs)."""
    d = sub.add_parser("demo", help="train and evaluate on scikit-learn's bundled digits")
    if not full:
        return d
    _add_model_args(d)
    d.add_argument("--json", action="store_true", help="also print the results as JSON")
    d.add_argument(
        "--in-process",
        dest="in_process",
        action="store_true",
        help="train on threads in this process instead of a LocalCluster",
    )
    d.add_argument(
        "--no-warmup",
        dest="no_warmup",
        action="store_true",
        help="do not compile numba code in this process while the LocalCluster "
        "starts (each worker then compiles what it needs itself on a first run)",
    )
    d.add_argument(
        "--local-workers",
        dest="local_workers",
        type=int,
        default=None,
        help="worker processes of the LocalCluster; an integer >= 1 "
        "(default: the cores, at most 4)",
    )
    d.set_defaults(func=cmd_demo)
    return d
