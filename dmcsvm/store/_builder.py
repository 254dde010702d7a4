"""The machinery every store writer shares: target checks, the temporary-directory builder,
label plans and block validation.

The store is written into a hidden temporary sibling directory of the target and renamed
into place only when complete.  On any error the temporary directory is removed, so a
failed conversion leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

import numpy as np
import scipy.sparse as sp
import zarr
from numpy.typing import ArrayLike, DTypeLike, NDArray

if TYPE_CHECKING:
    from zarr.core.array_spec import ArrayConfigParams

from .layout import (
    FORMAT_NAME,
    FORMAT_VERSION,
    StoreInfo,
    _local_path,
    _normalize_url,
    default_rows_per_chunk,
    open_store,
)

DEFAULT_BUFFER_ROWS = 65536
"""Rows a writer reads from its source at a time."""

DEFAULT_BUFFER_BYTES = 16 * 2**20
"""Approximate bytes (of text, or of float32 rows) a writer holds from its source at a time."""

_SPARSE_CHUNK = 2**20  # entries per chunk of indices/data when nnz is not known up front
_LABEL_LIMIT = 2**20  # distinct labels kept while a label column still looks numeric


# --------------------------------------------------------------------------- targets


def _prepare_target(path: str | os.PathLike[str], overwrite: bool) -> str:
    """Resolve and check the target of a writer before any source is read.

    Returns the absolute local path.  Raises ValueError for a remote URL, a missing parent
    directory, an existing target with ``overwrite=False``, or an existing target that is
    not a dmcsvm store (never deleted, whatever ``overwrite`` says).
    """
    url = _normalize_url(path)
    target = _local_path(url)
    if target is None:
        raise ValueError(
            f"{url}: writers need a local path (they write to a temporary directory and "
            "rename it into place)"
        )
    target = os.path.abspath(target)
    parent = os.path.dirname(target)
    if not os.path.isdir(parent):
        raise ValueError(f"cannot write {target}: parent directory {parent} does not exist")
    if os.path.lexists(target):
        if not overwrite:
            raise ValueError(f"{target} already exists; pass overwrite=True to replace it")
        _check_replaceable(target)
    return target


def _check_replaceable(target: str) -> None:
    """Refuse to delete anything but a dmcsvm data store or an empty directory."""
    if os.path.isdir(target) and not os.path.islink(target):
        if not os.listdir(target):
            return
        try:
            fmt = zarr.open_group(target, mode="r").attrs.get("format")
        except Exception:
            fmt = None
        if fmt == FORMAT_NAME:
            return
    raise ValueError(f"refusing to overwrite {target}: it is not a dmcsvm data store")


class _Appender:
    """Writes a stream of row blocks to a zarr array in whole chunks, growing it if asked."""

    pending: list[NDArray[Any]]

    def __init__(self, arr: zarr.Array[Any], chunk: int, grow: bool = False) -> None:
        self.arr, self.chunk, self.grow = arr, chunk, grow
        self.pos = 0
        self.pending, self.n_pending = [], 0

    def append(self, block: NDArray[Any]) -> None:
        if len(block) == 0:
            return
        self.pending.append(block)
        self.n_pending += len(block)
        if self.n_pending >= self.chunk:
            buf = np.concatenate(self.pending) if len(self.pending) > 1 else self.pending[0]
            k = (len(buf) // self.chunk) * self.chunk
            self._write(buf[:k])
            rest = buf[k:].copy()
            self.pending = [rest] if len(rest) else []
            self.n_pending = len(rest)

    def _write(self, block: NDArray[Any]) -> None:
        end = self.pos + len(block)
        if self.grow and end > self.arr.shape[0]:
            self.arr.resize((end,) + tuple(self.arr.shape[1:]))
        self.arr[self.pos : end] = block
        self.pos = end

    def close(self) -> int:
        if self.pending:
            self._write(np.concatenate(self.pending))
            self.pending, self.n_pending = [], 0
        return self.pos


#: zarr leaves out chunks that equal the fill value (all zeros); dmcsvm writes every chunk, so
#: that a chunk missing from a store it wrote is damage, never data (layout.check_chunks)
_ALL_CHUNKS: ArrayConfigParams = {"write_empty_chunks": True}


class _StoreBuilder:
    """Context manager owning the temporary directory a store is built in.

    ``create`` makes the arrays, ``append`` adds validated row blocks, ``commit`` writes the
    attributes and renames the directory into place; leaving the block by an exception
    removes the temporary directory.
    """

    tmp: str | None

    def __init__(self, target: str, overwrite: bool) -> None:
        self.target, self.overwrite = target, overwrite
        self.tmp = None

    def __enter__(self) -> Self:
        parent, name = os.path.split(self.target)
        self.tmp = tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=parent)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        if self.tmp is not None and os.path.exists(self.tmp):
            shutil.rmtree(self.tmp, ignore_errors=True)
        return False

    def create(
        self,
        n: int,
        d: int,
        sparse: bool,
        rows_per_chunk: int | None,
        labels: _LabelPlan,
        nnz: int | None = None,
        weights: bool = False,
    ) -> None:
        """Create the arrays of a store of ``n`` rows and ``d`` features in the temp directory
        (with ``weights``, also the optional per-row ``sample_weight`` array)."""
        if rows_per_chunk is None:
            rows_per_chunk = default_rows_per_chunk(d, n, sparse, nnz)
        rows_per_chunk = int(rows_per_chunk)
        if rows_per_chunk < 1:
            raise ValueError(f"rows_per_chunk must be at least 1, got {rows_per_chunk}")
        R = min(rows_per_chunk, max(1, n))
        self.n, self.d, self.sparse, self.R, self.labels = n, d, sparse, R, labels
        self.group = zarr.open_group(self.tmp, mode="w", zarr_format=3)
        g = self.group
        if sparse:
            element_chunk = (
                min(_SPARSE_CHUNK * 2, max(1, nnz)) if nnz is not None else _SPARSE_CHUNK
            )
            self.indptr = _Appender(
                g.create_array(
                    "indptr", shape=(n + 1,), chunks=(R,), dtype="int64", config=_ALL_CHUNKS
                ),
                R,
            )
            self.indices = _Appender(
                g.create_array(
                    "indices",
                    shape=(0,),
                    chunks=(element_chunk,),
                    dtype="int32",
                    config=_ALL_CHUNKS,
                ),
                element_chunk,
                grow=True,
            )
            self.data = _Appender(
                g.create_array(
                    "data", shape=(0,), chunks=(element_chunk,), dtype="float32", config=_ALL_CHUNKS
                ),
                element_chunk,
                grow=True,
            )
            self.indptr.append(np.zeros(1, dtype=np.int64))
            self.nnz = 0
        else:
            self.X = _Appender(
                g.create_array(
                    "X", shape=(n, d), chunks=(R, d), dtype="float32", config=_ALL_CHUNKS
                ),
                R,
            )
        self.y = _Appender(
            g.create_array("y", shape=(n,), chunks=(R,), dtype=labels.dtype, config=_ALL_CHUNKS), R
        )
        self.w = None
        if weights:
            self.w = _Appender(
                g.create_array(
                    "sample_weight", shape=(n,), chunks=(R,), dtype="float64", config=_ALL_CHUNKS
                ),
                R,
            )
        self.rows = 0

    def append(
        self,
        X_block: NDArray[Any] | sp.csr_matrix,
        y_block: ArrayLike,
        w_block: ArrayLike | None = None,
    ) -> None:
        """Append validated rows: float32 dense array or canonical float32 CSR, encoded labels
        (and their checked weights when the store has them)."""
        if (w_block is None) != (self.w is None):
            raise ValueError(
                "weights must be given for every block of a weighted store, and only for one"
            )
        if self.w is not None:
            self.w.append(np.asarray(w_block, dtype=np.float64))
        if self.sparse:
            block = X_block if sp.issparse(X_block) else sp.csr_matrix(X_block)
            # (sp.issparse does not narrow X_block for mypy: scipy ships no types)
            self.indices.append(np.asarray(block.indices, dtype=np.int32))  # type: ignore[union-attr]
            self.data.append(np.asarray(block.data, dtype=np.float32))
            self.indptr.append(np.asarray(block.indptr[1:], dtype=np.int64) + self.nnz)  # type: ignore[union-attr]
            self.nnz += int(block.indptr[-1])  # type: ignore[union-attr]
        else:
            block = X_block.toarray() if sp.issparse(X_block) else X_block  # type: ignore[union-attr]
            self.X.append(np.ascontiguousarray(block, dtype=np.float32))
        self.y.append(np.asarray(y_block, dtype=self.labels.dtype))
        self.rows += X_block.shape[0]

    def commit(self) -> StoreInfo:
        """Finish the arrays, write the attributes and rename the store into place."""
        assert self.tmp is not None  # (made by __enter__)
        if self.rows != self.n:
            raise ValueError(
                f"expected {self.n} rows but the source gave {self.rows} (did it change while "
                "being converted?)"
            )
        if self.sparse:
            self.indptr.close()
            self.indices.close()
            self.data.close()
        else:
            self.X.close()
        self.y.close()
        if self.w is not None:
            self.w.close()
        self.group.attrs.update(
            {
                "format": FORMAT_NAME,
                "format_version": FORMAT_VERSION,
                "n_samples": int(self.n),
                "n_features": int(self.d),
                "sparse": bool(self.sparse),
                "rows_per_chunk": int(self.R),
                "classes": self.labels.classes,
                "all_chunks_written": True,
            }
        )
        if os.path.lexists(self.target):
            if not self.overwrite:
                raise ValueError(f"{self.target} already exists; pass overwrite=True to replace it")
            _check_replaceable(self.target)
            old = f"{self.target}.old-{uuid.uuid4().hex[:8]}"
            os.rename(self.target, old)
            try:
                os.rename(self.tmp, self.target)
            except BaseException:
                os.rename(old, self.target)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(self.tmp, self.target)
        return open_store(self.target)


# --------------------------------------------------------------------------- labels


class _LabelPlan:
    """How labels are stored: dtype (int64/float64) and, for string labels, the classes."""

    def __init__(self, dtype: DTypeLike, classes: list[str] | None = None) -> None:
        self.dtype = np.dtype(dtype)
        self.classes = classes
        if classes is not None:
            self._sorted = np.array(classes, dtype=str)

    def encode_numbers(self, values: ArrayLike) -> NDArray[np.int64 | np.float64]:
        return np.asarray(values).astype(self.dtype)

    def encode_strings(self, strings: ArrayLike) -> NDArray[np.int64 | np.float64]:
        """int64 codes of string labels, or the labels parsed as numbers when not classes."""
        if self.classes is None:
            return np.asarray(strings, dtype=str).astype(np.float64).astype(self.dtype)
        strings = np.asarray(strings, dtype=str)
        codes = np.searchsorted(self._sorted, strings)
        codes = np.minimum(codes, len(self._sorted) - 1)
        if not np.array_equal(self._sorted[codes], strings):
            raise ValueError("a label was not seen in the first pass (did the source change?)")
        return codes.astype(np.int64)


class _LabelScan:
    """Accumulates what labels look like over a first pass: integers, reals or strings."""

    strings: set[str]

    def __init__(self) -> None:
        self.numeric = True
        self.integral = True
        self.strings = set()
        self.overflow = False
        self.first_nonfinite = None

    def add_numbers(self, values: ArrayLike) -> None:
        values = np.asarray(values, dtype=np.float64)
        if self.integral and values.size:
            self.integral = bool(
                np.all(np.floor(values) == values) and np.all(np.abs(values) <= 2**53)
            )

    def add_strings(self, strings: Iterable[str]) -> None:
        if self.overflow:
            return
        self.strings.update(strings)
        if self.numeric and len(self.strings) > _LABEL_LIMIT:
            self.overflow, self.strings = True, set()

    def plan(self, what: str) -> _LabelPlan:
        if self.numeric:
            return _LabelPlan(np.int64 if self.integral else np.float64, None)
        if self.overflow:
            raise ValueError(
                f"{what}: labels mix numbers and strings and have more than {_LABEL_LIMIT} "
                "distinct values"
            )
        return _LabelPlan(np.int64, sorted(self.strings))


def _scan_label_array(scan: _LabelScan, block: ArrayLike, row0: int, name: str = "y") -> None:
    """Add an in-memory block of labels (any dtype) to ``scan``; NaN/inf labels raise."""
    block = np.asarray(block)
    if block.dtype.kind == "O":
        try:
            block = block.astype(np.float64)
        except (TypeError, ValueError):
            block = block.astype(str)
    if block.dtype.kind in "US":
        scan.numeric = False
        scan.add_strings(np.unique(block.astype(str)).tolist())
    elif block.dtype.kind in "biu":
        pass  # integers: int64 plan
    elif block.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(block))
        if bad.size:
            raise ValueError(f"{name} contains NaN or infinity at row {row0 + int(bad[0])}")
        scan.add_numbers(block)
    else:
        raise ValueError(f"{name} has dtype {block.dtype}; labels must be numbers or strings")


def _encode_label_array(plan: _LabelPlan, block: ArrayLike) -> NDArray[np.int64 | np.float64]:
    block = np.asarray(block)
    if plan.classes is not None:
        return plan.encode_strings(block.astype(str))
    if block.dtype.kind == "O":
        block = block.astype(np.float64)
    return plan.encode_numbers(block)


# --------------------------------------------------------------------------- validation


def _first_nonfinite_row(block: NDArray[np.floating[Any]] | sp.csr_matrix) -> int | None:
    """Local index of the first row of a dense or CSR float block with NaN/inf, or None."""
    if sp.issparse(block):
        bad = np.flatnonzero(~np.isfinite(block.data))
        if not bad.size:
            return None
        # (sp.issparse does not narrow: scipy ships no types)
        return int(np.searchsorted(block.indptr, bad[0], side="right") - 1)  # type: ignore[union-attr, call-overload]
    finite = np.isfinite(block)
    if finite.all():
        return None
    return int(np.flatnonzero(~finite.all(axis=1))[0])


def _as_float32_block(block: ArrayLike | sp.spmatrix) -> NDArray[np.float32] | sp.csr_matrix:
    """Dense float32 C array or canonical float32 CSR (sorted, duplicates summed)."""
    if sp.issparse(block):
        block = sp.csr_matrix(block, dtype=np.float32)
        if not block.has_canonical_format:
            block = block.copy()
            block.sum_duplicates()
        return block
    block = np.asarray(block)
    if block.dtype.kind not in "biuf":
        raise ValueError(f"X has dtype {block.dtype}; features must be numbers")
    return np.ascontiguousarray(block, dtype=np.float32)


def _block_rows(d: int, buffer_rows: int, buffer_bytes: int) -> int:
    """Rows per block so a float32 block of ``d`` columns stays near ``buffer_bytes``."""
    buffer_rows = int(buffer_rows)
    if buffer_rows < 1:
        raise ValueError(f"buffer_rows must be at least 1, got {buffer_rows}")
    return max(1, min(buffer_rows, int(buffer_bytes) // (4 * max(1, d))))
