"""Which stopping rule should be MulticlassSVC's default?  The cheapest one after which held-out
predictions stop changing, on every real data set.

For every set of ``../shared/data`` (each with the train/test convention of its README; the sets
without one are split 70/30, stratified, seed 0) and every ``C`` in ``--C`` (gamma='scale',
features scaled to [-1, 1] on the training rows, float64 input as read), a reference model is
solved to a relative duality gap of 1e-6 with float64 kernel values.  Then each candidate rule is
run at the defaults otherwise (float32 kernel values, every core):

* ``psi <= tol`` for the KKT violation (CS 2001 Eq. 32) of every row, ``gap_tol=0``;
* relative duality gap ``(P - D) / P <= g`` alone (``tol`` too small to bind).

Both are checked with every row unshrunk.  For each it records the fit time (best of
``--repeat``), rounds, pattern optimizations, the final gap and max psi, test accuracy and the
agreement of its test predictions with the reference's.  Writes ``results/stopping_rule.json``
and a markdown table beside it.

Usage::

    python benchmarks/bench_stopping_rule.py [--data-dir ../shared/data] [--C 1,10]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _data  # noqa: E402

TOLS = (1e-1, 3e-2, 1e-2, 3e-3, 1e-3)
GAPS = (1e-1, 3e-2, 1e-2, 3e-3, 1e-3)
TINY = 1e-12  # a psi tolerance that never binds before the gap rule


def _split(X, y, seed=0):
    from sklearn.model_selection import train_test_split

    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=seed)
    Xtr, Xte = _data.scale_minmax(Xtr, Xte)
    return Xtr, ytr, Xte, yte


def _csv(path, label_col, sep=",", skip_cols=0):
    raw = np.genfromtxt(path, delimiter=sep, dtype=str)
    y = np.unique(raw[:, label_col], return_inverse=True)[1]
    X = np.delete(raw, label_col, axis=1)[:, skip_cols:].astype(np.float64)
    return X, y


def load_all(data_dir: Path) -> dict:
    """name -> (X_train, y_train, X_test, y_test), every set of the shared data folder."""
    d = Path(data_dir)
    sets = {}
    sets["iris"] = _split(*_csv(d / "iris" / "iris.data", 4))
    sets["wine"] = _split(*_csv(d / "wine" / "wine.data", 0))
    X, y = _csv(d / "glass" / "glass.data", 10, skip_cols=1)  # column 0 is an id
    sets["glass"] = _split(X, y)
    seg = np.loadtxt(d / "segment" / "segment.dat")
    sets["segment"] = _split(seg[:, :-1], seg[:, -1].astype(np.int64))
    vow = np.genfromtxt(d / "vowel" / "vowel-context.data", delimiter=",")
    tr, te = vow[:, 0] == 0, vow[:, 0] == 1
    Xtr, Xte = _data.scale_minmax(vow[tr, 3:13], vow[te, 3:13])
    sets["vowel"] = (Xtr, vow[tr, 13].astype(np.int64), Xte, vow[te, 13].astype(np.int64))
    sets["dna"] = _data.load_dna(d)
    sets["satimage"] = _data.load_satimage(d)
    sets["optdigits"] = _data.load_optdigits(d)
    sets["pendigits"] = _data.load_pendigits(d)
    sets["usps"] = _data.load_usps_scaled(d)
    sets["mnist"] = _data.load_mnist_test_split(d)
    sets["letter"] = _data.load_letter(d)
    sets["shuttle"] = _data.load_shuttle(d)
    return sets


def _fit(X, y, repeat, **kw):
    from dmcsvm import MulticlassSVC

    best, m = np.inf, None
    for _ in range(repeat):
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = MulticlassSVC(**kw).fit(X, y)
        best = min(best, time.perf_counter() - t)
    return best, m


def run_set(name, data, C, repeat):
    Xtr, ytr, Xte, yte = data
    from dmcsvm import MulticlassSVC

    MulticlassSVC(C=C).fit(Xtr[:300], ytr[:300]) if len(np.unique(ytr[:300])) > 1 else None
    t_ref, ref = _fit(
        Xtr,
        ytr,
        1,
        C=C,
        tol=TINY,
        kernel_dtype="float64",
        max_iter=20000,
        solver_options={"gap_tol": 1e-6},
    )
    p_ref = ref.predict(Xte)
    out = {
        "set": name,
        "C": C,
        "n_train": int(Xtr.shape[0]),
        "n_test": int(Xte.shape[0]),
        "d": int(Xtr.shape[1]),
        "n_classes": int(len(np.unique(ytr))),
        "reference": {
            "time": t_ref,
            "gap": float(ref.history_["gap"][-1]),
            "rounds": int(ref.n_iter_),
            "n_sv": int(ref.support_.shape[0]),
            "accuracy": float(np.mean(p_ref == yte)),
        },
        "rules": [],
    }
    rules = [("psi", t, dict(tol=t)) for t in TOLS] + [
        ("gap", g, dict(tol=TINY, solver_options={"gap_tol": g})) for g in GAPS
    ]
    for kind, value, kw in rules:
        t, m = _fit(Xtr, ytr, repeat, C=C, **kw)
        p = m.predict(Xte)
        h = m.history_
        out["rules"].append(
            {
                "rule": kind,
                "value": value,
                "time": t,
                "rounds": int(m.n_iter_),
                "steps": int(h["steps"].sum()),
                "gap": float(h["gap"][-1]),
                "max_psi": float(h["max_psi"][-1]),
                "n_sv": int(m.support_.shape[0]),
                "accuracy": float(np.mean(p == yte)),
                "agreement": float(np.mean(p == p_ref)),
            }
        )
    return out


def table(results) -> str:
    lines = [
        "| set | C | n | ref gap | rule | time (s) | rounds | gap | agreement | acc - ref acc |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        for q in r["rules"]:
            lines.append(
                f"| {r['set']} | {r['C']:g} | {r['n_train']} | {r['reference']['gap']:.1e} "
                f"| {q['rule']} <= {q['value']:g} | {q['time']:.3f} | {q['rounds']} | "
                f"{q['gap']:.1e} | {100 * q['agreement']:.2f} % | "
                f"{100 * (q['accuracy'] - r['reference']['accuracy']):+.2f} |"
            )
    return "\n".join(lines)


def summary(results) -> str:
    """Per rule: the worst agreement over every set and C, and the summed time."""
    keys = [(q["rule"], q["value"]) for q in results[0]["rules"]]
    lines = [
        "| rule | worst agreement | set of the worst | total time (s) |",
        "|---|---:|---|---:|",
    ]
    for k in keys:
        qs = [(r, next(q for q in r["rules"] if (q["rule"], q["value"]) == k)) for r in results]
        worst = min(qs, key=lambda rq: rq[1]["agreement"])
        lines.append(
            f"| {k[0]} <= {k[1]:g} | {100 * worst[1]['agreement']:.2f} % | "
            f"{worst[0]['set']} (C={worst[0]['C']:g}) | "
            f"{sum(q['time'] for _, q in qs):.2f} |"
        )
    return "\n".join(lines)


def verdict(results, need=0.999) -> str:
    """The cheapest rule (summed fit time) whose worst agreement over every set is >= need."""
    keys = [(q["rule"], q["value"]) for q in results[0]["rules"]]
    ok = []
    for k in keys:
        qs = [next(q for q in r["rules"] if (q["rule"], q["value"]) == k) for r in results]
        if min(q["agreement"] for q in qs) >= need:
            ok.append((sum(q["time"] for q in qs), k))
    if not ok:
        return f"no rule measured reaches {100 * need:.1f} % agreement on every set"
    t, (kind, value) = min(ok)
    return (
        f"the cheapest rule with >= {100 * need:.1f} % agreement on every set and C: "
        f"{kind} <= {value:g} ({t:.1f} s summed over the runs)"
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", default=str(_data.DEFAULT_DATA_DIR))
    p.add_argument("--C", default="1,10")
    p.add_argument("--datasets", default=None, help="comma-separated subset")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "stopping_rule.json"))
    a = p.parse_args(argv)
    sets = load_all(Path(a.data_dir))
    if a.datasets:
        sets = {k: sets[k] for k in a.datasets.split(",")}
    results = []
    for C in [float(c) for c in a.C.split(",")]:
        for name, data in sets.items():
            r = run_set(name, data, C, a.repeat)
            results.append(r)
            print(
                f"{name} C={C:g}: ref gap {r['reference']['gap']:.1e} "
                + " ".join(
                    f"{q['rule']}{q['value']:g}:{100 * q['agreement']:.1f}%/{q['time']:.2f}s"
                    for q in r["rules"]
                ),
                flush=True,
            )
    meta = {
        "machine": f"{platform.machine()} {os.cpu_count()} cores ({platform.processor() or 'cpu'})",
        "load_before": os.getloadavg(),
        "python": platform.python_version(),
    }
    Path(a.out).write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    md = Path(a.out).with_suffix(".md")
    md.write_text(
        f"# Stopping rule: agreement with a solve to gap 1e-6\n\n{meta}\n\n"
        f"**Verdict:** {verdict(results)}.\n\n"
        f"## Worst case over every set\n\n{summary(results)}\n\n## Every run\n\n"
        f"{table(results)}\n"
    )
    print(summary(results))
    print(verdict(results))


if __name__ == "__main__":
    main()
