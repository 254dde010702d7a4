"""Reading row blocks and labels out of a dmcsvm data store.

Every reader takes a :class:`~dmcsvm.store.layout.StoreInfo` (from :func:`open_store`, the
cheap choice for repeated reads, e.g. on a worker) or a store location, which is opened and
validated first.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import scipy.sparse as sp
import zarr
from numpy.typing import NDArray

from ..errors import NonFiniteError
from .layout import StoreInfo, open_store, read_checked

__all__ = [
    "read_rows",
    "read_labels",
    "read_sample_weight",
    "read_all",
    "iter_chunks",
    "verify_store",
]


def _info(info_or_url: StoreInfo | str | os.PathLike[str]) -> StoreInfo:
    """The StoreInfo of ``info_or_url``, opening and validating a location if needed."""
    if isinstance(info_or_url, StoreInfo):
        return info_or_url
    return open_store(info_or_url)


def _array(info: StoreInfo, name: str) -> zarr.Array[Any]:
    return zarr.open_array(info.url, path=name, mode="r")


def _check_range(info: StoreInfo, lo: int, hi: int | None) -> tuple[int, int]:
    """Validate ``0 <= lo <= hi <= n`` and return them as ints."""
    n = info.n_samples
    hi = n if hi is None else hi
    lo, hi = int(lo), int(hi)
    if not 0 <= lo <= hi <= n:
        raise ValueError(f"{info.url}: row range [{lo}, {hi}) is outside [0, {n})")
    return lo, hi


def read_rows(
    info_or_url: StoreInfo | str | os.PathLike[str], lo: int, hi: int
) -> NDArray[np.float32] | sp.csr_matrix:
    """Read feature rows ``[lo, hi)``: one partition's block, in the store's layout.

    Parameters
    ----------
    info_or_url : StoreInfo or str or os.PathLike
        An opened store, or its location (then opened and validated first).
    lo, hi : int
        Row range, ``0 <= lo <= hi <= n_samples``.  Aligning it with
        ``info.chunk_bounds`` reads each chunk once.

    Returns
    -------
    numpy.ndarray or scipy.sparse.csr_matrix
        C-contiguous float32 array of shape ``(hi - lo, n_features)`` for a dense store,
        float32 CSR matrix of that shape for a sparse store.
    """
    info = _info(info_or_url)
    lo, hi = _check_range(info, lo, hi)
    d = info.n_features
    if not info.sparse:
        block = np.ascontiguousarray(_read(info, "X", lo, hi), dtype=np.float32)
        _check_finite(info, block, lo)
        return block
    indptr = np.asarray(_read(info, "indptr", lo, hi + 1), dtype=np.int64)
    start, stop = int(indptr[0]), int(indptr[-1])
    if stop > start:
        indices = np.asarray(_read(info, "indices", start, stop))
        data = np.asarray(_read(info, "data", start, stop), dtype=np.float32)
        if not np.isfinite(data).all():
            at = start + int(np.flatnonzero(~np.isfinite(data))[0])
            _check_finite(
                info,
                data[at - start : at - start + 1],
                lo + int(np.searchsorted(indptr, at, side="right")) - 1,
            )
        if indices.min() < 0 or indices.max() >= d:
            raise ValueError(f"{info.url}: rows [{lo}, {hi}) hold feature indices outside [0, {d})")
    else:
        indices = np.zeros(0, dtype=np.int32)
        data = np.zeros(0, dtype=np.float32)
    return sp.csr_matrix((data, indices, indptr - start), shape=(hi - lo, d))


def read_labels(
    info_or_url: StoreInfo | str | os.PathLike[str], lo: int = 0, hi: int | None = None
) -> NDArray[np.int64 | np.float64]:
    """Read labels of rows ``[lo, hi)`` (all rows by default).

    Parameters
    ----------
    info_or_url : StoreInfo or str or os.PathLike
        An opened store, or its location.
    lo : int
        First row.
    hi : int, optional
        End row (exclusive); ``n_samples`` when None.

    Returns
    -------
    numpy.ndarray
        int64 labels (codes into ``info.classes`` when the store has string classes) or
        float64 labels.
    """
    info = _info(info_or_url)
    lo, hi = _check_range(info, lo, hi)
    y = np.asarray(_read(info, "y", lo, hi))
    if y.dtype.kind == "f" and not np.isfinite(y).all():
        r = lo + int(np.flatnonzero(~np.isfinite(y))[0])
        raise NonFiniteError(f"{info.url}: the label of row {r} is {float(y[r - lo])!r}")
    return y


def read_sample_weight(
    info_or_url: StoreInfo | str | os.PathLike[str],
) -> NDArray[np.float64] | None:
    """The store's optional per-row weights (the float64 array ``sample_weight``, one value
    per row, chunked like ``y``), or None when the store has none.

    Raises
    ------
    ValueError
        A ``sample_weight`` of the wrong shape or dtype, or a missing or damaged chunk (named);
        :class:`~dmcsvm.errors.NonFiniteError` for a NaN / infinite weight (naming the row).
    """
    info = _info(info_or_url)
    group = zarr.open_group(info.url, mode="r")
    if "sample_weight" not in group:
        return None
    arr = _array(info, "sample_weight")
    if arr.ndim != 1 or arr.shape[0] != info.n_samples:
        raise ValueError(
            f"{info.url}: sample_weight has shape {tuple(arr.shape)}; it needs one "
            f"value per row ({info.n_samples},)"
        )
    if arr.dtype.kind not in "fiu":
        raise ValueError(f"{info.url}: sample_weight has dtype {arr.dtype}; expected float64")
    w = np.asarray(_read(info, "sample_weight", 0, info.n_samples), dtype=np.float64)
    bad = ~np.isfinite(w)
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise NonFiniteError(f"{info.url}: the sample_weight of row {r} is {float(w[r])!r}")
    return w


def _read(info: StoreInfo, name: str, lo: int, hi: int) -> NDArray[Any]:
    """Elements ``[lo, hi)`` of array ``name``: every chunk read must exist (zarr would give
    zeros for a missing one) and a damaged chunk is named."""
    return read_checked(_array(info, name), info.url, name, lo, hi, info.complete)


def _check_finite(info: StoreInfo, block: NDArray[np.floating[Any]], lo: int) -> None:
    """NaN or inf in rows read from a store: an error naming the first such row."""
    ok = np.isfinite(block)
    if ok.all():
        return
    r = (
        int(np.flatnonzero(~ok.reshape(block.shape[0], -1).all(axis=1))[0])
        if block.ndim == 2
        else 0
    )
    bad = block[r][~np.isfinite(block[r])][0] if block.ndim == 2 else block.ravel()[0]
    raise NonFiniteError(
        f"{info.url}: row {lo + r} of X holds {float(bad)!r}; dmcsvm needs "
        f"finite features (replace or drop such rows and convert again)"
    )


def iter_chunks(
    info_or_url: StoreInfo | str | os.PathLike[str],
) -> Iterator[tuple[int, int, NDArray[np.float32] | sp.csr_matrix, NDArray[np.int64 | np.float64]]]:
    """Yield ``(lo, hi, X_block, y_block)`` for every row chunk in order (streaming a store).

    Parameters
    ----------
    info_or_url : StoreInfo or str or os.PathLike

    Yields
    ------
    tuple
        ``(lo, hi, read_rows(info, lo, hi), read_labels(info, lo, hi))``.
    """
    info = _info(info_or_url)
    for lo, hi in info.chunk_bounds:
        yield lo, hi, read_rows(info, lo, hi), read_labels(info, lo, hi)


def read_all(
    url: StoreInfo | str | os.PathLike[str],
) -> tuple[NDArray[np.float32] | sp.csr_matrix, NDArray[np.int64 | np.float64]]:
    """Read a whole (small) store into memory: a convenience for tests and small data.

    Parameters
    ----------
    url : StoreInfo or str or os.PathLike

    Returns
    -------
    X : numpy.ndarray or scipy.sparse.csr_matrix
        All rows, as :func:`read_rows` returns them.
    y : numpy.ndarray
        All labels.
    """
    info = _info(url)
    return read_rows(info, 0, info.n_samples), read_labels(info)


def verify_store(info_or_url: StoreInfo | str | os.PathLike[str]) -> int:
    """Read every chunk of a store: each must exist, decode and hold finite values.

    Returns
    -------
    int
        Rows read.

    Raises
    ------
    ValueError
        Naming the first missing or damaged chunk file, or the first row with NaN/inf.
    """
    info = _info(info_or_url)
    rows = 0
    for _lo, _hi, X, _ in iter_chunks(info):
        rows += X.shape[0]
    return rows
