"""The coordinator's sparse coefficient store behaves as the dense ``n x P`` array it replaces,
and holds only the rows of patterns that have coefficients (after ``compact``)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dmcsvm.coordinators.coefficients import CoefficientRows
from dmcsvm.engine.id_index import IdIndex
from dmcsvm.engine.row_bank import RowBank


def test_id_index_answers_as_a_dict():
    rng = np.random.default_rng(3)
    index, ref = IdIndex(), {}
    for _ in range(40):
        ids = rng.choice(10_000, size=rng.integers(0, 50), replace=False)
        new = np.array([g for g in ids.tolist() if g not in ref], dtype=np.int64)
        slots = rng.integers(0, 10**6, new.shape[0])
        index.add(new, slots)
        ref.update(zip(new.tolist(), slots.tolist(), strict=False))
        probe = rng.integers(-5, 10_005, 200)
        np.testing.assert_array_equal(index.lookup(probe), [ref.get(g, -1) for g in probe.tolist()])
    assert len(index) == len(ref) and index.nbytes == 16 * len(ref)
    np.testing.assert_array_equal(index.ids(), sorted(ref))
    assert IdIndex().lookup([1, 2]).tolist() == [-1, -1]
    # keep: the held ones of the ids asked for, renumbered in the order of their old slots
    asked = np.concatenate([rng.choice(sorted(ref), 30, replace=False), [-7, 10_006]])
    old_of = {g: ref[g] for g in asked.tolist() if g in ref}
    where, old = index.keep(asked)
    order = sorted(old_of, key=old_of.get)
    assert asked[where].tolist() == order and old.tolist() == [old_of[g] for g in order]
    np.testing.assert_array_equal(index.lookup(order), np.arange(len(order)))
    assert len(index) == len(order)
    with pytest.raises(ValueError, match="2 ids for 1 slots"):
        index.add([1, 2], [0])


@pytest.mark.parametrize("sparse", [False, True])
def test_row_bank_keeps_the_first_row_of_each_id_and_what_keep_names(sparse):
    """The bank against a dict of rows: a banked id keeps its first row, ``batch`` mixes fresh
    and banked rows in order, ``keep`` drops the rest (and the dense bank reuses its rows)."""
    rng = np.random.default_rng(4)
    d = 6
    bank, ref = RowBank(), {}

    def rows(X):
        return sp.csr_matrix(X) if sparse else X

    for _ in range(30):
        ids = rng.choice(300, size=rng.integers(1, 30))  # repeats within a call too
        X = rng.normal(size=(ids.shape[0], d)).astype(np.float32)
        bank.add(ids, rows(X))
        for g, x in zip(ids.tolist(), X, strict=False):
            ref.setdefault(g, x)
        held = np.array(sorted(ref), dtype=np.int64)
        assert len(bank) == held.shape[0]
        np.testing.assert_array_equal(bank.ids(), held)
        pick = rng.choice(held, size=min(10, held.shape[0]), replace=False)
        fresh = rng.random(pick.shape[0]) < 0.5
        Xnew = rng.normal(size=(int(fresh.sum()), d)).astype(np.float32)
        xrow = np.where(fresh, np.cumsum(fresh) - 1, -1)
        got = bank.batch(pick, xrow, rows(Xnew), d, sparse, np.float32)
        want = np.stack(
            [Xnew[r] if r >= 0 else ref[g] for g, r in zip(pick.tolist(), xrow, strict=False)]
        )
        np.testing.assert_array_equal(got.toarray() if sparse else got, want)
        stacked = bank.stack(pick, d, sparse, np.float32)
        np.testing.assert_array_equal(
            stacked.toarray() if sparse else stacked, np.stack([ref[g] for g in pick.tolist()])
        )
        if rng.random() < 0.3:
            live = rng.choice(held, size=held.shape[0] // 2, replace=False)
            bank.keep(np.concatenate([live, [10**6]]))  # an id never banked is ignored
            ref = {g: ref[g] for g in live.tolist()}
    if not sparse:
        with pytest.raises(KeyError):
            bank.stack(np.array([10**6]), d, sparse, np.float32)


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
        dense[back] = 0.0  # rows that leave the support
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
    assert store._used == sv.shape[0]  # only the support is stored
    np.testing.assert_array_equal(store.toarray(), dense)
    assert store.shape == (n, P)


def test_memory_follows_the_support_not_n():
    """A billion patterns cost nothing until they get coefficients."""
    store = CoefficientRows(10**9, 26)
    ids = np.array([5, 10**9 - 1, 123456789])
    store[ids] = np.ones((3, 26))
    assert store.nbytes < 10_000
    np.testing.assert_array_equal(store.support(), np.sort(ids))
    np.testing.assert_array_equal(store[np.array([4, 5])], [[0.0] * 26, [1.0] * 26])


def test_one_entry_per_row_reads_no_full_rows():
    """``B[ids, cols]`` over many patterns (the re-assignment asks it of every changed one)
    allocates O(len(ids)), not a len(ids) x P gather of their rows."""
    import tracemalloc

    store = CoefficientRows(10**6, 100)
    store[np.array([3, 7])] = np.arange(200.0).reshape(2, 100)
    ids = np.arange(0, 10**6, 2)
    cols = np.full(ids.shape[0], 5)
    tracemalloc.start()
    try:
        got = store[ids, cols]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * ids.shape[0] * 8  # a few O(len(ids)) arrays; the rows: 100x that
    assert got.shape == ids.shape and np.count_nonzero(got) == 0
    np.testing.assert_array_equal(
        store[np.array([3, 4, 7]), np.array([5, 5, 99])], [5.0, 0.0, 199.0]
    )


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
    # one pass in order over each batch (inner_steps=0): many small batches of new patterns
    s = SolverSettings(C=C, tol=1e-7, batch_size=4, max_iter=50000, inner_steps=0.0).check()
    pset = PartitionSettings(
        kernel=spec.to_dict(),
        C=C,
        selection=pt.SELECTIONS["bmg"],
        tol=s.tol,
        n_candidates=4,
        pcls=np.arange(m),
        shrinking=True,
        shrink_after=s.shrink_after,
        cache_bytes=10**6,
    )
    state = CoordinatorState.fresh(n, m)
    entered = set()

    def on_round(r, B):
        entered.update(state.pending.ids.tolist())

    ex = InProcessExecutor(2, 3).start(X, y, y, pset)
    try:
        res = solve(ex, n, np.arange(m), spec, s, X.shape[1], False, state=state, on_round=on_round)
    finally:
        ex.close()
    assert res.converged and res.n_iter > 100
    n_sv = len(res.support)
    assert len(state.bank) <= n_sv + 4 and state.B._used <= n_sv + 4
    # many more patterns entered a batch (and were banked) than stay in the support
    assert len(entered) > n_sv + 10
    D_star, _ = cs.cs_dual_qp(kernel_reference(spec, X, X), y, m, C)
    assert abs(res.history["dual"][-1] - D_star) <= 1e-6 * abs(D_star)
