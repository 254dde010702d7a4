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
