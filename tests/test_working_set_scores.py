"""The working set's scores sent with a round (``RoundMessage.scores``): the coordinator's solve
has already added ``K(x_i, X_B) dB`` to every working-set row ``i``, so a partition takes those
rows' scores and computes the batch's kernel columns over its other active rows only; the
column cache's admission is asked first (:meth:`ColumnCache.takes`), so that columns it keeps
are still whole."""

from __future__ import annotations

import numpy as np
import pytest
from test_partition_unshrink import _settings

from dmcsvm.coordinators import crammer_singer
from dmcsvm.engine.cache import ColumnCache
from dmcsvm.engine.messages import RoundMessage
from dmcsvm.engine.partition import Partition
from dmcsvm.kernels import KernelSpec, kernel_reference


def test_takes_names_the_columns_put_many_keeps():
    """Random rounds of gathers and puts on a cache of 6 columns: before every put, ``takes``
    says exactly which keys the put keeps (new slots, hits moved up, admission by request
    counts against the least recent unpinned column)."""
    rng = np.random.default_rng(0)
    width = 10
    cache = ColumnCache(6 * width * 4)
    for _ in range(200):
        keys = rng.choice(15, size=rng.integers(1, 8), replace=False)
        cache.start_round()
        out = np.empty((len(keys), width), dtype=np.float32)
        miss = cache.gather(keys, out)
        said = cache.takes(keys[miss], width, np.float32)
        before = set(cache._slot)
        cols = rng.random((len(miss), width)).astype(np.float32)
        cache.put_many(keys[miss], cols)
        kept = [int(k) in cache._slot for k in keys[miss]]
        assert said == kept, (said, kept, before)
    assert cache.takes([1, 2], 7 * width, np.float32) == [False, False]  # wider than the budget


@pytest.mark.parametrize("cache_cols", [0, 9, 400])
def test_a_partition_computes_columns_over_the_rows_without_scores(cache_cols):
    """Rows of the working set take the scores sent; the others get ``K dB`` as without them
    (float64 kernel values: to 1e-12); the kernel values computed cover the other rows only,
    except the columns the cache keeps, which are whole."""
    rng = np.random.default_rng(5)
    n, d, P, nb = 80, 4, 3, 12
    X = rng.normal(size=(n, d))
    y = rng.integers(0, P, n)
    spec = KernelSpec("rbf", gamma=0.4)
    budgets = dict(cache_bytes=cache_cols * n * 8, kernel_block_bytes=5 * n * 8)
    ps = _settings(spec, P, np.float64, **budgets)
    plain, given = Partition(0, 0, n, X, y, y, ps), Partition(0, 0, n, X, y, y, ps)
    F0 = rng.normal(size=(n, P))
    plain.F[:], given.F[:] = F0, F0
    ids = np.sort(rng.choice(n, nb, replace=False))
    dB = rng.normal(size=(nb, P))
    ws = np.union1d(ids[::2], rng.choice(n, 20, replace=False))  # a working set around it
    F_ws = rng.normal(size=(ws.shape[0], P))
    plain.step(RoundMessage(ids=ids, XB=X[ids], dB=dB))
    given.step(RoundMessage(ids=ids, XB=X[ids], dB=dB, scores={"ids": ws, "F": F_ws}))
    want = F0 + kernel_reference(spec, X, X[ids]) @ dB
    np.testing.assert_allclose(plain.F, want, rtol=0, atol=1e-12)
    rest = np.setdiff1d(np.arange(n), ws)
    np.testing.assert_allclose(given.F[rest], want[rest], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(given.F[ws], F_ws)
    kept = min(cache_cols, nb)  # (an empty cache keeps the first columns it is offered)
    assert plain.kernel_elements == nb * n
    assert given.kernel_elements == kept * n + (nb - kept) * rest.shape[0]


@pytest.mark.parametrize("cache_cols", [0, 9])
def test_rounds_reuse_the_partitions_blocks_whatever_they_hold(cache_cols):
    """A partition computes a round's kernel blocks into buffers of its own, reused round after
    round (``PartitionBase._scratch``): a round that finds NaN left in them (what an earlier
    round left, made visible) gives the scores of fresh blocks, and the buffers stay the same
    arrays, each made at once as large as a kernel block may be."""
    rng = np.random.default_rng(7)
    n, d, P = 80, 4, 3
    X = rng.normal(size=(n, d))
    y = rng.integers(0, P, n)
    spec = KernelSpec("rbf", gamma=0.4)
    budgets = dict(cache_bytes=cache_cols * n * 8, kernel_block_bytes=5 * n * 8)
    part = Partition(0, 0, n, X, y, y, _settings(spec, P, np.float64, **budgets))
    F = rng.normal(size=(n, P))
    part.F[:] = F
    made = None
    for _ in range(3):
        ids = np.sort(rng.choice(n, 12, replace=False))
        dB = rng.normal(size=(12, P))
        ws = np.union1d(ids[::3], rng.choice(n, 20, replace=False))
        F_ws = rng.normal(size=(ws.shape[0], P))
        for buf in part._bufs.values():
            buf[...] = np.nan
        part.step(RoundMessage(ids=ids, XB=X[ids], dB=dB, scores={"ids": ws, "F": F_ws}))
        F = F + kernel_reference(spec, X, X[ids]) @ dB
        F[ws] = F_ws
        np.testing.assert_allclose(part.F, F, rtol=0, atol=1e-12)
        if made is None:
            made = dict(part._bufs)
            assert {"kt", "kp", "xr"} <= set(made)
            assert all(b.nbytes >= 5 * n * 8 for b in made.values())
        assert all(part._bufs[k] is b for k, b in made.items())
    # closed, the partition lets go of its blocks at once (a worker's next fit reuses them)
    part.close()
    assert part._bufs == {} and part._X_active is None and part.cache._buf is None


def test_a_shrunk_row_in_the_working_set_keeps_its_lagging_scores():
    """A working-set row the partition shrank after reporting it lags (its scores are brought
    up to date by the unshrink's log, this batch included): the scores sent are not taken."""
    rng = np.random.default_rng(2)
    n, d, P = 40, 3, 3
    X = rng.normal(size=(n, d))
    y = rng.integers(0, P, n)
    part = Partition(0, 0, n, X, y, y, _settings(KernelSpec("rbf", gamma=0.5), P, np.float64))
    part.active = np.arange(0, n, 2)
    part.F[:] = -3.0
    ids = np.array([1, 4, 6])
    ws = np.array([3, 4, 5, 8])
    part.step(
        RoundMessage(
            ids=ids,
            XB=X[ids],
            dB=rng.normal(size=(3, P)),
            scores={"ids": ws, "F": np.full((4, P), 9.0)},
        )
    )
    np.testing.assert_array_equal(part.F[[4, 8]], 9.0)
    np.testing.assert_array_equal(part.F[[3, 5]], -3.0)  # shrunk: left to the log


def test_scores_are_sent_only_well_above_the_kernel_values_rounding():
    assert crammer_singer.sends_scores(1e-3, np.float32)
    assert not crammer_singer.sends_scores(1e-9, np.float32)
    assert crammer_singer.sends_scores(1e-9, np.float64)


@pytest.mark.parametrize("sent", [True, False])
def test_rounds_with_the_working_sets_scores_reach_the_qp_optimum(cs, sent, monkeypatch):
    """Partition rounds (working sets of 9 of 60 rows) whose partitions take the scores sent
    reach the exact solver's optimum as those that compute every column."""
    if not sent:
        monkeypatch.setattr(crammer_singer, "sends_scores", lambda tol, x_dtype: False)
    taken = []
    real = Partition._take_scores

    def count(self, got, pos, at):
        taken.append(len(pos))
        return real(self, got, pos, at)

    monkeypatch.setattr(Partition, "_take_scores", count)
    X, y = cs.make_blobs_problem(seed=4, n=60, d=3, m=3, spread=1.2, scale=1.5)
    spec = KernelSpec("rbf", gamma=0.5)
    B, r = cs.run_solver(X, y, 3, spec, 1.0, batch_size=9, tol=1e-8)
    assert r.converged
    assert (sum(taken) > 0) == sent
    K = kernel_reference(spec, X, X)
    D_star, _ = cs.cs_dual_qp(K, y, 3, 1.0)
    cs.check_feasible(B, y, 1.0, atol=1e-9)
    assert abs(cs.dual_value(B, K, y) - D_star) <= 1e-8 * abs(D_star)
    viol, _ = cs.kkt_violation(B, K @ B, y, 1.0)
    assert viol <= 2e-8
