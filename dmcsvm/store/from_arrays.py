"""Writers from arrays already in memory, memory-mapped or lazy: numpy/scipy.sparse,
``.npy`` files and dask arrays, converted one bounded block of rows at a time."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike

from ..errors import check_sample_weight
from ._builder import (
    DEFAULT_BUFFER_BYTES,
    DEFAULT_BUFFER_ROWS,
    _as_float32_block,
    _block_rows,
    _encode_label_array,
    _first_nonfinite_row,
    _LabelScan,
    _prepare_target,
    _scan_label_array,
    _StoreBuilder,
)
from .layout import StoreInfo

if TYPE_CHECKING:
    import dask.array as da

__all__ = ["from_dask", "from_npy", "write_arrays"]


def write_arrays(
    path: str | os.PathLike[str],
    X: ArrayLike | sp.spmatrix,
    y: ArrayLike,
    rows_per_chunk: int | None = None,
    overwrite: bool = False,
    sparse: bool | None = None,
    buffer_rows: int = DEFAULT_BUFFER_ROWS,
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    sample_weight: ArrayLike | None = None,
) -> StoreInfo:
    """Write in-memory arrays to a new store (dense numpy or scipy.sparse features).

    Parameters
    ----------
    path : str or os.PathLike
        Target directory (a local path or ``file://`` URL); must not exist unless
        ``overwrite``.
    X : array_like or scipy.sparse matrix, shape (n, d)
        Features; stored as float32, dense arrays as ``X``, sparse ones in the CSR layout.
    y : array_like, shape (n,)
        Labels: integers (int64), reals (float64) or strings (int64 codes + ``classes``).
    rows_per_chunk : int, optional
        Rows per chunk; default about 8 MiB of features per chunk.
    overwrite : bool
        Replace an existing dmcsvm store at ``path``.
    sparse : bool, optional
        Force the layout; default follows the type of ``X``.
    buffer_rows, buffer_bytes : int
        Rows (at most, and about that many bytes) converted and written at a time.
    sample_weight : array_like, shape (n,), optional
        Per-row weights (finite, >= 0), stored as the optional float64 array ``sample_weight``
        chunked like ``y``; a fit on the store uses them as ``fit(..., sample_weight=...)``
        does (:mod:`dmcsvm.estimators._weights`).

    Returns
    -------
    StoreInfo
        The new store, opened.
    """
    if sample_weight is not None:
        sample_weight = check_sample_weight(sample_weight, np.shape(y)[0] if np.ndim(y) else -1)
    target = _prepare_target(path, overwrite)
    is_sparse = sp.issparse(X)
    X = sp.csr_matrix(X) if is_sparse else np.asarray(X)
    y = np.asarray(y)
    if X.ndim != 2:
        raise ValueError(f"X must be two-dimensional, got shape {X.shape}")
    if y.ndim != 1:
        raise ValueError(f"y must be one-dimensional, got shape {y.shape}")
    n, d = X.shape
    if y.shape[0] != n:
        raise ValueError(f"X has {n} rows but y has {y.shape[0]}")
    if n == 0:
        raise ValueError("X has no rows; a store needs at least one sample")
    if d == 0:
        raise ValueError("X has no features; a store needs at least one")
    sparse = is_sparse if sparse is None else bool(sparse)
    scan = _LabelScan()
    _scan_label_array(scan, y, 0)
    plan = scan.plan("y")
    step = _block_rows(d, buffer_rows, buffer_bytes)
    with _StoreBuilder(target, overwrite) as builder:
        builder.create(
            n,
            d,
            sparse,
            rows_per_chunk,
            plan,
            nnz=X.nnz if is_sparse else None,  # type: ignore[union-attr]  # (X is CSR here)
            weights=sample_weight is not None,
        )
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            block = _as_float32_block(X[lo:hi])
            bad = _first_nonfinite_row(block)
            if bad is not None:
                raise ValueError(f"X contains NaN or infinity at row {lo + bad}")
            builder.append(
                block,
                _encode_label_array(plan, y[lo:hi]),
                None if sample_weight is None else sample_weight[lo:hi],
            )
        return builder.commit()


def from_npy(
    X_path: str | os.PathLike[str],
    y_path: str | os.PathLike[str],
    path: str | os.PathLike[str],
    rows_per_chunk: int | None = None,
    overwrite: bool = False,
    buffer_rows: int = DEFAULT_BUFFER_ROWS,
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    progress: Callable[[int, int], object] | None = None,
) -> StoreInfo:
    """Convert a pair of ``.npy`` files (features, labels) to a store, memory-mapped.

    Parameters
    ----------
    X_path : str or os.PathLike
        ``.npy`` file of shape (n, d), numeric; read with ``mmap_mode="r"`` in row blocks.
    y_path : str or os.PathLike
        ``.npy`` file of shape (n,): integer, real or string labels.
    path : str or os.PathLike
        Target store directory.
    rows_per_chunk, overwrite, buffer_rows, buffer_bytes
        As for :func:`write_arrays`.
    progress : callable, optional
        ``progress(done, total)`` with the rows written so far.

    Returns
    -------
    StoreInfo
    """
    target = _prepare_target(path, overwrite)
    arrays = []
    for _name, p in (("X", X_path), ("y", y_path)):
        p = os.fspath(p)
        if not os.path.isfile(p):
            raise ValueError(f"{p} does not exist")
        try:
            arr = np.load(p, mmap_mode="r", allow_pickle=False)
        except Exception as exc:
            raise ValueError(f"{p} is not a readable .npy file: {exc}") from exc
        if not isinstance(arr, np.ndarray):
            raise ValueError(f"{p} is not a .npy file (an .npz archive?)")
        arrays.append(arr)
    X, y = arrays
    if X.ndim != 2:
        raise ValueError(f"{X_path}: X must be two-dimensional, got shape {X.shape}")
    if y.ndim != 1:
        raise ValueError(f"{y_path}: y must be one-dimensional, got shape {y.shape}")
    if X.dtype.kind not in "biuf":
        raise ValueError(f"{X_path}: X has dtype {X.dtype}; features must be numbers")
    n, d = X.shape
    if y.shape[0] != n:
        raise ValueError(f"X has {n} rows but y has {y.shape[0]} ({X_path}, {y_path})")
    if n == 0 or d == 0:
        raise ValueError(f"{X_path} is empty (shape {X.shape})")
    step = _block_rows(d, buffer_rows, buffer_bytes)
    label_step = max(step, int(buffer_bytes) // max(1, y.dtype.itemsize))
    scan = _LabelScan()
    for lo in range(0, n, label_step):
        _scan_label_array(scan, y[lo : lo + label_step], lo, name=os.fspath(y_path))
    plan = scan.plan(os.fspath(y_path))
    with _StoreBuilder(target, overwrite) as builder:
        builder.create(n, d, False, rows_per_chunk, plan)
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            block = np.ascontiguousarray(X[lo:hi], dtype=np.float32)
            bad = _first_nonfinite_row(block)
            if bad is not None:
                raise ValueError(f"{X_path} contains NaN or infinity at row {lo + bad}")
            builder.append(block, _encode_label_array(plan, y[lo:hi]))
            if progress is not None:
                progress(hi, n)
        return builder.commit()


def from_dask(
    X: da.Array,
    y: da.Array | ArrayLike,
    path: str | os.PathLike[str],
    rows_per_chunk: int | None = None,
    overwrite: bool = False,
    sparse: bool | None = None,
    buffer_rows: int = DEFAULT_BUFFER_ROWS,
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
) -> StoreInfo:
    """Write dask arrays to a store, computing one row block at a time.

    Any chunking of ``X`` works (uneven, or split along features): each block of rows is
    computed with its labels and written into chunks that hold whole rows.

    Parameters
    ----------
    X : dask.array.Array, shape (n, d)
        Features; blocks may be numpy or scipy.sparse (then the store is CSR by default).
    y : dask.array.Array or array_like, shape (n,)
        Labels: integers, reals or strings.  Read once to learn the label set, then again
        block by block.
    path : str or os.PathLike
        Target store directory.
    rows_per_chunk, overwrite, buffer_rows, buffer_bytes
        As for :func:`write_arrays`.
    sparse : bool, optional
        Force the layout; default CSR when the blocks of ``X`` are scipy.sparse.

    Returns
    -------
    StoreInfo
    """
    import dask.array as da
    from dask.base import compute  # (dask.compute: re-exported without __all__)

    target = _prepare_target(path, overwrite)
    # (dask's functions are unannotated: calls to them are untyped calls, returning Any)
    X = X if isinstance(X, da.Array) else da.asarray(X)
    y = y if isinstance(y, da.Array) else cast("da.Array", da.asarray(np.asarray(y)))  # type: ignore[no-untyped-call]
    if X.ndim != 2:
        raise ValueError(f"X must be two-dimensional, got shape {X.shape}")
    if y.ndim != 1:
        raise ValueError(f"y must be one-dimensional, got shape {y.shape}")
    if np.isnan(X.shape[0]):
        X = X.compute_chunk_sizes()  # type: ignore[no-untyped-call]
    if np.isnan(y.shape[0]):
        y = cast("da.Array", y.compute_chunk_sizes())  # type: ignore[no-untyped-call]
    n, d = int(X.shape[0]), int(X.shape[1])
    if y.shape[0] != n:
        raise ValueError(f"X has {n} rows but y has {y.shape[0]}")
    if n == 0 or d == 0:
        raise ValueError(f"X is empty (shape {X.shape})")
    if sparse is None:
        sparse = sp.issparse(getattr(X, "_meta", None))
    step = _block_rows(d, buffer_rows, buffer_bytes)
    label_step = max(step, int(buffer_bytes) // 8)
    scan = _LabelScan()
    for lo in range(0, n, label_step):
        _scan_label_array(scan, y[lo : lo + label_step].compute(), lo)
    plan = scan.plan("y")
    with _StoreBuilder(target, overwrite) as builder:
        builder.create(n, d, bool(sparse), rows_per_chunk, plan)
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            xb, yb = compute(X[lo:hi], y[lo:hi])  # type: ignore[no-untyped-call]
            block = _as_float32_block(xb)
            bad = _first_nonfinite_row(block)
            if bad is not None:
                raise ValueError(f"X contains NaN or infinity at row {lo + bad}")
            builder.append(block, _encode_label_array(plan, yb))
        return builder.commit()
