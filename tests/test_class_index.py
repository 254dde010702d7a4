"""A store's class index read where it is used (docs/design.md, 'The coordinator's size'): the
classes found chunk by chunk, the index of any rows equal to ``np.unique(labels,
return_inverse=True)``'s, and fits from a store (MulticlassSVC and the SMO family) that never read
more labels at once than a scan block or a partition holds."""

from __future__ import annotations

import numpy as np
import pytest

import dmcsvm.store as store_pkg
from dmcsvm import MulticlassSVC
from dmcsvm.engine.executor import InProcessExecutor
from dmcsvm.store import class_index as ci
from dmcsvm.store import open_store, write_arrays
from dmcsvm.store.class_index import StoreClassIndex, scan_classes


def _store(tmp_path, y, rows_per_chunk=16, name="s.zarr"):
    X = np.random.default_rng(0).normal(size=(len(y), 3)).astype(np.float32)
    url = str(tmp_path / name)
    write_arrays(url, X, y, rows_per_chunk=rows_per_chunk)
    return url, X


@pytest.mark.parametrize("kind", ["int", "float", "str"])
def test_index_equals_numpy_unique_inverse(tmp_path, monkeypatch, kind):
    monkeypatch.setattr(ci, "SCAN_ROWS", 40)  # several scan blocks of 2 chunks
    raw = np.random.default_rng(1).integers(0, 5, 203) * 3 - 4
    y = {"int": raw, "float": raw / 2.0, "str": np.array([f"c{v}" for v in raw])}[kind]
    url, _ = _store(tmp_path, y)
    info = open_store(url)
    classes, table = scan_classes(info)
    ref_classes, ref_idx = np.unique(y, return_inverse=True)
    np.testing.assert_array_equal(classes, ref_classes)
    assert (table is not None) == (kind == "str")
    idx = StoreClassIndex(info, 0, len(y), classes, table)
    assert len(idx) == 203 and idx.shape == (203,)
    np.testing.assert_array_equal(np.asarray(idx), ref_idx)
    np.testing.assert_array_equal(
        np.ascontiguousarray(idx[37:150], dtype=np.int64), ref_idx[37:150]
    )
    np.testing.assert_array_equal(np.asarray(idx[37:150][5:9]), ref_idx[42:46])
    ids = np.array([202, 0, 17, 17, 99, 41, 40])  # unsorted, repeated, block edges
    np.testing.assert_array_equal(idx[ids], ref_idx[ids])
    np.testing.assert_array_equal(idx[37:150][np.array([0, 112])], ref_idx[[37, 149]])
    assert idx[np.zeros(0, dtype=np.int64)].shape == (0,)
    # class sizes, chunk by chunk (MultiPrototypeSVC's prototype counts are checked on them)
    np.testing.assert_array_equal(idx.bincount(7), np.bincount(ref_idx, minlength=7))
    np.testing.assert_array_equal(ci.class_counts(idx, 7), np.bincount(ref_idx, minlength=7))
    np.testing.assert_array_equal(
        idx[37:150].bincount(), np.bincount(ref_idx[37:150], minlength=len(classes))
    )


def test_bad_indexing_is_refused(tmp_path):
    url, _ = _store(tmp_path, np.arange(20) % 2)
    idx = StoreClassIndex(open_store(url), 0, 20, np.array([0, 1]))
    with pytest.raises(IndexError, match="^a StoreClassIndex slice takes no step$"):
        idx[::2]
    with pytest.raises(IndexError, match="^row index out of range for 20 rows$"):
        idx[np.array([3, 20])]
    with pytest.raises(
        IndexError,
        match=r"^index rows with a slice or a 1-d array, got shape "
        r"\(1, 2\)$",
    ):
        idx[np.array([[1, 2]])]


def _digits_store(tmp_path, binary=False):
    """The first 240 scikit-learn digits (binary: >= 5) as arrays and as a store of 20-row
    chunks."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X, y = (X[:240] / 16.0).astype(np.float32), y[:240]
    if binary:
        y = (y >= 5).astype(np.int64)
    url = str(tmp_path / "d.zarr")
    write_arrays(url, X, y, rows_per_chunk=20)
    return X, y, url


def _fit_watched(monkeypatch, est, url):
    """``est.fit(url)`` with every label read recorded (``(lo, hi)``; reading the whole label
    array fails), scan blocks of 60 rows, and every executor ``call``'s replies kept:
    ``(est, reads, replies)``."""
    reads, replies = [], []
    real = ci.read_labels
    call = InProcessExecutor.call

    def recording(info, lo=0, hi=None):
        reads.append((lo, hi))
        return real(info, lo, hi)

    def whole(*args, **kwargs):
        raise AssertionError("the store's labels were read whole")

    def recording_call(self, what, *args):
        out = call(self, what, *args)
        replies.append((what, out))
        return out

    monkeypatch.setattr(ci, "read_labels", recording)
    monkeypatch.setattr(ci, "SCAN_ROWS", 60)
    monkeypatch.setattr(store_pkg, "read_labels", whole)
    monkeypatch.setattr(InProcessExecutor, "call", recording_call)
    try:
        est.fit(url)
    finally:
        monkeypatch.undo()
    return est, reads, replies


@pytest.mark.parametrize("name", ["MulticlassSVC", "OneVsRestSVC", "OneVsOneSVC", "BinarySVC"])
def test_store_fit_reads_labels_by_block_and_equals_the_array_fit(tmp_path, monkeypatch, name):
    """The coordinator never reads the label array whole: every read is one scan block, one
    partition's rows (for the SMO family: each binary problem's signs, computed by every
    partition from its own labels) or the rows of a batch or of the support, and the model is
    the in-memory one's."""
    import scipy.sparse as sp

    import dmcsvm

    X, y, url = _digits_store(tmp_path, binary=name == "BinarySVC")
    cls = getattr(dmcsvm, name)
    kw = dict(C=10.0, gamma=0.05, tol=1e-4, n_jobs=2)
    opts = {"n_partitions": 3}
    on_store, reads, replies = _fit_watched(monkeypatch, cls(**kw, solver_options=opts), url)
    ref = cls(**kw, solver_options=opts).fit(X, y)
    assert reads and max(hi - lo for lo, hi in reads) <= 80  # partitions: 80 rows each
    # the end-of-solve summaries carry per-group numbers, nothing per row
    summaries = [r for what, out in replies if what == "summary" for r in out]
    assert len(summaries) == (0 if name == "MulticlassSVC" else 3 * len(on_store.intercept_))
    assert all(np.size(v) <= 6 for r in summaries for v in r.values())
    np.testing.assert_array_equal(on_store.classes_, ref.classes_)
    np.testing.assert_array_equal(on_store.support_, ref.support_)
    np.testing.assert_array_equal(on_store.n_support_, ref.n_support_)
    dense = (lambda c: c.toarray()) if sp.issparse(ref.dual_coef_) else np.asarray
    np.testing.assert_allclose(
        dense(on_store.dual_coef_), dense(ref.dual_coef_), rtol=0, atol=1e-12
    )
    if name != "MulticlassSVC":
        np.testing.assert_allclose(on_store.intercept_, ref.intercept_, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kernel", ["rbf", "linear"])
def test_multiprototype_store_fit_holds_no_per_row_array(tmp_path, monkeypatch, kernel):
    """MultiPrototypeSVC from a store: labels read by block or by partition, the initial
    assignment drawn by each partition, the re-assignments kept in the partitions (a redraw
    reply carries only its moved rows); the model and the assignment are the in-memory fit's."""
    from dmcsvm import MultiPrototypeSVC

    X, y, url = _digits_store(tmp_path)
    kw = dict(
        n_prototypes=3,
        C=10.0,
        kernel=kernel,
        gamma=0.05,
        max_epochs=6,
        tol=1e-4,
        n_jobs=2,
        random_state=0,
    )
    opts = {"n_partitions": 3, "linear_solver": "rounds"}
    on_store, reads, replies = _fit_watched(
        monkeypatch, MultiPrototypeSVC(**kw, solver_options=opts), url
    )
    ref = MultiPrototypeSVC(**kw, solver_options=opts).fit(X, y)
    assert reads and max(hi - lo for lo, hi in reads) <= 80  # partitions: 80 rows each
    redraws = [r for what, out in replies if what == "redraw" for r in out]
    assert len(redraws) == 3 * on_store.n_epochs_ > 0
    moved = [r["moved"]["ids"].shape[0] for r in redraws]
    assert sum(moved) == on_store.epoch_history_["n_moved"].sum() > 0
    assert sum(r["n_changed"] for r in redraws) == on_store.epoch_history_["n_changed"].sum()
    assert all(
        v.shape[0] == m for r, m in zip(redraws, moved, strict=False) for v in r["moved"].values()
    )
    np.testing.assert_array_equal(on_store.assignment_, ref.assignment_)
    np.testing.assert_array_equal(on_store.support_, ref.support_)
    np.testing.assert_allclose(on_store.dual_coef_, ref.dual_coef_, rtol=0, atol=1e-12)


def test_one_class_store_is_refused_by_the_chunked_scan(tmp_path):
    url, _ = _store(tmp_path, np.full(40, 7))
    with pytest.raises(
        ValueError,
        match="^MulticlassSVC needs samples of at least 2 classes in "
        "the data, but the data contains only one class: 7$",
    ):
        MulticlassSVC().fit(url)


def test_checkpoint_label_hashes_are_the_same_read_by_blocks(tmp_path):
    """The checkpoint's labels_crc32 and data fingerprint of a store fit (its class index read
    block by block) equal those of the same index held as one array: resuming either works."""
    import zlib

    from dmcsvm.checkpoint import data_fingerprint, label_blocks, labels_crc32

    y = np.random.default_rng(3).integers(0, 4, 101)
    url, X = _store(tmp_path, y, rows_per_chunk=10)
    info = open_store(url)
    classes, table = scan_classes(info)
    lazy = StoreClassIndex(info, 0, 101, classes, table)
    whole = np.unique(y, return_inverse=True)[1].astype(np.int64)
    blocks = list(label_blocks(lazy, rows=7))
    assert len(blocks) == 15 and max(len(b) for b in blocks) == 7
    np.testing.assert_array_equal(np.concatenate(blocks), whole)
    assert labels_crc32(lazy) == labels_crc32(whole) == zlib.crc32(whole)
    assert data_fingerprint(X, lazy) == data_fingerprint(X, whole)


@pytest.mark.slow
@pytest.mark.cluster
def test_partition_rebuilt_after_a_lost_worker_reads_its_labels_again(tmp_path):
    """A worker dies between rounds of a store fit whose class index stays in the store: its
    partitions are rebuilt on the other worker from the small index slices the executor kept
    (they read their labels there) and the solve reaches the uninterrupted optimum."""
    import os
    import signal

    from distributed import Client
    from test_fault_tolerance import (
        SPEC,
        _assert_same_optimum,
        _Cluster,
        _once_at,
        _problem,
        _wait_removed,
    )

    from dmcsvm.coordinators.crammer_singer import SolverSettings, solve
    from dmcsvm.engine.dask import DaskExecutor
    from dmcsvm.engine.executor import InProcessExecutor
    from dmcsvm.engine.partition_base import PartitionSettings
    from dmcsvm.engine.rows import StoreSource
    from dmcsvm.numerics import pattern as pt

    X, y = _problem()
    url = str(tmp_path / "p.zarr")
    write_arrays(url, X, y, rows_per_chunk=10)
    X32 = X.astype(np.float32)
    n, m = X.shape[0], int(y.max()) + 1
    info = open_store(url)
    classes, table = scan_classes(info)
    idx = StoreClassIndex(info, 0, n, classes, table)

    def run(executor, on_round=None):
        s = SolverSettings(C=2.0, tol=1e-6, gap_tol=0.0, batch_size=6).check()
        ps = PartitionSettings(
            kernel=SPEC.to_dict(),
            C=s.C,
            selection=pt.SEL_BMG,
            tol=s.tol,
            n_candidates=6,
            pcls=np.arange(m),
            cache_bytes=10**5,
            kernel_dtype="float32",
        )
        executor.start(
            StoreSource(url, n, X.shape[1], 10, 4.0 * X.shape[1]),
            idx,
            idx,
            ps,
            bounds=[(0, 50), (50, 110), (110, n)],
        )
        try:
            r = solve(
                executor, n, np.arange(m), SPEC, s, X.shape[1], False, np.float32, on_round=on_round
            )
        finally:
            executor.close()
        B = np.zeros((n, m))
        B[r.support] = r.coef
        return B, r

    B_ref, r_ref = run(InProcessExecutor(2))
    (tmp_path / "cl").mkdir()
    cluster = _Cluster(tmp_path / "cl", nanny=True)
    try:
        with Client(cluster.addr) as client:
            ex = DaskExecutor(client)
            killed = []

            def kill_one():
                victim = ex.placement[1]
                assert isinstance(ex._build[1][3], StoreClassIndex)  # no label array kept
                pid = client.run(os.getpid, workers=[victim])[victim]
                killed.append([k for k, w in enumerate(ex.placement) if w == victim])
                os.kill(pid, signal.SIGKILL)
                _wait_removed(client, victim)

            B, r = run(ex, on_round=_once_at(8, kill_one))
            assert killed[0] and sorted(k for k, _, _, _ in ex.recoveries) == killed[0]
    finally:
        cluster.close()
    _assert_same_optimum(B, r, B_ref, r_ref, X32)
