"""warm_start along a path of C values: each refit starts from the previous coefficients, against
cold fits at the same C, in one process.

Default: UCI letter (first 15000 rows train, [-1, 1] scaling), RBF gamma=1, C = 1, 3, 10, 30,
float32, n_jobs=2, dmcsvm defaults otherwise.  Reports per C: cold and warm fit seconds and rounds,
the speed-up, the relative difference of the final duals and the test accuracy of both.  Writes a
JSON and a markdown table (``--out``, default ``results/warm_start.json``).

Usage::

    python benchmarks/bench_warm_start.py [--data-dir ../shared/data] [--n-train 15000]
    python benchmarks/bench_warm_start.py --n-train 1000 --Cs 1,3 --out /tmp/ws.json   # quick
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _data  # noqa: E402
import _report


def main(argv=None):
    ap = _report.parser(__doc__.splitlines()[0], "warm_start.json", data_dir=True)
    ap.add_argument("--n-train", type=int, default=15000)
    ap.add_argument("--Cs", default="1,3,10,30")
    ap.add_argument("--gamma", type=float, default=1.0)
    a = ap.parse_args(argv)
    run = _report.Run(__file__, "warm_start along a C path", _report.settings_of(a))
    from dmcsvm import MulticlassSVC

    Xtr, ytr, Xte, yte = _data.load_letter(a.data_dir)
    Xtr, ytr = Xtr[: a.n_train].astype(np.float32), ytr[: a.n_train]
    Xte = Xte.astype(np.float32)
    Cs = [float(c) for c in a.Cs.split(",")]
    MulticlassSVC(C=1.0, gamma=a.gamma, n_jobs=2).fit(Xtr[:500], ytr[:500])  # compile
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
        rows.append(
            dict(
                C=C,
                cold_s=t_cold,
                warm_s=t_warm,
                speedup=t_cold / t_warm,
                cold_rounds=int(cold.n_iter_),
                warm_rounds=int(warm.n_iter_),
                dual_rel_diff=abs(dc - dw) / abs(dc),
                cold_acc=float(cold.score(Xte, yte)),
                warm_acc=float(warm.score(Xte, yte)),
            )
        )
        print(rows[-1], flush=True)
    first = rows[0]  # the path starts cold: its first warm fit has no past
    path_cold = sum(r["cold_s"] for r in rows)
    path_warm = sum(r["warm_s"] for r in rows)
    out = run.envelope(
        rows,
        data="letter",
        n_train=int(Xtr.shape[0]),
        gamma=a.gamma,
        path_cold_s=path_cold,
        path_warm_s=path_warm,
        path_speedup_after_first=((path_cold - first["cold_s"]) / (path_warm - first["warm_s"])),
    )
    _report.write(out, a.out, markdown(out))


def markdown(out) -> str:
    rows, first = out["results"], out["results"][0]
    lines = [
        "# warm_start along a C path (letter)",
        "",
        _report.machine_line(out),
        _report.load_line(out),
        "",
        f"letter {out['n_train']} train rows, RBF gamma={out['gamma']}, float32, n_jobs=2, "
        f"defaults otherwise; cold and warm fits in one process.",
        "",
        *_report.md_table(
            [
                "C",
                "cold s",
                "warm s",
                "speed-up",
                "cold rounds",
                "warm rounds",
                "dual rel. diff",
                "cold acc %",
                "warm acc %",
            ],
            [
                [
                    f"{r['C']:g}",
                    f"{r['cold_s']:.2f}",
                    f"{r['warm_s']:.2f}",
                    f"{r['speedup']:.2f}",
                    r["cold_rounds"],
                    r["warm_rounds"],
                    f"{r['dual_rel_diff']:.1e}",
                    f"{100 * r['cold_acc']:.2f}",
                    f"{100 * r['warm_acc']:.2f}",
                ]
                for r in rows
            ],
            "r" * 9,
        ),
        "",
        f"The first C starts cold either way. After it, the path takes "
        f"{out['path_cold_s'] - first['cold_s']:.1f} s cold against "
        f"{out['path_warm_s'] - first['warm_s']:.1f} s warm "
        f"({out['path_speedup_after_first']:.2f}x).",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
