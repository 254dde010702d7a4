"""The compact copy of a streamed partition's active rows (engine/rows.py CompactRows): exact rows
in memory and on disk, nothing left behind, and a streamed fit that reads far less of the store
once shrinking has left few active rows, reaching the in-memory model."""

from __future__ import annotations

import numpy as np
import pytest

from dmcsvm import MulticlassSVC
from dmcsvm.engine import partition_base as partition_mod
from dmcsvm.engine.rows import CompactRows
from dmcsvm.store import write_arrays


@pytest.fixture(params=["memory", "zarr"])
def where(request, monkeypatch):
    # small chunks so that a few hundred rows span several of them
    monkeypatch.setattr(CompactRows, "CHUNK_BYTES", 70 * 12 * 4)
    monkeypatch.setattr(CompactRows, "IN_MEMORY_BYTES", 1 << 40 if request.param == "memory" else 0)
    return request.param


def _blocks(X, ids, size):
    return ((ids[a : a + size], X[ids[a : a + size]]) for a in range(0, ids.shape[0], size))


def test_blocks_and_take_return_the_exact_rows(where, tmp_path):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((1000, 12)).astype(np.float32)
    ids = np.sort(rng.choice(1000, 400, replace=False))
    c = CompactRows(ids, _blocks(X, ids, 33), 12, np.float32, str(tmp_path))
    assert (c.path is not None) == (where == "zarr")
    active = np.sort(rng.choice(ids, 150, replace=False))
    got = np.full((150, 12), np.nan, dtype=np.float32)
    for pa, pb, rows, Xa in c.blocks(active):
        np.testing.assert_array_equal(rows, active[pa:pb])
        got[pa:pb] = Xa
    np.testing.assert_array_equal(got, X[active])
    shuffled = rng.permutation(active)
    np.testing.assert_array_equal(c.take(shuffled), X[shuffled])
    assert c.holds(active) and not c.holds(np.setdiff1d(np.arange(1000), ids)[:1])
    c.close()
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_nothing_behind(where, tmp_path):
    X = np.ones((300, 12), dtype=np.float32)
    ids = np.arange(300)
    with pytest.raises(RuntimeError, match="compact copy got 200 of 300 rows"):
        CompactRows(ids, _blocks(X, ids[:200], 50), 12, np.float32, str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def _problem(n=3000, d=24, m=5, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=4.0, size=(m, d))
    y = rng.integers(0, m, n)
    return (centres[y] + rng.normal(size=(n, d))).astype(np.float32), y


@pytest.mark.slow
def test_streamed_fit_reads_the_compact_copy_and_reaches_the_in_memory_model(tmp_path, monkeypatch):
    X, y = _problem()
    url = str(tmp_path / "train.zarr")
    write_arrays(url, X, y, rows_per_chunk=200)
    params = dict(C=1.0, gamma=0.05, tol=1e-3, n_jobs=2, cache_size=0)
    opts = {"gap_tol": 0.0, "batch_size": 64, "n_partitions": 2}
    mem = MulticlassSVC(**params, solver_options={**opts, "data_in_memory": True}).fit(url)
    cache_dir = tmp_path / "cache"
    stream = MulticlassSVC(
        **params,
        solver_options={
            **opts,
            "data_in_memory": False,
            "cache_dir": str(cache_dir),
            "disk_cache_size": 0,
        },
    ).fit(url)
    monkeypatch.setattr(partition_mod, "COMPACT_FRACTION", 0.0)  # never compact
    plain = MulticlassSVC(
        **params, solver_options={**opts, "data_in_memory": False, "disk_cache_size": 0}
    ).fit(url)
    st = stream.engine_stats_
    assert all(p["compact_writes"] >= 1 for p in st)
    assert all(p["compact_writes"] == 0 for p in plain.engine_stats_)
    # the store is read far less once the passes read the compact copy
    read = sum(p["x_bytes_read"] for p in st)
    read_plain = sum(p["x_bytes_read"] for p in plain.engine_stats_)
    assert read < 0.5 * read_plain, (read, read_plain)
    # the same optimum (the kernel blocks differ in float32 rounding only)
    for est in (stream, plain):
        assert est.converged_
        assert est.history_["dual"][-1] == pytest.approx(mem.history_["dual"][-1], rel=1e-5)
        np.testing.assert_array_equal(est.predict(X), mem.predict(X))
    assert not cache_dir.exists() or list(cache_dir.iterdir()) == []
