"""warm_start along a path of C values: each refit starts from the previous coefficients, against
cold fits at the same C, in one process.

Default: UCI letter (first 15000 rows train, [-1, 1] scaling), RBF gamma=1, C = 1, 3, 10, 30,
float32, n_jobs=2, dmcsvm defaults otherwise.  Reports per C: cold and warm fit seconds and rounds,
the speed-up, the relative difference of the final duals and the test accuracy of both.  Writes a
JSON and a markdown table (``--out``, default ``results/warm_start.json``).

Usage::

    python benchmarks/bench_warm_start.py [--data-dir ../shared/data] [--n-train 15000]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _data  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    ap.add_argument("--n-train", type=int, default=15000)
    ap.add_argument("--Cs", default="1,3,10,30")
    ap.add_argument("--gamma", type=float, default=1.0)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "warm_start.json"))
    a = ap.parse_args(argv)
    from dmcsvm import MulticlassSVC
    Xtr, ytr, Xte, yte = _data.load_letter(a.data_dir)
    Xtr, ytr = Xtr[:a.n_train].astype(np.float32), ytr[:a.n_train]
    Xte = Xte.astype(np.float32)
    Cs = [float(c) for c in a.Cs.split(",")]
    MulticlassSVC(C=1.0, gamma=a.gamma, n_jobs=2).fit(Xtr[:500], ytr[:500])       # compile
    t0 = time.perf_counter()
    rows = []
    warm = MulticlassSVC(C=Cs[0], gamma=a.gamma, n_jobs=2, warm_start=True)
    for C in Cs:
        t = time.perf_counter()
        cold = MulticlassSVC(C=C, gamma=a.gamma, n_jobs=2).fit(Xtr, ytr)
        t_cold = time.perf_counter() - t
        t = time.perf_counter()
        warm.set_params(C=C).fit(Xtr, ytr)
        t_warm = time.perf_counter() - t
        dc, dw = cold.history_["dual"][-1], warm.history_["dual"][-1]
        rows.append(dict(C=C, cold_s=t_cold, warm_s=t_warm, speedup=t_cold / t_warm,
                         cold_rounds=int(cold.n_iter_), warm_rounds=int(warm.n_iter_),
                         dual_rel_diff=abs(dc - dw) / abs(dc),
                         cold_acc=float(cold.score(Xte, yte)), warm_acc=float(warm.score(Xte, yte))))
        print(rows[-1], flush=True)
    first = rows[0]                      # the path starts cold: its first warm fit has no past
    path_cold = sum(r["cold_s"] for r in rows)
    path_warm = sum(r["warm_s"] for r in rows)
    out = dict(machine=_data.machine_info(), load=_data.other_load(), data="letter",
               n_train=int(Xtr.shape[0]), gamma=a.gamma, rows=rows, path_cold_s=path_cold,
               path_warm_s=path_warm, path_speedup_after_first=(
                   (path_cold - first["cold_s"]) / (path_warm - first["warm_s"])),
               runtime_s=time.perf_counter() - t0)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    lines = ["# warm_start along a C path (letter)", "",
             f"Machine: {out['machine']['cpu_model']}, {out['machine']['cpu_count']} cores; "
             f"load at the end {out['load']}. letter {Xtr.shape[0]} train rows, RBF gamma="
             f"{a.gamma}, float32, n_jobs=2, defaults otherwise; cold and warm fits in one "
             f"process.", "",
             "| C | cold s | warm s | speed-up | cold rounds | warm rounds | dual rel. diff | "
             "cold acc % | warm acc % |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['C']:g} | {r['cold_s']:.2f} | {r['warm_s']:.2f} | {r['speedup']:.2f} "
                     f"| {r['cold_rounds']} | {r['warm_rounds']} | {r['dual_rel_diff']:.1e} | "
                     f"{100 * r['cold_acc']:.2f} | {100 * r['warm_acc']:.2f} |")
    lines += ["", f"The first C starts cold either way. After it, the path takes "
                  f"{path_cold - first['cold_s']:.1f} s cold against {path_warm - first['warm_s']:.1f} s "
                  f"warm ({out['path_speedup_after_first']:.2f}x)."]
    Path(a.out).with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
