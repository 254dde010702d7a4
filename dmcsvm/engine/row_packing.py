"""Dense X rows on the wire as their nonzeros, when that is smaller: lossless, bit for bit.

On wide data with many zeros (MNIST: about 19 % of the pixels are nonzero) the X rows of a
round's batch and of the partitions' new candidates are most of the bytes a round moves, and down
the Dask tree they cross every level (benchmarks/results/scaling.md).  :func:`pack_rows` gives a
dense block as :class:`PackedRows` (row pointers, 16-bit column numbers where the width allows,
the values) when that takes fewer bytes than the block itself; :func:`unpack_rows` gives the same
block back.  A value is kept when any bit of it is set, so ``-0.0`` travels too and the receiver's
rows equal the sender's bit for bit (the kernel values and hence the model do not move).  Sparse
(CSR) rows already travel as their nonzeros and pass through unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numba
import numpy as np
from numpy.typing import NDArray

#: unsigned views that tell a float's bits apart from +0.0 (-0.0 counts as a nonzero)
_BITS = {np.dtype(np.float32): np.uint32, np.dtype(np.float64): np.uint64}

_T = TypeVar("_T")


@numba.njit(cache=True, nogil=True)
def nonzero_counts(bits: NDArray[np.unsignedinteger[Any]], counts: NDArray[np.int64]) -> None:
    """``counts[i]``: the entries of row ``i`` of ``bits`` (a float block viewed as unsigned
    integers) that are not all-zero bits."""
    for i in range(bits.shape[0]):
        c = 0
        for j in range(bits.shape[1]):
            if bits[i, j] != 0:
                c += 1
        counts[i] = c


@numba.njit(cache=True, nogil=True)
def gather_nonzeros(
    bits: NDArray[np.unsignedinteger[Any]],
    X: NDArray[np.floating[Any]],
    indptr: NDArray[np.int32],
    cols: NDArray[np.integer[Any]],
    vals: NDArray[np.floating[Any]],
) -> None:
    """Row ``i``'s nonzeros of ``X`` (as ``bits`` marks them) to ``cols`` / ``vals`` from
    ``indptr[i]`` on, in column order; both are one longer than the nonzeros."""
    # eight entries at a time: a run of eight zeros (most of a sparse row) is one test; inside
    # a run that has a nonzero every entry is written at ``k`` and only a nonzero moves ``k`` on
    # (no branch per entry), hence the one spare slot for a row's last run
    d = X.shape[1]
    for i in range(X.shape[0]):
        k = indptr[i]
        j = 0
        while j + 8 <= d:
            if (
                bits[i, j]
                | bits[i, j + 1]
                | bits[i, j + 2]
                | bits[i, j + 3]
                | bits[i, j + 4]
                | bits[i, j + 5]
                | bits[i, j + 6]
                | bits[i, j + 7]
            ) != 0:
                for jj in range(j, j + 8):
                    cols[k] = jj
                    vals[k] = X[i, jj]
                    k += bits[i, jj] != 0
            j += 8
        for jj in range(j, d):
            cols[k] = jj
            vals[k] = X[i, jj]
            k += bits[i, jj] != 0


@numba.njit(cache=True, nogil=True)
def scatter_rows(
    indptr: NDArray[np.int32],
    cols: NDArray[np.integer[Any]],
    vals: NDArray[np.floating[Any]],
    out: NDArray[np.floating[Any]],
) -> None:
    """The rows :func:`gather_nonzeros` packed, written into ``out`` (zeros elsewhere)."""
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = 0
        for k in range(indptr[i], indptr[i + 1]):
            out[i, cols[k]] = vals[k]


@dataclass
class PackedRows:
    """A dense ``shape`` block of ``dtype`` as its nonzeros (:func:`pack_rows`); ``rows[idx]``
    takes rows without unpacking (a tree node cuts its children's candidates this way)."""

    shape: tuple[int, int]
    indptr: NDArray[np.int32]
    cols: NDArray[np.uint16 | np.int32]
    vals: NDArray[np.floating[Any]]

    @property
    def nbytes(self) -> int:
        return self.indptr.nbytes + self.cols.nbytes + self.vals.nbytes

    def __len__(self) -> int:
        return int(self.shape[0])

    def __getitem__(self, idx: slice | NDArray[np.integer[Any]] | NDArray[np.bool_]) -> PackedRows:
        rows = np.arange(self.shape[0])[idx]
        start, stop = self.indptr[rows], self.indptr[rows + 1]
        counts = stop - start
        indptr = np.zeros(rows.shape[0] + 1, dtype=self.indptr.dtype)
        np.cumsum(counts, out=indptr[1:])
        # positions of every kept entry: each row's run start..stop, in row order
        at = np.repeat(start - indptr[:-1], counts) + np.arange(int(indptr[-1]))
        return PackedRows((rows.shape[0], self.shape[1]), indptr, self.cols[at], self.vals[at])


def packed_nbytes(n_rows: int, nnz: int, width: int, itemsize: int) -> int:
    """Bytes of a :class:`PackedRows` of ``n_rows`` rows with ``nnz`` nonzeros."""
    return 4 * (n_rows + 1) + nnz * ((2 if width < 2**16 else 4) + itemsize)


def pack_rows(X: object) -> object:
    """``X`` as :class:`PackedRows` when that is smaller than ``X`` (a 2-D float32 / float64
    array), else ``X`` itself (also any other kind of value: CSR rows, None)."""
    if not isinstance(X, np.ndarray) or X.ndim != 2 or X.dtype not in _BITS or X.size == 0:
        return X
    X = np.ascontiguousarray(X)
    n, d = X.shape
    bits = X.view(_BITS[X.dtype])
    counts = np.empty(n, dtype=np.int64)
    nonzero_counts(bits, counts)
    nnz = int(counts.sum())
    if nnz >= 2**31 or packed_nbytes(n, nnz, d, X.itemsize) >= X.nbytes:
        return X
    indptr = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=indptr[1:])
    # (numpy's stubs cannot type a dtype chosen at run time)
    cols = cast(
        "NDArray[np.uint16 | np.int32]",
        np.empty(nnz + 1, dtype=np.uint16 if d < 2**16 else np.int32),
    )
    vals = np.empty(nnz + 1, dtype=X.dtype)
    gather_nonzeros(bits, X, indptr, cols, vals)
    return PackedRows((n, d), indptr, cols[:nnz], vals[:nnz])


def unpack_rows(rows: _T) -> _T | NDArray[np.floating[Any]]:
    """The dense block :func:`pack_rows` packed (anything else unchanged)."""
    if not isinstance(rows, PackedRows):
        return rows
    out = np.empty(rows.shape, dtype=rows.vals.dtype)
    scatter_rows(rows.indptr, rows.cols, rows.vals, out)
    return out
