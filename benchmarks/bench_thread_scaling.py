"""Which part of a partition's round stops scaling when partitions are threads of one process.

Weak scaling: T threads (T = 1, 2, 4, ...) each run the same work on their own arrays (a
partition's share: ``rows`` active rows, a batch of ``b`` patterns, ``P`` classes), with BLAS
held at one thread as partitions run it.  Ideal: the time per repetition stays flat as T grows.
Each operation of :meth:`Partition.step` is timed alone: the kernel block's GEMM into a reused
buffer, its numba RBF pass, the score GEMM ``K @ dB``, the scatter ``F[active] += dK``, the
selection scan, a fresh block allocated and touched, and a numba dot-product Gram (no BLAS) for
comparison.  Written after a 16-core machine showed in-process fits slowing from 2 to 16 threads
while LocalCluster fits with as many one-thread worker processes sped up (scaling.md).

    python benchmarks/bench_thread_scaling.py [--threads 1,2,4,8,16] [--out PATH]
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _report  # noqa: E402


@numba.njit(cache=True, nogil=True)
def gram_numba(XB, XA, out):
    """``out = XB @ XA.T`` by plain loops (no BLAS), float32."""
    for i in range(XB.shape[0]):
        for j in range(XA.shape[0]):
            s = np.float32(0.0)
            for k in range(XB.shape[1]):
                s += XB[i, k] * XA[j, k]
            out[i, j] = s


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def kdb_numba(KT, dB, out):
    """``out = KT.T @ dB`` by row axpys over dB's nonzeros (no BLAS), out (rows, P) float32."""
    out[:] = 0.0
    for j in range(KT.shape[0]):
        for c in range(dB.shape[1]):
            v = dB[j, c]
            if v != 0.0:
                for r in range(KT.shape[1]):
                    out[r, c] += v * KT[j, r]


def arrays(rng, rows, b, d, P):
    from dmcsvm.kernels import row_norms_sq

    Xa = rng.standard_normal((rows, d)).astype(np.float32)
    XB = rng.standard_normal((b, d)).astype(np.float32)
    act = np.sort(rng.choice(rows, rows * 3 // 4, replace=False)).astype(np.int64)
    return {
        "Xa": Xa,
        "XB": XB,
        "na": row_norms_sq(Xa),
        "nb": row_norms_sq(XB),
        "KT": np.empty((b, rows), np.float32),
        "Kact": np.ones((b, len(act)), np.float32),
        "dK": np.empty((len(act), P), np.float32),
        "dB": np.where(rng.random((b, P)) < 0.15, 0.1, 0.0).astype(np.float32),
        "F": rng.normal(0, 0.5, (rows, P)),
        "B": np.zeros((rows, P)),
        "yp": rng.integers(0, P, rows).astype(np.int64),
        "act": act,
        "V": np.empty(rows),
        "psi": np.empty(rows),
        "calm": np.zeros(rows, np.int64),
    }


def operations(P):
    from dmcsvm.kernels import rbf_from_gram
    from dmcsvm.numerics import pattern as pt

    pcls = np.arange(P, dtype=np.int64)
    sel = pt.SELECTIONS["bmg"]
    return {
        "gemm X_B X_a^T (BLAS)": lambda s: np.matmul(s["XB"], s["Xa"].T, out=s["KT"]),
        "gram by numba loops": lambda s: gram_numba(s["XB"], s["Xa"], s["KT"]),
        "rbf pass (numba)": lambda s: rbf_from_gram(s["KT"], s["nb"], s["na"], 0.05, s["KT"]),
        "K @ dB (BLAS)": lambda s: s["Kact"].T @ s["dB"],
        "dB^T @ K^T (BLAS)": lambda s: s["dB"].T @ s["Kact"],
        "K @ dB (numba axpys)": lambda s: kdb_numba(s["Kact"], s["dB"], s["dK"]),
        "F[active] += dK": lambda s: s["F"].__setitem__(s["act"], s["F"][s["act"]] + 1e-9),
        "selection scan (numba)": lambda s: pt.scan_rows(
            sel,
            s["B"],
            s["F"],
            s["yp"],
            s["yp"],
            pcls,
            np.ones(len(s["yp"])),
            10.0,
            1e-3,
            s["act"],
            1.0,
            s["calm"],
            s["V"],
            s["psi"],
        ),
        "fresh block alloc+touch": lambda s: np.empty_like(s["KT"]).fill(1.0),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2,4,8,16")
    ap.add_argument("--rows", type=int, default=4000, help="active rows per partition")
    ap.add_argument("--b", type=int, default=500)
    ap.add_argument("--d", type=int, default=32)
    ap.add_argument("--P", type=int, default=10)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default=str(_report.RESULTS_DIR / "thread_scaling.json"))
    a = ap.parse_args(argv)
    from dmcsvm.engine.threads import one_blas_thread

    threads = [int(t) for t in a.threads.split(",")]
    run = _report.Run(
        __file__, "weak scaling of a partition's operations over threads", _report.settings_of(a)
    )
    rng = np.random.default_rng(0)
    data = [arrays(rng, a.rows, a.b, a.d, a.P) for _ in range(max(threads))]
    ops = operations(a.P)
    res = []
    with one_blas_thread():
        for s in data:  # compile and touch every buffer once
            for op in ops.values():
                op(s)
        for name, op in ops.items():
            row = {"op": name, "ms_per_rep": {}}
            for T in threads:
                with ThreadPoolExecutor(T) as pool:
                    list(pool.map(lambda s: op(s), data[:T]))
                    t = time.perf_counter()
                    list(pool.map(lambda s: [op(s) for _ in range(a.reps)], data[:T]))
                    row["ms_per_rep"][T] = 1e3 * (time.perf_counter() - t) / a.reps
            base = row["ms_per_rep"][threads[0]]
            row["slowdown"] = {T: v / base for T, v in row["ms_per_rep"].items()}
            res.append(row)
            print(
                f"{name:26s} "
                + "  ".join(f"T={T}: {v:7.2f} ms" for T, v in row["ms_per_rep"].items()),
                flush=True,
            )
    _report.write(run.envelope({"ops": res}, threads=threads), a.out)


if __name__ == "__main__":
    main()
