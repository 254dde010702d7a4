"""dmcsvm against scikit-learn's SVC as n grows, on MNIST digits deformed as InfiMNIST makes
MNIST8M (:mod:`deformed_digits`): train on 25k, 50k, 100k, 200k rows, test on 5,000 originals.

Both at their defaults (``MulticlassSVC()``, ``SVC()``: C=1, gamma='scale'), in one process,
on the same float64 numpy array read from the store each size is written to (chunk by chunk, in a
temporary directory deleted afterwards).  SVC runs only where its projected time (from the
growth of the sizes before) stays within ``--svc-budget`` seconds.  Reports per n: fit and
predict time, accuracy, support vectors, dmcsvm's rounds, pattern optimizations, unshrinks and
time split (coordinator solve / partitions), and each side's growth exponent between
consecutive sizes, ``log(t2 / t1) / log(n2 / n1)``.  Writes ``results/deformed_series.json``, a
markdown table and a log-log plot beside it.

    python benchmarks/bench_deformed_series.py [--sizes 25000,50000,100000,200000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _data  # noqa: E402
import _report  # noqa: E402
import deformed_digits as dd  # noqa: E402


def _read(url) -> tuple[np.ndarray, np.ndarray]:
    """X (float64, as a user reads it) and y of a dmcsvm store."""
    import zarr

    g = zarr.open_group(str(url), mode="r")
    return np.asarray(g["X"][:], dtype=np.float64), np.asarray(g["y"][:])


def _fit_dmcsvm(X, y, Xte, yte, **kw):
    from dmcsvm import MulticlassSVC

    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = MulticlassSVC(**kw).fit(X, y)
    t_fit = time.perf_counter() - t
    t = time.perf_counter()
    acc = float(np.mean(m.predict(Xte) == yte))
    h = m.history_
    return {
        "fit": t_fit,
        "predict": time.perf_counter() - t,
        "accuracy": acc,
        "n_sv": int(m.support_.shape[0]),
        "rounds": int(m.n_iter_),
        "steps": int(h["steps"].sum()),
        "gap": float(h["gap"][-1]),
        "max_psi": float(h["max_psi"][-1]),
        "unshrinks": int(np.sum(np.diff(h["n_active"]) > 0)),
        "t_solve": float(h["t_solve"].sum()),
        "t_parts": float(h["t_parts"].sum()),
        "t_kernel": float(h["t_kernel"].sum()),
        "t_update": float(h["t_update"].sum()),
        "columns_computed": int(h["rows_computed"][-1]),
        "settings": kw or "defaults",
        # the per-round trajectory, what scaling_model.py projects to larger clusters from
        "trajectory": {
            k: np.asarray(h[k]).round(6).tolist()
            for k in (
                "batch",
                "n_active",
                "n_viol",
                "steps",
                "rows_computed",
                "rows_cached",
                "t_solve",
                "t_parts",
                "t_round",
            )
            if k in h
        },
    }


def _fit_svc(X, y, Xte, yte):
    from sklearn.svm import SVC

    t = time.perf_counter()
    m = SVC().fit(X, y)
    t_fit = time.perf_counter() - t
    t = time.perf_counter()
    acc = float(np.mean(m.predict(Xte) == yte))
    return {
        "fit": t_fit,
        "predict": time.perf_counter() - t,
        "accuracy": acc,
        "n_sv": int(m.support_.shape[0]),
        "settings": "defaults",
    }


def exponents(rows, side) -> list:
    pts = [(r["n"], r[side]["fit"]) for r in rows if r.get(side)]
    return [
        {"from": a[0], "to": b[0], "exponent": float(np.log(b[1] / a[1]) / np.log(b[0] / a[0]))}
        for a, b in zip(pts, pts[1:], strict=False)
    ]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", default=str(_data.DEFAULT_DATA_DIR))
    p.add_argument("--sizes", default="25000,50000,100000,200000")
    p.add_argument("--svc-budget", type=float, default=3600.0)
    p.add_argument("--tmp", default=None, help="where the stores are written (then deleted)")
    p.add_argument(
        "--svc-from",
        default=None,
        help="take SVC's rows from this earlier result of the series (same data and "
        "settings: SVC does not change with dmcsvm) instead of fitting it again",
    )
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "deformed_series.json"))
    a = p.parse_args(argv)
    Xte, yte = dd.test_set(a.data_dir)
    from dmcsvm import MulticlassSVC

    X0, y0 = dd.block(a.data_dir, 0)
    MulticlassSVC().fit(X0[:1000].astype(np.float64), y0[:1000])  # numba cache, first touch
    rows = []
    out = Path(a.out)
    mi = _report.machine_info()
    meta = {
        "machine": f"{mi['cpu_model']}, {os.cpu_count()} cores, "
        f"BLAS kernels {_report.blas_kernels(mi)}",
        "machine_info": mi,
        "load_before": os.getloadavg(),
        "python": platform.python_version(),
        "data": "first 5,000 MNIST test digits + InfiMNIST-like deformations (train), "
        "last 5,000 originals (test); pixels scaled to [-1, 1]",
        "settings": "both at defaults (C=1, gamma='scale'), float64 numpy input",
    }
    for n in [int(s) for s in a.sizes.split(",")]:
        tmp = tempfile.mkdtemp(prefix="dmcsvm-deformed-", dir=a.tmp)
        try:
            t = time.perf_counter()
            dd.write_store(Path(tmp) / "train.zarr", n, a.data_dir)
            t_write = time.perf_counter() - t
            X, y = _read(Path(tmp) / "train.zarr")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        row = {"n": n, "write_store_s": t_write, "load": os.getloadavg()}
        row["dmcsvm"] = _fit_dmcsvm(X, y, Xte, yte)
        print(f"n={n} dmcsvm {row['dmcsvm']}", flush=True)
        old = (
            {r["n"]: r for r in json.loads(Path(a.svc_from).read_text())["rows"]}
            if a.svc_from
            else {}
        )
        if old.get(n, {}).get("svc"):
            row["svc"] = dict(old[n]["svc"], reused_from=str(a.svc_from))
            row["ratio"] = row["dmcsvm"]["fit"] / row["svc"]["fit"]
            rows.append(row)
            res = {
                "meta": meta,
                "rows": rows,
                "exponent_dmcsvm": exponents(rows, "dmcsvm"),
                "exponent_svc": exponents(rows, "svc"),
            }
            out.write_text(json.dumps(res, indent=1))
            print(f"n={n} svc reused, ratio {row['ratio']:.2f}", flush=True)
            continue
        svc_prev = [r for r in rows if r.get("svc")]
        proj = None
        if len(svc_prev) >= 2:
            e = exponents(svc_prev, "svc")[-1]["exponent"]
            proj = svc_prev[-1]["svc"]["fit"] * (n / svc_prev[-1]["n"]) ** e
        elif svc_prev:
            proj = svc_prev[-1]["svc"]["fit"] * (n / svc_prev[-1]["n"]) ** 2
        if proj is None or proj <= a.svc_budget:
            row["svc"] = _fit_svc(X, y, Xte, yte)
            row["ratio"] = row["dmcsvm"]["fit"] / row["svc"]["fit"]
            print(f"n={n} svc {row['svc']} ratio {row['ratio']:.2f}", flush=True)
        else:
            row["svc"] = None
            row["svc_projected_s"] = proj
        rows.append(row)
        del X, y
        res = {
            "meta": meta,
            "rows": rows,
            "exponent_dmcsvm": exponents(rows, "dmcsvm"),
            "exponent_svc": exponents(rows, "svc"),
        }
        out.write_text(json.dumps(res, indent=1))
    write_md(res, out.with_suffix(".md"))
    plot(res, out.with_suffix(".png"))


def write_md(res, path):
    lines = [
        "# dmcsvm vs SVC on deformed MNIST digits as n grows\n",
        f"{ {k: v for k, v in res['meta'].items() if k != 'machine_info'} }\n",
        "| n | SVC fit (s) | dmcsvm fit (s) | ratio | SVC acc | dmcsvm acc | SVC SVs | "
        "dmcsvm SVs | rounds | unshrinks | dmcsvm solve / parts (s) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in res["rows"]:
        s, d = r.get("svc"), r["dmcsvm"]
        lines.append(
            f"| {r['n']:,} | {s['fit'] if s else float('nan'):.1f} | {d['fit']:.1f} | "
            f"{(r.get('ratio') or float('nan')):.2f} | "
            f"{100 * s['accuracy'] if s else float('nan'):.2f} | "
            f"{100 * d['accuracy']:.2f} | {s['n_sv'] if s else '-'} | {d['n_sv']} | "
            f"{d['rounds']} | "
            f"{d['unshrinks']} | {d['t_solve']:.1f} / {d['t_parts']:.1f} |"
        )
    lines.append("\nGrowth exponents (fit time ~ n^e between consecutive sizes):\n")
    for side in ("svc", "dmcsvm"):
        lines.append(
            f"- {side}: "
            + ", ".join(
                f"{e['from']:,}->{e['to']:,}: {e['exponent']:.2f}" for e in res[f"exponent_{side}"]
            )
        )
    Path(path).write_text("\n".join(lines) + "\n")


def plot(res, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for side, mk in (("svc", "s-"), ("dmcsvm", "o-")):
        pts = [(r["n"], r[side]["fit"]) for r in res["rows"] if r.get(side)]
        if pts:
            ax.loglog(
                *zip(*pts, strict=False), mk, label=side if side == "dmcsvm" else "SVC (LIBSVM)"
            )
    ax.set_xlabel("training rows")
    ax.set_ylabel("fit time (s)")
    ax.set_title("Deformed MNIST digits, both at defaults")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
