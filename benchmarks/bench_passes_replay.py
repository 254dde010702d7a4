"""The coordinator's working-set solves of a default fit, captured and replayed on 1..W threads.

A fit's working-set passes (:func:`dmcsvm.numerics.working_set.solve_working_set`) are most of
the coordinator's time on the small real sets (88 % of letter's solve).  This script fits
``MulticlassSVC()`` at its defaults on each set, keeps the inputs of its working-set solves of at
least ``--min-rows`` rows (the batch's coefficients and scores, its ``K_BB`` block taken whole
from the coordinator's Gram cache), and replays them alone: best of ``--repeat`` for each thread
count, with the steps taken, and a check that every thread count gives the solves of one thread
bit for bit.  It times a change to the passes without the rounds, the partitions and the Gram
rows around them (HISTORY: "What a step of the passes costs", "The passes' visit order").  The
captured solves live in a temporary folder, deleted at the end.  Writes
``results/passes_replay.json`` and ``.md``.

Usage::

    python benchmarks/bench_passes_replay.py                       # letter, satimage, pendigits
    python benchmarks/bench_passes_replay.py --deformed 20000      # + deformed digits (~1 min)
    python benchmarks/bench_passes_replay.py --datasets letter --threads 1,2,4 --out /tmp/p.json
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _data  # noqa: E402
import _report  # noqa: E402


def capture(X, y, folder: Path, min_rows: int, most: int) -> list[Path]:
    """Fit ``MulticlassSVC()`` on ``X, y`` and write the inputs of its first ``most``
    working-set solves of at least ``min_rows`` rows to ``folder`` (one npz each)."""
    from dmcsvm import MulticlassSVC
    from dmcsvm.coordinators import crammer_singer as cs

    real = cs.solve_working_set
    files: list[Path] = []

    def keep(code, Bb, Fb, G, gpos, yb, cb, pcls, kdiag, C, tol, fp_eps, max_steps, inner_tol,
             relax=1.0, rows=None, **kw):  # fmt: skip
        if rows is not None and Bb.shape[0] >= min_rows and len(files) < most:
            rows.ensure(gpos)  # every row of the block, as the replay needs it
            path = folder / f"ws{len(files):03d}.npz"
            np.savez(
                path, code=code, Bb=Bb, Fb=Fb, K=np.ascontiguousarray(rows.G[np.ix_(gpos, gpos)]),
                yb=yb, cb=cb, pcls=pcls, kdiag=kdiag, C=C, tol=tol, fp_eps=fp_eps,
                max_steps=max_steps, inner_tol=inner_tol, relax=relax,
            )  # fmt: skip
            files.append(path)
        return real(code, Bb, Fb, G, gpos, yb, cb, pcls, kdiag, C, tol, fp_eps, max_steps,
                    inner_tol, relax, rows=rows, **kw)  # fmt: skip

    cs.solve_working_set = keep
    try:
        MulticlassSVC().fit(X, y)
    finally:
        cs.solve_working_set = real
    return files


def _problem(path: Path) -> tuple:
    z = dict(np.load(path))
    C = z["C"] if z["C"].ndim else float(z["C"])
    nb = z["Bb"].shape[0]
    return (
        int(z["code"]), z["Bb"], z["Fb"], z["K"], np.arange(nb), z["yb"], z["cb"], z["pcls"],
        z["kdiag"], C, float(z["tol"]), float(z["fp_eps"]), int(z["max_steps"]),
        float(z["inner_tol"]), float(z["relax"]),
    )  # fmt: skip


def replay(files: list[Path], threads: list[int], repeat: int) -> dict:
    """Every captured solve on each thread count: best total seconds, steps, and whether each
    count gives one thread's result bit for bit."""
    from dmcsvm.engine.threads import LazyPool
    from dmcsvm.numerics.working_set import solve_working_set

    probs = [_problem(f) for f in files]
    pools = {w: LazyPool(w, "replay") for w in threads if w > 1}
    ref = [solve_working_set(*p) for p in probs]
    out: dict = {
        "solves": len(probs),
        "rows": [int(p[1].shape[0]) for p in probs],
        "prototypes": int(probs[0][1].shape[1]) if probs else 0,
        "steps": int(sum(int(r[2].sum()) for r in ref)),
        "best_s": {},
        "equal_to_one_thread": {},
    }
    for w in threads:
        got = [solve_working_set(*p, pool=pools.get(w)) for p in probs]
        out["equal_to_one_thread"][w] = all(
            all(np.array_equal(a, b) for a, b in zip(g, r, strict=True))
            for g, r in zip(got, ref, strict=True)
        )
    best = {w: np.inf for w in threads}
    for _ in range(repeat):
        for w in threads:  # alternated
            t = time.perf_counter()
            for p in probs:
                solve_working_set(*p, pool=pools.get(w))
            best[w] = min(best[w], time.perf_counter() - t)
    out["best_s"] = {w: float(v) for w, v in best.items()}
    for pool in pools.values():
        pool.close()
    return out


def table(results, threads) -> str:
    head = ["set", "solves", "rows", "P", "steps"]
    head += [f"{w} thread{'s' if w > 1 else ''} s" for w in threads]
    head += ["us a step (1 thread)", "equal"]
    rows = []
    for name, r in results.items():
        one = r["best_s"].get(1, min(r["best_s"].values()))
        rows.append(
            [name, str(r["solves"]), f"{min(r['rows']):,}-{max(r['rows']):,}", str(r["prototypes"]),
             f"{r['steps']:,}"]
            + [f"{r['best_s'][w]:.3f}" for w in threads]
            + [f"{one / max(r['steps'], 1) * 1e6:.1f}",
               "yes" if all(r["equal_to_one_thread"].values()) else "no"]
        )  # fmt: skip
    return "\n".join(_report.md_table(head, rows, "lrrrr" + "r" * len(threads) + "rl"))


def main(argv=None):
    ap = _report.parser(__doc__.splitlines()[0], "passes_replay.json", data_dir=True)
    ap.add_argument("--datasets", default="letter,satimage,pendigits")
    ap.add_argument("--deformed", type=int, default=0, help="rows of deformed digits (0: none)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--min-rows", type=int, default=2000)
    ap.add_argument("--most", type=int, default=12, help="solves kept per set")
    a = ap.parse_args(argv)
    threads = [int(w) for w in a.threads.split(",")]
    run = _report.Run(__file__, "working-set solves replayed", _report.settings_of(a))
    sets = {name: None for name in a.datasets.split(",") if name}
    if a.deformed:
        sets[f"deformed {a.deformed // 1000}k"] = a.deformed
    results = {}
    tmp = Path(tempfile.mkdtemp(prefix="dmcsvm-passes-"))
    try:
        for name, n in sets.items():
            if n is None:
                Xtr, ytr = getattr(_data, _data.DEFAULT_SETS[name])(a.data_dir)[:2]
            else:
                import deformed_digits as dd

                Xtr, ytr = dd.training_rows(a.data_dir, n)[:2]
            folder = tmp / name.replace(" ", "_")
            folder.mkdir()
            files = capture(Xtr, ytr, folder, a.min_rows, a.most)
            if files:
                results[name] = replay(files, threads, a.repeat)
                print(table({name: results[name]}, threads).splitlines()[-1], flush=True)
            shutil.rmtree(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = run.envelope(results, threads=threads)
    md = [
        "# The coordinator's working-set solves, captured from default fits and replayed",
        "",
        _report.machine_line(out) + "  " + _report.load_line(out),
        "",
        f"`MulticlassSVC()` at its defaults, float64 input as read; its first {a.most} "
        f"working-set solves of at least {a.min_rows:,} rows, replayed alone (no rounds, "
        f"partitions or Gram rows around them), best of {a.repeat}, thread counts alternated. "
        f"'equal': every thread count gives one thread's solves bit for bit.",
        "",
        table(results, threads),
        "",
        f"Script runtime {out['script_runtime_s']:.1f} s.",
    ]
    outp = _report.write(out, a.out, "\n".join(md))
    print(f"wrote {outp} and {outp.with_suffix('.md')}")
    return out


if __name__ == "__main__":
    main()
