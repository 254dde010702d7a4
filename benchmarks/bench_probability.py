"""Probability quality of ``MulticlassSVC(probability=True)`` against scikit-learn.

For letter and usps (``--data-dir``, default ``../shared/data``) the same C and gamma='scale'
for every model:

- dmcsvm: MulticlassSVC trained on all training rows, and its out-of-fold decision values from
  the internal stratified 5-fold CV that ``probability=True`` runs; every candidate map is fitted
  on the same out-of-fold values and scored on the test set: multinomial logistic regression on
  all class scores (C_lr = 0.1, 1 and 100), one-vs-rest Platt scaling + normalisation (what
  ``CalibratedClassifierCV(method='sigmoid')`` does per class), and the map the estimator ships
  (``MULTICLASS_METHOD``);
- ``SVC(probability=True)`` (LIBSVM: one-vs-one Platt + pairwise coupling, internal 5-fold CV);
- ``CalibratedClassifierCV(SVC(), cv=5)`` (sigmoid, ensemble of 5).

Reported: test log-loss, Brier score, accuracy of ``argmax predict_proba`` and wall times; JSON
under ``benchmarks/results/`` and a table on stdout.  ``--n-train`` takes a stratified subset of
the training rows (the test in tests/test_probability.py uses 1500 / 1000 rows).

    python benchmarks/bench_probability.py [--datasets letter usps] [--n-train N] [--C 10]
"""

from __future__ import annotations

import time

import _report
import numpy as np
from _data import load_letter, load_usps, stratified_subset


def _scores(y, P, classes):
    from sklearn.metrics import log_loss

    idx = np.searchsorted(classes, y)
    onehot = np.zeros_like(P)
    onehot[np.arange(len(y)), idx] = 1.0
    return {
        "log_loss": float(log_loss(y, P, labels=classes)),
        "brier": float(np.mean(np.sum((P - onehot) ** 2, axis=1))),
        "accuracy": float(np.mean(classes[P.argmax(axis=1)] == y)),
    }


def run_dataset(name, Xtr, ytr, Xte, yte, C, n_jobs):
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.svm import SVC

    from dmcsvm import MulticlassSVC
    from dmcsvm.estimators import _calibration as cal

    rows = []
    Xtr32, Xte32 = Xtr.astype(np.float32), Xte.astype(np.float32)
    est = MulticlassSVC(C=C, n_jobs=n_jobs, random_state=0)
    t = time.perf_counter()
    est.fit(Xtr32, ytr)
    t_fit = time.perf_counter() - t
    t = time.perf_counter()
    D_oof, labels = cal.out_of_fold_decisions(est, Xtr32, ytr, {})
    t_cv = time.perf_counter() - t
    classes, y_idx = np.unique(labels, return_inverse=True)
    D_test = est.decision_function(Xte32)
    acc_dec = float(np.mean(est.predict(Xte32) == yte))
    for label, method, c_lr in [
        ("dmcsvm multinomial (C_lr=0.1)", "multinomial", 0.1),
        ("dmcsvm multinomial (C_lr=1)", "multinomial", 1.0),
        ("dmcsvm multinomial (C_lr=100)", "multinomial", 100.0),
        ("dmcsvm one-vs-rest Platt + normalise", "ovr_sigmoid", None),
    ]:
        t = time.perf_counter()
        m, coef, icpt = cal.fit_calibration(D_oof, y_idx, len(classes), method=method, C=c_lr)
        t_map = time.perf_counter() - t
        P = cal.apply_calibration(m, coef, icpt, D_test)
        rows.append(
            {
                "model": label,
                **_scores(yte, P, classes),
                "fit_seconds": round(t_fit + t_cv + t_map, 2),
                "shipped": method == cal.MULTICLASS_METHOD
                and (c_lr or cal.MULTINOMIAL_C) == cal.MULTINOMIAL_C,
            }
        )
    rows.append(
        {
            "model": "dmcsvm decision argmax (no probabilities)",
            "log_loss": None,
            "brier": None,
            "accuracy": acc_dec,
            "fit_seconds": round(t_fit, 2),
        }
    )
    print(f"  dmcsvm: fit {t_fit:.1f} s, 5-fold calibration {t_cv:.1f} s", flush=True)

    t = time.perf_counter()
    svc = SVC(C=C, gamma="scale", probability=True, random_state=0).fit(Xtr, ytr)
    t_svc = time.perf_counter() - t
    rows.append(
        {
            "model": "SVC(probability=True)",
            **_scores(yte, svc.predict_proba(Xte), svc.classes_),
            "fit_seconds": round(t_svc, 2),
        }
    )
    print(f"  SVC(probability=True): {t_svc:.1f} s", flush=True)
    t = time.perf_counter()
    ccv = CalibratedClassifierCV(SVC(C=C, gamma="scale"), cv=5).fit(Xtr, ytr)
    t_ccv = time.perf_counter() - t
    rows.append(
        {
            "model": "CalibratedClassifierCV(SVC(), cv=5)",
            **_scores(yte, ccv.predict_proba(Xte), ccv.classes_),
            "fit_seconds": round(t_ccv, 2),
        }
    )
    print(f"  CalibratedClassifierCV: {t_ccv:.1f} s", flush=True)
    ref = rows[-1]["log_loss"]
    for r in rows:
        r["log_loss_vs_ccv"] = None if r["log_loss"] is None else round(r["log_loss"] / ref, 4)
    return {
        "dataset": name,
        "n_train": int(len(ytr)),
        "n_test": int(len(yte)),
        "C": C,
        "rows": rows,
    }


def main(argv=None):
    ap = _report.parser(__doc__, data_dir=True)
    ap.add_argument("--datasets", nargs="+", default=["letter", "usps"])
    ap.add_argument("--n-train", type=int, default=None, help="stratified training subset")
    ap.add_argument("--C", type=float, default=10.0)
    ap.add_argument("--n-jobs", type=int, default=2)
    ap.add_argument(
        "--out",
        default=None,
        help="result JSON (default results/probability.json, or probability_nN.json "
        "with --n-train N); its markdown beside it",
    )
    a = ap.parse_args(argv)
    run = _report.Run(__file__, "probability", _report.settings_of(a))
    loaders = {"letter": load_letter, "usps": load_usps}
    results = []
    for name in a.datasets:
        Xtr, ytr, Xte, yte = loaders[name](a.data_dir)
        if a.n_train:
            Xtr, ytr = stratified_subset(Xtr, ytr, a.n_train, random_state=0)
        print(f"{name}: {len(ytr)} train / {len(yte)} test", flush=True)
        res = run_dataset(name, Xtr, ytr, Xte, yte, a.C, a.n_jobs)
        results.append(res)
        print("\n".join(table(res)), flush=True)
    out = a.out or str(
        _report.RESULTS_DIR
        / ("probability.json" if not a.n_train else f"probability_n{a.n_train}.json")
    )
    env = run.envelope(results)
    _report.write(env, out, markdown(env))
    print(f"written {out}")


def table(res) -> list[str]:
    """The rows of one data set: log-loss (and against CalibratedClassifierCV), Brier, accuracy."""

    def dash(v, fmt):
        return "-" if v is None else format(v, fmt)

    return _report.md_table(
        ["model", "log-loss", "vs CCV", "Brier", "accuracy", "fit s"],
        [
            [
                r["model"],
                dash(r["log_loss"], ".4f"),
                dash(r["log_loss_vs_ccv"], ".3f"),
                dash(r["brier"], ".4f"),
                f"{r['accuracy']:.4f}",
                f"{r['fit_seconds']:.1f}",
            ]
            for r in res["rows"]
        ],
    )


def markdown(out) -> str:
    L = [
        "# Probability quality: MulticlassSVC(probability=True) vs scikit-learn",
        "",
        _report.machine_line(out),
        _report.load_line(out),
        "",
    ]
    for res in out["results"]:
        L += [
            (
                f"## {res['dataset']} ({res['n_train']} train / {res['n_test']} test, "
                f"C={res['C']:g})"
            ),
            "",
            *table(res),
            "",
        ]
    return "\n".join(L)


if __name__ == "__main__":
    main()
