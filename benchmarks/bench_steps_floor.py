"""How many pattern optimizations per support vector the Crammer-Singer dual needs: the papers'
sequential algorithm as a floor for dmcsvm's batched rounds.

The papers' algorithm (CS 2001 §6, AS 2005 §5) optimizes one pattern at a time, exactly, always
the one that is most violated *now*; here it runs on the full Gram matrix (every score updated
after every step, every row's selection value recomputed), which no practical solver can afford
but which shows how many per-pattern steps a greedy block coordinate method needs to reach a given
precision.  Two greedy choices are measured: largest KKT violation ``psi`` (CS 2001 Eq. 32) and
largest exact gain (AS 2005's BMG), and a random order over the violators (Keerthi et al. 2008's
sequential dual method, as LIBLINEAR).  Each stops at relative duality gap ``--gap-tol`` (every
row counted), as dmcsvm's ``MulticlassSVC(tol=1e-4, gap_tol=1e-3)`` fit of the same rows, whose
steps are ``sum(history_['steps'])``.

Data: stratified subsets (``--n``, default 2000; letter 1000, its 26 classes make every greedy
step's full scan 26 x n) of the sets of ``bench_vs_libsvm.py``, scaled to [-1, 1], float64, at the
C and gamma that script chose for the full sets.

Usage::

    python benchmarks/bench_steps_floor.py [--data-dir DIR] [--out results/steps_floor.json]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _data  # noqa: E402
import _report  # noqa: E402

from dmcsvm import MulticlassSVC  # noqa: E402
from dmcsvm.kernels import KernelSpec, kernel_block  # noqa: E402
from dmcsvm.numerics import pattern as pt  # noqa: E402

# C, gamma of results/vs_libsvm.md (a short SVC validation on each full training set)
SETS = {
    "satimage": (10.0, 0.692936, 2000),
    "pendigits": (1.0, 0.523906, 2000),
    "usps": (10.0, 0.00660017, 2000),
    "dna": (10.0, 0.00734082, 2000),
    "letter": (10.0, 1.67533, 1000),
}
GREEDY_PSI, RANDOM_ORDER, GREEDY_GAIN = 0, 1, 2
RULES = {"greedy_psi": GREEDY_PSI, "random_order": RANDOM_ORDER, "greedy_gain": GREEDY_GAIN}
LOADERS = {
    "letter": "load_letter",
    "usps": "load_usps_scaled",
    "satimage": "load_satimage",
    "pendigits": "load_pendigits",
    "dna": "load_dna",
}


@numba.njit(cache=True)
def sequential(G, y, C, tol, gap_tol, rule, seed, max_steps):
    """The sequential algorithm on the full Gram ``G``: returns (steps, n_SV, gap, max psi).
    ``rule``: GREEDY_PSI / GREEDY_GAIN (one step on the best row, then every psi refreshed) or
    RANDOM_ORDER (a pass in random order over the rows violating ``tol``, then refreshed)."""
    n = G.shape[0]
    P = int(y.max()) + 1
    B = np.zeros((n, P))
    F = np.zeros((n, P))
    pcls = np.arange(P)
    psi = np.zeros(n)
    b0 = np.empty(P)
    np.random.seed(seed)
    perm = np.arange(n)
    steps = 0
    gap = 1.0
    for i in range(n):
        psi[i] = pt.psi_value(B[i], F[i], y[i], y[i], pcls, C)
    while steps < max_steps:
        j = np.argmax(psi)
        if psi[j] <= tol:
            break
        if rule == GREEDY_GAIN:
            best = -1.0
            for i in range(n):
                if psi[i] > tol:
                    v = pt.bmg_value(B[i], F[i], y[i], y[i], pcls, G[i, i], C)
                    if v > best:
                        best = v
                        j = i
        if rule == RANDOM_ORDER:
            np.random.shuffle(perm)
            todo = perm[psi[perm] > tol]
        else:
            todo = np.array([j])
        for j in todo:
            if rule == RANDOM_ORDER and pt.psi_value(B[j], F[j], y[j], y[j], pcls, C) <= tol:
                continue
            b = B[j]
            f = F[j].copy()
            b0[:] = b
            kpp = G[j, j]
            pt.optimize_pattern(
                pt.OPT_EXACT,
                b,
                f,
                y[j],
                y[j],
                pcls,
                kpp,
                C,
                (0.1 * tol) ** 2 / (2.0 * kpp),
                tol / 2.0,
            )
            steps += 1
            for r in range(P):
                d = b[r] - b0[r]
                if d != 0.0:
                    for k in range(n):
                        F[k, r] += G[j, k] * d
        for i in range(n):
            psi[i] = pt.psi_value(B[i], F[i], y[i], y[i], pcls, C)
        sa, sbf, sxi = pt.objective_parts(B, F, y, y, pcls)
        primal = 0.5 * sbf + C * sxi
        gap = (primal - (sa - 0.5 * sbf)) / primal
        if gap <= gap_tol:
            break
    nsv = 0
    for i in range(n):
        if B[i, y[i]] > 0.0:
            nsv += 1
    return steps, nsv, gap, psi.max()


def main():
    p = _report.parser(__doc__, "steps_floor.json", data_dir=True)
    p.add_argument("--sets", default=",".join(SETS))
    p.add_argument("--n", type=int, default=0, help="rows per set (0: the table's)")
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--gap-tol", type=float, default=1e-3)
    p.add_argument("--rules", default=",".join(RULES))
    args = p.parse_args()
    run = _report.Run(__file__, "steps_floor", _report.settings_of(args))
    results = []
    for name in args.sets.split(","):
        C, gamma, n = SETS[name]
        n = args.n or n
        Xtr, ytr, _, _ = getattr(_data, LOADERS[name])(args.data_dir)
        if n < len(ytr):
            Xtr, ytr = _data.stratified_subset(Xtr, ytr, n)
        X = np.ascontiguousarray(Xtr, dtype=np.float64)
        y = np.ascontiguousarray(ytr, dtype=np.int64)
        G = np.asarray(kernel_block(KernelSpec("rbf", gamma=gamma), X, X), dtype=np.float64)
        row = {"data": name, "n": len(y), "classes": int(y.max()) + 1, "C": C, "gamma": gamma}
        for rule in args.rules.split(","):
            t = time.perf_counter()
            st, nsv, gap, mp = sequential(
                G, y, C, args.tol, args.gap_tol, RULES[rule], 0, 200 * len(y)
            )
            row[rule] = {
                "steps": int(st),
                "n_sv": int(nsv),
                "per_sv": st / max(nsv, 1),
                "gap": float(gap),
                "max_psi": float(mp),
                "seconds": time.perf_counter() - t,
            }
        kw = dict(
            C=C, gamma=gamma, tol=args.tol, n_jobs=1, solver_options={"gap_tol": args.gap_tol}
        )
        MulticlassSVC(**kw).fit(X, y)  # compile outside the timing
        t = time.perf_counter()
        m = MulticlassSVC(**kw).fit(X, y)
        h = m.history_
        row["dmcsvm"] = {
            "steps": int(h["steps"].sum()),
            "n_sv": len(m.support_),
            "per_sv": float(h["steps"].sum()) / len(m.support_),
            "gap": float(h["gap"][-1]),
            "rounds": int(m.n_iter_),
            "seconds": time.perf_counter() - t,
        }
        results.append(row)
        print(
            name,
            {k: (v["per_sv"] if isinstance(v, dict) else v) for k, v in row.items()},
            flush=True,
        )
    out = run.envelope(results)
    rules = [r for r in args.rules.split(",")]
    head = (
        ["data", "rows", "classes"]
        + [f"{r} steps/SV" for r in rules]
        + ["dmcsvm steps/SV", "dmcsvm / greedy_psi"]
    )
    body = []
    for r in results:
        cells = [r["data"], r["n"], r["classes"]]
        cells += [f"{r[k]['per_sv']:.1f} (gap {r[k]['gap']:.1e})" for k in rules]
        cells += [f"{r['dmcsvm']['per_sv']:.1f} (gap {r['dmcsvm']['gap']:.1e})"]
        cells += [
            f"{r['dmcsvm']['per_sv'] / r['greedy_psi']['per_sv']:.2f}" if "greedy_psi" in r else "-"
        ]
        body.append(cells)
    md = [
        "# Pattern optimizations per support vector: the sequential algorithm's floor",
        "",
        _report.machine_line(out),
        _report.load_line(out),
        "",
        f"Stopping: relative duality gap <= {args.gap_tol} over every row (psi tol "
        f"{args.tol}); RBF at vs_libsvm's C and gamma; float64; one run each.",
        "",
        *_report.md_table(head, body),
        "",
        "greedy_psi / greedy_gain: the papers' sequential algorithm on the full Gram matrix "
        "(one exact per-pattern step on the most violated / highest-gain row, all scores and "
        "selection values refreshed after it); random_order: passes in random order over the "
        "violators (Keerthi et al. 2008's order). dmcsvm: MulticlassSVC defaults with "
        "tol/gap_tol as above, n_jobs=1, its working-set rounds.",
    ]
    _report.write(out, args.out, "\n".join(md))


if __name__ == "__main__":
    main()
