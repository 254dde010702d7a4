"""Speed-up over cores on one many-core machine (issue 39 item 4): the deformed digits of
:mod:`deformed_digits` fitted at defaults with 1, 2, 4, ... one-thread Dask workers and with
1, 2, 4, ... in-process threads.

Every fit is ``MulticlassSVC()`` at its defaults (C=1, gamma='scale') on the float64 array a
user reads, tested on the 5,000 originals no training row comes from.  A fit on ``W`` workers
gives its coordinator ``n_jobs=W`` threads too (the coordinator's Gram rows run while the
workers wait), so a point of either sweep uses ``W`` cores; the speed-up is against 1 worker
(1 thread).  Each LocalCluster is started, warmed with a small fit (numba's cache loads) and
closed outside the timed fit.  The JSON is written after every fit, so a run cut short keeps
what it measured; ``--budget-s`` stops starting fits past that many seconds.  ``--report``
writes the markdown table and the plot from the JSON alone (on a machine without the data).

    python benchmarks/bench_node_scaling.py --n 25000 --workers 1,16,8,4,2 --threads 1,16,8,4,2
    python benchmarks/bench_node_scaling.py --n 50000 --plan dask:16,dask:1,inprocess:16
    python benchmarks/bench_node_scaling.py --report
"""

from __future__ import annotations

import json
import os
import sys
import time
from itertools import zip_longest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _report  # noqa: E402
import deformed_digits as dd  # noqa: E402
from bench_deformed_series import _fit_dmcsvm  # noqa: E402


def _summary(r: dict) -> dict:
    """A fit's record without its per-round trajectory (kept only for the 1-core fits)."""
    return {k: v for k, v in r.items() if k != "trajectory"}


def _data_of(a):
    """The training rows and the test set; with ``--data-cache`` read from (or saved to) that
    ``.npz``, so a second run on the same machine skips making them."""
    import numpy as np

    cache = Path(a.data_cache) if a.data_cache else None
    if cache is not None and cache.exists():
        with np.load(cache) as z:
            if int(z["n"]) == a.n:
                return z["X"], z["y"], z["Xte"], z["yte"]
    X, y = dd.training_rows(a.data_dir, a.n)
    Xte, yte = dd.test_set(a.data_dir)
    if cache is not None:
        np.savez(cache, X=X, y=y, Xte=Xte, yte=yte, n=a.n)
    return X, y, Xte, yte


def measure(a) -> None:
    from distributed import Client, LocalCluster

    from dmcsvm import MulticlassSVC

    t0 = time.perf_counter()
    workers = [int(v) for v in a.workers.split(",") if v]
    threads = [int(v) for v in a.threads.split(",") if v]
    run = _report.Run(__file__, "speed-up over cores on one machine", _report.settings_of(a))
    out: dict = {"n": a.n, "fits": []}

    def save():
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        _report.write(run.envelope(out), a.out)

    t = time.perf_counter()
    X, y, Xte, yte = _data_of(a)
    out["make_data_s"] = time.perf_counter() - t
    t = time.perf_counter()
    # numba compiles (or loads its cache): a fit in the block and one in partition rounds
    # (2,000 rows alone would run all their rounds in the coordinator's block)
    MulticlassSVC(n_jobs=1).fit(X[:2000], y[:2000])
    MulticlassSVC(n_jobs=1, solver_options={"batch_size": 500}).fit(X[:2000], y[:2000])
    out["warm_up_s"] = time.perf_counter() - t
    print(f"data {X.shape} in {out['make_data_s']:.1f} s, warm-up {out['warm_up_s']:.1f} s")
    save()

    def record(kind, cores, r, **extra):
        r = {"kind": kind, "cores": cores, "load": list(os.getloadavg()), **r, **extra}
        if cores != 1:
            r = _summary(r)
        out["fits"].append(r)
        print(
            f"{kind} {cores}: fit {r['fit']:.1f} s, {r['rounds']} rounds, solve "
            f"{r['t_solve']:.1f} s, partitions {r['t_parts']:.1f} s, acc {r['accuracy']:.4f}",
            flush=True,
        )
        save()

    on_dask, in_process = [("dask", k) for k in workers], [("inprocess", k) for k in threads]
    plan = on_dask + in_process
    if a.interleave:  # a worker count, then a thread count, ...: a run cut short has both sweeps
        plan = [p for pair in zip_longest(on_dask, in_process) for p in pair if p]
    if a.plan:  # an explicit order, e.g. the fits that matter most first on a short lease
        plan = [(kind, int(k)) for kind, k in (v.split(":") for v in a.plan.split(",") if v)]
    for kind, cores in plan:
        if a.budget_s is not None and time.perf_counter() - t0 > a.budget_s:
            print(f"budget of {a.budget_s} s spent: {kind} {cores} not run")
            out.setdefault("not_run", []).append([kind, cores])
            save()
            continue
        if kind == "inprocess":
            record(kind, cores, _fit_dmcsvm(X, y, Xte, yte, n_jobs=cores))
            continue
        t = time.perf_counter()
        cluster = LocalCluster(
            n_workers=cores, threads_per_worker=1, processes=True, dashboard_address=None
        )
        client = Client(cluster)
        start_s = time.perf_counter() - t
        try:
            MulticlassSVC(client=client, n_jobs=cores, solver_options={"batch_size": 500}).fit(
                X[:2000], y[:2000]
            )
            warm_s = time.perf_counter() - t - start_s
            r = _fit_dmcsvm(X, y, Xte, yte, client=client, n_jobs=cores)
            record(kind, cores, r, cluster_start_s=start_s, cluster_warm_s=warm_s)
        finally:
            client.close(timeout=30)
            cluster.close(timeout=60)
    out["total_s"] = time.perf_counter() - t0
    save()


def report(path) -> str:
    """The markdown table (and a PNG) of a result file: fit time and speed-up per core count."""
    env = json.loads(Path(path).read_text())
    res = env["results"]
    fits = res["fits"]
    base = {
        k: next((f["fit"] for f in fits if f["kind"] == k and f["cores"] == 1), None)
        for k in ("dask", "inprocess")
    }
    ref = base["dask"]
    rows = [
        [
            "Dask workers" if f["kind"] == "dask" else "in-process threads",
            f["cores"],
            f"{f['fit']:.1f}",
            f["rounds"],
            f"{f['t_solve']:.1f}",
            f"{f['t_parts']:.1f}",
            f"{ref / f['fit']:.2f}" if ref else "–",
            f"{base['inprocess'] / f['fit']:.2f}" if base["inprocess"] else "–",
            f"{f['accuracy']:.4f}",
        ]
        for f in sorted(fits, key=lambda f: (f["kind"], f["cores"]))
    ]
    head = ["run", "cores", "fit s", "rounds", "solve s", "partitions s"]
    head += ["speed-up vs 1 worker", "vs 1 in-process thread", "accuracy"]
    lines = _report.md_table(head, rows)
    head = [
        f"# Speed-up over cores: deformed digits, n = {res['n']:,}, defaults",
        "",
        _report.machine_line(env) + "  " + _report.load_line(env),
        "",
        f"Memory {env['machine']['mem_gib']} GiB.  `MulticlassSVC()` at defaults, float64 "
        "input; a fit on W one-thread workers gives its coordinator `n_jobs=W`.  The benchmark "
        "ran alone (each fit's load is in the JSON; a load at the start is the last minute's, "
        "of a run before it).  solve: the coordinator's working-set solves; "
        "partitions: the slowest partition's work per round, summed.",
        "",
    ]
    not_run = res.get("not_run")
    tail = ["", f"Not run (past `--budget-s`): {not_run}."] if not_run else []
    md = "\n".join(head + lines + tail)
    _report.write_text(Path(path).with_suffix(".md"), md + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 4))
        for kind, label in (("dask", "Dask workers"), ("inprocess", "in-process threads")):
            pts = sorted((f["cores"], f["fit"]) for f in fits if f["kind"] == kind)
            if pts and ref:
                ax.plot([p[0] for p in pts], [ref / p[1] for p in pts], "o-", label=label)
        top = max(f["cores"] for f in fits)
        ax.plot([1, top], [1, top], ":", color="grey", label="linear")
        ax.set(xlabel="cores", ylabel="speed-up vs 1 worker", xscale="log", yscale="log")
        ax.set_title(f"deformed digits, n = {res['n']:,}, defaults")
        ax.legend()
        fig.tight_layout()
        fig.savefig(Path(path).with_suffix(".png"), dpi=100)
    except ImportError:
        pass
    return md


def main(argv=None) -> None:
    ap = _report.parser(__doc__, "node_scaling.json", data_dir=True)
    ap.add_argument("--n", type=int, default=25000)
    ap.add_argument("--workers", default="1,2,4,8,16")
    ap.add_argument("--threads", default="1,2,4,8,16")
    ap.add_argument("--interleave", action="store_true", help="alternate the two sweeps")
    ap.add_argument(
        "--plan", default=None, help="the fits in this order, e.g. dask:16,dask:1,inprocess:16"
    )
    ap.add_argument("--data-cache", default=None, help="an .npz to keep the data in between runs")
    ap.add_argument(
        "--budget-s", type=float, default=None, help="start no fit past this many seconds"
    )
    ap.add_argument("--report", action="store_true", help="only the table and plot of --out")
    a = ap.parse_args(argv)
    if not a.report:
        measure(a)
    print(report(a.out))


if __name__ == "__main__":
    main()
