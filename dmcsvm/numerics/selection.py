"""Per-round thresholds on the selection values ``V_p`` (CS 2001 §7 cooling; AS 2005 §5.3
MAX/MEAN)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

THRESHOLDS = ("max", "mean", "exp", "linear", "log")
EPS0 = 0.999  # CS 2001 §7: initial accuracy of every cooling scheme


def threshold_value(kind: str, t: int, max_v: float, mean_v: float, fraction: float = 0.5) -> float:
    """Threshold ``theta_V`` for round ``t`` given this round's max and mean selection value.

    ``max``: ``fraction * max_p V_p``; ``mean``: ``mean_p V_p`` (AS 2005 §5.3);
    ``exp``: ``eps0 exp(-t)``; ``linear``: ``eps0 / (t + 1)``; ``log``: ``eps0 / log10(t + 10)``
    (the cooling schemes of CS 2001 §7, ``eps0 = 0.999``).
    """
    if kind == "max":
        return fraction * max_v
    if kind == "mean":
        return mean_v
    if kind == "exp":
        return EPS0 * math.exp(-t)
    if kind == "linear":
        return EPS0 / (t + 1)
    if kind == "log":
        return EPS0 / math.log10(t + 10)
    raise ValueError(f"threshold must be one of {THRESHOLDS}, got {kind!r}")


def reference_violation(psi: NDArray[np.floating[Any]], skip: float) -> float:
    """The largest of ``psi`` once its ``floor(skip * len(psi))`` largest values are set aside
    (``skip = 0``: the largest): the working set's violation that its solve's stopping point is
    taken relative to, so that a handful of outlying rows do not end a solve of thousands
    after a few dozen steps (``SolverSettings.inner_skip``)."""
    k = int(skip * len(psi))
    if k <= 0:
        return float(np.max(psi))
    if k >= len(psi):
        k = len(psi) - 1
    i = len(psi) - 1 - k
    return float(np.partition(psi, i)[i])
