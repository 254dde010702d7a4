"""dmcsvm on a Dask LocalCluster against in-process, both at defaults on the same cores.

Issue 39 asks that ``MulticlassSVC(client='local')``, the demo's way, take at most 1.1x the
in-process fit on the same cores. Three ways to fit every real set of ``_data.DEFAULT_SETS``, each
at every default (C=1, gamma='scale', n_jobs=None) on float64 input as read, in one process:
in-process (``MulticlassSVC()``), alone before any cluster starts; ``client='local'``, alternated
with in-process fits, its LocalCluster closed before each set's fits, so that its first fit
starts one as a script that fits once does and its later fits reuse it
(``dmcsvm.close_local_clusters``); and on a LocalCluster of Dask's defaults already running (two
worker processes of one thread each here: the cores of this machine), alternated with in-process
fits. Only one cluster is alive at a time: idle workers and schedulers beside a fit slow it on
two cores. Reports the best and first fit of each, the ratios to
in-process, and whether the models are equal bit for bit. ``--deformed N`` adds the first N rows of
the deformed digits (:mod:`deformed_digits`, float64 in memory), where the fits are long enough
to show what the fixed costs weigh there. Writes ``results/local_cluster.json`` and ``.md``.

Usage::

    python benchmarks/bench_local_cluster.py [--data-dir ../shared/data] [--repeat 3]
    python benchmarks/bench_local_cluster.py --deformed 25000   # + deformed digits (~5 min)
    python benchmarks/bench_local_cluster.py --datasets usps,letter --repeat 2 --out /tmp/lc.json
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _data  # noqa: E402
import _report  # noqa: E402

MODES = ("in-process", "running LocalCluster", "client='local'")
#: in-process fits of the set before any cluster is started: the baseline of the bold ratio
ALONE = "in-process, no cluster alive"
#: in-process fits alternated with the running LocalCluster's (that cluster alive, no other)
BESIDE = "in-process, beside the running LocalCluster"


def _fit(make, X, y):
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = make().fit(X, y)
    return time.perf_counter() - t, m


def _stats(times, m) -> dict:
    return {
        "fits_s": times,
        "best_s": min(times),
        "first_s": times[0],
        "rounds": int(m.n_iter_),
        "solve_s": float(np.sum(m.history_["t_solve"])),
        "parts_s": float(np.sum(m.history_["t_parts"])),
        # 'inprocess' with a client: the rounds ran in the coordinator's block, no worker
        "executor": m.engine_stats_[0]["executor"],
    }


def alternate(data, makers: dict, repeat, warm=()) -> dict:
    """The fits of ``makers`` (mode -> estimator factory) ``repeat`` times, alternated, after
    untimed warm-ups on 500 rows for the modes in ``warm``; the first mode is the reference
    of the ratios and of 'equal' (dual coefficients bit for bit)."""
    Xtr, ytr, Xte, yte = data
    for mode in warm:
        _fit(makers[mode], Xtr[:500], ytr[:500])
    times: dict = {m: [] for m in makers}
    models: dict = {}
    for _ in range(repeat):
        for mode, make in makers.items():
            t, models[mode] = _fit(make, Xtr, ytr)
            times[mode].append(t)
    ref, *_ = makers
    out = {}
    for mode in makers:
        out[mode] = _stats(times[mode], models[mode])
        out[mode]["accuracy"] = float(models[mode].score(Xte, yte))
        out[mode]["equal_to_in_process"] = bool(
            np.array_equal(models[mode].dual_coef_, models[ref].dual_coef_)
        )
        out[mode]["ratio_best"] = out[mode]["best_s"] / out[ref]["best_s"]
        out[mode]["ratio_first"] = out[mode]["first_s"] / out[ref]["first_s"]
    return out


def run_local(data, repeat) -> dict:
    """In-process fits alternated with ``client='local'`` ones, with no other cluster alive: the
    set's first ``client='local'`` fit starts its cluster (no warm-up: its time is the 'first'
    column), the later ones reuse it; it is closed at the end."""
    from dmcsvm import MulticlassSVC, close_local_clusters

    close_local_clusters()
    makers = {MODES[0]: MulticlassSVC, MODES[2]: lambda: MulticlassSVC(client="local")}
    try:
        return alternate(data, makers, repeat, warm=(MODES[0],))
    finally:
        close_local_clusters()


def run_running(data, client, repeat) -> dict:
    """In-process fits alternated with fits on a running LocalCluster of Dask's defaults."""
    from dmcsvm import MulticlassSVC

    makers = {BESIDE: MulticlassSVC, MODES[1]: lambda: MulticlassSVC(client=client)}
    return alternate(data, makers, repeat, warm=tuple(makers))


def run_alone(data, repeat) -> dict:
    """In-process fits only, ``repeat`` times after an untimed warm-up on 500 rows, while no
    cluster runs in this process or beside it: the baseline of the 'alone' ratios."""
    from dmcsvm import MulticlassSVC

    Xtr, ytr = data[0], data[1]
    _fit(MulticlassSVC, Xtr[:500], ytr[:500])
    times = [_fit(MulticlassSVC, Xtr, ytr)[0] for _ in range(repeat)]
    return {"fits_s": times, "best_s": min(times), "first_s": times[0]}


def _with_alone(r: dict, alone: dict) -> dict:
    """The set's modes with the in-process fits alone and the cluster modes' ratios to them."""
    r[ALONE] = alone
    for mode in MODES[1:]:
        r[mode]["ratio_best_alone"] = r[mode]["best_s"] / alone["best_s"]
        r[mode]["ratio_first_alone"] = r[mode]["first_s"] / alone["first_s"]
    return r


def _deformed(n, data_dir):
    """The first ``n`` deformed training digits (float64, as a user's array would be) and the
    5,000 original test digits."""
    import deformed_digits as dd

    return (*dd.training_rows(data_dir, n), *dd.test_set(data_dir))


def table(results) -> str:
    head = ["set", "rows", "in-process alone best / first s",
            "in-process beside client='local' best / first s",
            "client='local' best / first s", "ratio best / first",
            "client='local' / alone best / first",
            "in-process beside running cluster best / first s",
            "running cluster best / first s", "ratio best / first", "equal models",
            "cluster fits ran"]  # fmt: skip
    rows = []
    for name, r in results.items():
        a, b, c, d, z = (r[m] for m in (MODES[0], MODES[1], MODES[2], BESIDE, ALONE))
        rows.append([
            name, f"{r['n_train']:,}",
            f"{z['best_s']:.2f} / {z['first_s']:.2f}",
            f"{a['best_s']:.2f} / {a['first_s']:.2f}",
            f"{c['best_s']:.2f} / {c['first_s']:.2f}",
            f"{c['ratio_best']:.2f} / {c['ratio_first']:.2f}",
            f"**{c['ratio_best_alone']:.2f}** / {c['ratio_first_alone']:.2f}",
            f"{d['best_s']:.2f} / {d['first_s']:.2f}",
            f"{b['best_s']:.2f} / {b['first_s']:.2f}",
            f"{b['ratio_best']:.2f} / {b['ratio_first']:.2f}",
            "yes" if b["equal_to_in_process"] and c["equal_to_in_process"] else "no",
            "on the workers" if c.get("executor", "dask") == "dask" else "in this process",
        ])  # fmt: skip
    return "\n".join(_report.md_table(head, rows, "lrrrrrrrrrll"))


def main(argv=None):
    ap = _report.parser(__doc__.splitlines()[0], "local_cluster.json", data_dir=True)
    ap.add_argument("--datasets", default=",".join(_data.DEFAULT_SETS))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--deformed", type=int, default=0, help="rows of deformed digits (0: none)")
    ap.add_argument("--deformed-repeat", type=int, default=2)
    a = ap.parse_args(argv)
    run = _report.Run(__file__, "LocalCluster vs in-process, defaults", _report.settings_of(a))
    from distributed import Client, LocalCluster

    cores = len(os.sched_getaffinity(0))
    names = a.datasets.split(",")
    datasets = {name: getattr(_data, _data.DEFAULT_SETS[name])(a.data_dir) for name in names}
    if a.deformed:
        datasets[f"deformed {a.deformed // 1000}k"] = _deformed(a.deformed, a.data_dir)
    # the baseline first, before any cluster exists
    alone = {
        name: run_alone(data, a.deformed_repeat if name.startswith("deformed") else a.repeat)
        for name, data in datasets.items()
    }
    # client='local' beside in-process fits, its own cluster the only one alive
    results = {
        name: run_local(data, a.deformed_repeat if name.startswith("deformed") else a.repeat)
        for name, data in datasets.items()
    }
    with LocalCluster(
        n_workers=cores, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster, Client(cluster) as client:  # fmt: skip
        for name, data in datasets.items():
            repeat = a.deformed_repeat if name.startswith("deformed") else a.repeat
            results[name].update(run_running(data, client, repeat))
            results[name]["n_train"] = int(data[0].shape[0])
            results[name]["n_features"] = int(data[0].shape[1])
            _with_alone(results[name], alone[name])
            print(table({name: results[name]}).splitlines()[-1], flush=True)
    import distributed

    fixed = [r[MODES[2]]["first_s"] - r[ALONE]["first_s"] for r in results.values()]
    kept = [r[MODES[2]]["best_s"] - r[ALONE]["best_s"] for r in results.values()]
    out = run.envelope(
        results, repeat=a.repeat, workers=cores, distributed=distributed.__version__,
        local_first_minus_in_process_s=[min(fixed), max(fixed)],
        local_best_minus_in_process_s=[min(kept), max(kept)],
    )  # fmt: skip
    md = [
        "# dmcsvm on a Dask LocalCluster against in-process, both at defaults",
        "",
        _report.machine_line(out, ("numpy", "numba", "distributed")) + "  "
        + _report.load_line(out),
        "",
        f"`MulticlassSVC()` in-process ({cores} threads), with `client='local'` (a "
        f"LocalCluster of {cores} worker processes of one thread, dmcsvm's own: its workers "
        f"keep the memory a fit frees for the next fit) and on a running LocalCluster of "
        f"Dask's defaults of as many workers. Every parameter at its default, float64 input "
        f"as read, features scaled to [-1, 1] on the training rows; best and first of "
        f"{a.repeat} fits. Three phases, one process: in-process fits alone, before any "
        f"cluster was started (the baseline of the bold ratio, the one issue 39 asks about); "
        f"then, set by set, in-process fits alternated with `client='local'` fits, that "
        f"cluster the only one alive (closed before each set: the first fit of a set starts "
        f"one, as a script that fits once does, with its start and the workers' first fit in "
        f"its time; the later fits reuse it); then in-process fits alternated with fits on "
        f"the running cluster, that cluster the only one alive. The plain ratios are to the "
        f"in-process fits of the same phase (idle workers beside them slow them). 'equal "
        f"models': the dual coefficients of both cluster fits equal the in-process fit's bit "
        f"for bit. 'cluster fits ran': a fit whose rounds all run in the coordinator's kernel "
        f"block (every row one working set, the default whenever that block fits the cache "
        f"budget) stays in this process whatever its client and starts no cluster; the others "
        f"run on the workers.",
        "",
        table(results),
        "",
        f"distributed {out['distributed']}. A first `client='local'` fit costs "
        f"{min(fixed):+.1f} to {max(fixed):+.1f} s more than a first in-process fit alone: "
        f"where it runs on the workers, the cluster's start and the workers' first fit (their "
        f"imports and numba cache loads). A later one costs {min(kept):+.2f} to {max(kept):+.2f} s "
        f"(best fits, against the fits alone): on the workers, the rows' placement, the round "
        f"trips and the cluster's processes beside the fit; in this process, the VM's noise.",
        "",
        f"Script runtime {out['script_runtime_s']:.1f} s.",
    ]  # fmt: skip
    outp = _report.write(out, a.out, "\n".join(md))
    print(f"wrote {outp} and {outp.with_suffix('.md')}")
    return out


if __name__ == "__main__":
    main()
