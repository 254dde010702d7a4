"""``dmcsvm plot LOG -o PNG``: convergence of a training run from its ``--log-json`` file."""

from __future__ import annotations

import json
import os

import numpy as np

from ._outputs import add_overwrite_option, atomic_file, check_output
from ._usage import UsageError, plural


def add_parser(sub):
    p = sub.add_parser("plot", help="plot dual, primal and duality gap of a --log-json file")
    p.add_argument("log", help="the JSON-lines file written by dmcsvm train --log-json")
    p.add_argument("-o", "--output", help="PNG to write (default: LOG with .png)")
    p.add_argument(
        "--x",
        choices=["rounds", "time"],
        default="rounds",
        help="horizontal axis: rounds or elapsed seconds (default rounds)",
    )
    p.add_argument("--title", help="title of the figure")
    add_overwrite_option(p, "the PNG")
    p.set_defaults(func=run)


def read_log(path) -> list:
    """The rounds of a JSON-lines log as ``[(name, columns)]``, one entry per binary problem
    for a decomposed estimator's log (rounds with a ``problem`` field), else one entry; a bad
    line raises UsageError naming it.  Only numeric fields become columns."""
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
    first = rows[0]
    if not ({"dual", "primal"} <= first.keys() or "objective" in first):
        raise UsageError(
            f"{path}: the rounds have neither 'dual' and 'primal' nor 'objective' fields"
        )
    groups: dict = {}
    for r in rows:
        key = r.get("problem")
        name = None if key is None else f"{r.get('positive')} vs {r.get('negative')}"
        groups.setdefault(key, (name, []))[1].append(r)
    out = []
    for name, rs in groups.values():
        cols = {}
        for k, v in rs[0].items():
            if k in ("problem", "positive", "negative") or isinstance(v, str):
                continue
            try:
                cols[k] = np.array(
                    [np.nan if r.get(k) is None else r.get(k) for r in rs], dtype=float
                )
            except (TypeError, ValueError):
                continue
        out.append((name, cols))
    return out


def _x(cols, how, path):
    if how == "time":
        if "elapsed" not in cols:
            raise UsageError(f"{path}: the rounds have no 'elapsed' field for --x time")
        return cols["elapsed"]
    for k in ("round", "epoch"):
        if k in cols:
            return cols[k] + 1
    return np.arange(1, len(next(iter(cols.values()))) + 1)


def _frame(ax, low, high, skip):
    """Frame the axis on the dual's range and the primal after its first rounds (which dwarf
    the rest)."""
    finite = np.concatenate([low, high])
    if np.isfinite(finite).any():
        lo, hi = np.nanmin(low), np.nanmax(high[skip:]) if len(high[skip:]) else np.nan
        if np.isfinite(lo) and np.isfinite(hi) and hi > lo:
            ax.set_ylim(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))


def run(a) -> int:
    groups = read_log(a.log)
    out = a.output or os.path.splitext(a.log)[0] + ".png"
    check_output(out, overwrite=a.overwrite)
    xs = [_x(cols, a.x, a.log) for _, cols in groups]
    xlabel = "elapsed time (s)" if a.x == "time" else "round"
    try:
        import matplotlib
    except ImportError:
        raise UsageError(
            "dmcsvm plot needs matplotlib, which is not installed here: pip install 'dmcsvm[plot]'"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    for (name, cols), x in zip(groups, xs, strict=False):
        tag = f" {name}" if name else ""
        if "primal" in cols and "dual" in cols:
            ax1.plot(x, cols["primal"], label=f"primal P{tag}")
            ax1.plot(x, cols["dual"], label=f"dual D{tag}")
            if len(groups) == 1:
                _frame(ax1, cols["dual"], cols["primal"], len(x) // 10)
            if "gap" in cols:
                gap, glabel = cols["gap"], "relative gap (P - D) / P"
            else:
                with np.errstate(divide="ignore", invalid="ignore"):
                    gap = (cols["primal"] - cols["dual"]) / np.abs(cols["primal"])
                glabel = "relative gap (P - D) / |P|"
        else:
            ax1.plot(x, cols["objective"], label=f"dual objective{tag}")
            gap = cols.get("violation", np.full(len(x), np.nan))
            glabel = "maximal KKT violation"
        ax2.semilogy(x, np.where(gap > 0, gap, np.nan), label=name)
        ax2.set_ylabel(glabel)
    ax1.set_ylabel("objective")
    ax1.legend(fontsize="small")
    if len(groups) > 1:
        ax2.legend(fontsize="small")
    ax2.set_xlabel(xlabel)
    ax1.set_title(a.title or os.path.basename(a.log))
    fig.tight_layout()
    with atomic_file(out, "wb") as fh:
        fig.savefig(fh, format="png", dpi=100)
    plt.close(fig)
    n = sum(len(x) for x in xs)
    what = f" of {len(groups)} binary problems" if len(groups) > 1 else ""
    print(f"wrote {out} ({n} {plural(n, 'round')}{what})")
    return 0
