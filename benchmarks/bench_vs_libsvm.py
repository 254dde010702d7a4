"""dmcsvm.MulticlassSVC versus scikit-learn's SVC (LIBSVM, one-vs-one) in one process.

Both models get the same RBF kernel, C, gamma (a number, resolved once from the training data) and
a 200 MB kernel cache.  dmcsvm keeps its other defaults and runs with ``n_jobs=2`` on float32 input
(its fast path: float32 kernel columns and sgemm updates); SVC gets float64 input (LIBSVM converts
everything to double anyway).  Data sets:

* letter, usps, satimage, pendigits, dna (``../shared/data``, each with a README): the
  usual train/test splits, features scaled to [-1, 1] with the training min/max; C and gamma chosen
  by a SHORT SVC validation on a training subset (:func:`validate`: C in {1, 10, 100}, gamma in
  {1/4, 1, 4} x 1/(n_features X.var())), then fixed for both models;
* digits (scikit-learn bundled, ``--datasets digits``): ``X / 16``, stratified 75/25 split, C=10,
  gamma='scale' resolved once.

dmcsvm's precision is reported, not assumed: the relative duality gap and max psi of the last
round (every row unshrunk when ``n_active == n_train``), pattern optimizations per support vector
(every inner step of the coordinator's working-set solve, ``sum(history_['steps']) / n_SV``),
rounds and the per-round time split (coordinator solve / slowest partition / round, summed).
``--tol`` / ``--gap-tol`` set dmcsvm's stopping rule (default: its defaults).

Each fit / predict is timed ``--repeat`` times (default 1; the minimum is reported), dmcsvm's and
SVC's calls alternated (the VM's speed drifts within minutes), after an untimed warm-up fit on a
small subset, so that numba's compilation / cache loading and first-touch costs are not charged
to dmcsvm.  Writes a JSON (``--out``) and a markdown table next to it (``vs_libsvm.md``).

Goals tracked, per set: fit ratio dmcsvm/SVC <= 1.0, accuracy >= SVC's - 0.3 points,
relative duality gap <= 1e-3 with every row unshrunk, pattern optimizations per SV < 10.

``--defaults`` measures the way a user runs both (``MulticlassSVC()`` for ``SVC()``): every
parameter at its default on both sides (C=1, gamma='scale', dmcsvm's ``n_jobs=None``, its
default stopping rule and float32 kernel values), float64 numpy input as read, on every real
set with at least 2,000 training rows (letter, usps, satimage, pendigits, dna, shuttle,
optdigits, the MNIST test split 5,000 / 5,000); beside it dmcsvm with ``n_jobs=1`` (one core
against LIBSVM's one core).  Writes ``results/vs_libsvm_defaults.json`` and ``.md``.

Usage::

    python benchmarks/bench_vs_libsvm.py [--data-dir ../shared/data] [--out results/vs_libsvm.json]
    python benchmarks/bench_vs_libsvm.py --defaults [--repeat 3]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _data  # noqa: E402
import _report

CACHE_MB = 200
N_JOBS = 2


def _time_pair(fa, fb, repeat, first=None):
    """Best of ``repeat`` timed calls of ``fa`` and of ``fb``, alternated (a, b, a, b, ...): this
    VM's speed drifts 20-40 % within minutes (LIBSVM's letter fit: 3.2 to 4.9 s in one quarter
    hour), and timing one side's repeats after the other's put the drift into the ratio.
    Returns ``(best_a, out_a, best_b, out_b)``, the outputs of the last calls; ``first`` (a
    list) receives the times of the first calls, ``[a, b]`` (what a script that fits once
    pays: later calls reuse memory the first paged in)."""
    best_a = best_b = np.inf
    out_a = out_b = None
    for i in range(repeat):
        t = time.perf_counter()
        out_a = fa()
        ta = time.perf_counter() - t
        best_a = min(best_a, ta)
        t = time.perf_counter()
        out_b = fb()
        tb = time.perf_counter() - t
        best_b = min(best_b, tb)
        if i == 0 and first is not None:
            first[:] = [ta, tb]
    return best_a, out_a, best_b, out_b


#: the five sets (``../shared/data``; every loader scales to [-1, 1] on the training set)
LOADERS = {
    "letter": "load_letter",
    "usps": "load_usps_scaled",
    "satimage": "load_satimage",
    "pendigits": "load_pendigits",
    "dna": "load_dna",
}
SPLITS = {
    "letter": "UCI letter, first 15000 train / last 5000 test",
    "usps": "USPS 7291 / 2007 (ESL copy)",
    "satimage": "Statlog satimage, sat.trn 4435 / sat.tst 2000",
    "pendigits": "UCI pendigits, tra 7494 / tes 3498",
    "dna": "Statlog DNA (LIBSVM dna.scale 2000 / dna.scale.t 1186)",
}
GRID_C = (1.0, 10.0, 100.0)
GRID_GAMMA_FACTOR = (0.25, 1.0, 4.0)  # times 1 / (n_features * X_train.var())


def validate(Xtr, ytr, n_fit=2000, n_val=1000, random_state=0):
    """A SHORT validation with SVC: a stratified subset of the training set (``n_fit`` rows fit,
    ``n_val`` other rows score) over ``GRID_C`` x ``GRID_GAMMA_FACTOR`` * gamma_scale; returns
    the best ``(C, gamma, table)`` (ties: the smaller C).  The pair is then fixed for both
    models."""
    from sklearn.model_selection import train_test_split
    from sklearn.svm import SVC

    n = Xtr.shape[0]
    n_fit = min(n_fit, n // 2)
    n_val = min(n_val, n - n_fit)
    Xf, Xrest, yf, yrest = train_test_split(
        Xtr, ytr, train_size=n_fit, stratify=ytr, random_state=random_state
    )
    Xv, _, yv, _ = (
        train_test_split(Xrest, yrest, train_size=n_val, stratify=yrest, random_state=random_state)
        if n_val < Xrest.shape[0]
        else (Xrest, None, yrest, None)
    )
    g0 = 1.0 / (Xtr.shape[1] * Xtr.var())
    table = []
    for C in GRID_C:
        for f in GRID_GAMMA_FACTOR:
            acc = float(np.mean(SVC(C=C, gamma=f * g0).fit(Xf, yf).predict(Xv) == yv))
            table.append({"C": C, "gamma": float(f * g0), "val_accuracy": acc})
    best = max(table, key=lambda r: (r["val_accuracy"], -r["C"]))
    return best["C"], best["gamma"], table


def _datasets(data_dir, which):
    out = {}
    if "digits" in which:
        Xtr, ytr, Xte, yte = _data.load_digits_split()
        gamma = 1.0 / (Xtr.shape[1] * Xtr.var())  # sklearn's 'scale', fixed as a number
        out["digits"] = dict(
            data=(Xtr, ytr, Xte, yte),
            C=10.0,
            gamma=float(gamma),
            gamma_note="'scale' = 1 / (n_features * X_train.var()), resolved once",
            split="sklearn digits, X/16, stratified 75/25, random_state=0",
        )
    for name, loader in LOADERS.items():
        if name not in which:
            continue
        Xtr, ytr, Xte, yte = getattr(_data, loader)(data_dir)
        C, gamma, table = validate(Xtr, ytr)
        out[name] = dict(
            data=(Xtr, ytr, Xte, yte),
            C=C,
            gamma=float(gamma),
            gamma_note="short SVC validation on a training subset",
            validation=table,
            split=SPLITS[name] + ", [-1,1] scaling with training min/max",
        )
    return out


def _warmup(Xtr, ytr, C, gamma):
    """Untimed fits on a small subset: numba compilation / cache loading, BLAS thread start-up."""
    from sklearn.svm import SVC

    from dmcsvm import MulticlassSVC

    Xs, ys = _data.stratified_subset(Xtr, ytr, min(500, Xtr.shape[0] // 2), random_state=1)
    m = MulticlassSVC(C=C, gamma=gamma, cache_size=CACHE_MB, n_jobs=N_JOBS)
    m.fit(Xs.astype(np.float32), ys).predict(Xs.astype(np.float32))
    SVC(C=C, gamma=gamma, cache_size=CACHE_MB).fit(Xs, ys).predict(Xs)


def run_dataset(name, cfg, repeat, extra):
    from sklearn.svm import SVC

    from dmcsvm import MulticlassSVC

    Xtr, ytr, Xte, yte = cfg["data"]
    C, gamma = cfg["C"], cfg["gamma"]
    _warmup(Xtr, ytr, C, gamma)
    res = {
        "validation": cfg.get("validation"),
        "load_before": _report.other_load(),
        "n_train": int(Xtr.shape[0]),
        "n_test": int(Xte.shape[0]),
        "n_features": int(Xtr.shape[1]),
        "n_classes": int(np.unique(ytr).shape[0]),
        "C": C,
        "gamma": gamma,
        "gamma_note": cfg["gamma_note"],
        "split": cfg["split"],
        "cache_size_mb": CACHE_MB,
    }

    # ---- dmcsvm (float32 fast path)
    X32, Xte32 = Xtr.astype(np.float32), Xte.astype(np.float32)
    dm = MulticlassSVC(C=C, kernel="rbf", gamma=gamma, cache_size=CACHE_MB, n_jobs=N_JOBS, **extra)
    # scikit-learn SVC (LIBSVM one-vs-one, float64), timed alternately with dmcsvm
    sv = SVC(C=C, kernel="rbf", gamma=gamma, cache_size=CACHE_MB)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        t_fit, _, sv_fit, _ = _time_pair(lambda: dm.fit(X32, ytr), lambda: sv.fit(Xtr, ytr), repeat)
    t_pred, pred, sv_pred, sv_labels = _time_pair(
        lambda: dm.predict(Xte32), lambda: sv.predict(Xte), repeat
    )
    h = dm.history_
    res["dmcsvm"] = {
        "params": {
            k: v
            for k, v in dm.get_params().items()
            if k
            in (
                "C",
                "kernel",
                "gamma",
                "optimizer",
                "selection",
                "threshold",
                "tol",
                "gap_tol",
                "batch_size",
                "shrinking",
                "cache_size",
                "n_jobs",
            )
        },
        "input_dtype": "float32",
        "fit_time_s": t_fit,
        "predict_time_s": t_pred,
        "accuracy": float(np.mean(pred == yte)),
        "n_support": int(dm.support_.shape[0]),
        "rounds": int(dm.n_iter_),
        "converged": bool(dm.converged_),
        "final_gap": float(h["gap"][-1]),
        "final_dual": float(h["dual"][-1]),
        "final_primal": float(h["primal"][-1]),
        "kernel_rows_computed": int(h["rows_computed"][-1]),
        "kernel_rows_cached": int(h["rows_cached"][-1]),
        "max_batch": int(np.max(h["batch"])) if len(h["batch"]) else 0,
        "final_n_active": int(h["n_active"][-1]),
        "n_train": int(Xtr.shape[0]),
        "final_max_psi": float(h["max_psi"][-1]),
        # per-pattern optimizations: every inner step of the coordinator's working-set solve
        "pattern_optimizations": int(np.sum(h["steps"])),
        "pattern_optimizations_per_sv": float(np.sum(h["steps"]) / max(1, dm.support_.shape[0])),
        "batch_entries_per_sv": float(np.sum(h["batch"]) / max(1, dm.support_.shape[0])),
        # summed over rounds (kernel / update / select: the slowest partition of each round)
        "time_split_s": {
            k: float(np.sum(h[k]))
            for k in ("t_kernel", "t_update", "t_select", "t_parts", "t_solve", "t_round")
        },
        "warnings": [str(x.message) for x in w],
    }

    # ---- scikit-learn SVC (LIBSVM one-vs-one, float64)
    res["svc"] = {
        "params": {
            "C": C,
            "kernel": "rbf",
            "gamma": gamma,
            "cache_size": CACHE_MB,
            "decision_function_shape": sv.decision_function_shape,
            "tol": sv.tol,
        },
        "input_dtype": "float64",
        "fit_time_s": sv_fit,
        "predict_time_s": sv_pred,
        "accuracy": float(np.mean(sv_labels == yte)),
        "n_support": int(sv.support_.shape[0]),
        "libsvm_iterations_total": int(
            np.sum(sv.n_iter_)
        ),  # summed over the m(m-1)/2 binary problems
    }
    d, s = res["dmcsvm"], res["svc"]
    res["ratios"] = {
        "fit_time_dmcsvm_over_svc": d["fit_time_s"] / s["fit_time_s"],
        "predict_time_dmcsvm_over_svc": d["predict_time_s"] / s["predict_time_s"],
        "accuracy_diff_points": 100.0 * (d["accuracy"] - s["accuracy"]),
        "n_support_dmcsvm_over_svc": d["n_support"] / s["n_support"],
    }
    return res


def goals(results):
    out = {}
    for name, r in results.items():
        if name == "digits":
            continue
        q, d = r["ratios"], r["dmcsvm"]
        out[name] = {
            "fit_ratio_le_1": q["fit_time_dmcsvm_over_svc"] <= 1.0,
            "accuracy_ge_svc_minus_0.3": q["accuracy_diff_points"] >= -0.3,
            "gap_le_1e-3_unshrunk": d["final_gap"] <= 1e-3 and d["final_n_active"] == d["n_train"],
            "opt_per_sv_single_digit": d["pattern_optimizations_per_sv"] < 10,
        }
    return out


def table(results) -> str:
    lines = [
        "| data | model | fit s | predict s | accuracy % | SVs | rounds |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        for key, label in (("dmcsvm", "dmcsvm (f32, n_jobs=2)"), ("svc", "SVC / LIBSVM (f64)")):
            m = r[key]
            lines.append(
                f"| {name} | {label} | {m['fit_time_s']:.3f} | {m['predict_time_s']:.3f} | "
                f"{100 * m['accuracy']:.2f} | {m['n_support']} | "
                f"{m.get('rounds', '')} |"
            )
    lines += [
        "",
        "| data | C | gamma | fit ratio dmcsvm/SVC | predict ratio | accuracy diff (points) | "
        "rel. gap (unshrunk) | max psi | opt/SV | rounds | t_solve / t_parts / t_round s | load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for name, r in results.items():
        q, d = r["ratios"], r["dmcsvm"]
        t = d["time_split_s"]
        lines.append(
            f"| {name} | {r['C']:g} | {r['gamma']:.4g} | {q['fit_time_dmcsvm_over_svc']:.2f} | "
            f"{q['predict_time_dmcsvm_over_svc']:.2f} | {q['accuracy_diff_points']:+.2f} | "
            f"{d['final_gap']:.2e} | {d['final_max_psi']:.1e} | "
            f"{d['pattern_optimizations_per_sv']:.1f} | {d['rounds']} | "
            f"{t['t_solve']:.2f} / {t['t_parts']:.2f} / {t['t_round']:.2f} | "
            f"{r['load_before']['loadavg_1m']:.1f} |"
        )
    return "\n".join(lines)


#: the sets of ``--defaults``: every real set with >= 2,000 training rows (loader in _data)
DEFAULT_SETS = _data.DEFAULT_SETS


def run_defaults(name, data, repeat):
    """Both at their defaults on float64 input: fit / predict times (best of ``repeat``,
    alternated), accuracy, support vectors, dmcsvm's rounds and stopping point, and a one-core
    dmcsvm fit (``n_jobs=1``) beside them."""
    from sklearn.svm import SVC

    from dmcsvm import MulticlassSVC

    Xtr, ytr, Xte, yte = data
    Xs, ys = _data.stratified_subset(Xtr, ytr, min(500, Xtr.shape[0] // 2), random_state=1)
    MulticlassSVC().fit(Xs, ys).predict(Xs)  # numba cache, thread start, first touch
    SVC().fit(Xs, ys).predict(Xs)
    dm, sv, dm1 = MulticlassSVC(), SVC(), MulticlassSVC(n_jobs=1)
    res = {
        "n_train": int(Xtr.shape[0]),
        "n_test": int(Xte.shape[0]),
        "n_features": int(Xtr.shape[1]),
        "n_classes": int(np.unique(ytr).shape[0]),
        "load_before": _report.other_load(),
        "input_dtype": str(Xtr.dtype),
    }
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        first: list = []
        t_fit, _, sv_fit, _ = _time_pair(
            lambda: dm.fit(Xtr, ytr), lambda: sv.fit(Xtr, ytr), repeat, first
        )
        t1, _, _, _ = _time_pair(lambda: dm1.fit(Xtr, ytr), lambda: None, repeat)
    t_pred, pred, sv_pred, sv_labels = _time_pair(
        lambda: dm.predict(Xte), lambda: sv.predict(Xte), repeat
    )
    h = dm.history_
    from dmcsvm.estimators._engine import n_threads

    res["dmcsvm"] = {
        "fit_time_s": t_fit,
        "fit_time_1_thread_s": t1,
        "first_fit_time_s": first[0],
        "threads": n_threads(None),
        "predict_time_s": t_pred,
        "accuracy": float(np.mean(pred == yte)),
        "n_support": int(dm.support_.shape[0]),
        "rounds": int(dm.n_iter_),
        "final_gap": float(h["gap"][-1]),
        "final_max_psi": float(h["max_psi"][-1]),
        "pattern_optimizations": int(np.sum(h["steps"])),
        "time_split_s": {k: float(np.sum(h[k])) for k in ("t_solve", "t_parts", "t_round")},
        "params": "defaults (MulticlassSVC())",
        "warnings": sorted({str(x.message)[:120] for x in w}),
    }
    res["svc"] = {
        "fit_time_s": sv_fit,
        "first_fit_time_s": first[1],
        "predict_time_s": sv_pred,
        "accuracy": float(np.mean(sv_labels == yte)),
        "n_support": int(sv.support_.shape[0]),
        "params": "defaults (SVC())",
    }
    res["ratios"] = {
        "fit": t_fit / sv_fit,
        "fit_1_thread": t1 / sv_fit,
        "first_fit": first[0] / first[1],
        "predict": t_pred / sv_pred,
        "accuracy_diff_points": 100.0 * (res["dmcsvm"]["accuracy"] - res["svc"]["accuracy"]),
    }
    return res


def defaults_table(results) -> str:
    lines = [
        "| data | n train | SVC fit s | dmcsvm fit s | ratio | ratio, first fits | "
        "ratio, dmcsvm n_jobs=1 | predict ratio | acc SVC % | acc dmcsvm − SVC | "
        "SVs SVC / dmcsvm | rounds | gap | load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for name, r in results.items():
        d, s, q = r["dmcsvm"], r["svc"], r["ratios"]
        lines.append(
            f"| {name} | {r['n_train']} | {s['fit_time_s']:.2f} | {d['fit_time_s']:.2f} | "
            f"**{q['fit']:.2f}** | {q['first_fit']:.2f} | {q['fit_1_thread']:.2f} | "
            f"{q['predict']:.2f} | "
            f"{100 * s['accuracy']:.2f} | {q['accuracy_diff_points']:+.2f} | "
            f"{s['n_support']} / {d['n_support']} | {d['rounds']} | "
            f"{d['final_gap']:.1e} | {r['load_before']['loadavg_1m']:.1f} |"
        )
    return "\n".join(lines)


def main_defaults(a):
    run = _report.Run(__file__, "dmcsvm vs SVC, both at defaults", _report.settings_of(a))
    results = {}
    for name in a.datasets.split(","):
        print(f"[{name}] running ...", flush=True)
        # each set in a process of its own, as a script that fits once runs: its first fit
        # pages in its memory afresh instead of reusing what an earlier set freed
        cmd = [sys.executable, __file__, "--one-set", name, "--data-dir", str(a.data_dir)]
        cmd += ["--repeat", str(a.repeat)]
        done = subprocess.run(cmd, check=True, capture_output=True, text=True)
        results[name] = json.loads(done.stdout.strip().splitlines()[-1])
        print(defaults_table({name: results[name]}).splitlines()[-1], flush=True)
    out = run.envelope(results, repeat=a.repeat)
    tab = defaults_table(results)
    threads = next(iter(results.values()))["dmcsvm"]["threads"] if results else 0
    md = [
        "# dmcsvm vs scikit-learn SVC, both at their defaults",
        "",
        _report.machine_line(out, ("numpy", "sklearn", "dmcsvm")) + "  " + _report.load_line(out),
        "",
        f"`MulticlassSVC()` against `SVC()`: every parameter at its default on both sides "
        f"(C=1, gamma='scale'; dmcsvm's n_jobs=None = {threads} threads here, float32 kernel "
        f"values, its default stopping rule), float64 numpy input as read, features scaled to "
        f"[-1, 1] on the training rows. Each set in a process of its own; best of {a.repeat} "
        f"fits, dmcsvm and SVC alternated, after an untimed warm-up on 500 rows. 'ratio, first "
        f"fits': the first timed fit of each side, what a script that fits once pays (later "
        f"fits reuse memory the first paged in). 'ratio, n_jobs=1': dmcsvm on one core against "
        f"LIBSVM's one core.",
        "",
        tab,
        "",
        f"Script runtime {out['script_runtime_s']:.1f} s.",
        "",
    ]
    outp = _report.write(out, a.out, "\n".join(md))
    print(tab)
    print(f"wrote {outp} and {outp.with_suffix('.md')}")
    return out


def main(argv=None):
    if argv is None:
        argv = sys.argv[1:]
    if "--one-set" in argv:  # (main_defaults' child: one set, its result as a JSON line)
        p = _report.parser(__doc__, "unused.json", data_dir=True)
        p.add_argument("--one-set", required=True)
        p.add_argument("--repeat", type=int, default=3)
        a = p.parse_args(argv)
        data = getattr(_data, DEFAULT_SETS[a.one_set])(a.data_dir)
        print(json.dumps(run_defaults(a.one_set, data, a.repeat)))
        return None
    if "--defaults" in argv:
        p = _report.parser(__doc__, "vs_libsvm_defaults.json", data_dir=True)
        p.add_argument("--defaults", action="store_true")
        p.add_argument("--datasets", default=",".join(DEFAULT_SETS))
        p.add_argument("--repeat", type=int, default=3)
        return main_defaults(p.parse_args(argv))
    p = _report.parser(__doc__, "vs_libsvm.json", data_dir=True)
    p.add_argument(
        "--datasets",
        default="letter,usps,satimage,pendigits,dna",
        help="comma separated: digits,letter,usps,satimage,pendigits,dna",
    )
    p.add_argument("--tol", type=float, default=None, help="dmcsvm tol (default: its default)")
    p.add_argument("--gap-tol", type=float, default=None, help="dmcsvm gap_tol")
    p.add_argument("--repeat", type=int, default=1, help="timed runs per fit/predict (min is kept)")
    a = p.parse_args(argv)
    run = _report.Run(__file__, "dmcsvm vs scikit-learn SVC (LIBSVM)", _report.settings_of(a))
    results = {}
    for name, cfg in _datasets(a.data_dir, a.datasets.split(",")).items():
        print(f"[{name}] running ...", flush=True)
        extra = {k: v for k, v in (("tol", a.tol), ("gap_tol", a.gap_tol)) if v is not None}
        results[name] = run_dataset(name, cfg, a.repeat, extra)
    out = run.envelope(results, repeat=a.repeat, goals=goals(results))
    tab = table(results)
    md = [
        "# dmcsvm vs scikit-learn SVC (LIBSVM)",
        "",
        _report.machine_line(out, ("numpy", "sklearn", "dmcsvm")) + "  " + _report.load_line(out),
        "",
        f"Same RBF kernel, C, gamma, "
        f"cache_size={CACHE_MB} MB; dmcsvm defaults otherwise, n_jobs={N_JOBS}, float32 input; "
        f"SVC float64. Best of `--repeat {a.repeat}` timed runs each, dmcsvm and SVC "
        f"alternated, after an untimed warm-up. "
        f"dmcsvm stopping: tol={a.tol if a.tol is not None else 'default'}, "
        f"gap_tol={a.gap_tol if a.gap_tol is not None else 'default'} (the rel. gap column is "
        f"that of the last round, every row unshrunk).",
        "",
        tab,
        "",
    ]
    for name, r in results.items():
        md.append(
            f"- {name}: {r['split']}; C={r['C']}, gamma={r['gamma']:.6g} ({r['gamma_note']})."
        )
    if out["goals"]:
        md += [
            "",
            "Goals: "
            + "; ".join(
                f"{k}: " + ", ".join(f"{g} {'met' if ok else 'NOT met'}" for g, ok in v.items())
                for k, v in out["goals"].items()
            ),
        ]
    md += ["", f"Script runtime {out['script_runtime_s']:.1f} s.", ""]
    outp = _report.write(out, a.out, "\n".join(md))
    print(tab)
    for k, v in out["goals"].items():
        print(f"goals {k}: {v}")
    print(f"wrote {outp} and {outp.with_suffix('.md')} ({out['script_runtime_s']:.1f} s)")
    return out


if __name__ == "__main__":
    main()
