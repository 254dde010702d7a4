"""The whole-block rounds' score update ``F += K(X, X_moved) dB`` (``whole_block.add_moved``):
only the nonzero coefficient changes are added, each scaled kernel row straight from the Gram
block, summed in float64 (``numerics.scores.add_moved_block``)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from dmcsvm.coordinators.whole_block import UPDATE_COLS, add_moved
from dmcsvm.numerics.scores import add_moved_block


def _problem(n, P, m, dtype, seed=0):
    rng = np.random.default_rng(seed)
    G = rng.random((n, n)).astype(dtype)
    g = rng.choice(n, m, replace=False).astype(np.int64)
    dB = np.zeros((m, P))
    for i in range(m):  # a moved pattern changes a few of its P coefficients
        c = rng.choice(P, 3, replace=False)
        dB[i, c] = rng.normal(size=3)
    return G, g, dB, rng.normal(size=(n, P))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_update_is_the_dense_product_in_float64(dtype):
    """Against ``F + G[g].T @ dB`` in float64 (the kernel values as stored): equal to rounding,
    over several column blocks and a last partial one."""
    n = 2 * UPDATE_COLS + 37
    G, g, dB, F0 = _problem(n, 7, 150, dtype)
    F = F0.copy()
    add_moved(F, G, g, dB, None)
    ref = F0 + G[g].astype(np.float64).T @ dB
    np.testing.assert_allclose(F, ref, rtol=1e-12, atol=1e-12)


def test_the_update_does_not_depend_on_the_threads():
    """The column blocks are fixed, so a pool of threads gives the same bits as one thread."""
    n = 3 * UPDATE_COLS + 5
    G, g, dB, F0 = _problem(n, 26, 80, np.float32, seed=1)
    F1, F2 = F0.copy(), F0.copy()
    add_moved(F1, G, g, dB, None)
    with ThreadPoolExecutor(3) as pool:
        add_moved(F2, G, g, dB, pool)
    np.testing.assert_array_equal(F1, F2)


def test_the_block_kernel_adds_each_change_in_order():
    """``F[a:b, cls[t]] += d[t] * G[rows[t], a:b]`` for every t, and nothing outside ``a:b``;
    repeated (row, class) pairs add up."""
    rng = np.random.default_rng(2)
    G = rng.random((40, 40)).astype(np.float32)
    F0 = rng.normal(size=(40, 4))
    rows = np.array([3, 3, 17, 3], dtype=np.int64)
    cls = np.array([0, 2, 2, 0], dtype=np.int64)
    d = np.array([0.5, -1.0, 2.0, 0.25])
    F = F0.copy()
    add_moved_block(F, G, rows, cls, d, 10, 30)
    ref = F0.copy()
    for r, c, dt in zip(rows, cls, d, strict=True):
        ref[10:30, c] += dt * G[r, 10:30].astype(np.float64)
    np.testing.assert_allclose(F, ref, rtol=1e-15, atol=1e-15)
    np.testing.assert_array_equal(F[:10], F0[:10])
    np.testing.assert_array_equal(F[30:], F0[30:])


def test_the_scan_in_blocks_gives_every_rows_values_and_the_sums_whatever_the_threads():
    """``whole_block.scan_rows`` (blocks of SCAN_ROWS rows on the block's threads) gives every
    row's ``psi`` and selection value of the one-call scan bit for bit, its sums to rounding,
    and the same bits on one thread or a pool of three."""
    from dmcsvm.coordinators.whole_block import SCAN_ROWS, scan_rows
    from dmcsvm.numerics import pattern as pt

    rng = np.random.default_rng(3)
    n, P = 2 * SCAN_ROWS + 101, 6
    y = rng.integers(0, P, n).astype(np.int64)
    B = np.zeros((n, P))
    for i in range(0, n, 3):  # feasible coefficients: alpha_y = -alpha_r
        a, r = rng.uniform(0, 1.0), (y[i] + 1 + rng.integers(0, P - 1)) % P
        B[i, y[i]], B[i, r] = a, -a
    F = rng.normal(size=(n, P))
    args = (pt.SELECTIONS["bmg"], B, F, y, y, np.arange(P), np.ones(n), np.full(n, 1.0), 1e-3)
    V0, psi0 = np.empty(n), np.empty(n)
    ref = pt.scan_all_rows(*args, V0, psi0)
    V1, psi1 = np.empty(n), np.empty(n)
    one = scan_rows(*args, V1, psi1, None)
    np.testing.assert_array_equal(V1, V0)
    np.testing.assert_array_equal(psi1, psi0)
    assert psi0.max() > 1e-3  # (violators: their selection values are computed)
    np.testing.assert_allclose(one, ref, rtol=1e-13)
    V2, psi2 = np.empty(n), np.empty(n)
    with ThreadPoolExecutor(3) as pool:
        three = scan_rows(*args, V2, psi2, pool)
    assert three == one
    np.testing.assert_array_equal(V2, V0)
