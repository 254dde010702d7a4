"""A partition's unshrink (docs/design.md, 'State that must survive': F is always rebuildable from
B): the shrunk rows' scores rebuilt as ``K(X_shrunk, X_SV) @ B_SV``, in row blocks, against a
float64 NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest

import dmcsvm.engine.partition as partition
from dmcsvm.engine.partition import Partition, PartitionSettings
from dmcsvm.kernels import KernelSpec, kernel_reference
from dmcsvm.numerics import pattern as pt


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unshrink_rebuilds_the_shrunk_rows_scores(dtype, monkeypatch):
    # small blocks and float64 slices, so that the rebuild crosses both of their boundaries
    monkeypatch.setattr(partition, "_F64_ROWS", 7)
    rng = np.random.default_rng(3)
    n, d, P, nsv = 90, 5, 4, 23
    X = rng.normal(size=(n, d)).astype(dtype)
    y = rng.integers(0, P, n)
    spec = KernelSpec("rbf", gamma=0.3)
    ps = PartitionSettings(
        kernel=spec.to_dict(),
        C=1.0,
        selection=pt.SEL_BMG,
        tol=1e-3,
        n_candidates=5,
        pcls=np.arange(P),
        kernel_dtype=np.dtype(dtype).name,
        kernel_block_bytes=8 * nsv * 20,
    )  # 20 rows per kernel block
    part = Partition(0, 0, n, X, y, y, ps)
    active = np.sort(rng.choice(n, 30, replace=False))
    part.active = active.copy()
    part.F[:] = -7.0  # stale scores everywhere
    Xsv = rng.normal(size=(nsv, d)).astype(dtype)
    Bsv = rng.normal(size=(nsv, P))
    part._unshrink({"ids": np.arange(nsv), "X": Xsv, "B": Bsv})
    shrunk = np.setdiff1d(np.arange(n), active)
    want = kernel_reference(spec, X[shrunk], Xsv) @ Bsv
    # the kernel values are the kernel dtype's (float32: ~1e-7 relative), their sum float64
    atol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(part.F[shrunk], want, rtol=0, atol=atol)
    np.testing.assert_array_equal(part.F[active], -7.0)  # active rows keep their scores
    np.testing.assert_array_equal(part.active, np.arange(n))
