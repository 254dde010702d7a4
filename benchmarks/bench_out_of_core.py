"""Out-of-core training: a zarr store several times larger than the Dask workers' memory limits.

A synthetic 10-class RBF problem with wide rows (default 1,000,000 x 2048 float32 = 8.2 GB) is
written to a temporary zarr store (streamed, one chunk at a time), then trained by
``MulticlassSVC(client=<LocalCluster 2 workers x 1 thread, memory_limit 900 MiB each>)`` directly
from the store path.  The partitions find that their rows cannot fit (``data_in_memory='auto'``),
re-read them from the store chunk by chunk every round, and keep kernel columns in the on-disk
zarr tier behind a small in-memory LRU.

Recorded (JSON + markdown):

- store size vs the workers' total memory limit (goal: >= 4x);
- that training finishes, that no worker was restarted (same worker processes before and after)
  and no worker paused/spilled/was killed for memory (the workers' logs), and each worker's peak
  RSS sampled every 0.1 s (goal: <= its limit);
- time per kernel row: the partitions' kernel time divided by the kernel columns they computed,
  normalised per row element (ns per n*d), against an in-memory, in-process run on a subset of the
  same store (``--subset`` rows) in the same script;
- the share of kernel columns served from the memory LRU, from the zarr tier, and recomputed,
  with the bytes of X re-read.

    python benchmarks/bench_out_of_core.py                  # the full run (several minutes)
    python benchmarks/bench_out_of_core.py --quick          # 100k x 512, 2 x 700 MiB (smoke test)
The store is written under ``--tmp`` (default: the system temporary directory) and deleted.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _report

M = 10  # classes
K_DIM = 8  # intrinsic dimension: classes are Gaussian blobs in K_DIM dimensions ...
SPREAD = 8.0  # ... with centres ~ N(0, SPREAD^2) and unit within-class noise (--spread),
NOISE = 0.01  # embedded in d wide features by a random projection, plus isotropic noise
# (wide rows of low intrinsic dimension, like real data; i.i.d. Gaussian rows in 2048 dimensions
# would make every pair of points equidistant and every point a support vector)


def _centres(d, seed):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=SPREAD, size=(M, K_DIM))
    proj = (rng.normal(size=(K_DIM, d)) / np.sqrt(d)).astype(np.float32)
    return centres, proj


def _labels(n, seed):
    return np.random.default_rng(seed + 1).integers(0, M, n).astype(np.int64)


def _block(lo, hi, d, seed, centres, y):
    centres, proj = centres
    rng = np.random.default_rng([seed, lo])
    Z = (centres[y[lo:hi]] + rng.standard_normal((hi - lo, K_DIM))).astype(np.float32)
    X = rng.standard_normal((hi - lo, d), dtype=np.float32)
    X *= NOISE
    X += Z @ proj
    return X


def write_store(path, n, d, rows_per_chunk, seed=0):
    """Stream the synthetic problem into a dmcsvm store, one row block at a time."""
    import dask
    import dask.array as da

    from dmcsvm.store import from_dask

    centres, y = _centres(d, seed), _labels(n, seed)
    blocks = [
        da.from_delayed(
            dask.delayed(_block)(lo, min(lo + rows_per_chunk, n), d, seed, centres, y),
            shape=(min(lo + rows_per_chunk, n) - lo, d),
            dtype=np.float32,
        )
        for lo in range(0, n, rows_per_chunk)
    ]
    X = da.concatenate(blocks, axis=0)
    with dask.config.set(scheduler="threads"):
        return from_dask(X, y, path, rows_per_chunk=rows_per_chunk)


# ------------------------------------------------------------------------ worker memory watch
def _start_rss_sampler(dask_worker=None, interval=0.1):
    """Runs on each worker: a daemon thread keeps the process's peak RSS."""
    import psutil

    proc = psutil.Process()
    state = {"peak": proc.memory_info().rss, "stop": False}

    def loop():
        while not state["stop"]:
            state["peak"] = max(state["peak"], proc.memory_info().rss)
            time.sleep(interval)

    threading.Thread(target=loop, daemon=True, name="dmcsvm-rss-sampler").start()
    dask_worker._dmcsvm_rss = state
    return os.getpid()


def _stop_rss_sampler(dask_worker=None):
    state = dask_worker._dmcsvm_rss
    state["stop"] = True
    return state["peak"]


def _memory_trouble(logs) -> list[str]:
    """Log lines in which Dask says a worker paused, spilled, or was killed/restarted for memory."""
    bad = ("paused", "spill", "memory limit", "Restarting worker", "exceeded", "Memory use is high")
    out = []
    for worker, lines in logs.items():
        for level, msg in lines:
            if any(b.lower() in msg.lower() for b in bad):
                out.append(f"{worker}: {level}: {msg[:200]}")
    return out


def _kernel_row_cost(est, d):
    """Partition seconds per kernel element (ns per entry x feature): the kernel blocks alone,
    and everything the partitions did (I/O, updates and selection included), over the entries
    they computed (columns x the rows active then; after shrinking a column covers fewer rows)."""
    st = est.engine_stats_
    elems = sum(p["kernel_elements"] for p in st) * d
    if not elems:
        return 0.0, 0.0
    return (
        sum(p["kernel_s"] for p in st) / elems * 1e9,
        sum(p["step_s"] for p in st) / elems * 1e9,
    )


def _cache_share(est):
    st = est.engine_stats_
    comp = sum(p["rows_computed"] for p in st)
    disk = sum(p["rows_disk"] for p in st)
    mem = sum(p["rows_cached"] for p in st) - disk
    tot = max(comp + disk + mem, 1)
    return {
        "columns_computed": comp,
        "columns_from_memory_lru": mem,
        "columns_from_zarr": disk,
        "share_computed": comp / tot,
        "share_memory": mem / tot,
        "share_zarr": disk / tot,
        "x_bytes_reread": sum(p["x_bytes_read"] for p in st),
        "zarr_bytes_read": sum(p["disk_bytes_read"] for p in st),
        "zarr_bytes_written": sum(p["disk_bytes_written"] for p in st),
        "compact_copies_written": sum(p["compact_writes"] for p in st),
        "compact_bytes_read": sum(p["compact_bytes_read"] for p in st),
    }


def main(argv=None):
    global SPREAD
    p = _report.parser(__doc__, "out_of_core.json")
    p.add_argument("--n", type=int, default=1_050_000)
    p.add_argument("--d", type=int, default=2048)
    p.add_argument("--memory-limit", default="900MiB", help="per worker")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument(
        "--subset", type=int, default=50_000, help="rows of the in-memory comparison run"
    )
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--cache-size", type=float, default=64.0, help="memory LRU, MB (all partitions)")
    p.add_argument("--disk-cache-size", type=float, default=8192.0, help="zarr tier, MB")
    p.add_argument("--C", type=float, default=1.0)
    p.add_argument("--max-iter", type=int, default=400)
    p.add_argument("--tmp", default=None, help="directory for the temporary store")
    p.add_argument(
        "--data-in-memory",
        default="auto",
        choices=["auto", "false"],
        help="'false' forces streaming (the quick run's data would fit)",
    )
    p.add_argument("--verbose", action="store_true", help="progress bar of the out-of-core fit")
    p.add_argument(
        "--spread",
        type=float,
        default=SPREAD,
        help="scale of the class centres (4: overlapping classes; at a million rows "
        "40%% of them still violated the margin after 200 rounds of batch 512, "
        "in memory too)",
    )
    p.add_argument("--quick", action="store_true")
    a = p.parse_args(argv)
    SPREAD = a.spread
    if a.quick:
        a.n, a.d, a.memory_limit, a.subset = 100_000, 512, "700MiB", 10_000
        a.data_in_memory = "false"
        a.out = str(Path(a.out).with_name("out_of_core_quick.json"))
    from dask.utils import parse_bytes
    from distributed import Client, LocalCluster

    from dmcsvm import MulticlassSVC
    from dmcsvm.store import default_rows_per_chunk

    run = _report.Run(
        __file__,
        "out-of-core training from a zarr store larger than the workers' memory",
        _report.settings_of(a),
    )
    tmp = tempfile.mkdtemp(prefix="dmcsvm-ooc-", dir=a.tmp)
    limit = parse_bytes(a.memory_limit)
    gamma = 1.0 / (2.0 * K_DIM)  # about exp(-1) within a class
    try:
        url = os.path.join(tmp, "train.zarr")
        rpc = default_rows_per_chunk(a.d, a.n)
        t = time.perf_counter()
        info = write_store(url, a.n, a.d, rpc)
        t_write = time.perf_counter() - t
        store_bytes = sum(f.stat().st_size for f in Path(url).rglob("*") if f.is_file())
        x_bytes = a.n * a.d * 4
        print(
            f"store {a.n} x {a.d}: {store_bytes / 2**30:.2f} GiB on disk "
            f"({x_bytes / 2**30:.2f} GiB of float32) written in {t_write:.0f} s",
            flush=True,
        )
        params = dict(
            C=a.C,
            kernel="rbf",
            gamma=gamma,
            cache_size=a.cache_size,
            max_iter=a.max_iter,
            tol=1e-2,
        )
        options = {"batch_size": a.batch_size, "gap_tol": 1e-2}

        # -- in-memory reference on a subset (same distribution): in-process, rows in memory
        sub_url = os.path.join(tmp, "subset.zarr")
        from dmcsvm.store import read_labels, read_rows, write_arrays

        write_arrays(
            sub_url,
            read_rows(info, 0, a.subset),
            read_labels(info, 0, a.subset),
            rows_per_chunk=rpc,
        )
        MulticlassSVC(n_jobs=a.workers, **dict(params, max_iter=2), solver_options=options).fit(
            sub_url
        )  # warm numba
        t = time.perf_counter()
        ref = MulticlassSVC(
            n_jobs=a.workers,
            solver_options={**options, "data_in_memory": True, "disk_cache_size": 0},
            **params,
        ).fit(sub_url)
        t_ref = time.perf_counter() - t
        ref_ns, ref_all = _kernel_row_cost(ref, a.d)
        print(
            f"in-memory subset {a.subset} rows: fit {t_ref:.1f} s, {ref.n_iter_} rounds, "
            f"{ref_ns:.3f} ns per kernel element",
            flush=True,
        )

        # -- the out-of-core run on a LocalCluster whose memory is far below the store
        with (
            LocalCluster(
                n_workers=a.workers,
                threads_per_worker=1,
                processes=True,
                memory_limit=limit,
                dashboard_address=None,
            ) as lc,
            Client(lc) as client,
        ):
            pids0 = client.run(_start_rss_sampler)
            t = time.perf_counter()
            est = MulticlassSVC(
                client=client,
                verbose=a.verbose,
                solver_options={
                    **options,
                    "data_in_memory": False if a.data_in_memory == "false" else "auto",
                    "disk_cache_size": a.disk_cache_size,
                },
                **params,
            ).fit(url)
            t_fit = time.perf_counter() - t
            peaks = client.run(_stop_rss_sampler)
            pids1 = client.run(os.getpid)
            trouble = _memory_trouble(client.get_worker_logs())
            t = time.perf_counter()
            acc_sub = float(est.score(sub_url))
            t_pred = time.perf_counter() - t
        ns, ns_all = _kernel_row_cost(est, a.d)
        share = _cache_share(est)
        h = est.history_
        res = {
            "n": a.n,
            "d": a.d,
            "classes": M,
            "rows_per_chunk": rpc,
            "store_bytes_on_disk": store_bytes,
            "x_bytes_float32": x_bytes,
            "workers": a.workers,
            "memory_limit_per_worker": limit,
            "store_over_total_memory": store_bytes / (limit * a.workers),
            "settings": {**params, **options},
            "spread": SPREAD,
            "store_write_s": t_write,
            "fit_s": t_fit,
            "rounds": int(est.n_iter_),
            "converged": bool(est.converged_),
            "n_support": int(len(est.support_)),
            "final_gap": float(h["gap"][-1]),
            "final_max_psi": float(h["max_psi"][-1]),
            "all_partitions_streamed": not any(p["in_memory"] for p in est.engine_stats_),
            "workers_restarted": sorted(pids0.values()) != sorted(pids1.values()),
            "memory_log_lines": trouble,
            "peak_rss_per_worker": {w: int(v) for w, v in peaks.items()},
            "peak_rss_over_limit": max(peaks.values()) / limit,
            "kernel_ns_per_element": ns,
            "partition_ns_per_element": ns_all,
            "subset": {
                "n": a.subset,
                "fit_s": t_ref,
                "rounds": int(ref.n_iter_),
                "kernel_ns_per_element": ref_ns,
                "partition_ns_per_element": ref_all,
            },
            "kernel_cost_ratio_streamed_over_memory": ns / ref_ns if ref_ns else None,
            "partition_cost_ratio_streamed_over_memory": ns_all / ref_all if ref_all else None,
            "cache": share,
            "time_split_s": {
                k: float(np.sum(h[k]))
                for k in ("t_round", "t_solve", "t_parts", "t_kernel", "t_update", "t_select")
            },
            "accuracy_on_subset_rows": acc_sub,
            "predict_subset_s": t_pred,
            "engine_stats": est.engine_stats_,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    goals = {
        "store >= 4x workers' total memory limit": res["store_over_total_memory"] >= 4.0,
        "training finished": res["converged"] or res["rounds"] >= a.max_iter,
        "no worker restarted or paused/killed for memory": (
            not res["workers_restarted"] and not res["memory_log_lines"]
        ),
        "peak RSS per worker <= limit": res["peak_rss_over_limit"] <= 1.0,
    }
    out = run.envelope(res, goals=goals)
    r, c = res, res["cache"]
    md = [
        "# Out-of-core training (zarr store larger than the workers' memory)",
        "",
        _report.machine_line(out)
        + f"  {out['machine']['mem_gib']} GiB.  "
        + _report.load_line(out),
        "",
        f"Store: {r['n']:,} x {r['d']} float32, {M} classes (centre spread {r['spread']:g}), "
        f"{r['store_bytes_on_disk'] / 2**30:.2f} GiB "
        f"on disk; LocalCluster {r['workers']} workers x 1 thread x "
        f"{r['memory_limit_per_worker'] / 2**30:.2f} GiB -> store = "
        f"{r['store_over_total_memory']:.1f}x the workers' total memory limit.",
        "",
        f"Settings: {r['settings']}.",
        "",
        "| | value |",
        "|---|---|",
        f"| fit time | {r['fit_s']:.0f} s, {r['rounds']} rounds, converged={r['converged']}, "
        f"gap {r['final_gap']:.2e}, {r['n_support']} SVs |",
        f"| partitions streamed their rows | {r['all_partitions_streamed']} |",
        f"| workers restarted / memory warnings | {r['workers_restarted']} / "
        f"{len(r['memory_log_lines'])} |",
        "| peak RSS per worker | "
        + ", ".join(f"{v / 2**20:.0f} MiB" for v in r["peak_rss_per_worker"].values())
        + f" (limit {r['memory_limit_per_worker'] / 2**20:.0f} MiB) |",
        "| ns per kernel entry x feature, streamed: kernel blocks (zarr-tier reads included) "
        "/ all partition work | "
        f"{r['kernel_ns_per_element']:.3f} / {r['partition_ns_per_element']:.3f} |",
        f"| same, in-memory subset ({r['subset']['n']:,} rows, in-process) | "
        f"{r['subset']['kernel_ns_per_element']:.3f} / "
        f"{r['subset']['partition_ns_per_element']:.3f} |",
        f"| ratio streamed / in memory | {r['kernel_cost_ratio_streamed_over_memory']:.2f} / "
        f"{r['partition_cost_ratio_streamed_over_memory']:.2f} |",
        f"| kernel columns recomputed / from memory LRU / from zarr | {c['columns_computed']} / "
        f"{c['columns_from_memory_lru']} / {c['columns_from_zarr']} "
        f"({100 * c['share_computed']:.0f} / {100 * c['share_memory']:.0f} / "
        f"{100 * c['share_zarr']:.0f} %) |",
        f"| X re-read / zarr tier read / written | {c['x_bytes_reread'] / 2**30:.1f} / "
        f"{c['zarr_bytes_read'] / 2**30:.2f} / {c['zarr_bytes_written'] / 2**30:.2f} GiB |",
        f"| compact copies of the active rows written / read from them | "
        f"{c['compact_copies_written']} / {c['compact_bytes_read'] / 2**30:.2f} GiB |",
        "",
        "Goals: " + "; ".join(f"{k}: {'met' if v else 'NOT met'}" for k, v in goals.items()),
        "",
    ]
    _report.write(out, a.out, "\n".join(md))
    print("\n".join(md))
    return out


if __name__ == "__main__":
    main()
