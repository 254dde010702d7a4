"""dmcsvm.numerics.prefetch: the software-prefetch hints compile inside numba kernels, for dense
and CSR rows, and change no value (a kernel with them equals NumPy); wrong arguments are typing
errors, not silent no-ops."""

from __future__ import annotations

import numba
import numpy as np
import pytest
import scipy.sparse as sp

from dmcsvm.numerics.prefetch import prefetch, prefetch2, prefetch_row
from dmcsvm.numerics.sequential_dual import row_dot


@numba.njit
def _dots_in_order(rows, w, order):
    """``x_i . w`` for the rows in ``order``, each asking for the next row first."""
    out = np.empty(order.shape[0])
    for j in range(order.shape[0]):
        if j + 1 < order.shape[0]:
            prefetch_row(rows, order[j + 1])
        out[j] = row_dot(w, 0, rows, order[j])
    return out


@numba.njit
def _sum_with_hints(a, b):
    acc = 0.0
    for i in range(a.shape[0]):
        prefetch(a, min(i + 8, a.shape[0] - 1))
        prefetch2(b, i % b.shape[0], np.int32(0))
        acc += a[i] + b[i % b.shape[0], 0]
    return acc


@pytest.mark.parametrize("d", [3, 17, 300])
def test_prefetched_row_dots_equal_numpy(d):
    """Row dots with the next row prefetched, on dense and CSR rows (an empty last row: its
    prefetch points one past the data), equal ``X w`` in a random visiting order; d = 300 rows
    are longer than the prefetched first kilobyte."""
    rng = np.random.default_rng(d)
    X = rng.normal(size=(50, d)) * (rng.random((50, d)) < 0.3)
    X[-1] = 0.0
    w = rng.normal(size=(1, d))
    order = rng.permutation(50)
    C = sp.csr_matrix(X)
    for rows in ((X,), (C.indptr.astype(np.int64), C.indices.astype(np.int64), C.data)):
        np.testing.assert_allclose(
            _dots_in_order(rows, w, order), X[order] @ w[0], rtol=1e-12, atol=1e-12
        )


def test_prefetch_hints_change_no_value():
    a = np.arange(20.0)
    b = np.arange(12.0).reshape(4, 3)
    assert _sum_with_hints(a, b) == a.sum() + sum(b[i % 4, 0] for i in range(20))


def test_prefetch_rejects_wrong_arguments():
    @numba.njit
    def two_d_with_one_index(b):
        prefetch(b, 0)

    @numba.njit
    def one_d_with_two_indices(a):
        prefetch2(a, 0, 0)

    with pytest.raises(numba.core.errors.TypingError):
        two_d_with_one_index(np.zeros((2, 2)))
    with pytest.raises(numba.core.errors.TypingError):
        one_d_with_two_indices(np.zeros(2))
