"""``dmcsvm plot LOG -o PNG``: convergence of a training run from its ``--log-json`` file."""

from __future__ import annotations

import json
import os

import numpy as np

from ._common import UsageError, atomic_file, check_output


def add_parser(sub):
    p = sub.add_parser("plot", help="plot dual, primal and duality gap of a --log-json file")
    p.add_argument("log", help="the JSON-lines file written by dmcsvm train --log-json")
    p.add_argument("-o", "--output", help="PNG to write (default: LOG with .png)")
    p.add_argument("--x", choices=["rounds", "time"], default="rounds",
                   help="horizontal axis: rounds or elapsed seconds (default rounds)")
    p.add_argument("--title", help="title of the figure")
    p.set_defaults(func=run)


def read_log(path) -> dict:
    """The columns of a JSON-lines log; a bad line raises UsageError naming it."""
    if not os.path.isfile(path):
        raise UsageError(f"{path} does not exist")
    rows = []
    with open(path) as fh:
        for i, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise UsageError(f"{path}, line {i}: not a JSON object") from None
            if not isinstance(row, dict):
                raise UsageError(f"{path}, line {i}: not a JSON object")
            rows.append(row)
    if not rows:
        raise UsageError(f"{path} holds no rounds")
    for need in ("dual", "primal", "gap"):
        if need not in rows[0]:
            raise UsageError(f"{path}: the rounds have no {need!r} field")
    keys = rows[0].keys()
    return {k: np.array([np.nan if r.get(k) is None else r.get(k) for r in rows], dtype=float)
            for k in keys}


def run(a) -> int:
    cols = read_log(a.log)
    out = a.output or os.path.splitext(a.log)[0] + ".png"
    check_output(out)
    if a.x == "time":
        if "elapsed" not in cols:
            raise UsageError(f"{a.log}: the rounds have no 'elapsed' field for --x time")
        x, xlabel = cols["elapsed"], "elapsed time (s)"
    else:
        x = cols["round"] + 1 if "round" in cols else np.arange(1, len(cols["dual"]) + 1)
        xlabel = "round"
    try:
        import matplotlib
    except ImportError:
        raise UsageError("dmcsvm plot needs matplotlib, which is not installed here: "
                         "pip install matplotlib") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    ax1.plot(x, cols["primal"], label="primal P")
    ax1.plot(x, cols["dual"], label="dual D")
    ax1.set_ylabel("objective")
    finite = np.concatenate([cols["primal"], cols["dual"]])
    finite = finite[np.isfinite(finite)]
    if finite.size:        # the first rounds' primal dwarfs the rest: frame the dual's range
        lo, hi = np.nanmin(cols["dual"]), np.nanmax(cols["primal"][len(x) // 10:])
        if np.isfinite(lo) and np.isfinite(hi) and hi > lo:
            ax1.set_ylim(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
    ax1.legend()
    gap = np.where(cols["gap"] > 0, cols["gap"], np.nan)
    ax2.semilogy(x, gap)
    ax2.set_ylabel("relative gap (P - D) / P")
    ax2.set_xlabel(xlabel)
    ax1.set_title(a.title or os.path.basename(a.log))
    fig.tight_layout()
    with atomic_file(out, "wb") as fh:
        fig.savefig(fh, format="png", dpi=100)
    plt.close(fig)
    print(f"wrote {out} ({len(x)} rounds)")
    return 0
