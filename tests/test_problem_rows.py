"""The SMO problems' per-row values computed where they are read (docs/design.md, 'The coordinator's
size'): a binary problem's signs and the constant groups equal their NumPy vectors whole, sliced (a
partition's rows) and at any rows, over an in-memory class index and over a store's, and travel
small (pickled)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from dmcsvm.engine.problem_rows import ConstantRows, PairSigns
from dmcsvm.store import open_store, write_arrays
from dmcsvm.store.class_index import StoreClassIndex, scan_classes


def _reference(y_idx, pos, neg):
    s = np.zeros(y_idx.shape[0], dtype=np.int64)
    s[y_idx == pos] = 1
    s[(y_idx != pos) if neg < 0 else (y_idx == neg)] = -1
    return s


def _labels():
    y = np.random.default_rng(5).integers(0, 4, 157) * 10 + 3
    return y, np.unique(y, return_inverse=True)[1].astype(np.int64)


def _store_index(tmp_path):
    y, _ = _labels()
    url = str(tmp_path / "s.zarr")
    write_arrays(url, np.zeros((157, 2), dtype=np.float32), y, rows_per_chunk=16)
    info = open_store(url)
    classes, table = scan_classes(info)
    return StoreClassIndex(info, 0, 157, classes, table)


@pytest.fixture(params=["array", "store"])
def class_index(request, tmp_path):
    """A class index of 157 rows (4 classes) held as an array or read from a store, and the
    array."""
    _, y_idx = _labels()
    return (y_idx if request.param == "array" else _store_index(tmp_path)), y_idx


@pytest.mark.parametrize("pos, neg", [(0, -1), (3, -1), (1, 2), (2, 0)])
def test_pair_signs_equal_the_sign_vector(class_index, pos, neg):
    index, y_idx = class_index
    ref = _reference(y_idx, pos, neg)
    signs = PairSigns(index, pos, neg)
    assert len(signs) == signs.shape[0] == 157 and signs.ndim == 1
    np.testing.assert_array_equal(np.asarray(signs), ref)
    np.testing.assert_array_equal(np.ascontiguousarray(signs, dtype=np.float64), ref.astype(float))
    part = signs[40:97]
    assert isinstance(part, PairSigns) and len(part) == 57
    np.testing.assert_array_equal(np.asarray(part), ref[40:97])
    np.testing.assert_array_equal(np.asarray(part[5:9]), ref[45:49])
    ids = np.array([156, 0, 77, 3, 3])
    np.testing.assert_array_equal(signs[ids], ref[ids])
    np.testing.assert_array_equal(part[np.array([0, 56])], ref[[40, 96]])
    again = pickle.loads(pickle.dumps(part))
    np.testing.assert_array_equal(np.asarray(again), ref[40:97])


def test_pair_signs_of_a_store_slice_travel_without_labels(tmp_path):
    """A store-backed partition slice pickles to a few hundred bytes: no label array inside."""
    part = PairSigns(_store_index(tmp_path), 1, -1)[16:157]
    assert len(pickle.dumps(part)) < 2000
    np.testing.assert_array_equal(
        np.asarray(pickle.loads(pickle.dumps(part))), _reference(_labels()[1], 1, -1)[16:157]
    )


def test_constant_rows():
    c = ConstantRows(10, 0)
    np.testing.assert_array_equal(np.asarray(c), np.zeros(10, dtype=np.int64))
    assert np.asarray(c).dtype == np.int64
    part = c[3:8]
    assert isinstance(part, ConstantRows) and len(part) == 5
    np.testing.assert_array_equal(np.asarray(part), np.zeros(5))
    np.testing.assert_array_equal(ConstantRows(6, 1)[np.array([5, 0, 2])], [1, 1, 1])
    assert len(ConstantRows(6, 1)[4:100]) == 2
