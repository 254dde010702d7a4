"""``dmcsvm predict MODEL DATA -o OUT`` and ``dmcsvm evaluate MODEL DATA``.

Prediction goes through the estimator's own ``predict``/``decision_function``: given a store it
runs chunk-parallel (on the cluster of ``--scheduler`` / ``--local-workers``, else on local
threads) and never gathers the data in one place.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from ._cluster import add_cluster_options, check_cluster_options, cluster_client
from ._inputs import (
    add_input_options,
    as_store,
    fits_stores,
    gram_rows,
    is_precomputed,
    labels_of,
    read_arrays,
)
from ._outputs import add_overwrite_option, atomic_file, check_output
from ._usage import stderr_is_tty


def predictions(model, info, with_labels=False, decision=False, client=None, proba=False):
    """``(labels, decision values or None, true labels or None)`` of a store; with
    ``proba=True`` the class probabilities (``predict_proba``) in place of decision values."""
    params = model.get_params(deep=False)
    if client is not None and "client" in params:
        model.set_params(client=client)
    try:
        if fits_stores(model):
            X = info.url
        else:
            X, _ = read_arrays(info)
            if is_precomputed(model):
                X = gram_rows(X, model.n_features_in_, info.url)
        pred = np.asarray(model.predict(X))
        if proba:
            D = np.asarray(model.predict_proba(X))
        else:
            D = np.asarray(model.decision_function(X)) if decision else None
    finally:
        if client is not None and "client" in params:
            model.set_params(client=params["client"])
    y = labels_of(info) if with_labels else None
    return pred, D, y


def _fmt(v):
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    return str(v)


def add_parsers(sub):
    p = sub.add_parser(
        "predict",
        help="predict labels (and decision values) with a saved model",
        description="Predict the labels of DATA with a model written by dmcsvm "
        "train; a store is predicted chunk by chunk (on the cluster "
        "of --scheduler / --local-workers, else on local threads).",
    )
    p.add_argument("model", help="model file written by dmcsvm train")
    p.add_argument("data", help="a dmcsvm store or a LIBSVM/CSV/.npy file")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        help="labels, one per line (with --decision-values: label then the values)",
    )
    add_overwrite_option(p)
    p.add_argument(
        "--decision-values",
        action="store_true",
        help="also write the decision values; the first line names the columns",
    )
    p.add_argument(
        "--probability",
        action="store_true",
        help="also write the class probabilities (label, then one column per class, "
        "named on the first line); the model must be trained with --probability",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar while converting a file (default: when stderr is a terminal)",
    )
    add_cluster_options(p)
    add_input_options(p, brief=True)
    p.set_defaults(func=run_predict)
    e = sub.add_parser(
        "evaluate",
        help="accuracy, confusion matrix and per-class report of a model on labelled data",
    )
    e.add_argument("model", help="model file written by dmcsvm train")
    e.add_argument("data", help="a dmcsvm store or a LIBSVM/CSV/.npy file, with labels")
    e.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    add_overwrite_option(e, "the --json file")
    add_cluster_options(e)
    add_input_options(e, brief=True)
    e.set_defaults(func=run_evaluate)


def _n_features(model):
    """The columns the data must have: the model's features, or for a precomputed kernel
    LIBSVM's serial column and one kernel value per training row (checked by gram_rows)."""
    return None if is_precomputed(model) else model.n_features_in_


def _load(a):
    from ..model_io import load_model

    check_cluster_options(a)
    return load_model(a.model)


def _fast(a):
    """A :class:`~._fast_predict.FastModel` of the model file when the prediction runs in this
    process and the model is of a kind it computes (no scikit-learn import), else None."""
    check_cluster_options(a)
    if a.scheduler or a.local_workers:
        return None
    from ._fast_predict import fast_model

    return fast_model(a.model)


def _fast_predictions(fast, info, a):
    """``(labels, values)`` by the FastModel, or None where it leaves the input to the
    estimator (which then also gives its error messages)."""
    from ._fast_predict import Unsupported

    try:
        X = None if fast.accepts_stores else read_arrays(info)[0]
        return fast.predictions(info, decision=a.decision_values, proba=a.probability, X=X)
    except Unsupported:
        return None


def run_predict(a) -> int:
    check_output(a.output, overwrite=a.overwrite)
    model = _fast(a) or _load(a)
    if a.probability:
        from ._usage import UsageError

        if a.decision_values:
            raise UsageError("--probability and --decision-values cannot be combined")
        if not (
            model.probability if hasattr(model, "predictions") else hasattr(model, "predict_proba")
        ):
            raise UsageError(f"{a.model} has no probabilities: train it with --probability")
    progress = stderr_is_tty() if a.progress is None else a.progress
    with (
        as_store(a.data, a, n_features=_n_features(model), progress=progress) as info,
        cluster_client(a) as client,
    ):
        out = _fast_predictions(model, info, a) if hasattr(model, "predictions") else None
        if out is None:
            if hasattr(model, "predictions"):
                model = _load(a)
            pred, D, _ = predictions(
                model, info, decision=a.decision_values, client=client, proba=a.probability
            )
        else:
            pred, D = out
    with atomic_file(a.output) as fh:
        if D is not None:
            names = [_fmt(c) for c in model.classes_]
            if D.ndim == 1:
                cols = ["f"]
            elif D.shape[1] == len(names) or a.probability:
                cols = names
            else:  # decision_function_shape='ovo': one column per pair i<j
                cols = [
                    f"{names[i]}/{names[j]}"
                    for i in range(len(names))
                    for j in range(i + 1, len(names))
                ]
            fh.write("label " + " ".join(cols) + "\n")
            D2 = D.reshape(len(pred), -1)
            for lab, row in zip(pred, D2, strict=False):
                fh.write(_fmt(lab) + " " + " ".join(repr(float(v)) for v in row) + "\n")
        else:
            for lab in pred:
                fh.write(_fmt(lab) + "\n")
    print(f"predicted {len(pred)} patterns; written to {a.output}")
    return 0


def evaluation(y, pred, classes) -> dict:
    """Accuracy, confusion matrix (rows: true class, columns: predicted) and per-class
    precision / recall / F1 / support with their macro and weighted averages, from
    scikit-learn's ``confusion_matrix`` and ``classification_report``; ``report`` is the
    latter's text."""
    from sklearn.metrics import classification_report, confusion_matrix

    labels = list(classes)
    extra = [
        c
        for c in np.unique(np.asarray(y, dtype=object).astype(str))
        if c not in {str(v) for v in labels}
    ]
    if extra:
        from ._usage import UsageError

        raise UsageError(f"the data has labels the model never saw: {', '.join(extra[:5])}")
    names = [_fmt(c) for c in labels]
    cm = confusion_matrix(y, pred, labels=labels)
    kw = {"labels": labels, "target_names": names, "zero_division": 0}
    rep = classification_report(y, pred, output_dict=True, **kw)

    def row(d):
        return {
            "precision": float(d["precision"]),
            "recall": float(d["recall"]),
            "f1": float(d["f1-score"]),
            "support": int(d["support"]),
        }

    return {
        "n": int(len(y)),
        "accuracy": float(np.mean(np.asarray(pred) == np.asarray(y))),
        "classes": names,
        "confusion_matrix": cm.tolist(),
        "per_class": [{"class": c, **row(rep[c])} for c in names],
        "macro_avg": row(rep["macro avg"]),
        "weighted_avg": row(rep["weighted avg"]),
        "_report": classification_report(y, pred, digits=4, **kw),
    }


def run_evaluate(a) -> int:
    if a.json:
        check_output(a.json, overwrite=a.overwrite)
    model = _load(a)
    with as_store(a.data, a, n_features=_n_features(model)) as info, cluster_client(a) as client:
        pred, _, y = predictions(model, info, with_labels=True, client=client)
    res = evaluation(y, pred, model.classes_)
    names = res["classes"]
    w = max(6, max(len(c) for c in names) + 1)
    print(
        f"accuracy {res['accuracy']:.4f} ({int(round(res['accuracy'] * res['n']))} of {res['n']})"
    )
    print("confusion matrix (rows: true class, columns: predicted)")
    print(" " * w + "".join(f"{c:>{w}}" for c in names))
    for c, row in zip(names, res["confusion_matrix"], strict=False):
        print(f"{c:>{w}}" + "".join(f"{v:>{w}d}" for v in row))
    print()
    print(res.pop("_report").rstrip("\n"))
    if a.json:
        with atomic_file(a.json) as fh:
            json.dump(res, fh, indent=1)
    return 0
