"""Score updates of a partition's rows, as nogil numba loops.

``F[rows] += dK`` written with NumPy's fancy indexing gathers, adds and scatters while holding
the GIL; with partitions as threads of one process that serialized them (10x its one-thread time
at 16 threads in benchmarks/bench_thread_scaling.py).  The loop below gives the same values
(each entry ``F[r, c] + float64(dK[i, c])``, the sum NumPy forms) without the GIL.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from numpy.typing import NDArray


@numba.njit(cache=True, nogil=True)
def add_rows(
    F: NDArray[np.float64], rows: NDArray[np.int64], dK: NDArray[np.floating[Any]]
) -> None:
    """``F[rows[i]] += dK[i]`` for every i (``rows`` distinct), ``dK`` float32 or float64."""
    P = F.shape[1]
    for i in range(rows.shape[0]):
        r = rows[i]
        for c in range(P):
            F[r, c] += np.float64(dK[i, c])


@numba.njit(cache=True, nogil=True)
def add_moved_block(
    F: NDArray[np.float64],
    G: NDArray[np.floating[Any]],
    rows: NDArray[np.int64],
    cls: NDArray[np.int64],
    d: NDArray[np.float64],
    a: int,
    b: int,
) -> None:
    """``F[a:b, cls[t]] += d[t] * G[rows[t], a:b]`` for every t, in that order: the scores of
    rows ``a:b`` moved by the nonzero coefficient changes ``(rows[t], cls[t], d[t])`` of a
    round's moved patterns, each row of ``G`` a pattern's kernel values (float32 or float64,
    summed in float64).

    A moved pattern changes 2-3 of its P coefficients (letter: 2.6 of 26), so this does a
    tenth of the multiply-adds of the dense product ``K_moved.T @ dB``, and reads each kernel
    row where it lies instead of gathering it.  Rows ``a:b`` of F are worked on transposed,
    one contiguous stream per class."""
    P = F.shape[1]
    w = b - a
    acc = np.empty((P, w))
    for j in range(w):
        for r in range(P):
            acc[r, j] = F[a + j, r]
    for t in range(rows.shape[0]):
        # (one-dimensional slices: the loop below vectorizes, 3x the speed of 2-D indexing)
        grow = G[rows[t], a:b]
        arow = acc[cls[t]]
        dt = d[t]
        for j in range(w):
            arow[j] += dt * np.float64(grow[j])
    for j in range(w):
        for r in range(P):
            F[a + j, r] = acc[r, j]
