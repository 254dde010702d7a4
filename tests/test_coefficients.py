"""The coordinator's sparse coefficient store behaves as the dense ``n x P`` array it replaces,
and holds only the rows of patterns that have coefficients (after ``compact``)."""

from __future__ import annotations

import numpy as np
import pytest

from dmcsvm.coordinators.coefficients import CoefficientRows


def test_matches_a_dense_array_under_the_solvers_operations():
    rng = np.random.default_rng(0)
    n, P = 500, 4
    dense = np.zeros((n, P))
    store = CoefficientRows(n, P)
    for _ in range(60):
        ids = rng.choice(n, size=rng.integers(1, 40), replace=False)
        dB = rng.normal(size=(ids.shape[0], P))
        dB[rng.random(ids.shape[0]) < 0.3] = 0.0
        dense[ids] += dB
        store[ids] += dB
        back = rng.choice(ids, size=max(1, ids.shape[0] // 4), replace=False)
        dense[back] = 0.0                      # rows that leave the support
        store[back] = 0.0
        cols = rng.integers(0, P, ids.shape[0])
        np.testing.assert_array_equal(store[ids, cols], dense[ids, cols])
        if rng.random() < 0.3:
            store.compact()
    np.testing.assert_array_equal(store.toarray(), dense)
    sv = np.flatnonzero(np.any(dense != 0.0, axis=1))
    np.testing.assert_array_equal(store.support(), sv)
    assert store.count_support() == sv.shape[0]
    np.testing.assert_array_equal(store[sv], dense[sv])
    np.testing.assert_array_equal(store[7], dense[7])
    store.compact()
    assert store._used == sv.shape[0]          # only the support is stored
    np.testing.assert_array_equal(store.toarray(), dense)
    assert store.shape == (n, P)


def test_memory_follows_the_support_not_n():
    """A billion patterns cost nothing until they get coefficients."""
    store = CoefficientRows(10 ** 9, 26)
    ids = np.array([5, 10 ** 9 - 1, 123456789])
    store[ids] = np.ones((3, 26))
    assert store.nbytes < 10_000
    np.testing.assert_array_equal(store.support(), np.sort(ids))
    np.testing.assert_array_equal(store[np.array([4, 5])], [[0.0] * 26, [1.0] * 26])


def test_one_entry_per_row_reads_no_full_rows():
    """``B[ids, cols]`` over many patterns (the re-assignment asks it of every changed one)
    allocates O(len(ids)), not a len(ids) x P gather of their rows."""
    import tracemalloc
    store = CoefficientRows(10 ** 6, 100)
    store[np.array([3, 7])] = np.arange(200.0).reshape(2, 100)
    ids = np.arange(0, 10 ** 6, 2)
    cols = np.full(ids.shape[0], 5)
    tracemalloc.start()
    try:
        got = store[ids, cols]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * ids.shape[0] * 8          # a few O(len(ids)) arrays; the rows: 100x that
    assert got.shape == ids.shape and np.count_nonzero(got) == 0
    np.testing.assert_array_equal(store[np.array([3, 4, 7]), np.array([5, 5, 99])],
                                  [5.0, 0.0, 199.0])


def test_ids_out_of_range_are_refused():
    store = CoefficientRows(10, 2)
    with pytest.raises(IndexError, match=r"pattern ids must be in \[0, 10\), got 3\.\.10"):
        store[np.array([3, 10])] = 1.0
    with pytest.raises(IndexError, match=r"pattern ids must be in \[0, 10\), got -1\.\.-1"):
        store[-1]


def test_row_bank_and_coefficients_follow_the_support_during_a_solve(cs):
    """Over a solve of many small batches the coordinator's stored coefficient rows and banked X
    rows shrink back to the support (plus the batch in flight) at every recount, and the result
    is still the exact optimum (partitions re-ship the X rows the bank dropped)."""
    from dmcsvm.coordinators.crammer_singer import CoordinatorState, SolverSettings, solve
    from dmcsvm.engine.executor import InProcessExecutor
    from dmcsvm.engine.partition import PartitionSettings
    from dmcsvm.kernels import KernelSpec, kernel_reference
    from dmcsvm.numerics import pattern as pt

    X, y = cs.make_blobs_problem(4, 300, 3, 3, spread=0.9, scale=2.5)
    n, m, C = X.shape[0], 3, 1.0
    spec = KernelSpec("rbf", gamma=0.5)
    s = SolverSettings(C=C, tol=1e-7, batch_size=4, max_iter=50000).check()
    pset = PartitionSettings(kernel=spec.to_dict(), C=C, selection=pt.SELECTIONS["bmg"],
                             tol=s.tol, n_candidates=4, pcls=np.arange(m), shrinking=True,
                             shrink_after=s.shrink_after, cache_bytes=10 ** 6)
    state = CoordinatorState.fresh(n, m)
    entered = set()

    def on_round(r, B):
        entered.update(state.pending.ids.tolist())

    ex = InProcessExecutor(2, 3).start(X, y, y, pset)
    try:
        res = solve(ex, n, np.arange(m), spec, s, X.shape[1], False, state=state,
                    on_round=on_round)
    finally:
        ex.close()
    assert res.converged and res.n_iter > 100
    n_sv = len(res.support)
    assert len(state.bank.rows) <= n_sv + 4 and state.B._used <= n_sv + 4
    # many more patterns entered a batch (and were banked) than stay in the support
    assert len(entered) > n_sv + 10
    D_star, _ = cs.cs_dual_qp(kernel_reference(spec, X, X), y, m, C)
    assert abs(res.history["dual"][-1] - D_star) <= 1e-6 * abs(D_star)
