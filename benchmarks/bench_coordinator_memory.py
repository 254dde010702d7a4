"""The coordinator's memory against the number of rows (docs/design.md, 'The coordinator's size'): a
fit streamed from a zarr store on a LocalCluster, with the coordinator (this process) sampled for
its resident memory.

For each ``n`` a synthetic store (``d`` features, ``m`` Gaussian classes, float32) is written to a
temporary directory (deleted afterwards), then ``MulticlassSVC(client=...)`` (q = 1) and
``MultiPrototypeSVC(n_prototypes=q, kernel='rbf', solver='rounds')`` (each further ``q`` of
``--prototypes``: one annealing epoch, the same round budget) -- or, with ``--ovr``,
``OneVsRestSVC`` (one binary SMO problem per class) -- train on it for a fixed number of
rounds, so every ``n`` ends with about the same support set.  A thread samples this
process's RSS every 20 ms; the report gives the peak above the RSS just before the fit, the support
size, and what the dense ``n x P`` float64 coefficient array of the former coordinator would have
taken.  The partitions live in the worker processes and are not counted.  JSON and markdown to
``results/coordinator_memory.json`` (``--out``).

    python benchmarks/bench_coordinator_memory.py [--ns 100000,400000,1600000] [--rounds 4]
        [--prototypes 1,10] [--ovr --out results/coordinator_memory_ovr.json]
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _report  # noqa: E402


class PeakRSS:
    """Samples this process's resident set size in a thread; ``peak`` after ``stop()``."""

    def __init__(self, every=0.02):
        import psutil

        self.proc, self.every, self.peak = psutil.Process(), every, 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(self.every)

    def __enter__(self):
        self.start_rss = self.proc.memory_info().rss
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)


def write_store(url, n, d, m, seed=0, rows=65536):
    """A store of ``n`` rows around ``m`` random centres, written block by block."""
    from dmcsvm.store import write_arrays

    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=2.0, size=(m, d)).astype(np.float32)
    y = rng.integers(0, m, n)
    X = np.empty((n, d), dtype=np.float32)
    for a in range(0, n, rows):
        b = min(a + rows, n)
        X[a:b] = centres[y[a:b]] + rng.standard_normal((b - a, d), dtype=np.float32)
    write_arrays(url, X, y, rows_per_chunk=rows)
    del X


def main(argv=None):
    ap = _report.parser(__doc__.splitlines()[0], "coordinator_memory.json")
    ap.add_argument("--ns", default="100000,400000,1600000")
    ap.add_argument("--d", type=int, default=16)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--prototypes", default="1", help="comma-separated q (1: MulticlassSVC)")
    ap.add_argument(
        "--ovr",
        action="store_true",
        help="OneVsRestSVC (one binary SMO problem per class, --rounds each) in place "
        "of the Crammer-Singer estimators",
    )
    a = ap.parse_args(argv)
    run = _report.Run(__file__, "coordinator memory against n", _report.settings_of(a))
    import warnings

    from distributed import Client, LocalCluster

    from dmcsvm import MulticlassSVC, MultiPrototypeSVC, OneVsRestSVC

    def model(q, client):
        if a.ovr:
            return OneVsRestSVC(client=client, C=1.0, gamma=1.0 / a.d, max_iter=a.rounds)
        if q == 1:
            return MulticlassSVC(
                client=client,
                C=1.0,
                gamma=1.0 / a.d,
                max_iter=a.rounds,
                solver_options={"batch_size": a.batch_size},
            )
        return MultiPrototypeSVC(
            client=client,
            n_prototypes=q,
            kernel="rbf",
            C=1.0,
            gamma=1.0 / a.d,
            max_epochs=1,
            max_iter=a.rounds,
            random_state=0,
            solver_options={"linear_solver": "rounds", "batch_size": a.batch_size},
        )

    qs = [int(v) for v in a.prototypes.split(",")]
    rows = []
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as lc,
        Client(lc) as client,
    ):
        # a first fit on a small store: imports, numba code and Dask's own buffers are in place
        # before the first measured fit
        tmp = tempfile.mkdtemp(prefix="dmcsvm-coordmem-")
        try:
            write_store(str(Path(tmp) / "w.zarr"), 5000, a.d, a.classes)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for q in qs:
                    model(q, client).fit(str(Path(tmp) / "w.zarr"))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for n in (int(v) for v in a.ns.split(",")):
            tmp = tempfile.mkdtemp(prefix="dmcsvm-coordmem-")
            try:
                url = str(Path(tmp) / "train.zarr")
                write_store(url, n, a.d, a.classes)
                for q in qs:
                    est = model(q, client)
                    t = time.perf_counter()
                    with PeakRSS() as mem, warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        est.fit(url)
                    fit_s = time.perf_counter() - t
                    P = est.classes_.shape[0] * q
                    rounds = (
                        int(np.sum(est.n_iter_))
                        if a.ovr
                        else int(len(est.history_["n_active"]))
                        if q > 1
                        else est.n_iter_
                    )
                    rows.append(
                        dict(
                            n=n,
                            q=q,
                            estimator=type(est).__name__,
                            rounds=rounds,
                            n_sv=int(len(est.support_)),
                            fit_s=fit_s,
                            rss_before_mb=mem.start_rss / 2**20,
                            peak_above_mb=(mem.peak - mem.start_rss) / 2**20,
                            dense_B_mb=n * P * 8 / 2**20,
                            labels_mb=n * 8 / 2**20,
                        )
                    )
                    print(rows[-1], flush=True)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    out = run.envelope(rows, d=a.d, classes=a.classes, batch_size=a.batch_size, ovr=a.ovr)
    _report.write(out, a.out, markdown(out))


def markdown(out) -> str:
    r0 = out["results"]
    ovr = bool(out.get("ovr"))
    what = "OneVsRestSVC" if ovr else "MulticlassSVC and MultiPrototypeSVC"
    lines = [
        f"# Coordinator memory against n ({what} on a LocalCluster, store streamed)",
        "",
        _report.machine_line(out),
        _report.load_line(out),
        "",
        f"Synthetic store: d = {out['d']} float32 features, {out['classes']} classes; RBF, "
        f"C = 1, batch {out['batch_size']}, a fixed number of rounds"
        f"{' per binary problem' if ovr else ''} so the support set is about the same for "
        f"every n; 2 worker processes hold the partitions.  Peak RSS of the coordinator "
        f"process above its RSS just before the fit (sampled every 20 ms).",
        "",
        *_report.md_table(
            [
                "n",
                "estimator",
                "q",
                "rounds",
                "support",
                "fit s",
                "peak above start MB",
                "dense n x P B would be MB",
                "labels (int64) MB",
            ],
            [
                [
                    f"{r['n']:,}",
                    r.get(
                        "estimator", "MulticlassSVC" if r.get("q", 1) == 1 else "MultiPrototypeSVC"
                    ),
                    r.get("q", 1),
                    r["rounds"],
                    r["n_sv"],
                    f"{r['fit_s']:.1f}",
                    f"{r['peak_above_mb']:.1f}",
                    "-" if ovr else f"{r['dense_B_mb']:.1f}",
                    f"{r['labels_mb']:.1f}",
                ]
                for r in r0
            ],
            "rlrrrrrrr",
        ),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
