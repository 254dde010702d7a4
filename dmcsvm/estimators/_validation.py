"""Parameter checks shared by the estimators; every message names the parameter and its value."""

from __future__ import annotations

import numbers

import numpy as np


def check_real(est, names, finite: bool = True) -> None:
    """Each parameter in ``names`` is a real number (not bool; finite unless ``finite=False``)."""
    for name in names:
        v = getattr(est, name)
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or (finite and not np.isfinite(v)):
            raise ValueError(f"{name} must be a {'finite ' if finite else ''}number, got {v!r}")


def check_int(est, names) -> None:
    """Each parameter in ``names`` is an integer (not bool)."""
    for name in names:
        v = getattr(est, name)
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise ValueError(f"{name} must be an integer, got {v!r}")
