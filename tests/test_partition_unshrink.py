"""A partition's unshrink (docs/design.md, 'State that must survive': F is always rebuildable from
B): the shrunk rows' scores rebuilt as ``K(X_shrunk, X_SV) @ B_SV``, in row blocks, or caught up
on the batches logged since their shrink, against a float64 NumPy reference; the log survives a
saved state."""

from __future__ import annotations

import numpy as np
import pytest

import dmcsvm.engine.partition as partition
from dmcsvm.engine.messages import RoundMessage
from dmcsvm.engine.partition import Partition, PartitionSettings
from dmcsvm.kernels import KernelSpec, kernel_reference
from dmcsvm.numerics import pattern as pt


def _settings(spec, P, dtype, **kw) -> PartitionSettings:
    return PartitionSettings(
        kernel=spec.to_dict(),
        C=1.0,
        selection=pt.SEL_BMG,
        tol=1e-3,
        n_candidates=5,
        pcls=np.arange(P),
        kernel_dtype=np.dtype(dtype).name,
        **kw,
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unshrink_rebuilds_the_shrunk_rows_scores(dtype, monkeypatch):
    # small blocks and float64 slices, so that the rebuild crosses both of their boundaries
    monkeypatch.setattr(partition, "_F64_ROWS", 7)
    rng = np.random.default_rng(3)
    n, d, P, nsv = 90, 5, 4, 23
    X = rng.normal(size=(n, d)).astype(dtype)
    y = rng.integers(0, P, n)
    spec = KernelSpec("rbf", gamma=0.3)
    ps = _settings(spec, P, dtype, kernel_block_bytes=8 * nsv * 20)  # 20 rows per kernel block
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


def _logged_partition(dtype, rng, n=120, d=5, P=4):
    """A partition whose rows are shrunk in two steps between four batches of its own rows
    (shrinking by the rounds' statistics is off: the test picks the rows), with the float64
    reference of every score, ``K(X, X) @ B``."""
    X = rng.normal(size=(n, d)).astype(dtype)
    y = rng.integers(0, P, n)
    spec = KernelSpec("rbf", gamma=0.3)
    ps = _settings(spec, P, dtype, shrinking=False)
    part = Partition(0, 0, n, X, y, y, ps)
    batches = [rng.choice(n, 3, replace=False) for _ in range(4)]
    shrunk = []
    for i, ids in enumerate(batches):
        part.step(RoundMessage(ids=ids, XB=X[ids], dB=rng.normal(size=(3, P))))
        if i in (0, 2):  # shrink 40 of the active rows after the first and the third batch
            keep = np.ones(part.active.shape[0], dtype=bool)
            out = rng.choice(part.active.shape[0], 40, replace=False)
            keep[out] = False
            shrunk.append(part.active[out])
            part._shrink(keep)
    want = kernel_reference(spec, X, X) @ part.B
    sv = np.flatnonzero(np.any(part.B != 0.0, axis=1))
    return part, X, {"ids": sv, "X": X[sv], "B": part.B[sv]}, want, shrunk


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unshrink_catches_shrunk_rows_up_on_the_batches_since(dtype):
    """Rows shrunk a few batches ago take those batches' kernel columns (3 per batch), not the
    support's (up to 12): 40 rows x 9 + 40 rows x 3 kernel values, and every score equals the
    float64 rebuild from B."""
    part, X, sv, want, (first, second) = _logged_partition(dtype, np.random.default_rng(5))
    assert len(sv["ids"]) > 9 and len(part._log) == 3
    before = part.kernel_elements
    part._unshrink(sv)
    assert part.kernel_elements - before == 40 * 9 + 40 * 3
    atol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(part.F, want, rtol=0, atol=atol)
    np.testing.assert_array_equal(part.active, np.arange(X.shape[0]))
    assert part._log == [] and np.all(part.shrunk_at == -1)


def test_unshrink_rebuilds_from_the_support_what_the_log_no_longer_holds(monkeypatch):
    """A log capped at one batch (3 rows of 5 float64 features) keeps only the last: the rows
    shrunk after the first batch are rebuilt from the support patterns, those shrunk after the
    third catch up on the fourth, and every score still equals the rebuild from B."""
    monkeypatch.setattr(partition, "LOG_BYTES", 3 * 5 * 8)
    part, X, sv, want, _ = _logged_partition(np.float64, np.random.default_rng(5))
    assert len(part._log) == 1 and part._log_t0 == 2
    before = part.kernel_elements
    part._unshrink(sv)
    assert part.kernel_elements - before == 40 * len(sv["ids"]) + 40 * 3
    np.testing.assert_allclose(part.F, want, rtol=0, atol=1e-12)


def test_a_saved_state_keeps_the_log(tmp_path):
    """A partition loaded from a saved state catches its shrunk rows up exactly as the one that
    saved it (a resumed fit takes the same rounds, bit for bit)."""
    part, X, sv, _, _ = _logged_partition(np.float32, np.random.default_rng(7))
    part.save_state(tmp_path)
    again = Partition(0, 0, X.shape[0], X, part.yp, part.cls, part.s)
    again.load_state(tmp_path)
    assert again._log_t0 == part._log_t0 and len(again._log) == len(part._log)
    part._unshrink(sv)
    again._unshrink(sv)
    np.testing.assert_array_equal(again.F, part.F)


@pytest.mark.parametrize("below", [True, False])
def test_a_partition_shrinks_once_its_calm_rows_reach_the_shrink_step(below):
    """Each shrink re-packs the cached kernel columns, so a partition waits until at least
    ``SHRINK_STEP`` of its active rows have stayed calm (zero coefficients, margin beyond the
    round's) for ``shrink_after`` rounds: one row fewer keeps every row active."""
    rng = np.random.default_rng(7)
    n, P = 200, 3
    X = rng.normal(size=(n, 4))
    y = rng.integers(0, P, n)
    ps = _settings(KernelSpec("rbf", gamma=0.3), P, np.float64, shrink_after=1)
    part = Partition(0, 0, n, X, y, y, ps)
    k = int(np.ceil(partition.SHRINK_STEP * n)) - (1 if below else 0)
    calm = np.sort(rng.choice(n, k, replace=False))
    part.F[calm, y[calm]] = 5.0  # margin 5 - 1 - 0 beyond the round's 0.5: calm
    part._report(0.5)
    assert np.all(part.calm[calm] == 1) and np.count_nonzero(part.calm) == k
    want = np.arange(n) if below else np.setdiff1d(np.arange(n), calm)
    np.testing.assert_array_equal(part.active, want)
