"""One actor per worker (WorkerGroup) and the broadcast / reduction tree: what the coordinator
receives is cut to what it can pick, and the rounds stay those of the in-process executor."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from distributed import Client, LocalCluster

from dmcsvm.coordinators.crammer_singer import SolverSettings, pick_candidates, solve
from dmcsvm.engine.dask import DaskExecutor
from dmcsvm.engine.executor import InProcessExecutor
from dmcsvm.engine.messages import (
    CSReply,
    RoundMessage,
    class_quota,
    merge,
    pack_message,
    pick_order,
    prune_candidates,
)
from dmcsvm.engine.partition import Partition, PartitionSettings
from dmcsvm.engine.worker_group import WorkerGroup
from dmcsvm.kernels import KernelSpec
from dmcsvm.numerics import pattern as pt

SPEC = KernelSpec("rbf", 0.2)


def _reply(rng, k, n, d, tol, frac=0.6, n_classes=1):
    """A partition's reply with ``n`` candidates: ties in V, violators (a share ``frac``) and
    rows near tol, some X rows already banked by the coordinator; classes drawn among
    ``n_classes``, the first ones the most frequent."""
    V = np.round(rng.random(n) * 4) / 4  # many ties
    psi = np.where(rng.random(n) < frac, tol + rng.random(n), tol * rng.random(n))
    new = rng.random(n) < 0.5
    return CSReply(
        part=k,
        cand_ids=k * 1000 + np.arange(n),
        cand_V=V,
        cand_psi=psi,
        cand_F=rng.normal(size=(n, 3)),
        cand_X=rng.normal(size=(int(new.sum()), d)),
        cand_new=new,
        cand_kdiag=np.ones(n),
        cand_yp=np.zeros(n, np.int64),
        cand_cls=np.minimum(rng.geometric(0.5, n) - 1, n_classes - 1).astype(np.int64),
        max_V=float(V.max(initial=0.0)),
        sum_V=float(V.sum()),
        max_psi=float(psi.max(initial=0.0)),
        n_viol=int((psi > tol).sum()),
        n_active=n,
        n_rows=n,
        sum_alpha=rng.random(),
        sum_BF=rng.random(),
        sum_xi=rng.random(),
    )


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("greedy", [True, False])
@pytest.mark.parametrize("n_classes", [0, 3])
def test_pruned_candidates_leave_every_pick_and_aggregate(seed, greedy, n_classes):
    """Each worker (here: groups of partitions) keeps only the candidates the coordinator can
    still pick: the batch (ids, X rows, scores), the violator flags of the picks and every
    aggregate are those of the unpruned replies; with the classes' shares of a working set
    (``n_classes``) too."""
    rng = np.random.default_rng(seed)
    tol, d = 1e-3, 5
    b = int(rng.integers(1, 6)) + (3 if n_classes else 0)
    sizes = rng.integers(0, 15, size=5)
    sizes[0] = max(sizes[0], 1)
    # few violators in half the draws: the batch then has room for the rows near tol
    frac = 0.1 if seed % 2 else 0.6
    replies = [
        (k, _reply(rng, k, int(n), d, tol, frac, max(n_classes, 1))) for k, n in enumerate(sizes)
    ]
    groups = [replies[:2], replies[2:3], replies[3:]]
    pruned = [kr for g in groups for kr in prune_candidates(g, (b, tol, n_classes))]
    assert sum(r.cand_V.shape[0] for _, r in pruned) <= len(groups) * 2 * b
    # the draw gives some group more candidates than b: something was cut
    assert sum(r.cand_V.shape[0] for _, r in pruned) < sum(sizes)
    full, cut = merge([r for _, r in replies]), merge([r for _, r in pruned])
    for theta in (0.0, 0.5, 2.0):
        p_full, v_full = pick_candidates(full, b, tol, theta, greedy, n_classes)
        p_cut, v_cut = pick_candidates(cut, b, tol, theta, greedy, n_classes)
        np.testing.assert_array_equal(full.cand_ids[p_full], cut.cand_ids[p_cut])
        np.testing.assert_array_equal(full.cand_F[p_full], cut.cand_F[p_cut])
        np.testing.assert_array_equal(v_full[p_full], v_cut[p_cut])
        xf, xc = full.cand_xrow()[p_full], cut.cand_xrow()[p_cut]
        np.testing.assert_array_equal(xf < 0, xc < 0)
        np.testing.assert_array_equal(full.cand_X[xf[xf >= 0]], cut.cand_X[xc[xc >= 0]])
    for name in ("max_V", "sum_V", "max_psi", "n_viol", "n_active", "sum_alpha", "sum_BF"):
        assert getattr(full, name) == getattr(cut, name)


@pytest.mark.parametrize("seed", range(8))
def test_one_worker_sends_exactly_the_batch(seed):
    """With every partition on one worker, what it sends is exactly the batch a working-set
    round picks (ties in V broken in partition order, the room filled by the rows nearest to
    violating): nothing the coordinator could not pick, nothing it would."""
    rng = np.random.default_rng(seed)
    tol, b = 1e-3, int(rng.integers(3, 40))
    frac = (0.05, 0.3, 0.9)[seed % 3]
    replies = [(k, _reply(rng, k, int(rng.integers(20, 60)), 4, tol, frac)) for k in range(3)]
    full = merge([r for _, r in replies])
    cut = merge([r for _, r in prune_candidates(replies, (b, tol))])
    pick, _ = pick_candidates(full, b, tol, 0.0, True)
    np.testing.assert_array_equal(np.sort(full.cand_ids[pick]), np.sort(cut.cand_ids))


def test_a_working_set_keeps_every_class_share():
    """With more violators than room, a working set keeps the best ``b // n_classes`` violators of
    every class (by V) and fills the rest by V, in decreasing V; with room for all, or without
    classes, the order by V alone."""
    V = np.array([9.0, 8, 7, 6, 5, 4, 3, 2, 1, 0.5])
    psi = np.ones(10)
    psi[8] = 0.0  # not a violator: never in a full working set
    cls = np.array([0, 0, 0, 0, 0, 0, 1, 2, 1, 2])
    # b = 6, 3 classes: two of each (class 1 has rows 6 and 8, row 8 does not violate), then
    # the best of the rest: rows 0, 1 (class 0), 6 (class 1), 7, 9 (class 2), then row 2
    got = pick_order(V, psi, 6, 1e-3, cls=cls, n_classes=3)
    assert got.tolist() == [0, 1, 2, 6, 7, 9]
    assert pick_order(V, psi, 6, 1e-3).tolist() == [0, 1, 2, 3, 4, 5]
    # room for every violator: all of them by V
    assert pick_order(V, psi, 9, 1e-3, cls=cls, n_classes=3).tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 9]
    # a one-pass batch (theta) keeps its threshold rule
    one_pass = pick_order(V, psi, 6, 1e-3, theta=0.0, cls=cls, n_classes=3)
    assert one_pass.tolist() == [0, 1, 2, 3, 4, 5]
    assert class_quota(V, cls, 6, 3).tolist() == [0, 1, 6, 7, 8, 9]


def test_no_pick_rule_leaves_replies_alone():
    rng = np.random.default_rng(0)
    replies = [(0, _reply(rng, 0, 9, 3, 1e-3))]
    assert prune_candidates(replies, None) is replies


def _problem(seed=3, n=120, d=6, m=4):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=2.0, size=(m, d))
    y = rng.integers(0, m, n).astype(np.int64)
    return centers[y] + rng.normal(size=(n, d)), y


def _settings(m, batch=6):
    s = SolverSettings(C=2.0, tol=1e-6, gap_tol=0.0, batch_size=batch).check()
    ps = PartitionSettings(
        kernel=SPEC.to_dict(),
        C=s.C,
        selection=pt.SEL_BMG,
        tol=s.tol,
        n_candidates=batch,
        pcls=np.arange(m),
        cache_bytes=10**5,
    )
    return s, ps


def test_a_round_sent_again_is_answered_from_memory():
    """A group that applied round ``seq`` answers it again without applying the update twice
    (a tree node died before forwarding its children's replies), bit for bit."""
    X, y = _problem()
    s, ps = _settings(4)
    specs = [
        (k, Partition, (k, lo, hi, X[lo:hi], y[lo:hi], y[lo:hi], ps))
        for k, (lo, hi) in enumerate([(0, 50), (50, 120)])
    ]
    g = WorkerGroup(specs, n_threads=2)
    try:
        first = pickle.loads(g.step_packed(pack_message(RoundMessage(pick=(6, s.tol))), 1))
        ids = first[0][1].cand_ids[:3]
        dB = np.zeros((3, 4))
        dB[:, 0], dB[:, 1] = 0.5, -0.5
        blob = pack_message(RoundMessage(ids=ids, XB=X[ids], dB=dB, pick=(6, s.tol)))
        a = g.step_packed(blob, 2)
        F = [p.F.copy() for p in g.parts.values()]
        b = g.step_packed(blob, 2)
        assert a == b
        for p, f in zip(g.parts.values(), F, strict=False):
            np.testing.assert_array_equal(p.F, f)
        g.step_packed(blob, 3)  # a new round number applies it again
        assert not np.array_equal(g.parts[0].F, F[0])
    finally:
        g.close()


def test_a_group_banks_the_rows_it_applied_and_prunes_with_the_coordinator():
    """A round whose batch rows the group banked earlier carries none of them and updates the
    scores exactly as the same round with the rows; ``bank_ids`` prunes the bank.  The
    sender's mirror (HeldIds) holds the same ids as the group's bank throughout."""
    from dmcsvm.engine.messages import HeldIds

    X, y = _problem()
    s, ps = _settings(4)
    specs = [
        (k, Partition, (k, lo, hi, X[lo:hi], y[lo:hi], y[lo:hi], ps))
        for k, (lo, hi) in enumerate([(0, 50), (50, 120)])
    ]
    full, banked = WorkerGroup(specs, n_threads=1), WorkerGroup(specs, n_threads=1)
    try:
        dB = np.zeros((3, 4))
        dB[:, 0], dB[:, 1] = 0.5, -0.5
        ids = np.array([3, 60, 90])
        held = HeldIds()
        first = RoundMessage(ids=ids, XB=X[ids], dB=dB)
        for g in (full, banked):
            g.step_packed(pack_message(first), 1)
        held.applied(first)
        assert sorted(banked._bank.ids().tolist()) == [3, 60, 90] == sorted(held.ids)
        again = RoundMessage(ids=ids[::-1], XB=X[ids[::-1]], dB=0.5 * dB)
        have = held.rows(again)
        assert have.all()
        a = pickle.loads(full.step_packed(pack_message(again), 2))
        b = pickle.loads(banked.step_packed(pack_message(again, have), 2))
        for (k, ra), (j, rb) in zip(a, b, strict=False):
            assert k == j and np.array_equal(ra.cand_ids, rb.cand_ids)
            assert np.array_equal(ra.cand_F, rb.cand_F) and ra.sum_BF == rb.sum_BF
        for p, q in zip(full.parts.values(), banked.parts.values(), strict=False):
            np.testing.assert_array_equal(p.F, q.F)
        prune = RoundMessage(reship=True, bank_ids=np.array([60]))
        banked.step_packed(pack_message(prune), 3)
        held.applied(prune)
        assert banked._bank.ids().tolist() == [60] == sorted(held.ids)
    finally:
        full.close()
        banked.close()


@pytest.mark.cluster
def _solve_on(ex, X, y, s, ps, bounds):
    """Solve the 4-class problem on executor ``ex`` (closed after): dense coefficients and the
    solve's result."""
    ex.start(X, y, y, ps, bounds=bounds)
    try:
        r = solve(ex, X.shape[0], np.arange(4), SPEC, s, X.shape[1], False)
    finally:
        ex.close()
    B = np.zeros((X.shape[0], 4))
    B[r.support] = r.coef
    return B, r


def test_tree_of_four_workers_matches_inprocess():
    """Rounds down a tree of four workers (root -> 1, 2; 1 -> 3) give the in-process rounds,
    and the coordinator sends one copy of each round's message instead of one per worker."""
    X, y = _problem()
    s, ps = _settings(4)
    bounds = [(0, 20), (20, 45), (45, 70), (70, 95), (95, 120)]
    run = lambda ex: _solve_on(ex, X, y, s, ps, bounds)  # noqa: E731

    B_ref, r_ref = run(InProcessExecutor(2))
    with (
        LocalCluster(
            n_workers=4, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        used, got, rows = {}, {}, {}
        for tree, bank in ((True, True), (False, True), (True, False)):
            ex = DaskExecutor(client, tree=tree, bank_rows=bank)
            B, r = run(ex)
            used[tree, bank], got[tree, bank] = ex.bytes_sent, B
            rows[tree, bank] = (ex.rows_sent, ex.rows_held)
            assert len(ex.groups) == 4
            assert r.n_iter == r_ref.n_iter and r.converged
            np.testing.assert_allclose(B, B_ref, rtol=0, atol=1e-9)
    # the direct path sends each round to 4 groups, the tree to its root only
    assert used[False, True] == 4 * used[True, True]
    # batch rows the groups banked in earlier rounds are not sent again; the same solve
    np.testing.assert_array_equal(got[True, True], got[True, False])
    sent, held = rows[True, True]
    assert rows[True, False] == (sent + held, 0) and held > 0
    assert used[True, True] < used[True, False]


@pytest.mark.cluster
def test_zero_rich_rows_travel_packed_with_the_same_solve(monkeypatch):
    """On rows that are mostly zeros, the batch rows going down the tree and the candidates' rows
    coming up travel as their nonzeros (engine/row_packing.py): fewer bytes each way, and the
    same solve bit for bit as with dense rows on the wire (the dense wire: ``pack_rows`` made
    the identity, which the in-process workers of this cluster share)."""
    from dmcsvm.engine import messages

    X, y = _problem(seed=5, n=120, d=48)
    X[np.random.default_rng(6).random(X.shape) < 0.85] = 0.0
    s, ps = _settings(4)
    bounds = [(0, 30), (30, 60), (60, 90), (90, 120)]
    got = {}
    with (
        LocalCluster(
            n_workers=4, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        for packed in (True, False):
            if not packed:
                monkeypatch.setattr(messages, "pack_rows", lambda rows: rows)
            ex = DaskExecutor(client, tree=True)
            B, r = _solve_on(ex, X, y, s, ps, bounds)
            got[packed] = (B, r.n_iter, ex.bytes_sent, ex.bytes_received, ex.rows_sent)
    (B1, it1, sent1, recv1, rows1), (B0, it0, sent0, recv0, rows0) = got[True], got[False]
    assert it1 == it0 and rows1 == rows0 > 0
    np.testing.assert_array_equal(B1, B0)
    # 15 % nonzeros: a sent row costs 4 + 0.15 * 48 * 6 bytes packed against 48 * 8 dense
    assert sent1 < sent0 - 0.5 * rows1 * 48 * 8
    assert recv1 < recv0


def test_tree_setting_is_checked():
    with pytest.raises(ValueError, match="tree must be 'auto', True or False, got 'yes'"):
        DaskExecutor(None, tree="yes")


def test_a_partition_reports_every_class_share_beside_its_best():
    """With ``class_quota`` a partition with more violators than ``n_candidates`` reports its
    best ``n_candidates`` by V and, beside them, every class's best ``n_candidates // n_classes``
    (what the coordinator's working set keeps of each class), nothing else."""
    from dataclasses import replace

    X, y = _problem(n=120, m=4)
    _, ps = _settings(4)
    ps = replace(ps, n_candidates=8)
    plain = Partition(0, 0, 120, X, y, y, ps)._report(0.0)
    share = Partition(0, 0, 120, X, y, y, replace(ps, class_quota=True))._report(0.0)
    assert plain.n_viol == share.n_viol == 120  # every row violates at B = 0
    assert plain.cand_ids.shape[0] == 8
    assert set(plain.cand_ids) <= set(share.cand_ids)
    for c in range(4):
        assert np.count_nonzero(share.cand_cls == c) >= 2
    # the extra rows are each class's best two by V among all rows of the class
    V_all = np.empty(120)
    psi_all = np.empty(120)
    p = Partition(0, 0, 120, X, y, y, ps)
    pt.selection_values(
        ps.selection,
        p.B,
        p.F,
        p.yp,
        p.cls,
        p.pcls,
        p.kdiag,
        p.row_bounds(),
        np.arange(120),
        V_all,
        psi_all,
    )
    best = set(class_quota(V_all, y, 8, 4).tolist())
    assert set(share.cand_ids.tolist()) == set(plain.cand_ids.tolist()) | best
