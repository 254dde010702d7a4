"""dmcsvm.MulticlassSVC versus scikit-learn's SVC (LIBSVM, one-vs-one) in one process.

Both models get the same RBF kernel, C, gamma (a number, resolved once from the training data) and
a 200 MB kernel cache.  dmcsvm keeps its other defaults and runs with ``n_jobs=2`` on float32 input
(its fast path: float32 kernel columns and sgemm updates); SVC gets float64 input (LIBSVM converts
everything to double anyway).  Data sets:

* digits (scikit-learn bundled): ``X / 16``, stratified 75/25 split (``random_state=0``), C=10,
  gamma='scale' resolved on the training split (the same number for both models);
* letter (UCI, LIBSVM convention): first 15000 rows train / last 5000 test, features scaled to
  [-1, 1] with the training min/max, C=10, gamma=1.

Each fit / predict is timed ``--repeat`` times (default 1; the minimum is reported) after an untimed
warm-up fit on a small subset, so that numba's compilation / cache loading and first-touch costs are
not charged to dmcsvm.  Writes a JSON (``--out``) and a markdown table next to it (``vs_libsvm.md``).

Goals tracked: on letter, fit-time ratio dmcsvm/SVC <= 1.0 with accuracy within 0.5 points, and a
predict-time ratio <= 0.2.

Usage::

    python benchmarks/bench_vs_libsvm.py [--data-dir ../shared/data] [--out results/vs_libsvm.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _data  # noqa: E402

CACHE_MB = 200
N_JOBS = 2


def _time(fn, repeat):
    best, out = np.inf, None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def _datasets(data_dir, which):
    out = {}
    if "digits" in which:
        Xtr, ytr, Xte, yte = _data.load_digits_split()
        gamma = 1.0 / (Xtr.shape[1] * Xtr.var())          # sklearn's 'scale', fixed as a number
        out["digits"] = dict(data=(Xtr, ytr, Xte, yte), C=10.0, gamma=float(gamma),
                             gamma_note="'scale' = 1 / (n_features * X_train.var()), resolved once",
                             split="sklearn digits, X/16, stratified 75/25, random_state=0")
    if "letter" in which:
        Xtr, ytr, Xte, yte = _data.load_letter(data_dir)
        out["letter"] = dict(data=(Xtr, ytr, Xte, yte), C=10.0, gamma=1.0, gamma_note="fixed",
                             split="UCI letter, first 15000 train / last 5000 test, "
                                   "[-1,1] scaling with training min/max")
    return out


def _warmup(Xtr, ytr, C, gamma):
    """Untimed fits on a small subset: numba compilation / cache loading, BLAS thread start-up."""
    from sklearn.svm import SVC
    from dmcsvm import MulticlassSVC
    Xs, ys = _data.stratified_subset(Xtr, ytr, min(500, Xtr.shape[0] // 2), random_state=1)
    m = MulticlassSVC(C=C, gamma=gamma, cache_size=CACHE_MB, n_jobs=N_JOBS)
    m.fit(Xs.astype(np.float32), ys).predict(Xs.astype(np.float32))
    SVC(C=C, gamma=gamma, cache_size=CACHE_MB).fit(Xs, ys).predict(Xs)


def run_dataset(name, cfg, repeat):
    from sklearn.svm import SVC
    from dmcsvm import MulticlassSVC
    Xtr, ytr, Xte, yte = cfg["data"]
    C, gamma = cfg["C"], cfg["gamma"]
    _warmup(Xtr, ytr, C, gamma)
    res = {"n_train": int(Xtr.shape[0]), "n_test": int(Xte.shape[0]),
           "n_features": int(Xtr.shape[1]), "n_classes": int(np.unique(ytr).shape[0]),
           "C": C, "gamma": gamma, "gamma_note": cfg["gamma_note"], "split": cfg["split"],
           "cache_size_mb": CACHE_MB}

    # ---- dmcsvm (float32 fast path)
    X32, Xte32 = Xtr.astype(np.float32), Xte.astype(np.float32)
    dm = MulticlassSVC(C=C, kernel="rbf", gamma=gamma, cache_size=CACHE_MB, n_jobs=N_JOBS)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        t_fit, _ = _time(lambda: dm.fit(X32, ytr), repeat)
    t_pred, pred = _time(lambda: dm.predict(Xte32), repeat)
    h = dm.history_
    res["dmcsvm"] = {
        "params": {k: v for k, v in dm.get_params().items()
                   if k in ("C", "kernel", "gamma", "optimizer", "selection", "threshold", "tol",
                            "gap_tol", "batch_size", "shrinking", "cache_size", "n_jobs")},
        "input_dtype": "float32",
        "fit_time_s": t_fit, "predict_time_s": t_pred,
        "accuracy": float(np.mean(pred == yte)),
        "n_support": int(dm.support_.shape[0]),
        "rounds": int(dm.n_iter_), "converged": bool(dm.converged_),
        "final_gap": float(h["gap"][-1]), "final_dual": float(h["dual"][-1]),
        "final_primal": float(h["primal"][-1]),
        "kernel_rows_computed": int(h["rows_computed"][-1]),
        "kernel_rows_cached": int(h["rows_cached"][-1]),
        "max_batch": int(np.max(h["batch"])) if len(h["batch"]) else 0,
        # summed over rounds (kernel / update / select: the slowest partition of each round)
        "time_split_s": {k: float(np.sum(h[k])) for k in ("t_kernel", "t_update", "t_select",
                                                           "t_solve", "t_round")},
        "warnings": [str(x.message) for x in w],
    }

    # ---- scikit-learn SVC (LIBSVM one-vs-one, float64)
    sv = SVC(C=C, kernel="rbf", gamma=gamma, cache_size=CACHE_MB)
    t_fit, _ = _time(lambda: sv.fit(Xtr, ytr), repeat)
    t_pred, pred = _time(lambda: sv.predict(Xte), repeat)
    res["svc"] = {
        "params": {"C": C, "kernel": "rbf", "gamma": gamma, "cache_size": CACHE_MB,
                   "decision_function_shape": sv.decision_function_shape, "tol": sv.tol},
        "input_dtype": "float64",
        "fit_time_s": t_fit, "predict_time_s": t_pred,
        "accuracy": float(np.mean(pred == yte)),
        "n_support": int(sv.support_.shape[0]),
        "libsvm_iterations_total": int(np.sum(sv.n_iter_)),   # summed over the m(m-1)/2 binary problems
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
    if "letter" not in results:
        return {}
    r = results["letter"]["ratios"]
    return {
        "letter_fit_ratio_le_1": {"target": 1.0, "value": r["fit_time_dmcsvm_over_svc"],
                                  "met": r["fit_time_dmcsvm_over_svc"] <= 1.0},
        "letter_accuracy_within_0.5_points": {"target": 0.5, "value": r["accuracy_diff_points"],
                                              "met": r["accuracy_diff_points"] >= -0.5},
        "letter_predict_ratio_le_0.2": {"target": 0.2, "value": r["predict_time_dmcsvm_over_svc"],
                                        "met": r["predict_time_dmcsvm_over_svc"] <= 0.2},
    }


def table(results) -> str:
    lines = ["| data | model | fit s | predict s | accuracy % | SVs | rounds |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        for key, label in (("dmcsvm", "dmcsvm (f32, n_jobs=2)"), ("svc", "SVC / LIBSVM (f64)")):
            m = r[key]
            lines.append(f"| {name} | {label} | {m['fit_time_s']:.3f} | {m['predict_time_s']:.3f} | "
                         f"{100 * m['accuracy']:.2f} | {m['n_support']} | "
                         f"{m.get('rounds', '')} |")
    lines += ["", "| data | fit ratio dmcsvm/SVC | predict ratio dmcsvm/SVC | accuracy diff (points) |",
              "|---|---:|---:|---:|"]
    for name, r in results.items():
        q = r["ratios"]
        lines.append(f"| {name} | {q['fit_time_dmcsvm_over_svc']:.2f} | "
                     f"{q['predict_time_dmcsvm_over_svc']:.2f} | {q['accuracy_diff_points']:+.2f} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=str(_data.DEFAULT_DATA_DIR))
    p.add_argument("--out", default=str(_data.RESULTS_DIR / "vs_libsvm.json"))
    p.add_argument("--datasets", default="digits,letter", help="comma separated: digits,letter")
    p.add_argument("--repeat", type=int, default=1, help="timed runs per fit/predict (min is kept)")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    load0 = _data.other_load()
    results = {}
    for name, cfg in _datasets(a.data_dir, a.datasets.split(",")).items():
        print(f"[{name}] running ...", flush=True)
        results[name] = run_dataset(name, cfg, a.repeat)
    out = {
        "benchmark": "dmcsvm vs scikit-learn SVC (LIBSVM)",
        "machine": _data.machine_info(),
        "load_at_start": load0, "load_at_end": _data.other_load(),
        "repeat": a.repeat,
        "results": results,
        "goals": goals(results),
        "script_runtime_s": time.perf_counter() - t0,
    }
    outp = Path(a.out)
    outp.parent.mkdir(parents=True, exist_ok=True)
    outp.write_text(json.dumps(out, indent=1) + "\n")
    tab = table(results)
    m = out["machine"]
    md = [f"# dmcsvm vs scikit-learn SVC (LIBSVM)", "",
          f"Machine: {m['cpu_model']}, {m['cpu_count']} cores, {m['platform']}; numpy {m['numpy']}, "
          f"scikit-learn {m['sklearn']}, dmcsvm {m['dmcsvm']}. Same RBF kernel, C, gamma, "
          f"cache_size={CACHE_MB} MB; dmcsvm defaults otherwise, n_jobs={N_JOBS}, float32 input; "
          f"SVC float64. One timed run each (`--repeat {a.repeat}`), after an untimed warm-up.", "",
          tab, ""]
    for name, r in results.items():
        md.append(f"- {name}: {r['split']}; C={r['C']}, gamma={r['gamma']:.6g} ({r['gamma_note']}).")
    if out["goals"]:
        md += ["", "Goals (letter): " + "; ".join(
            f"{k}: {v['value']:.2f} ({'met' if v['met'] else 'NOT met'})" for k, v in out["goals"].items())]
    md += ["", f"Other load: {load0}. Script runtime {out['script_runtime_s']:.1f} s.", ""]
    outp.with_suffix(".md").write_text("\n".join(md))
    print(tab)
    for k, v in out["goals"].items():
        print(f"goal {k}: {v['value']:.3f} -> {'met' if v['met'] else 'NOT met'}")
    print(f"wrote {outp} and {outp.with_suffix('.md')} ({out['script_runtime_s']:.1f} s)")
    return out


if __name__ == "__main__":
    main()
