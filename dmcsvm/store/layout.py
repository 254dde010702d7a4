"""The on-disk layout of a dmcsvm data store, and its validation.

A store is a zarr (v3) group.  Its attributes describe the data set; its arrays hold it in
row chunks so that a partition reads whole rows and never a slice of a feature range:

- attributes ``{"format": "dmcsvm-data", "format_version": 1, "n_samples": n,
  "n_features": d, "sparse": bool, "rows_per_chunk": R, "classes": [...] or null}``;
- dense data: ``X`` float32 of shape ``(n, d)``, chunks ``(R, d)``;
- sparse data (CSR triplet, no ``X``): ``indptr`` int64 ``(n + 1,)``, ``indices`` int32
  ``(nnz,)`` and ``data`` float32 ``(nnz,)``; rows ``[lo, hi)`` are
  ``indptr[lo:hi + 1]`` and ``indices/data[indptr[lo]:indptr[hi]]``;
- ``y`` of shape ``(n,)``, chunks ``(R,)``: int64 when every label is an integer, float64
  otherwise; string labels are stored as int64 codes ``0..k-1`` into ``classes`` (sorted).

:func:`open_store` checks all of this before anything reads data, so a wrong path or a
foreign store fails at once with a message that names the problem.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import zarr
from numpy.typing import NDArray

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "TARGET_CHUNK_BYTES",
    "StoreInfo",
    "open_store",
    "default_rows_per_chunk",
    "chunk_bounds",
]

FORMAT_NAME = "dmcsvm-data"
"""Value of the ``format`` attribute that marks a zarr group as a dmcsvm data store."""

FORMAT_VERSION = 1
"""Layout version this code writes and reads."""

TARGET_CHUNK_BYTES = 8 * 2**20
"""Default size of one row chunk of the features (8 MiB): large reads, bounded memory."""

_INDPTR_SCAN = 2**20  # indptr entries checked per read in open_store (8 MiB)


@dataclass(frozen=True)
class StoreInfo:
    """What :func:`open_store` learned about a validated store; cheap to send to workers.

    Attributes
    ----------
    url : str
        The store location as given (local paths made absolute), usable by zarr and the
        readers.
    n_samples : int
        Number of rows.
    n_features : int
        Number of feature columns.
    sparse : bool
        True for the CSR layout (``indptr``/``indices``/``data``), False for dense ``X``.
    rows_per_chunk : int
        Rows per chunk of ``X`` (or of ``indptr``) and ``y``.
    classes : list or None
        Original label strings when the source had string labels (``y`` holds codes into
        this list), else None.
    chunk_bounds : list of (int, int)
        ``(lo, hi)`` row range of every chunk, in order; the natural partition unit.
    nnz : int or None
        Stored entries of a sparse store; None for dense.
    label_dtype : str
        ``"int64"`` or ``"float64"``, the dtype of ``y``.
    complete : bool
        Whether the writer wrote every chunk (``all_chunks_written``; stores of dmcsvm 0.1 left
        out all-zero chunks).  Either way a missing chunk is an error.
    """

    url: str
    n_samples: int
    n_features: int
    sparse: bool
    rows_per_chunk: int
    classes: list[str] | None
    chunk_bounds: list[tuple[int, int]] = field(repr=False)
    nnz: int | None = None
    label_dtype: str = "int64"
    complete: bool = True

    @property
    def path(self) -> str:
        """Alias of ``url``."""
        return self.url

    @property
    def n_chunks(self) -> int:
        """Number of row chunks (length of ``chunk_bounds``)."""
        return len(self.chunk_bounds)


def default_rows_per_chunk(
    n_features: int, n_samples: int | None = None, sparse: bool = False, nnz: int | None = None
) -> int:
    """Rows per chunk so that one chunk of features is about 8 MiB (at least one row).

    Parameters
    ----------
    n_features : int
        Feature columns ``d``.
    n_samples : int, optional
        Rows ``n``; the result is capped at ``n`` when given.
    sparse : bool
        Size rows by their stored entries (8 bytes each plus 8 for ``indptr``) instead of
        ``4 * d`` bytes.
    nnz : int, optional
        Stored entries of a sparse data set; needs ``n_samples``.

    Returns
    -------
    int
    """
    if sparse and nnz is not None and n_samples:
        row_bytes = 8.0 * nnz / n_samples + 8.0
    elif sparse:
        row_bytes = 8.0 * max(1, n_features) * 0.05 + 8.0  # guess: 5 % density
    else:
        row_bytes = 4.0 * max(1, n_features)
    rows = max(1, int(TARGET_CHUNK_BYTES // row_bytes))
    if n_samples is not None:
        rows = min(rows, max(1, int(n_samples)))
    return rows


def chunk_bounds(n_samples: int, rows_per_chunk: int) -> list[tuple[int, int]]:
    """``(lo, hi)`` row range of each chunk of ``n_samples`` rows cut every ``rows_per_chunk``.

    Returns
    -------
    list of (int, int)
    """
    return [(lo, min(lo + rows_per_chunk, n_samples)) for lo in range(0, n_samples, rows_per_chunk)]


def _normalize_url(url: str | os.PathLike[str]) -> str:
    """Absolute path for a local path; other store URLs (``file://``, ``s3://``...) unchanged."""
    url = os.fspath(url)
    if not isinstance(url, str):
        raise TypeError(f"store location must be a path or URL string, got {type(url).__name__}")
    if "://" in url:
        return url
    return os.path.abspath(url)


def _local_path(url: str) -> str | None:
    """Local filesystem path of ``url`` or None when it names a remote store."""
    if "://" not in url:
        return url
    if url.startswith("file://"):
        return url[len("file://") :]
    return None


def _open_group(url: str) -> zarr.Group:
    """Open the zarr group at ``url`` read-only, or raise ValueError('... is not a zarr store')."""
    local = _local_path(url)
    if local is not None and not os.path.exists(local):
        raise ValueError(f"{url} is not a zarr store: the path does not exist")
    try:
        return zarr.open_group(url, mode="r")
    except Exception as exc:  # zarr raises several types (GroupNotFoundError, FileNotFoundError...)
        raise ValueError(f"{url} is not a zarr store: {exc}") from exc


def _get_array(group: zarr.Group, url: str, name: str) -> zarr.Array[Any]:
    """The array ``name`` of the group, or ValueError naming the missing array."""
    try:
        node = group[name]
    except KeyError:
        raise ValueError(f"{url} is missing array {name!r}") from None
    if not isinstance(node, zarr.Array):
        raise ValueError(f"{url} is missing array {name!r} (found a group of that name)")
    return node


def _int_attr(attrs: Mapping[str, object], url: str, name: str, minimum: int) -> int:
    value = attrs.get(name)
    if value is None:
        raise ValueError(f"{url} is missing attribute {name!r}")
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{url} attribute {name!r} must be an integer >= {minimum}, got {value!r}")
    return value


def _len(arr: zarr.Array[Any]) -> int:
    return arr.shape[0] if arr.ndim else 0


def _check_dtype(arr: zarr.Array[Any], url: str, name: str, expected: str) -> None:
    if arr.dtype != np.dtype(expected):
        raise ValueError(f"{url}: {name} has dtype {arr.dtype}; expected {expected}")


def _check_indptr(indptr: zarr.Array[Any], url: str, n: int, nnz: int) -> None:
    """Check that ``indptr`` starts at 0, never decreases and ends at ``nnz``, chunk by chunk."""
    first = int(indptr[0])  # type: ignore[arg-type]  # (zarr types an element as any scalar)
    if first != 0:
        raise ValueError(f"{url}: indptr is inconsistent: indptr[0] is {first}, expected 0")
    prev = 0
    for lo in range(0, n + 1, _INDPTR_SCAN):
        hi = min(n + 1, lo + _INDPTR_SCAN)
        block = np.asarray(indptr[lo:hi])
        if block[0] < prev or np.any(np.diff(block) < 0):
            steps = np.diff(np.concatenate([[prev], block]))
            bad = lo + int(np.flatnonzero(steps < 0)[0]) - 1
            raise ValueError(
                f"{url}: indptr is inconsistent: not monotone (indptr[{bad + 1}] < indptr[{bad}])"
            )
        prev = int(block[-1])
    if prev != nnz:
        raise ValueError(
            f"{url}: indptr is inconsistent: indptr[-1] is {prev} "
            f"but indices/data hold {nnz} entries"
        )


# --------------------------------------------------------------------------- chunk integrity
# zarr reads a chunk that is missing from the store as the fill value: a deleted chunk of X would
# train on rows of zeros, one of y would relabel its rows as class 0.  Every read checks that its
# chunks exist, and decoding errors name the chunk.


def _store_key(arr: zarr.Array[Any], i: int) -> tuple[str, str]:
    """Store key of chunk ``i`` (along the rows) of ``arr`` and the key inside the array."""
    key = arr.metadata.encode_chunk_key((int(i),) + (0,) * (arr.ndim - 1))
    prefix = arr.store_path.path
    return (f"{prefix}/{key}" if prefix else key), key


def _exists(arr: zarr.Array[Any], full_key: str) -> bool:
    from zarr.core.sync import sync

    return bool(sync(arr.store_path.store.exists(full_key)))


def missing_chunks(arr: zarr.Array[Any], lo: int = 0, hi: int | None = None) -> list[int]:
    """Indices of the chunks of ``arr`` holding its elements ``[lo, hi)`` (along the first axis)
    that are not in the store."""
    n = arr.shape[0] if arr.ndim else 0
    hi = n if hi is None else hi
    if hi <= lo:
        return []
    R = arr.chunks[0]
    return [i for i in range(lo // R, (hi - 1) // R + 1) if not _exists(arr, _store_key(arr, i)[0])]


def _chunk_error(
    url: str, name: str, arr: zarr.Array[Any], i: int, what: str = "is missing"
) -> ValueError:
    R = arr.chunks[0]
    lo, hi = i * R, min((i + 1) * R, arr.shape[0])
    unit = "rows" if name in ("X", "y", "indptr", "sample_weight") else "entries"
    return ValueError(
        f"{url}: chunk file {_store_key(arr, i)[0]} ({unit} {lo} to {hi - 1} of {name}) {what}"
    )


def read_checked(
    arr: zarr.Array[Any], url: str, name: str, lo: int, hi: int, complete: bool = True
) -> NDArray[Any]:
    """``arr[lo:hi]`` as a NumPy array, after checking that every chunk it reads exists; a chunk
    that cannot be decoded is named in the error."""
    if complete:
        gone = missing_chunks(arr, lo, hi)
        if gone:
            raise _chunk_error(url, name, arr, gone[0])
    try:
        return np.asarray(arr[lo:hi])
    except Exception as exc:  # zarr/numcodecs raise codec-specific types
        R = arr.chunks[0]
        for i in range(lo // R, max(lo, hi - 1) // R + 1):
            try:
                np.asarray(arr[i * R : min((i + 1) * R, arr.shape[0])])
            except Exception as exc_i:  # noqa: BLE001 - find the damaged chunk to name it
                raise _chunk_error(
                    url, name, arr, i, f"cannot be read ({type(exc_i).__name__}: {exc_i})"
                ) from exc
        raise ValueError(f"{url}: cannot read {name}[{lo}:{hi}]: {exc}") from exc


def check_all_chunks_present(
    group: zarr.Group, url: str, names: Iterable[str], complete: bool = True
) -> None:
    """Every chunk of the arrays ``names`` is in the store (one listing per array).

    Stores that dmcsvm wrote declare ``all_chunks_written``: for them a missing chunk is an error.
    Stores built by other tools may leave out all-zero chunks as zarr does by default; they are
    read as zarr reads them, with a warning naming the first absent chunk."""
    for name in names:
        arr = cast("zarr.Array[Any]", group[name])  # (open_store checked each: _get_array)
        if arr.size and arr.nchunks_initialized < arr.nchunks:
            gone = missing_chunks(arr)
            if not gone:
                continue
            err = _chunk_error(url, name, arr, gone[0])
            if complete:
                raise err
            import warnings

            warnings.warn(
                f"{err} and is read as zeros: the store does not declare "
                f"all_chunks_written (it was not written by dmcsvm convert), so an "
                f"absent chunk may be one that zarr left out as all zeros",
                stacklevel=3,
            )


def open_store(url: str | os.PathLike[str]) -> StoreInfo:
    """Open and validate a dmcsvm data store before any computation touches it.

    Parameters
    ----------
    url : str or os.PathLike
        Local path of the store directory or a zarr store URL (``file:///tmp/a.zarr``; other
        fsspec URLs are passed to zarr as they are).

    Returns
    -------
    StoreInfo

    Raises
    ------
    ValueError
        With a message naming the problem: not a zarr store, not a dmcsvm store (``format``
        attribute), unsupported ``format_version``, missing attribute or array, rows of ``X``
        and ``y`` that disagree, ``X`` chunks that split rows, a wrong dtype, an
        inconsistent ``indptr``, or a chunk file missing from a store that dmcsvm wrote (zarr
        would read it as zeros; every later read checks its chunks again).  For sparse stores the
        whole ``indptr`` is read (8 bytes a row, streamed) to check it.
    """
    url = _normalize_url(url)
    group = _open_group(url)
    attrs = dict(group.attrs)

    fmt = attrs.get("format")
    if fmt is None:
        raise ValueError(f"{url} is not a dmcsvm data store (format attribute missing)")
    if fmt != FORMAT_NAME:
        raise ValueError(
            f"{url} is not a dmcsvm data store "
            f"(format attribute is {fmt!r}, expected {FORMAT_NAME!r})"
        )
    version = attrs.get("format_version")
    if version != FORMAT_VERSION:
        raise ValueError(
            f"{url} has format_version {version}; this dmcsvm reads version {FORMAT_VERSION}"
        )

    n = _int_attr(attrs, url, "n_samples", 0)
    d = _int_attr(attrs, url, "n_features", 1)
    rows_per_chunk = _int_attr(attrs, url, "rows_per_chunk", 1)
    sparse = attrs.get("sparse")
    if not isinstance(sparse, bool):
        raise ValueError(f"{url} attribute 'sparse' must be true or false, got {sparse!r}")
    classes = attrs.get("classes")
    if classes is not None and (
        not isinstance(classes, list) or not all(isinstance(c, str) for c in classes)
    ):
        raise ValueError(f"{url} attribute 'classes' must be a list of strings or null")

    y = _get_array(group, url, "y")
    nnz = None
    if sparse:
        indptr = _get_array(group, url, "indptr")
        indices = _get_array(group, url, "indices")
        data = _get_array(group, url, "data")
        if indptr.ndim != 1 or indices.ndim != 1 or data.ndim != 1:
            raise ValueError(f"{url}: indptr, indices and data must be one-dimensional")
        rows = indptr.shape[0] - 1
        if y.ndim != 1 or y.shape[0] != rows:
            raise ValueError(
                f"{url}: X has {rows} rows (indptr has {rows + 1} entries) but y has {_len(y)}"
            )
        if indices.shape[0] != data.shape[0]:
            raise ValueError(
                f"{url}: indices has {indices.shape[0]} entries but data has {data.shape[0]}"
            )
        _check_dtype(indptr, url, "indptr", "int64")
        _check_dtype(indices, url, "indices", "int32")
        _check_dtype(data, url, "data", "float32")
        nnz = int(data.shape[0])
    else:
        X = _get_array(group, url, "X")
        if X.ndim != 2:
            raise ValueError(f"{url}: X must be two-dimensional, got shape {X.shape}")
        rows = X.shape[0]
        if y.ndim != 1 or y.shape[0] != rows:
            raise ValueError(f"{url}: X has {rows} rows but y has {_len(y)}")
        if X.shape[1] != d:
            raise ValueError(f"{url}: X has {X.shape[1]} features but attribute n_features is {d}")
        if X.chunks[1] != d:
            raise ValueError(
                f"{url}: X is chunked along features (chunks {tuple(X.chunks)} for {d} features); "
                "each chunk must hold whole rows"
            )
        if X.chunks[0] != rows_per_chunk:
            raise ValueError(
                f"{url}: X has chunks of {X.chunks[0]} rows "
                f"but attribute rows_per_chunk is {rows_per_chunk}"
            )
        _check_dtype(X, url, "X", "float32")
    if rows != n:
        raise ValueError(f"{url}: X has {rows} rows but attribute n_samples is {n}")
    if y.dtype not in (np.dtype("int64"), np.dtype("float64")):
        raise ValueError(f"{url}: y has dtype {y.dtype}; expected int64 or float64")
    if classes is not None and y.dtype != np.dtype("int64"):
        raise ValueError(f"{url}: y holds codes into 'classes' and must be int64, not {y.dtype}")
    complete = bool(attrs.get("all_chunks_written", False))
    check_all_chunks_present(
        group, url, ("indptr", "indices", "data", "y") if sparse else ("X", "y"), complete
    )
    if sparse and n > 0:
        assert nnz is not None  # (set with the sparse arrays above)
        _check_indptr(indptr, url, n, nnz)

    return StoreInfo(
        url=url,
        n_samples=n,
        n_features=d,
        sparse=sparse,
        rows_per_chunk=rows_per_chunk,
        classes=list(classes) if classes is not None else None,
        chunk_bounds=chunk_bounds(n, rows_per_chunk),
        nnz=nnz,
        label_dtype=str(y.dtype),
        complete=complete,
    )
