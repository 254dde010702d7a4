"""Achieved GFLOP/s of ``dmcsvm.kernels.kernel_block`` against numpy's sgemm / dgemm of the same
shapes.

A kernel block of the engine is ``K(X_B, X_part)``: the round's batch (``b`` rows) against a
partition's active rows (``n`` rows), ``d`` features, computed as one GEMM ``G = X_B @ X_part.T``
plus a numba element-wise pass (rbf: exponent in float64 then numpy's SIMD ``exp``; poly: integer
power; both in place on the GEMM's output, the form LLVM vectorizes; linear: nothing more).  This
script times, in one process and on the same arrays:

* ``gemm``: ``X_B @ X_part.T`` with numpy (sgemm for float32, dgemm for float64; a fresh output
  each call, as inside ``kernel_block``);
* ``gemm_out``: the same GEMM into a preallocated output (shows the first-touch cost of fresh
  output pages);
* ``kernel_block(spec, X_B, X_part, out=fresh (b, n) array, norms_b=precomputed)``: exactly the
  call ``Partition._columns`` makes when every column misses the cache;
* ``pass``: the element-wise pass alone on a precomputed Gram block (rbf / poly / linear).

The yardstick is the GEMM's ``2 b n d`` flops: GFLOP/s = 2 b n d / time, and
``ratio = gemm time / kernel_block time`` (goal >= 0.7).  Shapes: partition rows ``n`` in
{10000, 50000} x batch ``b`` in {100, 1000} x ``d`` in {16, 64, 256, 784, 1024}, float32 and
float64, under 1 and 2 BLAS threads (threadpoolctl; the numba pass and ``np.exp`` are
single-threaded either way).  Each timing is the minimum of 2-40 calls (as many as fit in ~0.25 s;
one call when a call takes over a second) after one warm-up call.

It also times ``Partition._columns`` on a realistic partition (``n`` rows, float32, rbf, batch of
1000 patterns): with no cache (every column computed by ``kernel_block`` into the ``K^T`` block),
with a cache and all misses (computed, then copied into the cache), and with every column cached
(the copy path), to compare the partition's column path with ``kernel_block`` alone.

Outputs: ``--out`` (JSON, default ``results/kernel_throughput.json``), ``kernel_throughput.md``
and ``kernel_throughput.png`` (ratio vs d) next to it.

Usage::

    python benchmarks/bench_kernel_throughput.py --quick    # seconds: n=5000, b=100, d 16/256
    python benchmarks/bench_kernel_throughput.py            # the full grid (several minutes)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _report

from dmcsvm.engine.partition import Partition, PartitionSettings  # noqa: E402
from dmcsvm.kernels import (  # noqa: E402
    KernelSpec,
    copy_gram,
    kernel_block,
    poly_from_gram,
    rbf_from_gram,
    row_norms_sq,
)
from dmcsvm.numerics import pattern as pt  # noqa: E402

KERNELS = {
    "rbf": KernelSpec("rbf", gamma=0.05),
    "poly": KernelSpec("poly", gamma=0.05, degree=3, coef0=1.0),
    "linear": KernelSpec("linear"),
}
GOAL = 0.7


def _time(fn, budget=0.25, lo=2, hi=40):
    """Minimum wall time of ``fn()`` over 2-40 calls (enough to fill ~``budget`` s; one for calls
    over a second) after a warm-up call."""
    t = time.perf_counter()
    fn()
    first = time.perf_counter() - t
    if first > 1.0:  # long calls (the big shapes): warm-up + one timed call
        lo = 1
    reps = int(min(hi, max(lo, math.ceil(budget / max(first, 1e-9)))))
    best = np.inf
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _pass(spec, G, na, nb, out):
    if spec.name == "rbf":
        rbf_from_gram(G, na, nb, float(spec.gamma), out)
    elif spec.name == "poly":
        poly_from_gram(G, float(spec.gamma), float(spec.coef0), int(spec.degree), out)
    else:
        copy_gram(G, out)


def _inplace(spec, XB, Xp, norms_b, norms_p, out):
    """The steps ``kernel_block`` takes, spelled out: the GEMM written straight into ``out`` and
    the element-wise pass run in place on it (one (b, n) block, no Gram block besides it)."""
    np.matmul(XB, Xp.T, out=out)
    if spec.name != "linear":
        _pass(spec, out, norms_b, norms_p, out)
    return out


def bench_shape(n, b, d, dtype, threads, rng):
    """Every timing of one shape / dtype / thread count."""
    Xp = rng.uniform(-1, 1, (n, d)).astype(dtype)
    XB = np.ascontiguousarray(Xp[rng.choice(n, b, replace=False)])
    norms_p = row_norms_sq(Xp)
    norms_b = row_norms_sq(XB)
    flops = 2.0 * b * n * d
    row = {
        "n": n,
        "b": b,
        "d": d,
        "dtype": np.dtype(dtype).name,
        "threads": threads,
        "gflop": flops / 1e9,
    }
    with threadpool_limits(threads):
        row["gemm_s"] = _time(lambda: XB @ Xp.T)
        G = np.empty((b, n), dtype=dtype)
        row["gemm_out_s"] = _time(lambda: np.matmul(XB, Xp.T, out=G))
        G = XB @ Xp.T
        out = np.empty((b, n), dtype=dtype)
        row["kernels"] = {}
        for name, spec in KERNELS.items():
            # as Partition._columns calls it: a fresh output block every call
            t_kb = _time(
                lambda: kernel_block(
                    spec, XB, Xp, out=np.empty((b, n), dtype=dtype), norms_b=norms_p
                )
            )
            t_reuse = _time(lambda: kernel_block(spec, XB, Xp, out=out, norms_b=norms_p))
            t_pass = _time(lambda: _pass(spec, G, norms_b, norms_p, out))
            t_inpl = _time(
                lambda: _inplace(spec, XB, Xp, norms_b, norms_p, np.empty((b, n), dtype=dtype))
            )
            row["kernels"][name] = {
                "kernel_block_s": t_kb,
                "kernel_block_reused_out_s": t_reuse,
                "pass_s": t_pass,
                "inplace_whatif_s": t_inpl,
                "gflops": flops / t_kb / 1e9,
                "ratio": row["gemm_s"] / t_kb,
                "ratio_reused_out": row["gemm_s"] / t_reuse,
                "ratio_inplace_whatif": row["gemm_s"] / t_inpl,
                "pass_share": t_pass / t_kb,
            }
    row["gemm_gflops"] = flops / row["gemm_s"] / 1e9
    return row


def bench_columns(n, d, b, rng, threads=1):
    """``Partition._columns`` on a float32 rbf partition of ``n`` rows: no cache, cache misses
    (compute + copy into the cache), all hits (copy path); and ``kernel_block`` alone."""
    X = rng.uniform(-1, 1, (n, d)).astype(np.float32)
    y = rng.integers(0, 26, n).astype(np.int64)
    ids = np.sort(rng.choice(n, b, replace=False)).astype(np.int64)
    XB = np.ascontiguousarray(X[ids])
    spec = KERNELS["rbf"]

    def part(cache_bytes):
        ps = PartitionSettings(
            kernel=spec.to_dict(),
            C=10.0,
            selection=pt.SELECTIONS["bmg"],
            tol=1e-3,
            n_candidates=b,
            pcls=np.arange(26),
            cache_bytes=cache_bytes,
            kernel_dtype="float32",
        )
        return Partition(0, 0, n, X, y, y, ps)

    big = 4 * n * b * 2
    res = {"n": n, "d": d, "b": b, "threads": threads, "dtype": "float32", "kernel": "rbf"}
    with threadpool_limits(threads):
        p0 = part(0)
        res["no_cache_s"] = _time(lambda: p0._columns(ids, XB))
        ps = [part(big) for _ in range(3)]
        t = []
        for p in ps:  # a fresh cache each time: all misses
            s = time.perf_counter()
            p._columns(ids, XB)
            t.append(time.perf_counter() - s)
        res["miss_into_cache_s"] = min(t)
        hot = ps[0]
        res["all_hits_s"] = _time(lambda: hot._columns(ids, XB))
        res["kernel_block_s"] = _time(
            lambda: kernel_block(spec, XB, X, out=np.empty((b, n), np.float32), norms_b=hot.norms)
        )
        res["gemm_s"] = _time(lambda: XB @ X.T)
    res["copy_GBps_all_hits"] = 4.0 * n * b / res["all_hits_s"] / 1e9
    return res


# ------------------------------------------------------------------------------------------------


def plot(rows, path):
    plt = _report.pyplot()
    threads = sorted({r["threads"] for r in rows})
    dtypes = ["float32", "float64"]
    shapes = sorted({(r["n"], r["b"]) for r in rows})
    colors = {"rbf": "#c44e52", "poly": "#4c72b0", "linear": "#55a868"}
    styles = ["-", "--", ":", "-."]
    fig, axes = plt.subplots(
        len(threads), 2, figsize=(12, 4.2 * len(threads)), squeeze=False, sharey=True
    )
    for i, th in enumerate(threads):
        for j, dt in enumerate(dtypes):
            ax = axes[i][j]
            for _k, name in enumerate(KERNELS):
                for s, (n, b) in enumerate(shapes):
                    pts = sorted(
                        (r["d"], r["kernels"][name]["ratio"])
                        for r in rows
                        if r["threads"] == th and r["dtype"] == dt and r["n"] == n and r["b"] == b
                    )
                    if pts:
                        ax.plot(
                            *zip(*pts, strict=False),
                            styles[s % 4],
                            color=colors[name],
                            marker="o",
                            ms=3,
                            label=f"{name} n={n} b={b}",
                        )
            ax.axhline(GOAL, color="k", lw=0.8, ls="--")
            ax.set_xscale("log")
            ds = sorted({r["d"] for r in rows})
            ax.set_xticks(ds, [str(d) for d in ds])
            ax.minorticks_off()
            ax.set_title(f"{dt}, {th} BLAS thread{'s' if th > 1 else ''}")
            ax.set_xlabel("d (features)")
            if j == 0:
                ax.set_ylabel("gemm time / kernel_block time")
            ax.set_ylim(0, 1.3)
    axes[0][0].legend(fontsize=7, ncol=2)
    fig.suptitle("kernel_block vs numpy GEMM of the same shape (dashed line: goal 0.7)")
    fig.tight_layout()
    _report.save_figure(fig, path, dpi=100)


def markdown(out) -> str:
    m = out["machine"]
    L = [
        "# kernel_block throughput vs numpy GEMM",
        "",
        f"Machine: {m['cpu_model']}, {m['cpu_count']} cores, {m['platform']}; numpy {m['numpy']}, "
        f"numba {m['numba']}, BLAS: "
        + ", ".join(
            f"{b.get('internal_api')} {b.get('version')} ({b.get('architecture')})"
            for b in m["blas"]
            if b.get("user_api") == "blas"
        )
        + f"; dmcsvm commit `{_report.commit_label(out)}`.  "
        + _report.load_line(out),
        "",
        *(
            ["**Quick smoke run** (`--quick`): checks the script, not a measurement.", ""]
            if out["quick"]
            else []
        ),
        f"Grid: partition rows n in {out['grid']['rows']}, batch b in {out['grid']['batches']}, "
        f"d in {out['grid']['dims']}, BLAS threads {out['threads']}.",
        "",
        "GFLOP/s counted as the GEMM's 2 b n d; ratio = gemm time / kernel_block time (goal >= "
        f"{GOAL}); pass % = share of kernel_block spent in the element-wise pass (measured alone "
        "on a precomputed Gram block).  gemm_out: GEMM into a preallocated output.  *ratio*: "
        "kernel_block with a fresh output block per call, as `Partition._columns` calls it; "
        "*reused out*: the same output block every call (no first-touch page faults); *in place, "
        "spelled out*: `np.matmul` into a fresh output and the pass run on it, the steps "
        "kernel_block itself takes (a check that it adds nothing around them).",
        "",
    ]
    for th in out["threads"]:
        L += [
            f"## {th} BLAS thread{'s' if th > 1 else ''}",
            "",
            "| dtype | n | b | d | gemm GF/s | gemm_out GF/s | rbf GF/s | rbf ratio | rbf pass % | "
            "poly GF/s | poly ratio | linear GF/s | linear ratio | ratio with reused out "
            "rbf/poly/lin | in place, spelled out rbf/poly/lin |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in out["results"]:
            if r["threads"] != th:
                continue
            k = r["kernels"]
            L.append(
                f"| {r['dtype']} | {r['n']} | {r['b']} | {r['d']} | {r['gemm_gflops']:.1f} | "
                f"{r['gflop'] / r['gemm_out_s']:.1f} | {k['rbf']['gflops']:.1f} | "
                f"{k['rbf']['ratio']:.2f} | {100 * k['rbf']['pass_share']:.0f} | "
                f"{k['poly']['gflops']:.1f} | {k['poly']['ratio']:.2f} | "
                f"{k['linear']['gflops']:.1f} | {k['linear']['ratio']:.2f} | "
                + "/".join(f"{k[x]['ratio_reused_out']:.2f}" for x in KERNELS)
                + " | "
                + "/".join(f"{k[x]['ratio_inplace_whatif']:.2f}" for x in KERNELS)
                + " |"
            )
        L.append("")
    L += [
        "## Goal (ratio >= 0.7) by d",
        "",
        "Share of (n, b, dtype, threads) cells per kernel and d that meet the goal:",
        "",
        "| d | " + " | ".join(KERNELS) + " |",
        "|---:|" + "---:|" * len(KERNELS),
    ]
    for d, row in sorted(out["goal_by_d"].items(), key=lambda kv: int(kv[0])):
        L.append(
            f"| {d} | "
            + " | ".join(
                f"{row[k]['met']}/{row[k]['cells']} (min {row[k]['min_ratio']:.2f})"
                for k in KERNELS
            )
            + " |"
        )
    L.append("")
    if out.get("columns"):
        env = out.get("columns_worker_env") or {}
        envs = ", ".join(f"{k}={v}" for k, v in env.get("environ", {}).items())
        L += [
            "## Partition._columns (float32 rbf, batch of b patterns, 1 BLAS thread)",
            "",
            "Every column missing (no cache), every column missing with the cache on (computed, "
            "then a copy put in the LRU), every column cached (copied from the LRU into the "
            "K^T block); kernel_block and the GEMM alone for reference.  *this process*: glibc "
            f"defaults; *worker env*: a child process with a Dask worker's environment ({envs}).",
            "",
            "| where | n | d | b | no cache ms | misses into cache ms | all hits ms | "
            "kernel_block ms | gemm ms | copy GB/s (all hits) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for where, cols in (
            ("this process", out["columns"]),
            ("worker env", env.get("results", [])),
        ):
            for c in cols:
                L.append(
                    f"| {where} | {c['n']} | {c['d']} | {c['b']} | "
                    f"{1e3 * c['no_cache_s']:.1f} | {1e3 * c['miss_into_cache_s']:.1f} | "
                    f"{1e3 * c['all_hits_s']:.1f} | {1e3 * c['kernel_block_s']:.1f} | "
                    f"{1e3 * c['gemm_s']:.1f} | {c['copy_GBps_all_hits']:.1f} |"
                )
        L.append("")
    return "\n".join(L)


def _columns_in_worker_env(quick):
    """The column-path timings again in a child process with the environment a Dask nanny gives
    its worker (``distributed.nanny.pre-spawn-environ``: ``MALLOC_TRIM_THRESHOLD_=65536``, one
    BLAS thread), where glibc returns freed blocks to the OS at once, so every fresh block is
    page-faulted in again."""
    import subprocess

    import dask
    import distributed  # noqa: F401 - loads the distributed config defaults

    env = dict(os.environ)
    pre = dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {}
    env.update({k: str(v) for k, v in pre.items()})
    cmd = [sys.executable, str(Path(__file__).resolve()), "--columns-only"] + (
        ["--quick"] if quick else []
    )
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return {
        "environ": {k: str(v) for k, v in pre.items()},
        "results": json.loads(r.stdout.strip().splitlines()[-1]),
    }


def goal_by_d(rows):
    out = {}
    for r in rows:
        for k, v in r["kernels"].items():
            e = out.setdefault(str(r["d"]), {}).setdefault(
                k, {"met": 0, "cells": 0, "min_ratio": np.inf}
            )
            e["cells"] += 1
            e["met"] += int(v["ratio"] >= GOAL)
            e["min_ratio"] = float(min(e["min_ratio"], v["ratio"]))
    return out


def main(argv=None):
    p = _report.parser(__doc__, "kernel_throughput.json")
    p.add_argument("--quick", action="store_true", help="smoke run: n=5000, b=100, d 16/256")
    p.add_argument("--no-columns", action="store_true", help="skip the Partition._columns timing")
    p.add_argument("--rows", help="partition rows n, comma separated (default 10000,50000)")
    p.add_argument("--batches", help="batch sizes b, comma separated (default 100,1000)")
    p.add_argument("--dims", help="features d, comma separated (default 16,64,256,784,1024)")
    p.add_argument("--threads", default="1,2", help="BLAS thread counts (default 1,2)")
    p.add_argument("--columns-only", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.quick:
        ns, bs, ds, cols = [5000], [100], [16, 256], [(5000, 16, 100)]
    else:
        ns, bs, ds = [10000, 50000], [100, 1000], [16, 64, 256, 784, 1024]
        cols = [(7500, 16, 1000), (25000, 16, 1000), (25000, 784, 1000)]
    ints = lambda v: [int(x) for x in v.split(",")]  # noqa: E731
    ns, bs, ds = (
        (ints(a.rows) if a.rows else ns),
        (ints(a.batches) if a.batches else bs),
        (ints(a.dims) if a.dims else ds),
    )
    if a.columns_only:  # child process with a Dask worker's environment
        rng = np.random.default_rng(1)
        print(json.dumps([bench_columns(n, d, b, rng) for n, d, b in cols]))
        return None
    threads = ints(a.threads)
    run = _report.Run(__file__, "kernel_block throughput vs numpy GEMM", _report.settings_of(a))
    rng = np.random.default_rng(0)
    # compile / load the numba passes before timing
    for spec in KERNELS.values():
        for dt in (np.float32, np.float64):
            Z = rng.uniform(-1, 1, (8, 4)).astype(dt)
            kernel_block(spec, Z, Z, dtype=dt)
    rows = []
    for th in threads:
        for dt in (np.float32, np.float64):
            for n in ns:
                for b in bs:
                    for d in ds:
                        r = bench_shape(n, b, d, dt, th, rng)
                        rows.append(r)
                        print(
                            f"threads={th} {r['dtype']} n={n} b={b} d={d}: gemm "
                            f"{r['gemm_gflops']:.1f} GF/s; ratio rbf "
                            f"{r['kernels']['rbf']['ratio']:.2f} poly "
                            f"{r['kernels']['poly']['ratio']:.2f} linear "
                            f"{r['kernels']['linear']['ratio']:.2f}",
                            flush=True,
                        )
    columns, columns_env = [], None
    if not a.no_columns:
        columns = [bench_columns(n, d, b, np.random.default_rng(1)) for n, d, b in cols]
        columns_env = _columns_in_worker_env(a.quick)
    out = run.envelope(
        rows,
        quick=bool(a.quick),
        threads=threads,
        grid={"rows": ns, "batches": bs, "dims": ds},
        kernels={k: v.to_dict() for k, v in KERNELS.items()},
        goal_ratio=GOAL,
        goal_by_d=goal_by_d(rows),
        columns=columns,
        columns_worker_env=columns_env,
    )
    md = markdown(out)
    outp = _report.write(out, a.out, md)
    plot(rows, outp.with_suffix(".png"))
    print(md)
    print(
        f"wrote {outp}, {outp.with_suffix('.md')}, {outp.with_suffix('.png')} "
        f"({out['script_runtime_s']:.1f} s)"
    )
    return out


if __name__ == "__main__":
    main()
