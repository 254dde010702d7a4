"""Errors dmcsvm raises for a solve that cannot be trusted, and the checks that raise them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["NonFiniteError", "check_finite_round", "check_finite_rows", "check_sample_weight"]

_CAUSE = (
    "the likely cause is non-finite or overflowing input (values so large that squared "
    "norms or kernel values overflow) or an extreme kernel parameter; scale the features "
    "to a moderate range"
)


class NonFiniteError(ValueError):
    """A dual, primal, score or coefficient became NaN or infinite: the solve stops instead of
    reporting a wrong model as converged."""


def check_finite_round(round_: int, **values: float | NDArray[np.floating[Any]]) -> None:
    """Raise :class:`NonFiniteError` naming every value of ``values`` (scalars or arrays) that is
    not finite in round ``round_``."""
    bad = []
    for name, v in values.items():
        if np.ndim(v) == 0:
            if not math.isfinite(float(v)):
                bad.append(f"{name} {float(v)!r}")
        elif not np.all(np.isfinite(v)):
            bad.append(
                f"{name} ({int(np.size(v) - np.count_nonzero(np.isfinite(v)))} non-finite entries)"
            )
    if bad:
        raise NonFiniteError(f"round {round_}: {', '.join(bad)}: {_CAUSE}")


def check_finite_rows(
    what: str, first_row: int, values: np.ndarray, rows: NDArray[np.integer[Any]] | None = None
) -> None:
    """Raise :class:`NonFiniteError` for the first non-finite entry of per-row ``values``
    (``values[j]`` belongs to row ``first_row + j``, or ``rows[j]`` when given)."""
    ok = np.isfinite(values)
    if ok.all():
        return
    j = int(np.flatnonzero(~ok)[0])
    r = int(rows[j]) if rows is not None else first_row + j
    raise NonFiniteError(f"training row {r}: {what} is {float(values[j])!r}; {_CAUSE}")


def check_sample_weight(sample_weight: ArrayLike | None, n: int) -> NDArray[np.float64] | None:
    """``sample_weight`` as a float64 vector of length ``n`` (None stays None), refusing a wrong
    shape, non-numbers, NaN/inf (:class:`~dmcsvm.errors.NonFiniteError`, naming the row) and
    negative weights (naming the row)."""
    if sample_weight is None:
        return None
    if hasattr(sample_weight, "compute"):  # a dask array or series
        sample_weight = sample_weight.compute()
    try:
        sw = np.asarray(sample_weight, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"sample_weight must hold numbers: {exc}") from None
    if sw.ndim != 1:
        raise ValueError(
            f"sample_weight must be 1-dimensional (one weight per row), got shape {sw.shape}"
        )
    if sw.shape[0] != n:
        raise ValueError(
            f"sample_weight has {sw.shape[0]} weights for {n} rows; it needs one per row"
        )
    bad = ~np.isfinite(sw)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise NonFiniteError(f"sample_weight[{i}] is {float(sw[i])!r}; weights must be finite")
    neg = sw < 0
    if neg.any():
        i = int(np.flatnonzero(neg)[0])
        raise ValueError(f"sample_weight[{i}] is {float(sw[i])!r}; weights must be >= 0")
    return sw
