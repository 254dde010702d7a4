"""The 'auto' kernel cache budgets (``estimators._engine.cache_mb`` / ``gram_mb``): the whole
budget on rows of many features, a share on few (a cached value is memory paged in, a computed
one ``features`` multiply-adds), never below LIBSVM's 200 MB unless the machine's budget is
smaller; numbers given by the user and cluster fits keep theirs.  MulticlassSVC's working set
sized by the data (``batch_size=None``, ``auto_batch``)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import dmcsvm.estimators.multiclass as mc
from dmcsvm import MulticlassSVC
from dmcsvm.estimators import _engine
from dmcsvm.estimators._engine import (
    auto_batch,
    cache_mb,
    features_per_row,
    gram_mb,
    partition_cache_mb,
)
from dmcsvm.estimators._inputs import fit_inputs, in_kernel_precision


def _machine(monkeypatch, gib):
    """cache_mb's view of a machine with ``gib`` GiB of memory."""
    sizes = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": gib * 2**30 // 4096}
    monkeypatch.setattr(_engine.os, "sysconf", lambda name: sizes[name])


def test_auto_budgets_by_features(monkeypatch):
    _machine(monkeypatch, 24)  # an eighth: 3072 MB; the Gram block at most 800 MB on few
    est = MulticlassSVC()  # features (or none known), all of it on many
    assert (cache_mb(est), gram_mb(est)) == (3072.0, 800.0)
    for f in (256, 784, 10_000):
        assert (cache_mb(est, f), gram_mb(est, f)) == (3072.0, 3072.0)
    assert gram_mb(est, 255.9) == 800.0 * 255.9 / 256
    assert (cache_mb(est, 128), gram_mb(est, 128)) == (1536.0, 400.0)
    assert (cache_mb(est, 36), gram_mb(est, 36)) == (432.0, 200.0)
    assert (cache_mb(est, 9), gram_mb(est, 9)) == (200.0, 200.0)
    assert (cache_mb(est, 0.2), gram_mb(est, 0.2)) == (200.0, 200.0)


def test_auto_budgets_never_exceed_the_machines(monkeypatch):
    _machine(monkeypatch, 1)  # an eighth: 128 MB, below LIBSVM's 200
    est = MulticlassSVC()
    assert cache_mb(est) == 128.0 and cache_mb(est, 9) == 128.0 and gram_mb(est, 9) == 128.0


def test_given_budgets_and_cluster_fits_keep_theirs(monkeypatch):
    _machine(monkeypatch, 24)
    est = MulticlassSVC(cache_size=50)
    assert cache_mb(est, 9) == 50.0 and gram_mb(est, 9) is None
    est = MulticlassSVC(client="tcp://127.0.0.1:1")  # (not contacted)
    assert cache_mb(est, 9) == cache_mb(est, 784) == 200.0


def test_auto_partition_cache_on_a_cluster_follows_its_workers_memory():
    """'auto' on a Dask cluster: an eighth of the smallest worker memory limit per worker that
    holds partitions, at most 4096 MB a worker, by features; a worker with no limit, a given
    budget or an in-process fit keep cache_mb's budget."""
    from types import SimpleNamespace

    GiB = 2**30
    on_cluster = MulticlassSVC(client="tcp://127.0.0.1:1")  # (not contacted)

    def ex(*limits):
        return SimpleNamespace(
            worker_info={f"w{i}": {"memory_limit": m} for i, m in enumerate(limits)}
        )

    assert partition_cache_mb(on_cluster, ex(12 * GiB, 12 * GiB), 784, 2) == 3072.0
    assert partition_cache_mb(on_cluster, ex(12 * GiB, 4 * GiB), 784, 2) == 1024.0  # the smallest
    assert partition_cache_mb(on_cluster, ex(12 * GiB, 12 * GiB), 784, 1) == 1536.0  # 1 worker used
    assert partition_cache_mb(on_cluster, ex(64 * GiB), 784, 4) == 4096.0  # at most 4096 a worker
    assert partition_cache_mb(on_cluster, ex(12 * GiB, 12 * GiB), 16, 2) == 200.0  # few features
    assert partition_cache_mb(on_cluster, ex(12 * GiB, 0), 784, 2) == 200.0  # no limit
    assert partition_cache_mb(on_cluster, ex(), 784, 2) == 200.0
    given = MulticlassSVC(client="tcp://127.0.0.1:1", cache_size=50)
    assert partition_cache_mb(given, ex(12 * GiB), 784, 2) == 50.0
    in_process = MulticlassSVC()
    assert partition_cache_mb(in_process, ex(12 * GiB), 784, 2) == cache_mb(in_process, 784)


def test_a_cluster_fit_gives_its_partitions_the_workers_share(local_client, monkeypatch):
    """Through a fit on the session's LocalCluster: each partition's column cache is its share
    of an eighth of the workers' memory limit, not of the cluster's fixed 200 MB."""
    seen = []
    make = mc.cs_partition_settings

    def spy(settings, spec, pcls, td, n_parts, cache, **kw):
        seen.append((n_parts, cache))
        return make(settings, spec, pcls, td, n_parts, cache, **kw)

    monkeypatch.setattr(mc, "cs_partition_settings", spy)
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 300))
    y = rng.integers(0, 3, 300)
    # (working sets of 100 rows: the partitions' rounds, on the workers)
    MulticlassSVC(client=local_client, max_iter=2, solver_options={"batch_size": 100}).fit(X, y)
    info = local_client.scheduler_info(n_workers=-1)["workers"].values()
    per = min(4096.0, min(w["memory_limit"] for w in info) / 2**20 / 8)
    assert seen == [(2, per * 2)] and per * 2 > 200.0


def test_features_per_row_dense_sparse_and_float32():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 30))
    y = np.repeat([0, 1], 20)
    est = MulticlassSVC()
    td, _, _ = fit_inputs(est, X, y)
    assert features_per_row(td) == 30.0
    assert features_per_row(in_kernel_precision(est, td)) == 30.0
    S = sp.random(40, 1000, density=0.01, format="csr", random_state=1)
    td, _, _ = fit_inputs(est, S, y)
    assert features_per_row(td) == pytest.approx(S.nnz / 40)
    assert features_per_row(in_kernel_precision(est, td)) == pytest.approx(S.nnz / 40)


def test_auto_batch_by_rows_features_and_gram_places():
    # half the rows, at least 5,000, at most the Gram block's places (800 MiB of float32: 14,481)
    assert auto_batch(20_000, 784, 800.0, 4, True) == 10_000
    assert auto_batch(50_000, 784, 800.0, 4, True) == 14_481
    assert auto_batch(50_000, 784, 800.0, 8, True) == 10_240  # float64 kernel values
    assert auto_batch(8_000, 784, 800.0, 4, True) == 5_000
    assert auto_batch(50_000, 784, 200.0, 4, True) == 7_240  # a smaller budget
    assert auto_batch(12_000, 256, 800.0, 4, True) == 6_000
    # few features, sparse rows or a linear kernel (dense=False), no Gram block: 5,000
    assert auto_batch(50_000, 255, 800.0, 4, True) == 5_000
    assert auto_batch(50_000, 784, 800.0, 4, False) == 5_000
    assert auto_batch(50_000, 784, 0.0, 4, True) == 5_000


def test_fit_runs_with_the_budgets_of_its_rows(monkeypatch):
    """MulticlassSVC's solve gets the budgets and working set of its rows: 9 features take
    200 MB where 300 take the whole budget (the Gram block too); the working set is half the
    rows on 300 features (the least lowered to 10 here), the least on 9, and a given batch_size
    stays.  (Here the whole problem's block is taken not to fit: see the next test.)"""
    _machine(monkeypatch, 24)
    monkeypatch.setattr(_engine, "AUTO_BATCH_MIN", 10)
    monkeypatch.setattr(mc, "whole_block_mb", lambda est, n, itemsize: None)
    seen = []
    solve = mc.solve

    def spy(executor, n, pcls, spec, settings, *a, **kw):
        seen.append((settings.cache_size, settings.gram_cache_size, settings.batch_size))
        return solve(executor, n, pcls, spec, settings, *a, **kw)

    monkeypatch.setattr(mc, "solve", spy)
    rng = np.random.default_rng(2)
    y = np.repeat([0, 1, 2], 20)
    for d in (9, 300):
        MulticlassSVC(n_jobs=1).fit(rng.normal(size=(60, d)) + y[:, None], y)
    MulticlassSVC(n_jobs=1, solver_options={"batch_size": 7}).fit(rng.normal(size=(60, 300)), y)
    assert seen == [(200.0, 200.0, 10), (3072.0, 3072.0, 30), (3072.0, 3072.0, 7)]


def test_the_whole_problem_is_one_working_set_when_its_block_fits(monkeypatch):
    """``batch_size=None`` is every row when their whole Gram block fits the machine's 'auto'
    budget (or the cache_size given), on few features too, and the block's budget grows to
    hold it; the rounds then run in the coordinator's block (no partition computes a kernel
    column).  A larger problem, sparse rows, a smaller budget or a warm start keep the rules
    above."""
    _machine(monkeypatch, 24)  # 'auto': 3072 MB, 28,377 float32 places
    est = MulticlassSVC()
    assert _engine.whole_block_mb(est, 28_000, 4) == pytest.approx(28_000**2 * 4 / 2**20)
    assert _engine.whole_block_mb(est, 28_500, 4) is None
    assert _engine.whole_block_mb(est, 20_100, 8) is None  # float64 values: 3,082 MB
    assert _engine.whole_block_mb(MulticlassSVC(cache_size=100), 5_000, 4) == pytest.approx(
        5_000**2 * 4 / 2**20  # 95 MB within a given 100
    )
    assert _engine.whole_block_mb(MulticlassSVC(cache_size=90), 5_000, 4) is None
    seen, hist = [], []
    solve = mc.solve

    def spy(executor, n, pcls, spec, settings, *a, **kw):
        seen.append((settings.gram_cache_size, settings.batch_size))
        res = solve(executor, n, pcls, spec, settings, *a, **kw)
        hist.append(res.history["rows_computed"][-1])
        return res

    monkeypatch.setattr(mc, "solve", spy)
    rng = np.random.default_rng(4)
    y = np.repeat([0, 1, 2], 30)
    X = rng.normal(size=(90, 9)) + y[:, None]
    MulticlassSVC(n_jobs=1).fit(X, y)
    MulticlassSVC(n_jobs=1).fit(sp.csr_matrix(X), y)
    warm = MulticlassSVC(n_jobs=1, warm_start=True).fit(X, y)
    warm.fit(X, y)
    assert seen[0] == (200.0, 90) and hist[0] == 0
    assert seen[1][1] == 5_000  # sparse rows: no Gram block to size (the least working set)
    # a warm start continues in the partitions' rounds (so does a checkpointed fit): the
    # working set is sized for them
    assert seen[2] == (200.0, 90) and seen[3][1] == 5_000


def test_auto_gram_block_grows_to_half_the_rows_within_a_third_of_memory(monkeypatch):
    """On many features the Gram block holds a working set of half the rows when the cache
    budget would not, up to a third of the machine's memory; few features and a given budget
    keep their rule."""
    _machine(monkeypatch, 24)  # cache: 3072 MB; a third: 8192 MB
    est = MulticlassSVC()
    assert gram_mb(est, 784, rows=40_000) == 3072.0  # 20,000^2 float32: 1,526 MB
    assert gram_mb(est, 784, rows=60_000) == pytest.approx(30_000**2 * 4 / 2**20)  # 3,433 MB
    assert gram_mb(est, 784, rows=70_000, itemsize=8) == 8192.0  # 35,000^2 float64: 9,346 MB
    assert gram_mb(est, 784, rows=200_000) == 8192.0
    assert gram_mb(est, 16, rows=200_000) == 200.0  # 800 MB by 16/256 features, at least 200
    assert gram_mb(MulticlassSVC(cache_size=500), 784, rows=200_000) is None
    # the block lives in the fitting process whatever the executor: a cluster fit's too (its
    # partitions' columns, on the workers, keep the cluster's 200 MB)
    on_cluster = MulticlassSVC(client="tcp://127.0.0.1:1")
    assert cache_mb(on_cluster, 784) == 200.0
    assert gram_mb(on_cluster, 784, rows=200_000) == 8192.0
    assert gram_mb(on_cluster, 784, rows=40_000) == 3072.0
    assert gram_mb(on_cluster, 16, rows=200_000) == 200.0
    # what the fit's working set becomes: half the rows while the block holds them
    assert auto_batch(60_000, 784, gram_mb(est, 784, rows=60_000), 4, True) == 30_000
    assert auto_batch(200_000, 784, 8192.0, 4, True) == 46_340


def test_gram_block_grows_only_for_the_working_set_it_sizes(monkeypatch):
    """The 'auto' Gram block grows past the cache budget only where ``batch_size=None`` sizes
    the working set by it (dense rows, a nonlinear kernel): sparse rows (no block) and a given
    ``batch_size`` keep the cache budget (a linear kernel's fit takes the explicit-prototype
    path, which has no Gram block).  A cache
    budget of 0.001 MB stands for one smaller than half the rows' block (30^2 float32 values:
    0.0034 MB) on 60 rows."""
    _machine(monkeypatch, 24)
    monkeypatch.setattr(_engine, "AUTO_CACHE_MAX", 0.001)
    monkeypatch.setattr(_engine, "AUTO_BATCH_MIN", 10)
    seen = []
    solve = mc.solve

    def spy(executor, n, pcls, spec, settings, *a, **kw):
        seen.append((settings.gram_cache_size, settings.batch_size))
        return solve(executor, n, pcls, spec, settings, *a, **kw)

    monkeypatch.setattr(mc, "solve", spy)
    rng = np.random.default_rng(3)
    y = np.repeat([0, 1, 2], 20)
    X = rng.normal(size=(60, 300)) + y[:, None]
    grown = 30 * 30 * 4 / 2**20
    MulticlassSVC(n_jobs=1).fit(X, y)
    assert seen[-1] == (pytest.approx(grown), 30)  # half the rows, held by the grown block
    MulticlassSVC(n_jobs=1).fit(sp.csr_matrix(X), y)
    MulticlassSVC(n_jobs=1, solver_options={"batch_size": 7}).fit(X, y)
    assert seen[1:] == [(0.001, 10), (0.001, 7)]
    assert gram_mb(MulticlassSVC(), 300, rows=60) == pytest.approx(grown)
