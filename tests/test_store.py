"""Tests of the zarr data store: exact round trips, streaming converters, validation, cleanup."""

import os
import re

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from sklearn.datasets import dump_svmlight_file, load_svmlight_file

from dmcsvm.store import (
    FORMAT_NAME,
    FORMAT_VERSION,
    default_rows_per_chunk,
    from_csv,
    from_dask,
    from_npy,
    from_svmlight,
    iter_chunks,
    open_store,
    read_all,
    read_labels,
    read_rows,
    write_arrays,
)


def _dense(rng, n=50, d=6):
    return rng.standard_normal((n, d)).astype(np.float32)


def _sparse(rng, n=60, d=40, density=0.1):
    X = sp.random(n, d, density=density, format="csr", random_state=rng, dtype=np.float64)
    return X.astype(np.float32)


def _assert_same(X_store, X_ref):
    """Exact equality (values and dtype) of a read-back block and its float32 reference."""
    if sp.issparse(X_ref):
        assert sp.issparse(X_store)
        assert X_store.dtype == np.float32
        assert X_store.shape == X_ref.shape
        assert np.array_equal(X_store.toarray(), X_ref.toarray())
    else:
        assert isinstance(X_store, np.ndarray)
        assert X_store.dtype == np.float32 and X_store.flags.c_contiguous
        assert np.array_equal(X_store, X_ref)


def _entries(directory):
    return sorted(os.listdir(directory))


# --------------------------------------------------------------------------- round trips


def test_dense_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    X, y = _dense(rng), rng.integers(0, 4, 50)
    info = write_arrays(tmp_path / "d.zarr", X, y, rows_per_chunk=7)
    assert (info.n_samples, info.n_features, info.sparse, info.rows_per_chunk) == (50, 6, False, 7)
    assert info.classes is None and info.label_dtype == "int64"
    assert info.chunk_bounds == [(lo, min(lo + 7, 50)) for lo in range(0, 50, 7)]
    attrs = dict(zarr.open_group(str(tmp_path / "d.zarr"), mode="r").attrs)
    assert attrs == {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "n_samples": 50,
        "n_features": 6,
        "sparse": False,
        "rows_per_chunk": 7,
        "classes": None,
        "all_chunks_written": True,
    }
    g = zarr.open_group(str(tmp_path / "d.zarr"), mode="r")
    assert g["X"].chunks == (7, 6) and g["X"].dtype == np.float32 and g["y"].chunks == (7,)
    X2, y2 = read_all(info)
    _assert_same(X2, X)
    assert y2.dtype == np.int64 and np.array_equal(y2, y)


def test_csr_round_trip(tmp_path):
    rng = np.random.default_rng(1)
    X = _sparse(rng)
    X.data[X.indptr[3] : X.indptr[4]] = 0  # an empty row
    X.eliminate_zeros()
    assert X.indptr[3] == X.indptr[4]
    y = rng.standard_normal(60)  # real labels -> float64
    info = write_arrays(tmp_path / "s.zarr", X, y, rows_per_chunk=8)
    assert info.sparse and info.nnz == X.nnz and info.label_dtype == "float64"
    g = zarr.open_group(str(tmp_path / "s.zarr"), mode="r")
    assert "X" not in g
    assert (g["indptr"].dtype, g["indices"].dtype, g["data"].dtype) == (
        np.int64,
        np.int32,
        np.float32,
    )
    assert np.array_equal(g["indptr"][:], X.indptr) and np.array_equal(g["indices"][:], X.indices)
    X2, y2 = read_all(str(tmp_path / "s.zarr"))
    _assert_same(X2, X)
    assert np.array_equal(y2, y)


def test_layout_override_and_string_labels(tmp_path):
    rng = np.random.default_rng(2)
    X = _dense(rng, 30, 4)
    y = np.array(["cat", "ant", "bee"] * 10)
    info = write_arrays(tmp_path / "a.zarr", X, y, sparse=True)
    assert info.sparse and info.classes == ["ant", "bee", "cat"]
    X2, codes = read_all(info)
    _assert_same(X2, sp.csr_matrix(X))
    assert np.array_equal(np.array(info.classes)[codes], y)


def test_default_rows_per_chunk_is_about_8_mib():
    assert default_rows_per_chunk(1024) == 2048
    assert default_rows_per_chunk(10**7) == 1
    assert default_rows_per_chunk(16, n_samples=100) == 100
    assert (
        default_rows_per_chunk(10**6, n_samples=10**6, sparse=True, nnz=10**8) == 8 * 2**20 // 808
    )


def test_read_rows_on_chunk_boundaries(tmp_path):
    rng = np.random.default_rng(3)
    Xd, Xs, y = _dense(rng, 45, 5), _sparse(rng, 45, 30), np.arange(45)
    for name, X in (("d.zarr", Xd), ("s.zarr", Xs)):
        info = write_arrays(tmp_path / name, X, y, rows_per_chunk=10)
        assert info.chunk_bounds == [(0, 10), (10, 20), (20, 30), (30, 40), (40, 45)]
        for lo, hi in info.chunk_bounds:
            _assert_same(read_rows(info, lo, hi), X[lo:hi])
            assert np.array_equal(read_labels(info, lo, hi), y[lo:hi])
        for b in (10, 20, 30, 40):  # ranges straddling a boundary, and ending/starting on it
            for lo, hi in ((b - 1, b + 1), (b - 1, b), (b, b + 1), (0, b), (b, 45)):
                _assert_same(read_rows(info, lo, hi), X[lo:hi])
        assert read_rows(info, 10, 10).shape == (0, X.shape[1])
        assert [lo for lo, _, _, _ in iter_chunks(info)] == [0, 10, 20, 30, 40]
        with pytest.raises(ValueError, match=r"row range \[40, 46\) is outside \[0, 45\)"):
            read_rows(info, 40, 46)


def test_open_store_accepts_file_url(tmp_path):
    rng = np.random.default_rng(4)
    X = _dense(rng, 12, 3)
    write_arrays(tmp_path / "u.zarr", X, np.zeros(12, dtype=int))
    url = "file://" + str(tmp_path / "u.zarr")
    info = open_store(url)
    assert info.url == url and info.n_samples == 12
    _assert_same(read_rows(url, 2, 9), X[2:9])


# --------------------------------------------------------------------------- svmlight


@pytest.mark.parametrize(
    "zero_based, sparse, density",
    [(False, None, 0.05), (True, None, 0.6), ("auto", True, 0.6), ("auto", False, 0.05)],
)
def test_from_svmlight_matches_sklearn(tmp_path, zero_based, sparse, density):
    rng = np.random.default_rng(5)
    n, d = 1000, 30
    X = sp.random(n, d, density=density, format="csr", random_state=rng).astype(np.float32)
    X.data = (X.data * 200 - 100).astype(np.float32)
    y = rng.integers(-1, 5, n)
    src = tmp_path / "data.svm"
    dump_svmlight_file(X, y, str(src), zero_based=bool(zero_based))
    X_ref, y_ref = load_svmlight_file(str(src), dtype=np.float32, zero_based=zero_based)
    info = from_svmlight(
        src,
        tmp_path / "out.zarr",
        zero_based=zero_based,
        sparse=sparse,
        buffer_rows=7,
        rows_per_chunk=64,
    )
    assert info.n_samples == n and info.n_features == X_ref.shape[1]
    assert info.sparse == (sparse if sparse is not None else density < 0.25)
    X2, y2 = read_all(info)
    assert np.array_equal(X2.toarray() if sp.issparse(X2) else X2, X_ref.toarray())
    assert y2.dtype == np.int64 and np.array_equal(y2, y_ref)
    assert _entries(tmp_path) == ["data.svm", "out.zarr"]


def test_from_svmlight_handles_comments_qid_order_and_real_labels(tmp_path):
    src = tmp_path / "hand.svm"
    src.write_text(
        "# a header comment\n"
        "1.5 qid:3 3:1.25 1:-2 # trailing comment\n"
        "\n"
        "-0.5 2:4e-1\n"
        "+2 \n"
        "3 1:7 3:8\n"
    )
    info = from_svmlight(src, tmp_path / "h.zarr", n_features=5, sparse=False, buffer_rows=2)
    X, y = read_all(info)
    expected = np.zeros((4, 5), dtype=np.float32)
    expected[0, [0, 2]] = [-2, 1.25]
    expected[1, 1] = np.float32(0.4)
    expected[3, [0, 2]] = [7, 8]
    assert np.array_equal(X, expected)
    assert y.dtype == np.float64 and np.array_equal(y, [1.5, -0.5, 2, 3])


def test_svmlight_fast_and_slow_parsers_agree():
    from dmcsvm.store.svmlight import _parse_svmlight_fast, _parse_svmlight_slow

    lines = [
        b"# comment only\n",
        b"1 qid:2 4:0.5 2:-1e-3\r\n",
        b"\n",
        b"  -3   7:+2.5\t9:1E2 # c\n",
        b"2.5\n",
        b"0 1:nan 3:inf\n",
        b"4 0:1",
    ]
    fast = _parse_svmlight_fast(lines, 10)
    slow = _parse_svmlight_slow("f", lines, 10)
    assert fast is not None
    for a, b in zip(fast, slow, strict=False):
        assert a.dtype.kind == b.dtype.kind and np.array_equal(a, b, equal_nan=True)
    assert slow[4].tolist() == [11, 13, 14, 15, 16]
    for odd in ([b"1 1:1_0\n"], [b"1 1.5:2\n"], [b"1 3 1:2:3\n"], [b"1 1:2x\n"]):
        assert _parse_svmlight_fast(odd, 1) is None
    assert _parse_svmlight_slow("f", [b"1 1:1_0\n"], 1)[3].tolist() == [10.0]


def test_from_svmlight_reads_gzip(tmp_path):
    import gzip

    with gzip.open(tmp_path / "d.svm.gz", "wb") as f:
        f.write(b"1 1:1 3:2\n0 2:5\n")
    X, y = read_all(from_svmlight(tmp_path / "d.svm.gz", tmp_path / "g.zarr", sparse=False))
    assert np.array_equal(X, [[1, 0, 2], [0, 5, 0]]) and y.tolist() == [1, 0]


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ("2 1:nan 3:1", r"data\.svm contains NaN or infinity at row 30 \(line 31\)"),
        ("2 1:1 3:inf", r"data\.svm contains NaN or infinity at row 30 \(line 31\)"),
        ("2 1:1 3:x", r"data\.svm, line 31: cannot parse feature '3:x'"),
        ("2 1:1 3", r"data\.svm, line 31: cannot parse feature '3'"),
        ("lbl 1:1", r"data\.svm, line 31: bad label 'lbl'"),
        ("1,2 1:1", r"data\.svm, line 31: bad label '1,2' \(multi-label"),
        ("nan 1:1", r"data\.svm, line 31: bad label 'nan'"),
        ("1 2:1 2:3", r"data\.svm, line 31: feature index 2 appears twice"),
        ("1 -2:1", r"data\.svm, line 31: negative feature index -2"),
    ],
)
def test_failed_svmlight_write_leaves_nothing(tmp_path, bad_line, message):
    lines = ["1 1:0.5 2:1"] * 60
    lines[30] = bad_line
    src = tmp_path / "data.svm"
    src.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=message):
        from_svmlight(src, tmp_path / "out.zarr", buffer_rows=7, rows_per_chunk=4)
    assert _entries(tmp_path) == ["data.svm"]


def test_svmlight_index_errors(tmp_path):
    src = tmp_path / "data.svm"
    src.write_text("1 1:1\n2 0:1 4:2\n")
    with pytest.raises(
        ValueError, match=r"data\.svm, line 2: feature index 0 in a file read as one-based"
    ):
        from_svmlight(src, tmp_path / "o.zarr", zero_based=False)
    with pytest.raises(
        ValueError, match=r"data\.svm, line 2: feature index 4 is beyond n_features=3"
    ):
        from_svmlight(src, tmp_path / "o.zarr", n_features=3)
    empty = tmp_path / "empty.svm"
    empty.write_text("# nothing\n\n")
    with pytest.raises(ValueError, match=r"empty\.svm contains no samples"):
        from_svmlight(empty, tmp_path / "o.zarr")
    assert _entries(tmp_path) == ["data.svm", "empty.svm"]


def test_failure_after_chunks_were_written_leaves_nothing(tmp_path):
    # valid for pass 1, then the second pass finds the source changed: the temp dir with
    # chunks already written must go
    src = tmp_path / "data.svm"
    src.write_text("".join(f"{i % 3} 1:{i} 2:1\n" for i in range(100)))
    import dmcsvm.store._builder as builder_mod

    real = builder_mod._StoreBuilder.append
    calls = []

    def failing_append(self, X, y):
        calls.append(1)
        if len(calls) == 5:
            assert any(name.startswith(".out.zarr.tmp-") for name in os.listdir(tmp_path))
            raise OSError("disk full")
        return real(self, X, y)

    builder_mod._StoreBuilder.append = failing_append
    try:
        with pytest.raises(OSError, match="disk full"):
            from_svmlight(src, tmp_path / "out.zarr", buffer_rows=7, rows_per_chunk=4)
    finally:
        builder_mod._StoreBuilder.append = real
    assert _entries(tmp_path) == ["data.svm"]


# --------------------------------------------------------------------------- csv


def _write_csv(path, rows, header=None):
    text = ([header] if header else []) + [",".join(map(str, r)) for r in rows]
    path.write_text("\n".join(text) + "\n")


def test_from_csv_label_first_and_last(tmp_path):
    rng = np.random.default_rng(6)
    X = np.round(rng.standard_normal((40, 3)), 3).astype(np.float32)
    y = rng.integers(0, 3, 40)
    _write_csv(
        tmp_path / "first.csv",
        [[yi, *xi] for xi, yi in zip(X.tolist(), y, strict=False)],
        header="y,a,b,c",
    )
    _write_csv(tmp_path / "last.csv", [[*xi, yi] for xi, yi in zip(X.tolist(), y, strict=False)])
    a = from_csv(
        tmp_path / "first.csv",
        tmp_path / "a.zarr",
        skip_header=True,
        buffer_rows=7,
        rows_per_chunk=9,
    )
    b = from_csv(tmp_path / "last.csv", tmp_path / "b.zarr", label_column=-1, buffer_rows=7)
    for info in (a, b):
        X2, y2 = read_all(info)
        _assert_same(X2, X)
        assert y2.dtype == np.int64 and np.array_equal(y2, y) and info.classes is None


def test_from_csv_string_labels_and_dropped_columns(tmp_path):
    letters = [chr(ord("A") + i % 26) for i in range(60)][::-1]
    rows = [[f"id{i}", i * 0.5, letters[i], -i] for i in range(60)]
    rows.insert(10, [])  # a blank line is skipped
    path = tmp_path / "letters.csv"
    path.write_text("\n".join(";".join(map(str, r)) for r in rows) + "\n")
    info = from_csv(
        path, tmp_path / "l.zarr", label_column=2, delimiter=";", drop_columns=(0,), buffer_rows=8
    )
    assert info.classes == [chr(ord("A") + i) for i in range(26)]
    assert info.n_features == 2
    X, codes = read_all(info)
    assert np.array_equal(X, np.array([[i * 0.5, -i] for i in range(60)], dtype=np.float32))
    assert codes.dtype == np.int64 and [info.classes[c] for c in codes] == letters


@pytest.mark.parametrize(
    "bad, message",
    [
        ("1,nan,2", r"data\.csv contains NaN or infinity at row 20 \(line 21\)"),
        ("1,2,inf", r"data\.csv contains NaN or infinity at row 20 \(line 21\)"),
        ("1,abc,2", r"data\.csv, line 21: column 1 is not a number: 'abc'"),
        ("1,,2", r"data\.csv, line 21: column 1 is not a number: ''"),
        ("1,2", r"data\.csv, line 21: 2 fields, expected 3"),
        ("nan,1,2", r"data\.csv, line 21: bad label 'nan'"),
    ],
)
def test_failed_csv_write_leaves_nothing(tmp_path, bad, message):
    rows = ["1,0.5,2"] * 40
    rows[20] = bad
    (tmp_path / "data.csv").write_text("\n".join(rows) + "\n")
    with pytest.raises(ValueError, match=message):
        from_csv(tmp_path / "data.csv", tmp_path / "out.zarr", buffer_rows=6, rows_per_chunk=4)
    assert _entries(tmp_path) == ["data.csv"]


# --------------------------------------------------------------------------- npy, dask


def test_from_npy(tmp_path):
    rng = np.random.default_rng(7)
    X, y = rng.standard_normal((33, 4)), rng.integers(0, 5, 33)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    info = from_npy(
        tmp_path / "X.npy", tmp_path / "y.npy", tmp_path / "n.zarr", buffer_rows=5, rows_per_chunk=8
    )
    X2, y2 = read_all(info)
    _assert_same(X2, X.astype(np.float32))
    assert np.array_equal(y2, y)
    X[17, 2] = np.inf
    np.save(tmp_path / "X.npy", X)
    with pytest.raises(ValueError, match=r"X\.npy contains NaN or infinity at row 17"):
        from_npy(tmp_path / "X.npy", tmp_path / "y.npy", tmp_path / "m.zarr", buffer_rows=5)
    assert "m.zarr" not in _entries(tmp_path)


def test_from_dask_uneven_chunks(tmp_path):
    da = pytest.importorskip("dask.array")
    rng = np.random.default_rng(8)
    X, y = rng.standard_normal((50, 7)).astype(np.float32), rng.integers(0, 3, 50)
    Xd = da.from_array(X, chunks=((3, 20, 1, 26), (2, 5)))
    yd = da.from_array(y, chunks=((13, 37),))
    info = from_dask(Xd, yd, tmp_path / "k.zarr", rows_per_chunk=9, buffer_rows=11)
    g = zarr.open_group(str(tmp_path / "k.zarr"), mode="r")
    assert g["X"].chunks == (9, 7)
    X2, y2 = read_all(info)
    _assert_same(X2, X)
    assert np.array_equal(y2, y)
    info = from_dask(da.from_array(sp.csr_matrix(X), chunks=(13, 7)), y, tmp_path / "ks.zarr")
    assert info.sparse
    _assert_same(read_all(info)[0], sp.csr_matrix(X))


def test_from_dask_rejects_nan(tmp_path):
    da = pytest.importorskip("dask.array")
    X = np.ones((20, 3))
    X[12, 1] = np.nan
    with pytest.raises(ValueError, match="X contains NaN or infinity at row 12"):
        from_dask(da.from_array(X, chunks=5), np.zeros(20), tmp_path / "k.zarr", buffer_rows=4)
    assert _entries(tmp_path) == []


# --------------------------------------------------------------------------- writer checks


def test_write_arrays_validation(tmp_path):
    X = np.ones((20, 3))
    X[12, 1] = np.nan
    with pytest.raises(ValueError, match="X contains NaN or infinity at row 12"):
        write_arrays(tmp_path / "a.zarr", X, np.zeros(20), buffer_rows=5)
    Xs = sp.csr_matrix(np.eye(20))
    Xs.data[7] = np.inf
    with pytest.raises(ValueError, match="X contains NaN or infinity at row 7"):
        write_arrays(tmp_path / "a.zarr", Xs, np.zeros(20), buffer_rows=5)
    with pytest.raises(ValueError, match="X has 20 rows but y has 19"):
        write_arrays(tmp_path / "a.zarr", np.ones((20, 3)), np.zeros(19))
    with pytest.raises(ValueError, match="X has no rows"):
        write_arrays(tmp_path / "a.zarr", np.ones((0, 3)), np.zeros(0))
    with pytest.raises(ValueError, match="y contains NaN or infinity at row 2"):
        write_arrays(tmp_path / "a.zarr", np.ones((4, 3)), [0, 1, np.nan, 1])
    assert _entries(tmp_path) == []


def test_overwrite(tmp_path):
    target = tmp_path / "o.zarr"
    write_arrays(target, np.ones((5, 2)), np.zeros(5))
    with pytest.raises(ValueError, match="o.zarr already exists; pass overwrite=True"):
        write_arrays(target, np.ones((5, 2)), np.zeros(5))
    info = write_arrays(target, np.zeros((7, 3)), np.ones(7), overwrite=True)
    assert (info.n_samples, info.n_features) == (7, 3)
    assert _entries(tmp_path) == ["o.zarr"]
    other = tmp_path / "precious"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(
        ValueError, match="refusing to overwrite .*precious: it is not a dmcsvm data store"
    ):
        write_arrays(other, np.ones((5, 2)), np.zeros(5), overwrite=True)
    assert (other / "notes.txt").read_text() == "keep me"
    with pytest.raises(ValueError, match="parent directory .* does not exist"):
        write_arrays(tmp_path / "no" / "x.zarr", np.ones((5, 2)), np.zeros(5))


# --------------------------------------------------------------------------- open_store


def _attrs(**over):
    attrs = {
        "format": FORMAT_NAME,
        "format_version": 1,
        "n_samples": 100,
        "n_features": 16,
        "sparse": False,
        "rows_per_chunk": 1000,
        "classes": None,
    }
    attrs.update(over)
    return {k: v for k, v in attrs.items() if v is not _DROP}


_DROP = object()


def _store(path, attrs, **arrays):
    """Build a store by hand: ``name=(values, chunks)`` for each array."""
    g = zarr.open_group(str(path), mode="w")
    for name, (values, chunks) in arrays.items():
        a = g.create_array(name, shape=values.shape, chunks=chunks, dtype=values.dtype)
        a[...] = values
    g.attrs.update(attrs)
    return str(path)


def _good_dense():
    return {
        "X": (np.zeros((100, 16), np.float32), (1000, 16)),
        "y": (np.zeros(100, np.int64), (1000,)),
    }


def _good_sparse():
    indptr = np.arange(101, dtype=np.int64) * 2
    return {
        "indptr": (indptr, (50,)),
        "indices": (np.zeros(200, np.int32), (64,)),
        "data": (np.ones(200, np.float32), (64,)),
        "y": (np.zeros(100, np.int64), (50,)),
    }


def test_open_store_accepts_hand_built_stores(tmp_path):
    info = open_store(_store(tmp_path / "d", _attrs(), **_good_dense()))
    assert info.chunk_bounds == [(0, 100)] and not info.sparse
    info = open_store(
        _store(tmp_path / "s", _attrs(sparse=True, rows_per_chunk=50), **_good_sparse())
    )
    assert info.sparse and info.nnz == 200 and info.chunk_bounds == [(0, 50), (50, 100)]
    assert read_rows(info, 49, 51).toarray()[:, 0].tolist() == [2.0, 2.0]


def _case(name):
    """(attrs, arrays, message) of each broken-store case."""
    dense, sparse = _good_dense(), _good_sparse()
    sattrs = _attrs(sparse=True, rows_per_chunk=50)
    if name == "no format":
        return _attrs(format=_DROP), dense, "is not a dmcsvm data store (format attribute missing)"
    if name == "foreign format":
        return (
            _attrs(format="xarray"),
            dense,
            "is not a dmcsvm data store (format attribute is 'xarray', expected 'dmcsvm-data')",
        )
    if name == "version":
        return _attrs(format_version=7), dense, "has format_version 7; this dmcsvm reads version 1"
    if name == "missing y":
        del dense["y"]
        return _attrs(), dense, "is missing array 'y'"
    if name == "missing X":
        del dense["X"]
        return _attrs(), dense, "is missing array 'X'"
    if name == "missing indices":
        del sparse["indices"]
        return sattrs, sparse, "is missing array 'indices'"
    if name == "lengths":
        dense["y"] = (np.zeros(99, np.int64), (1000,))
        return _attrs(), dense, "X has 100 rows but y has 99"
    if name == "n_samples attr":
        return _attrs(n_samples=101), dense, "X has 100 rows but attribute n_samples is 101"
    if name == "feature chunks":
        dense["X"] = (np.zeros((100, 16), np.float32), (1000, 8))
        return (
            _attrs(),
            dense,
            "X is chunked along features (chunks (1000, 8) for 16 features); "
            "each chunk must hold whole rows",
        )
    if name == "row chunks":
        return (
            _attrs(rows_per_chunk=10),
            dense,
            "X has chunks of 1000 rows but attribute rows_per_chunk is 10",
        )
    if name == "X dtype":
        dense["X"] = (np.zeros((100, 16), np.float64), (1000, 16))
        return _attrs(), dense, "X has dtype float64; expected float32"
    if name == "y dtype":
        dense["y"] = (np.zeros(100, np.int32), (1000,))
        return _attrs(), dense, "y has dtype int32; expected int64 or float64"
    if name == "data dtype":
        sparse["data"] = (np.ones(200, np.float64), (64,))
        return sattrs, sparse, "data has dtype float64; expected float32"
    if name == "indptr monotone":
        indptr = sparse["indptr"][0].copy()
        indptr[40] = 500
        sparse["indptr"] = (indptr, (50,))
        return sattrs, sparse, "indptr is inconsistent: not monotone (indptr[41] < indptr[40])"
    if name == "indptr last":
        sparse["indices"] = (np.zeros(210, np.int32), (64,))
        sparse["data"] = (np.ones(210, np.float32), (64,))
        return (
            sattrs,
            sparse,
            "indptr is inconsistent: indptr[-1] is 200 but indices/data hold 210 entries",
        )
    if name == "missing attr":
        return _attrs(n_features=_DROP), dense, "is missing attribute 'n_features'"
    raise AssertionError(name)


@pytest.mark.parametrize(
    "name",
    [
        "no format",
        "foreign format",
        "version",
        "missing y",
        "missing X",
        "missing indices",
        "lengths",
        "n_samples attr",
        "feature chunks",
        "row chunks",
        "X dtype",
        "y dtype",
        "data dtype",
        "indptr monotone",
        "indptr last",
        "missing attr",
    ],
)
def test_open_store_rejects_broken_stores(tmp_path, name):
    attrs, arrays, message = _case(name)
    url = _store(tmp_path / "bad.zarr", attrs, **arrays)
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        open_store(url)
    assert str(tmp_path / "bad.zarr") in str(err.value)


@pytest.mark.parametrize("at", [40, 42])
def test_indptr_check_streams_across_blocks(tmp_path, monkeypatch, at):
    import dmcsvm.store.layout as layout

    monkeypatch.setattr(layout, "_INDPTR_SCAN", 7)  # check indptr 7 entries at a time
    arrays = _good_sparse()
    url = _store(tmp_path / "ok.zarr", _attrs(sparse=True, rows_per_chunk=50), **arrays)
    assert open_store(url).nnz == 200
    indptr = arrays["indptr"][0].copy()
    indptr[at] = indptr[at - 1] - 1  # decrease inside a block (40) and on a block start (42)
    arrays["indptr"] = (indptr, (50,))
    url = _store(tmp_path / "bad.zarr", _attrs(sparse=True, rows_per_chunk=50), **arrays)
    with pytest.raises(
        ValueError, match=re.escape(f"not monotone (indptr[{at}] < indptr[{at - 1}])")
    ):
        open_store(url)


def test_open_store_rejects_non_stores(tmp_path):
    with pytest.raises(
        ValueError, match=r"nope\.zarr is not a zarr store: the path does not exist"
    ):
        open_store(tmp_path / "nope.zarr")
    (tmp_path / "plain").mkdir()
    with pytest.raises(ValueError, match=r"plain is not a zarr store"):
        open_store(tmp_path / "plain")
    (tmp_path / "file.txt").write_text("hi")
    with pytest.raises(ValueError, match=r"file\.txt is not a zarr store"):
        open_store(tmp_path / "file.txt")
    with pytest.raises(ValueError, match=r"is not a zarr store"):
        read_rows(str(tmp_path / "nope.zarr"), 0, 1)
