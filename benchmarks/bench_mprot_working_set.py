"""MultiPrototypeSVC's rounds: the working-set solve by re-selection against the one pass in order,
in one process, on real data (it chose the defaults: the working set on kernel rows, one pass on
the linear fast path).

Default: satimage and pendigits (LIBSVM's train/test files, [-1, 1] scaling), RBF kernel, q = 2
prototypes per class, C = 10, the annealed search with its default schedule, float32, n_jobs=2,
and the linear fast path (degree-1 polynomial) on the same data.  Reports per configuration: fit
seconds, rounds, per-pattern optimizations, the final energy and test accuracy of both solves,
and the speed-up.  Writes a JSON and a markdown table (``--out``, default
``results/mprot_working_set.json``).

Usage::

    python benchmarks/bench_mprot_working_set.py [--data-dir DIR] [--sets satimage,pendigits]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _data  # noqa: E402
import _report

LOADERS = {
    "satimage": _data.load_satimage,
    "pendigits": _data.load_pendigits,
    "usps": _data.load_usps_scaled,
    "dna": _data.load_dna,
}
KERNELS = {
    "rbf": dict(kernel="rbf", gamma="scale", solver_options={"fast_linear": False}),
    "linear": dict(
        kernel="poly",
        degree=1,
        gamma=1.0,
        coef0=1.0,
        solver_options={"fast_linear": True, "linear_solver": "rounds"},
    ),
}


def _fit(params, inner_steps, Xtr, ytr, Xte, yte):
    """Fit with the rounds' batch solve chosen: ``inner_steps = 0`` the threshold's batch
    optimized once in order, ``20`` the working set by re-selection (the solver option
    ``inner_steps``)."""
    from dmcsvm import MultiPrototypeSVC

    model = MultiPrototypeSVC(**params)
    model.set_params(
        solver_options={**(model.solver_options or {}), "inner_steps": float(inner_steps)}
    )
    t = time.perf_counter()
    model.fit(Xtr, ytr)
    fit_s = time.perf_counter() - t
    rh = model.history_
    steps = int(np.sum(rh.get("steps", [0])))
    return dict(
        fit_s=fit_s,
        rounds=int(model.n_iter_),
        optimizations=steps,
        epochs=int(model.n_epochs_),
        energy=float(model.energy_),
        accuracy=float(model.score(Xte, yte)),
    )


def main(argv=None):
    ap = _report.parser(__doc__.splitlines()[0], "mprot_working_set.json", data_dir=True)
    ap.add_argument("--sets", default="satimage,pendigits")
    ap.add_argument("--kernels", default="rbf,linear")
    ap.add_argument("--q", type=int, default=2)
    ap.add_argument("--C", type=float, default=10.0)
    a = ap.parse_args(argv)
    run = _report.Run(
        __file__, "MultiPrototypeSVC rounds: working set vs one pass", _report.settings_of(a)
    )
    from dmcsvm import MultiPrototypeSVC

    rows = []
    for name in a.sets.split(","):
        Xtr, ytr, Xte, yte = LOADERS[name](a.data_dir)
        Xtr, Xte = Xtr.astype(np.float32), Xte.astype(np.float32)
        for kname in a.kernels.split(","):
            params = dict(n_prototypes=a.q, C=a.C, random_state=0, n_jobs=2, **KERNELS[kname])
            MultiPrototypeSVC(**{**params, "max_epochs": 1}).fit(Xtr[:300], ytr[:300])  # compile
            old = _fit(params, 0, Xtr, ytr, Xte, yte)
            new = _fit(params, 20, Xtr, ytr, Xte, yte)
            rows.append(
                dict(
                    data=name,
                    n_train=int(Xtr.shape[0]),
                    kernel=kname,
                    one_pass=old,
                    working_set=new,
                    speedup=old["fit_s"] / new["fit_s"],
                )
            )
            print(rows[-1], flush=True)
    out = run.envelope(rows, q=a.q, C=a.C)
    _report.write(out, a.out, markdown(out))


def markdown(out) -> str:
    lines = [
        "# MultiPrototypeSVC rounds: working-set solve vs one pass in order",
        "",
        _report.machine_line(out),
        _report.load_line(out),
        "",
        f"q = {out['q']} prototypes per class, C = {out['C']:g}, default annealing schedule, "
        f"float32, n_jobs=2, random_state=0; rbf: gamma='scale', kernel rows; linear: "
        f"<x, z> + 1 with explicit prototypes (solver='rounds').  Both solves in one process.",
        "",
        *_report.md_table(
            [
                "data",
                "kernel",
                "one pass s",
                "working set s",
                "speed-up",
                "rounds (1p / ws)",
                "optimizations (1p / ws)",
                "energy (1p / ws)",
                "accuracy % (1p / ws)",
            ],
            [
                [
                    r["data"],
                    r["kernel"],
                    f"{r['one_pass']['fit_s']:.2f}",
                    f"{r['working_set']['fit_s']:.2f}",
                    f"{r['speedup']:.2f}",
                    f"{r['one_pass']['rounds']} / {r['working_set']['rounds']}",
                    f"{r['one_pass']['optimizations']} / {r['working_set']['optimizations']}",
                    f"{r['one_pass']['energy']:.1f} / {r['working_set']['energy']:.1f}",
                    f"{100 * r['one_pass']['accuracy']:.2f} / "
                    f"{100 * r['working_set']['accuracy']:.2f}",
                ]
                for r in out["results"]
            ],
            "llrrrrrrr",
        ),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
