"""Pattern selection x threshold x kernel cache: dual objective versus time (Aiolli & Sperduti 2005,
§5.4, Figs. 8-10).

The paper trains the single-prototype (Crammer-Singer) problem on 5000 NIST digits and plots the
Lagrangian (dual) value against time for the selection strategies KKT / AMG / BMG with the
thresholds MEAN / MAX / logarithmic cooling, first with a kernel cache holding every row it needs
(Figs. 8, 9), then with a cache of only 100 kernel rows (Fig. 10a).  Here:

* data: a stratified subset of ``--n-train`` (default 3000) USPS training digits (256 features in
  [-1, 1]; the closest stored data set to NIST digits), float32; the accuracy of each final model
  is measured on the full USPS test set (2007 digits);
* model: RBF kernel, C=10, gamma='scale' resolved once on the subset; optimizer ``all_pairs``
  (the paper's SMO-like "ALL", AllPairsOptimizeOnPatterns); ``tol=1e-3``, ``gap_tol=1e-3``;
* selection in {kkt, amg, bmg} x threshold in {mean, max (threshold_fraction=0.5), log} x cache in
  {full: every kernel column fits, 100 rows: ``cache_size`` = 100 columns of every partition};
* ``batch_size=1`` is the papers' sequential algorithm (one pattern per round, all scores updated
  after it).  In dmcsvm a round with ``batch_size=1`` always optimizes the pattern of largest
  ``V_p`` (the threshold only filters which candidates may join a batch, and the best one always
  may), so at batch size 1 the three thresholds give *the same* sequence of rounds; the script
  checks this and records it.  The paper's threshold acts on a sweep (every pattern with
  ``V_p > theta`` is optimized in turn), which corresponds to dmcsvm's batched rounds, so the grid
  is also run at the default ``batch_size`` (1000), where the threshold matters.

Curves are ``history_['elapsed']`` (seconds since the solver started) against ``history_['dual']``,
downsampled (log-spaced in round number) to at most 200 points each in the JSON.  Outputs:
``--out`` (JSON), ``selection.png`` (batch size 1: two panels, full cache / 100-row cache, log time
axis) and ``selection_batch<B>.png`` for every other batch size.

Usage::

    python benchmarks/bench_selection.py [--data-dir ../shared/data] [--out results/selection.json]
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _data  # noqa: E402
import _report

SELECTIONS = ("kkt", "amg", "bmg")
THRESHOLDS = ("mean", "max", "log")
MAX_POINTS = 200


def cache_mb(n, n_parts, n_cols, itemsize=4):
    """Cache budget (MB, as dmcsvm's ``cache_size``) holding ``n_cols`` kernel columns of every
    partition: dmcsvm splits ``cache_size`` evenly over its ``n_parts`` row partitions and a column
    of a partition holds its (at most ``ceil(n / n_parts)``) active rows in the data's dtype."""
    rows = math.ceil(n / n_parts)
    return n_cols * rows * itemsize * n_parts / 2**20


def downsample_idx(n, k=MAX_POINTS):
    """At most ``k`` indices of ``range(n)``, log-spaced (dense at the start), first and last
    kept."""
    if n <= k:
        return np.arange(n)
    idx = np.unique(np.round(np.geomspace(1, n, k - 1)).astype(np.int64) - 1)
    idx = np.unique(np.concatenate([[0], idx, [n - 1]]))
    while idx.shape[0] > k:  # rounding can leave a few too many
        idx = np.delete(idx, np.arange(1, idx.shape[0] - 1, 2)[: idx.shape[0] - k])
    return idx


def _g(v, digits=7):
    return float(f"{float(v):.{digits}g}")


def time_to(el, dual, level):
    hit = np.flatnonzero(dual >= level)
    return float(el[hit[0]]) if hit.shape[0] else None


def run_one(
    X,
    y,
    Xte,
    yte,
    *,
    C,
    gamma,
    selection,
    threshold,
    cache,
    batch_size,
    n_jobs,
    optimizer,
    gap_tol,
    tol,
    max_iter,
):
    from dmcsvm import MulticlassSVC

    m = MulticlassSVC(
        C=C,
        kernel="rbf",
        gamma=gamma,
        tol=tol,
        cache_size=cache,
        max_iter=max_iter,
        n_jobs=n_jobs,
        solver_options={
            "optimizer": optimizer,
            "pattern_selection": selection,
            "threshold": threshold,
            "gap_tol": gap_tol,
            "batch_size": batch_size,
        },
    )
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        t = time.perf_counter()
        m.fit(X, y)
        fit_s = time.perf_counter() - t
    acc = float(m.score(Xte, yte))
    h = m.history_
    return m, {
        "selection": selection,
        "threshold": threshold,
        "batch_size": batch_size,
        "cache_size_mb": cache,
        "fit_time_s": fit_s,
        "rounds": int(m.n_iter_),
        "converged": bool(m.converged_),
        "final_dual": float(h["dual"][-1]),
        "final_gap": float(h["gap"][-1]),
        "max_psi": float(h["max_psi"][-1]),
        "n_support": int(m.support_.shape[0]),
        "test_accuracy": acc,
        "kernel_rows_computed": int(h["rows_computed"][-1]),
        "kernel_rows_cached": int(h["rows_cached"][-1]),
        # summed over rounds; kernel / update / select are the slowest partition's time per round
        "time_split_s": {
            k: float(np.sum(h[k]))
            for k in ("t_kernel", "t_update", "t_select", "t_solve", "t_round")
        },
        "warnings": [str(x.message)[:200] for x in w],
    }


def plot(runs, batch_size, caches, path, n, dstar):
    """Two columns (full cache / small cache); top: dual vs time, bottom: D* - D vs time (log)."""
    plt = _report.pyplot()
    from matplotlib.ticker import NullFormatter

    colors = {"kkt": "tab:red", "amg": "tab:green", "bmg": "tab:blue"}
    styles = {"mean": "-", "max": "--", "log": ":"}
    fig, axes = plt.subplots(
        2,
        len(caches),
        figsize=(6.2 * len(caches), 7.6),
        sharex=True,
        sharey="row",
        gridspec_kw={"height_ratios": [3, 2]},
    )
    axes = np.asarray(axes).reshape(2, len(caches))
    for j, (cname, cmb) in enumerate(caches):
        top, bot = axes[0, j], axes[1, j]
        for r in runs:
            if r["batch_size"] != batch_size or r["cache"] != cname:
                continue
            el, du = np.maximum(np.asarray(r["_elapsed"]), 1e-5), np.asarray(r["_dual"])
            kw = dict(color=colors[r["selection"]], ls=styles[r["threshold"]], lw=1.3)
            top.plot(
                el,
                du,
                label=f"{r['selection'].upper()}-{r['threshold'].upper()} "
                f"({r['fit_time_s']:.1f} s)",
                **kw,
            )
            bot.plot(el, np.maximum(dstar - du, 1e-4), **kw)
        for ax in (top, bot):
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.grid(True, which="major", alpha=0.3)
        top.set_ylim(0, 1.03 * dstar)
        bot.set_yscale("log")
        bot.set_xlabel("time since the solver started (s, log scale)")
        top.set_title(f"{cname} cache ({cmb:.3g} MB)")
        top.legend(fontsize=7, loc="lower right")
    axes[0, 0].set_ylabel("dual objective (Lagrangian) D")
    axes[1, 0].set_ylabel("D* - D  (D* = best final dual)")
    fig.suptitle(
        f"USPS subset n={n}, RBF, batch_size={batch_size}"
        + (
            " (sequential; the three threshold curves of a selection are the same rounds)"
            if batch_size == 1
            else ""
        ),
        fontsize=10,
    )
    fig.tight_layout()
    _report.save_figure(fig, path, dpi=100)


def main(argv=None):
    p = _report.parser(__doc__, "selection.json", data_dir=True)
    p.add_argument("--n-train", type=int, default=3000)
    p.add_argument("--n-jobs", type=int, default=2)
    p.add_argument("--C", type=float, default=10.0)
    p.add_argument("--optimizer", default="all_pairs")
    p.add_argument("--batch-sizes", default="1,1000", help="comma separated; 1 = sequential")
    p.add_argument("--cache-rows", type=int, default=100, help="columns held by the small cache")
    p.add_argument("--tol", type=float, default=1e-3)
    p.add_argument("--gap-tol", type=float, default=1e-3)
    p.add_argument("--max-iter", type=int, default=200000)
    p.add_argument("--selections", default=",".join(SELECTIONS))
    p.add_argument("--thresholds", default=",".join(THRESHOLDS))
    a = p.parse_args(argv)
    run = _report.Run(
        __file__,
        "pattern selection / threshold / cache (Aiolli & Sperduti 2005 Figs. 8-10)",
        _report.settings_of(a),
    )
    out_path = Path(a.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)

    Xtr, ytr, Xte, yte = _data.load_usps(a.data_dir)
    X, y = _data.stratified_subset(Xtr, ytr, a.n_train, random_state=0)
    X, Xte = X.astype(np.float32), Xte.astype(np.float32)
    n = X.shape[0]
    gamma = float(1.0 / (X.shape[1] * X.astype(np.float64).var()))
    n_parts = max(1, min(a.n_jobs, n))
    caches = [
        ("full", max(200.0, 1.05 * cache_mb(n, n_parts, n))),
        (f"{a.cache_rows}-row", cache_mb(n, n_parts, a.cache_rows)),
    ]
    batches = [int(b) for b in a.batch_sizes.split(",")]
    sels, thrs = a.selections.split(","), a.thresholds.split(",")
    common = dict(
        C=a.C,
        gamma=gamma,
        n_jobs=a.n_jobs,
        optimizer=a.optimizer,
        gap_tol=a.gap_tol,
        tol=a.tol,
        max_iter=a.max_iter,
    )

    # warm-up: numba compilation / cache loading for every selection, outside the timings
    for sel in sels:
        run_one(
            X[:300],
            y[:300],
            Xte[:50],
            yte[:50],
            selection=sel,
            threshold="mean",
            cache=200.0,
            batch_size=1,
            **common,
        )
        run_one(
            X[:300],
            y[:300],
            Xte[:50],
            yte[:50],
            selection=sel,
            threshold="mean",
            cache=200.0,
            batch_size=100,
            **common,
        )

    runs = []
    for bs in batches:
        for cname, cmb in caches:
            for sel in sels:
                for thr in thrs:
                    m, rec = run_one(
                        X,
                        y,
                        Xte,
                        yte,
                        selection=sel,
                        threshold=thr,
                        cache=cmb,
                        batch_size=bs,
                        **common,
                    )
                    rec["cache"] = cname
                    rec["_elapsed"] = np.asarray(m.history_["elapsed"], dtype=np.float64)
                    rec["_dual"] = np.asarray(m.history_["dual"], dtype=np.float64)
                    runs.append(rec)
                    print(
                        f"bs={bs:<5d} {cname:>8s} {sel}-{thr:<4s} {rec['fit_time_s']:7.2f} s "
                        f"rounds={rec['rounds']:<6d} dual={rec['final_dual']:.4f} "
                        f"rows computed/cached={rec['kernel_rows_computed']}/"
                        f"{rec['kernel_rows_cached']} acc={rec['test_accuracy']:.4f}",
                        flush=True,
                    )

    dstar = max(r["final_dual"] for r in runs)
    for r in runs:
        r["time_to_99.9pct_dual_s"] = time_to(r["_elapsed"], r["_dual"], 0.999 * dstar)
        r["time_to_99.99pct_dual_s"] = time_to(r["_elapsed"], r["_dual"], 0.9999 * dstar)

    # the thresholds at batch size 1: identical dual sequences?
    same = {}
    for bs in batches:
        for cname, _ in caches:
            for sel in sels:
                ds = [
                    r["_dual"]
                    for r in runs
                    if r["batch_size"] == bs and r["cache"] == cname and r["selection"] == sel
                ]
                same[f"bs={bs} {cname} {sel}"] = bool(
                    all(d.shape == ds[0].shape and np.array_equal(d, ds[0]) for d in ds)
                )

    pngs = []
    for bs in batches:
        png = out_path.with_name("selection.png" if bs == 1 else f"selection_batch{bs}.png")
        plot(runs, bs, caches, png, n, dstar)
        pngs.append(png.name)

    for r in runs:
        idx = downsample_idx(r["_dual"].shape[0])
        r["curve"] = {
            "round": idx.tolist(),
            "elapsed_s": [_g(v, 5) for v in r["_elapsed"][idx]],
            "dual": [_g(v, 8) for v in r["_dual"][idx]],
        }
        del r["_elapsed"], r["_dual"]

    out = run.envelope(
        runs,
        setup={
            "data": f"USPS train, stratified subset of {n} (random_state=0); test: full "
            f"USPS test ({Xte.shape[0]})",
            "dtype": "float32",
            "kernel": "rbf",
            "C": a.C,
            "gamma": gamma,
            "gamma_note": "'scale' on the subset",
            "optimizer": a.optimizer,
            "tol": a.tol,
            "gap_tol": a.gap_tol,
            "max_iter": a.max_iter,
            "n_jobs": a.n_jobs,
            "n_partitions": n_parts,
            "caches_mb": dict(caches),
            "cache_note": f"small cache = {a.cache_rows} columns per partition of ceil(n/n_parts) "
            f"float32 rows each; full = every column (at least 200 MB)",
            "batch_sizes": batches,
            "threshold_fraction": 0.5,
            "log_cooling": "theta_t = 0.999 / log10(t + 10)",
        },
        best_dual=dstar,
        thresholds_give_identical_dual_sequence=same,
        figures=pngs,
    )
    md = markdown(out)
    _report.write(out, out_path, md, compact=True)
    print()
    print(md)
    print(
        f"wrote {out_path} ({out_path.stat().st_size / 1024:.0f} KB), {pngs}; "
        f"{out['script_runtime_s']:.0f} s"
    )
    return out


def markdown(out) -> str:
    """The runs as a table: fit time, rounds, time to 99.9 / 99.99 % of the best dual."""
    f = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    rows = [
        [
            r["batch_size"],
            r["cache"],
            f"{r['selection'].upper()}-{r['threshold'].upper()}",
            f"{r['fit_time_s']:.2f}",
            r["rounds"],
            f(r["time_to_99.9pct_dual_s"]),
            f(r["time_to_99.99pct_dual_s"]),
            f"{r['kernel_rows_computed']} / {r['kernel_rows_cached']}",
            f"{100 * r['test_accuracy']:.2f}",
        ]
        for r in out["results"]
    ]
    return "\n".join(
        [
            "# Pattern selection, threshold and cache (USPS subset)",
            "",
            _report.machine_line(out),
            _report.load_line(out),
            "",
            *_report.md_table(
                [
                    "batch",
                    "cache",
                    "selection-threshold",
                    "fit s",
                    "rounds",
                    "t to 99.9% D*",
                    "t to 99.99% D*",
                    "rows computed / cached",
                    "test acc",
                ],
                rows,
                "rll" + "r" * 6,
            ),
            "",
            (
                "Identical dual sequences over thresholds: "
                f"{out['thresholds_give_identical_dual_sequence']}"
            ),
            "",
        ]
    )


if __name__ == "__main__":
    main()
