"""X rows on the wire as their nonzeros (engine/row_packing.py): the numba kernels against NumPy,
the packed form bit for bit (signed zeros included), row takes without unpacking, and the round
messages and replies that carry them."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from dmcsvm.engine.messages import (
    CSReply,
    RoundMessage,
    pack_message,
    pack_reply_rows,
    prune_candidates,
    unpack_message,
    unpack_reply_rows,
)
from dmcsvm.engine.row_bank import RowBank
from dmcsvm.engine.row_packing import (
    PackedRows,
    gather_nonzeros,
    nonzero_counts,
    pack_rows,
    packed_nbytes,
    scatter_rows,
    unpack_rows,
)


def _zero_rich(rng, n, d, density, dtype=np.float32):
    X = rng.normal(size=(n, d)).astype(dtype)
    X[rng.random((n, d)) >= density] = 0.0
    return X


def _bits(X):
    return X.view(np.uint32 if X.dtype == np.float32 else np.uint64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [1, 7, 8, 9, 33])
def test_kernels_match_numpy(dtype, d):
    """Counts, gathered nonzeros (column order, one spare slot) and the scatter back, against
    NumPy, on widths around the eight-entry runs of the gather."""
    rng = np.random.default_rng(d)
    X = _zero_rich(rng, 50, d, 0.3, dtype)
    X[3] = 0.0  # an empty row
    X[4, 0] = -0.0  # a signed zero is a value
    bits = _bits(X)
    counts = np.empty(50, dtype=np.int64)
    nonzero_counts(bits, counts)
    np.testing.assert_array_equal(counts, (bits != 0).sum(axis=1))
    indptr = np.r_[0, np.cumsum(counts)].astype(np.int32)
    cols = np.empty(counts.sum() + 1, dtype=np.uint16)
    vals = np.empty(counts.sum() + 1, dtype=dtype)
    gather_nonzeros(bits, X, indptr, cols, vals)
    r, c = np.nonzero(bits)
    np.testing.assert_array_equal(cols[:-1], c)
    np.testing.assert_array_equal(_bits(vals[:-1]), bits[r, c])
    out = np.full_like(X, 7.0)  # the scatter writes the zeros too
    scatter_rows(indptr, cols[:-1], vals[:-1], out)
    np.testing.assert_array_equal(_bits(out), bits)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pack_round_trips_bit_for_bit_and_is_smaller(dtype):
    rng = np.random.default_rng(0)
    X = _zero_rich(rng, 200, 300, 0.2, dtype)
    X[5, 7] = -0.0
    p = pack_rows(X)
    assert isinstance(p, PackedRows)
    assert p.nbytes == packed_nbytes(200, int(np.count_nonzero(_bits(X))), 300, X.itemsize)
    assert p.nbytes < 0.4 * X.nbytes
    back = unpack_rows(pickle.loads(pickle.dumps(p)))
    assert back.dtype == X.dtype and back.shape == X.shape
    np.testing.assert_array_equal(_bits(back), _bits(X))
    assert np.signbit(back[5, 7])


def test_wide_rows_use_32_bit_columns():
    X = np.zeros((3, 70000), dtype=np.float32)
    X[0, 69999], X[2, 65536], X[2, 3] = 1.5, -2.0, 0.25
    p = pack_rows(X)
    assert p.cols.dtype == np.int32
    np.testing.assert_array_equal(unpack_rows(p), X)


def test_what_is_not_smaller_or_not_dense_passes_through():
    rng = np.random.default_rng(2)
    dense = rng.normal(size=(40, 30)).astype(np.float32)  # no zeros: packing costs more
    assert pack_rows(dense) is dense
    half = _zero_rich(rng, 40, 30, 0.7)  # 6 bytes a nonzero vs 4 an entry
    assert pack_rows(half) is half
    import scipy.sparse as sp

    csr = sp.random(10, 20, density=0.1, format="csr")
    for v in (
        None,
        csr,
        np.zeros((0, 5), np.float32),
        np.zeros(5, np.float32),
        np.zeros((4, 4), np.int64),
    ):
        assert pack_rows(v) is v
        assert unpack_rows(v) is v
    empty = pack_rows(np.zeros((6, 40), np.float32))  # all zeros: pointers only
    assert isinstance(empty, PackedRows) and empty.vals.size == 0
    np.testing.assert_array_equal(unpack_rows(empty), np.zeros((6, 40), np.float32))


@pytest.mark.parametrize("take", [[3, 1, 7], [], [0, 0, 5], slice(2, 9, 3), [9]])
def test_row_take_without_unpacking(take):
    rng = np.random.default_rng(3)
    X = _zero_rich(rng, 10, 50, 0.15)
    X[1] = 0.0
    p = pack_rows(X)
    got = p[np.asarray(take, dtype=np.int64) if isinstance(take, list) else take]
    assert isinstance(got, PackedRows)
    want = X[np.asarray(take, dtype=np.int64) if isinstance(take, list) else take]
    np.testing.assert_array_equal(unpack_rows(got), want)
    assert len(got) == want.shape[0]


def test_round_message_packs_batch_and_unshrink_rows():
    """A message's batch rows and an unshrink's support rows travel packed and come back the
    same, also when some batch rows are left out for the receivers' banks."""
    rng = np.random.default_rng(4)
    X = _zero_rich(rng, 30, 64, 0.15)
    ids = np.arange(0, 60, 2)
    msg = RoundMessage(
        ids=ids,
        XB=X,
        dB=rng.normal(size=(30, 3)),
        unshrink={"ids": ids[:5], "X": X[:5], "B": np.ones((5, 3))},
    )
    dense = X.nbytes + X[:5].nbytes
    blob = pack_message(msg)
    assert len(blob) < dense
    back = unpack_message(blob)
    np.testing.assert_array_equal(back.XB, X)
    np.testing.assert_array_equal(back.unshrink["X"], X[:5])
    bank = RowBank()
    have = np.zeros(30, dtype=bool)
    have[::3] = True
    bank.add(ids[have], X[have])
    back = unpack_message(pack_message(msg, have), bank)
    np.testing.assert_array_equal(back.XB, X)


def test_reply_rows_packed_pruned_and_unpacked_as_dense():
    """Candidates cut while their rows are packed (a tree node) keep the rows a cut of the dense
    replies keeps."""
    rng = np.random.default_rng(5)
    tol, d = 1e-3, 40
    replies = []
    for k in range(3):
        n = 12
        new = rng.random(n) < 0.6
        replies.append(
            (
                k,
                CSReply(
                    part=k,
                    cand_ids=k * 100 + np.arange(n),
                    cand_V=rng.random(n),
                    cand_psi=tol + rng.random(n),
                    cand_F=rng.normal(size=(n, 3)),
                    cand_X=_zero_rich(rng, int(new.sum()), d, 0.1),
                    cand_new=new,
                    cand_kdiag=np.ones(n),
                    cand_yp=np.zeros(n, np.int64),
                    cand_cls=np.zeros(n, np.int64),
                ),
            )
        )
    packed = pack_reply_rows(replies)
    assert all(isinstance(r.cand_X, PackedRows) for _, r in packed)
    assert replies[0][1].cand_X.__class__ is np.ndarray  # the input is left alone
    dense_cut = prune_candidates(replies, (7, tol))
    packed_cut = prune_candidates(pickle.loads(pickle.dumps(packed)), (7, tol))
    for (k, a), (j, b) in zip(dense_cut, packed_cut, strict=False):
        b = unpack_reply_rows(b)
        assert k == j
        np.testing.assert_array_equal(a.cand_ids, b.cand_ids)
        np.testing.assert_array_equal(a.cand_X, b.cand_X)
