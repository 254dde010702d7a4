"""Streaming converters that write dmcsvm data stores.

Every writer reads its source in bounded buffers (``buffer_rows`` rows or about
``buffer_bytes`` bytes, whichever comes first), so a source larger than memory converts with
memory bounded by the buffers and one chunk per output array.  Text sources are read twice:
the first pass counts rows, finds the feature range and the label set and validates every
line; the second pass writes.

The store is written into a hidden temporary sibling directory of the target and renamed
into place only when complete.  On any error (a line that does not parse, NaN or infinity
in the features, a bad label, an I/O error) the temporary directory is removed, so a
failed conversion leaves nothing behind; errors in a text file raise ValueError naming the
file and the line.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import lzma
import os
import re
import shutil
import tempfile
import uuid
import warnings

import numpy as np
import scipy.sparse as sp
import zarr

from .layout import (
    FORMAT_NAME,
    FORMAT_VERSION,
    StoreInfo,
    _local_path,
    _normalize_url,
    default_rows_per_chunk,
    open_store,
)

__all__ = ["write_arrays", "from_svmlight", "from_csv", "from_npy", "from_dask"]

DEFAULT_BUFFER_ROWS = 65536
"""Rows a writer reads from its source at a time."""

DEFAULT_BUFFER_BYTES = 16 * 2**20
"""Approximate bytes (of text, or of float32 rows) a writer holds from its source at a time."""

_SPARSE_CHUNK = 2**20  # entries per chunk of indices/data when nnz is not known up front
_LABEL_LIMIT = 2**20  # distinct labels kept while a label column still looks numeric


# --------------------------------------------------------------------------- targets


def _prepare_target(path, overwrite):
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


def _check_replaceable(target):
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

    def __init__(self, arr, chunk, grow=False):
        self.arr, self.chunk, self.grow = arr, chunk, grow
        self.pos = 0
        self.pending, self.n_pending = [], 0

    def append(self, block):
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

    def _write(self, block):
        end = self.pos + len(block)
        if self.grow and end > self.arr.shape[0]:
            self.arr.resize((end,) + tuple(self.arr.shape[1:]))
        self.arr[self.pos : end] = block
        self.pos = end

    def close(self):
        if self.pending:
            self._write(np.concatenate(self.pending))
            self.pending, self.n_pending = [], 0
        return self.pos


#: zarr leaves out chunks that equal the fill value (all zeros); dmcsvm writes every chunk, so
#: that a chunk missing from a store it wrote is damage, never data (layout.check_chunks)
_ALL_CHUNKS = {"write_empty_chunks": True}


class _StoreBuilder:
    """Context manager owning the temporary directory a store is built in.

    ``create`` makes the arrays, ``append`` adds validated row blocks, ``commit`` writes the
    attributes and renames the directory into place; leaving the block by an exception
    removes the temporary directory.
    """

    def __init__(self, target, overwrite):
        self.target, self.overwrite = target, overwrite
        self.tmp = None

    def __enter__(self):
        parent, name = os.path.split(self.target)
        self.tmp = tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=parent)
        return self

    def __exit__(self, exc_type, exc, tb):
        if self.tmp is not None and os.path.exists(self.tmp):
            shutil.rmtree(self.tmp, ignore_errors=True)
        return False

    def create(self, n, d, sparse, rows_per_chunk, labels, nnz=None):
        """Create the arrays of a store of ``n`` rows and ``d`` features in the temp directory."""
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
            element_chunk = min(_SPARSE_CHUNK * 2, max(1, nnz)) if nnz is not None else _SPARSE_CHUNK
            self.indptr = _Appender(g.create_array("indptr", shape=(n + 1,), chunks=(R,),
                                                   dtype="int64", config=_ALL_CHUNKS), R)
            self.indices = _Appender(
                g.create_array("indices", shape=(0,), chunks=(element_chunk,), dtype="int32",
                               config=_ALL_CHUNKS),
                element_chunk,
                grow=True,
            )
            self.data = _Appender(
                g.create_array("data", shape=(0,), chunks=(element_chunk,), dtype="float32",
                               config=_ALL_CHUNKS),
                element_chunk,
                grow=True,
            )
            self.indptr.append(np.zeros(1, dtype=np.int64))
            self.nnz = 0
        else:
            self.X = _Appender(g.create_array("X", shape=(n, d), chunks=(R, d), dtype="float32",
                                                  config=_ALL_CHUNKS), R)
        self.y = _Appender(g.create_array("y", shape=(n,), chunks=(R,), dtype=labels.dtype,
                                            config=_ALL_CHUNKS), R)
        self.rows = 0

    def append(self, X_block, y_block):
        """Append validated rows: float32 dense array or canonical float32 CSR, encoded labels."""
        if self.sparse:
            block = X_block if sp.issparse(X_block) else sp.csr_matrix(X_block)
            self.indices.append(np.asarray(block.indices, dtype=np.int32))
            self.data.append(np.asarray(block.data, dtype=np.float32))
            self.indptr.append(np.asarray(block.indptr[1:], dtype=np.int64) + self.nnz)
            self.nnz += int(block.indptr[-1])
        else:
            block = X_block.toarray() if sp.issparse(X_block) else X_block
            self.X.append(np.ascontiguousarray(block, dtype=np.float32))
        self.y.append(np.asarray(y_block, dtype=self.labels.dtype))
        self.rows += X_block.shape[0]

    def commit(self) -> StoreInfo:
        """Finish the arrays, write the attributes and rename the store into place."""
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

    def __init__(self, dtype, classes=None):
        self.dtype = np.dtype(dtype)
        self.classes = classes
        if classes is not None:
            self._sorted = np.array(classes, dtype=str)

    def encode_numbers(self, values):
        return np.asarray(values).astype(self.dtype)

    def encode_strings(self, strings):
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

    def __init__(self):
        self.numeric = True
        self.integral = True
        self.strings = set()
        self.overflow = False
        self.first_nonfinite = None

    def add_numbers(self, values):
        values = np.asarray(values, dtype=np.float64)
        if self.integral and values.size:
            self.integral = bool(np.all(np.floor(values) == values) and np.all(np.abs(values) <= 2**53))

    def add_strings(self, strings):
        if self.overflow:
            return
        self.strings.update(strings)
        if self.numeric and len(self.strings) > _LABEL_LIMIT:
            self.overflow, self.strings = True, set()

    def plan(self, what):
        if self.numeric:
            return _LabelPlan(np.int64 if self.integral else np.float64, None)
        if self.overflow:
            raise ValueError(
                f"{what}: labels mix numbers and strings and have more than {_LABEL_LIMIT} "
                "distinct values"
            )
        return _LabelPlan(np.int64, sorted(self.strings))


def _scan_label_array(scan, block, row0, name="y"):
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


def _encode_label_array(plan, block):
    block = np.asarray(block)
    if plan.classes is not None:
        return plan.encode_strings(block.astype(str))
    if block.dtype.kind == "O":
        block = block.astype(np.float64)
    return plan.encode_numbers(block)


# --------------------------------------------------------------------------- validation


def _first_nonfinite_row(block):
    """Local index of the first row of a dense or CSR float block with NaN/inf, or None."""
    if sp.issparse(block):
        bad = np.flatnonzero(~np.isfinite(block.data))
        if not bad.size:
            return None
        return int(np.searchsorted(block.indptr, bad[0], side="right") - 1)
    finite = np.isfinite(block)
    if finite.all():
        return None
    return int(np.flatnonzero(~finite.all(axis=1))[0])


def _as_float32_block(block):
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


def _block_rows(d, buffer_rows, buffer_bytes):
    """Rows per block so a float32 block of ``d`` columns stays near ``buffer_bytes``."""
    buffer_rows = int(buffer_rows)
    if buffer_rows < 1:
        raise ValueError(f"buffer_rows must be at least 1, got {buffer_rows}")
    return max(1, min(buffer_rows, int(buffer_bytes) // (4 * max(1, d))))


# --------------------------------------------------------------------------- arrays


def write_arrays(path, X, y, rows_per_chunk=None, overwrite=False, sparse=None,
                 buffer_rows=DEFAULT_BUFFER_ROWS, buffer_bytes=DEFAULT_BUFFER_BYTES,
                 sample_weight=None):
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
        from ..estimators._weights import check_sample_weight
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
        builder.create(n, d, sparse, rows_per_chunk, plan, nnz=X.nnz if is_sparse else None)
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            block = _as_float32_block(X[lo:hi])
            bad = _first_nonfinite_row(block)
            if bad is not None:
                raise ValueError(f"X contains NaN or infinity at row {lo + bad}")
            builder.append(block, _encode_label_array(plan, y[lo:hi]))
        if sample_weight is not None:
            builder.group.create_array("sample_weight", shape=(n,), chunks=(builder.R,),
                                       dtype="float64", config=_ALL_CHUNKS)[:] = sample_weight
        return builder.commit()


def from_npy(X_path, y_path, path, rows_per_chunk=None, overwrite=False,
             buffer_rows=DEFAULT_BUFFER_ROWS, buffer_bytes=DEFAULT_BUFFER_BYTES, progress=None):
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
    for name, p in (("X", X_path), ("y", y_path)):
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


def from_dask(X, y, path, rows_per_chunk=None, overwrite=False, sparse=None,
              buffer_rows=DEFAULT_BUFFER_ROWS, buffer_bytes=DEFAULT_BUFFER_BYTES):
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
    import dask
    import dask.array as da

    target = _prepare_target(path, overwrite)
    X = X if isinstance(X, da.Array) else da.asarray(X)
    y = y if isinstance(y, da.Array) else da.asarray(np.asarray(y))
    if X.ndim != 2:
        raise ValueError(f"X must be two-dimensional, got shape {X.shape}")
    if y.ndim != 1:
        raise ValueError(f"y must be one-dimensional, got shape {y.shape}")
    if np.isnan(X.shape[0]):
        X = X.compute_chunk_sizes()
    if np.isnan(y.shape[0]):
        y = y.compute_chunk_sizes()
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
            xb, yb = dask.compute(X[lo:hi], y[lo:hi])
            block = _as_float32_block(xb)
            bad = _first_nonfinite_row(block)
            if bad is not None:
                raise ValueError(f"X contains NaN or infinity at row {lo + bad}")
            builder.append(block, _encode_label_array(plan, yb))
        return builder.commit()


# --------------------------------------------------------------------------- text files


def _check_source(src):
    src = os.fspath(src)
    if not os.path.isfile(src):
        raise ValueError(f"{src} does not exist or is not a file")
    return src


class _Meter:
    """Reports bytes read from a source file to ``progress(done, total)`` (both passes)."""

    def __init__(self, progress, total):
        self.progress, self.total, self.done = progress, int(total), 0

    def add(self, k):
        self.done += k
        self.progress(min(self.done, self.total), self.total)

    def finish(self):
        self.progress(self.total, self.total)


class _Tracked(io.RawIOBase):
    """A raw file that counts the bytes read from disk into a :class:`_Meter`."""

    def __init__(self, f, meter):
        self.f, self.meter = f, meter

    def readable(self):
        return True

    def readinto(self, b):
        k = self.f.readinto(b)
        if k:
            self.meter.add(k)
        return k

    def close(self):
        self.f.close()
        super().close()


def _open_binary(src, meter=None):
    """Open a file for reading bytes, decompressing ``.gz``, ``.bz2`` and ``.xz`` files; with a
    ``meter``, the (compressed) bytes read from disk are counted into it."""
    raw = None
    if meter is not None:
        raw = io.BufferedReader(_Tracked(open(src, "rb", buffering=0), meter))
    if src.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw, mode="rb") if raw else gzip.open(src, "rb")
    if src.endswith(".bz2"):
        return bz2.BZ2File(raw, "rb") if raw else bz2.open(src, "rb")
    if src.endswith(".xz"):
        return lzma.LZMAFile(raw, "rb") if raw else lzma.open(src, "rb")
    return raw if raw else open(src, "rb")


def _line_buffers(src, buffer_rows, buffer_bytes, meter=None):
    """Yield ``(lines, first_line_number)`` buffers of raw byte lines from a text file."""
    if int(buffer_rows) < 1:
        raise ValueError(f"buffer_rows must be at least 1, got {buffer_rows}")
    with _open_binary(src, meter) as f:
        lines, size, first = [], 0, 1
        for line in f:
            lines.append(line)
            size += len(line)
            if len(lines) >= buffer_rows or size >= buffer_bytes:
                yield lines, first
                first += len(lines)
                lines, size = [], 0
        if lines:
            yield lines, first


class TextFormatError(ValueError):
    """A line of a LIBSVM/svmlight file that looks like another text format.

    ``suggestion`` is ``"csv"`` (comma-separated values) or ``"whitespace"`` (columns separated
    by runs of spaces or tabs: :func:`from_csv` with ``delimiter="whitespace"``)."""

    def __init__(self, message, suggestion):
        super().__init__(message)
        self.suggestion = suggestion


def _short(token, limit=30):
    return token if len(token) <= limit else token[:limit] + "..."


def _looks_like(parts):
    """``"csv"`` or ``"whitespace"`` when the tokens of a line (no ``index:value`` anywhere) are
    delimited numbers or text, else None."""
    if any(b":" in t for t in parts):
        return None
    if any(b"," in t for t in parts):
        return "csv"
    if len(parts) >= 2:
        try:
            for t in parts[1:]:
                float(t)
        except ValueError:
            return None
        return "whitespace"
    return None


_LOOKS_LIKE = {"csv": "the line looks like comma-separated values, not LIBSVM",
               "whitespace": "the line looks like whitespace-separated columns, not LIBSVM"}


class _SvmlightBlock:
    """One buffer of svmlight lines, parsed: labels, CSR pieces and the line of every row."""

    __slots__ = ("labels", "indptr", "index", "values", "lines")


def _svmlight_error(src, line, msg):
    return ValueError(f"{src}, line {line}: {msg}")


def _parse_svmlight_fast(lines, first):
    """Vectorized parse of a buffer of svmlight lines; None when anything looks unusual.

    Tokenizes the whole buffer at once with numpy (a label token then ``index:value``
    tokens on every non-blank line) and converts all numbers with one ``np.fromstring``
    call, so no Python object is made per token.  Any irregularity (a token without exactly
    one colon, text that is not a number, a non-integral index) returns None and the slow
    path, which names the offending line, takes over.

    Returns
    -------
    (labels, counts, index, values, lineno) or None
    """
    blob = b"".join(lines)
    if b"#" in blob:
        blob = b"".join(l[: l.find(b"#")] + b"\n" if b"#" in l else l for l in lines)
    if b"qid:" in blob:
        blob = re.sub(rb"[ \t]qid:[^ \t\r\n]*", b"", blob)
    if not blob.endswith(b"\n"):
        blob += b"\n"
    a = np.frombuffer(blob, dtype=np.uint8)
    space = a <= 32
    start_mask = ~space
    start_mask[1:] &= space[:-1]
    starts = np.flatnonzero(start_mask)
    del start_mask, space
    if starts.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return np.zeros(0), empty, empty, np.zeros(0), empty
    tok_line = np.searchsorted(np.flatnonzero(a == 10), starts)  # newlines before each token
    is_label = np.empty(starts.size, dtype=bool)
    is_label[0] = True
    is_label[1:] = tok_line[1:] != tok_line[:-1]
    colons = np.flatnonzero(a == 58)
    per_token = np.bincount(np.searchsorted(starts, colons, side="right") - 1, minlength=starts.size)
    if not np.array_equal(per_token, ~is_label):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        try:
            nums = np.fromstring(blob.replace(b":", b" "), sep=" ")
        except (ValueError, DeprecationWarning):
            return None
    width = np.where(is_label, 1, 2)
    if nums.size != int(width.sum()):
        return None
    offset = np.cumsum(width) - width
    labels = nums[offset[is_label]]
    feature_at = offset[~is_label]
    index_f = nums[feature_at]
    with np.errstate(invalid="ignore"):
        index = index_f.astype(np.int64)
    if not np.array_equal(index, index_f):
        return None
    row_of = np.cumsum(is_label) - 1
    counts = np.bincount(row_of[~is_label], minlength=labels.size)
    lineno = first + tok_line[is_label]
    return labels, counts, index, nums[feature_at + 1], lineno


def _parse_svmlight_slow(src, lines, first):
    """Line-by-line parse of a buffer; raises ValueError naming the first bad line.

    Returns
    -------
    (labels, counts, index, values, lineno)
    """
    labels, counts, index, values, lineno = [], [], [], [], []
    for k, line in enumerate(lines):
        line_no = first + k
        parts = line.split(b"#", 1)[0].split()
        if not parts:
            continue
        feats = parts[1:]
        if feats and feats[0].startswith(b"qid:"):
            del feats[0]
        other = _looks_like(parts)
        try:
            labels.append(float(parts[0]))
        except ValueError:
            lab = _short(parts[0].decode(errors="replace"))
            if other is not None:
                raise TextFormatError(f"{src}, line {line_no}: bad label {lab!r} "
                                      f"({_LOOKS_LIKE[other]})", other) from None
            extra = " (multi-label files are not supported)" if "," in lab else ""
            raise _svmlight_error(src, line_no, f"bad label {lab!r}{extra}") from None
        for tok in feats:
            i, sep, v = tok.partition(b":")
            try:
                if not sep:
                    raise ValueError
                index.append(int(i))
                values.append(float(v))
            except ValueError:
                what = _short(tok.decode(errors="replace"))
                if other is not None:
                    raise TextFormatError(f"{src}, line {line_no}: cannot parse feature {what!r} "
                                          f"({_LOOKS_LIKE[other]})", other) from None
                raise _svmlight_error(
                    src, line_no, f"cannot parse feature {what!r} (expected index:value)",
                ) from None
        counts.append(len(feats))
        lineno.append(line_no)
    return (
        np.asarray(labels, dtype=np.float64),
        np.asarray(counts, dtype=np.int64),
        np.asarray(index, dtype=np.int64),
        np.asarray(values, dtype=np.float64),
        np.asarray(lineno, dtype=np.int64),
    )


def _parse_svmlight(src, lines, first):
    """Parse and validate a buffer of svmlight lines (indices as written, not yet offset)."""
    parsed = _parse_svmlight_fast(lines, first)
    if parsed is None:
        parsed = _parse_svmlight_slow(src, lines, first)
    labels, counts, index, values, lineno = parsed
    blk = _SvmlightBlock()
    blk.labels, blk.index, blk.lines = labels, index, lineno
    blk.indptr = np.zeros(labels.size + 1, dtype=np.int64)
    np.cumsum(counts, out=blk.indptr[1:])
    bad = np.flatnonzero(~np.isfinite(labels))
    if bad.size:
        raise _svmlight_error(src, lineno[bad[0]], f"bad label '{float(labels[bad[0]])}'")
    with np.errstate(over="ignore"):
        blk.values = values.astype(np.float32)
    row_of = np.repeat(np.arange(labels.size), counts)
    bad = np.flatnonzero(~np.isfinite(blk.values))
    if bad.size:
        r = int(row_of[bad[0]])
        raise _NonFinite(r, int(lineno[r]))
    neg = np.flatnonzero(index < 0)
    if neg.size:
        raise _svmlight_error(src, lineno[row_of[neg[0]]], f"negative feature index {index[neg[0]]}")
    # indices must increase within a row: sort rows that do not, reject duplicates
    same_row = row_of[1:] == row_of[:-1]
    if np.any(same_row & (np.diff(index) <= 0)):
        order = np.lexsort((index, row_of))
        blk.index, blk.values = index[order], blk.values[order]
        dup = np.flatnonzero(same_row & (np.diff(blk.index) == 0))
        if dup.size:
            raise _svmlight_error(
                src, lineno[row_of[dup[0]]], f"feature index {blk.index[dup[0]]} appears twice"
            )
    return blk


class _NonFinite(Exception):
    """Internal: a parsed buffer holds NaN/inf in the features of local row ``row``."""

    def __init__(self, row, line):
        super().__init__(row, line)
        self.row, self.line = row, line


def _svmlight_blocks(src, buffer_rows, buffer_bytes, meter=None):
    """Yield ``(row0, block)`` parsed buffers of an svmlight file; NaN/inf raise ValueError."""
    row0 = 0
    for lines, first in _line_buffers(src, buffer_rows, buffer_bytes, meter):
        try:
            blk = _parse_svmlight(src, lines, first)
        except _NonFinite as exc:
            raise ValueError(
                f"{src} contains NaN or infinity at row {row0 + exc.row} (line {exc.line})"
            ) from None
        if len(blk.labels):
            yield row0, blk
            row0 += len(blk.labels)


def from_svmlight(src, path, n_features=None, sparse=None, zero_based="auto",
                  rows_per_chunk=None, overwrite=False,
                  buffer_rows=DEFAULT_BUFFER_ROWS, buffer_bytes=DEFAULT_BUFFER_BYTES,
                  progress=None):
    """Convert a LIBSVM/svmlight text file to a store, streaming it in two passes.

    Lines are ``label [qid:q] index:value ...`` with optional ``# comments``; blank lines are
    skipped, ``qid`` is ignored, indices within a line may come in any order but not twice.
    ``.gz``, ``.bz2`` and ``.xz`` files are decompressed on the fly.

    Parameters
    ----------
    src : str or os.PathLike
        The text file.
    path : str or os.PathLike
        Target store directory.
    n_features : int, optional
        Number of features; default the largest index in the file (after the zero-based
        adjustment) plus one.  Smaller than that raises ValueError.
    sparse : bool, optional
        Store CSR (True) or dense ``X`` (False); default CSR when the density
        ``nnz / (n * d)`` is below 0.25.
    zero_based : bool or "auto"
        Whether indices start at 0.  ``"auto"`` (as scikit-learn): zero-based if some index
        is 0, else one-based.
    rows_per_chunk : int, optional
        Rows per chunk; default about 8 MiB of features per chunk.
    overwrite : bool
        Replace an existing dmcsvm store at ``path``.
    buffer_rows, buffer_bytes : int
        Lines (at most) and bytes (about) of text parsed at a time; also bounds the dense
        rows built at a time.
    progress : callable, optional
        ``progress(done, total)`` with the bytes of the file read so far over both passes.

    Returns
    -------
    StoreInfo

    Raises
    ------
    ValueError
        For an unparsable line, NaN/inf feature values, a bad label, an index out of range
        (each naming the file and line), an empty file, or an existing target.  Nothing is
        left on disk.
    """
    target = _prepare_target(path, overwrite)
    src = _check_source(src)
    if not (isinstance(zero_based, str) and zero_based == "auto"):
        if zero_based not in (True, False):
            raise ValueError(f"zero_based must be True, False or 'auto', got {zero_based!r}")
        zero_based = bool(zero_based)

    # pass 1: rows, entries, index range, labels; every line validated
    meter = _Meter(progress, 2 * os.path.getsize(src)) if progress is not None else None
    n = nnz = 0
    min_index, max_index, max_line = None, -1, None
    scan = _LabelScan()
    for _, blk in _svmlight_blocks(src, buffer_rows, buffer_bytes, meter):
        n += len(blk.labels)
        nnz += len(blk.index)
        scan.add_numbers(blk.labels)
        if len(blk.index):
            lo_i, hi_at = int(blk.index.min()), int(np.argmax(blk.index))
            min_index = lo_i if min_index is None else min(min_index, lo_i)
            if blk.index[hi_at] > max_index:
                max_index = int(blk.index[hi_at])
                row = int(np.searchsorted(blk.indptr, hi_at, side="right") - 1)
                max_line = int(blk.lines[row])
    if n == 0:
        raise ValueError(f"{src} contains no samples")
    offset = 0 if zero_based is True or (zero_based == "auto" and min_index == 0) else 1
    if offset == 1 and min_index == 0:
        first_zero = _find_svmlight_index(src, 0, buffer_rows, buffer_bytes)
        raise _svmlight_error(src, first_zero, "feature index 0 in a file read as one-based (zero_based=False)")
    needed = max_index - offset + 1
    if n_features is None:
        d = needed
    else:
        d = int(n_features)
        if d < needed:
            raise _svmlight_error(
                src, max_line, f"feature index {max_index} is beyond n_features={d}"
            )
    if d <= 0:
        raise ValueError(f"{src} has no features; pass n_features")
    if d >= 2**31:
        raise ValueError(f"{src}: {d} features do not fit the int32 column indices of a store")
    if sparse is None:
        sparse = nnz / (n * d) < 0.25
    plan = scan.plan(src)

    # pass 2: write
    dense_rows = _block_rows(d, buffer_rows, buffer_bytes)
    with _StoreBuilder(target, overwrite) as builder:
        builder.create(n, d, bool(sparse), rows_per_chunk, plan, nnz=nnz)
        for _, blk in _svmlight_blocks(src, buffer_rows, buffer_bytes, meter):
            index = (blk.index - offset).astype(np.int32)
            m = len(blk.labels)
            y = plan.encode_numbers(blk.labels)
            if sparse:
                X = sp.csr_matrix((blk.values, index, blk.indptr), shape=(m, d))
                builder.append(X, y)
                continue
            for a in range(0, m, dense_rows):
                b = min(m, a + dense_rows)
                s, e = blk.indptr[a], blk.indptr[b]
                dense = np.zeros((b - a, d), dtype=np.float32)
                rows = np.repeat(np.arange(b - a), np.diff(blk.indptr[a : b + 1]))
                dense[rows, index[s:e]] = blk.values[s:e]
                builder.append(dense, y[a:b])
        info = builder.commit()
    if meter is not None:
        meter.finish()
    return info


def _find_svmlight_index(src, value, buffer_rows, buffer_bytes):
    """Line number of the first row holding feature index ``value`` (for error messages)."""
    for _, blk in _svmlight_blocks(src, buffer_rows, buffer_bytes):
        hit = np.flatnonzero(blk.index == value)
        if hit.size:
            return int(blk.lines[np.searchsorted(blk.indptr, hit[0], side="right") - 1])
    return 0


WHITESPACE = "whitespace"
"""``from_csv(delimiter=WHITESPACE)``: fields separated by any run of spaces or tabs."""


def _check_delimiter(delimiter):
    """The delimiter of :func:`from_csv`: one character, or ``"whitespace"`` / None."""
    if delimiter is None or delimiter == WHITESPACE:
        return WHITESPACE
    if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in "\r\n\"":
        raise ValueError(f"delimiter must be one character (not a quote or a line break) or "
                         f"'whitespace', got {delimiter!r}")
    return delimiter


def _whitespace_records(src, f):
    """``(fields, line_number)`` of every line split at runs of whitespace (blank lines give an
    empty list, as csv.reader's records)."""
    line_num = 0
    while True:
        try:
            line = next(f)
        except StopIteration:
            return
        except UnicodeDecodeError as exc:
            raise ValueError(f"{src}, line {line_num + 1}: {exc}") from None
        line_num += 1
        yield line.split(), line_num


def _csv_records(src, f, delimiter):
    reader = csv.reader(f, delimiter=delimiter)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except (csv.Error, UnicodeDecodeError) as exc:
            raise ValueError(f"{src}, line {reader.line_num + 1}: {exc}") from None
        yield row, reader.line_num


def _csv_buffers(src, delimiter, skip_header, buffer_rows, buffer_bytes, meter=None):
    """Yield ``(rows, line_numbers)`` buffers of non-empty CSV records from a text file."""
    if int(buffer_rows) < 1:
        raise ValueError(f"buffer_rows must be at least 1, got {buffer_rows}")
    skip = int(skip_header)
    raw = _open_binary(src, meter)
    with io.TextIOWrapper(raw, encoding="utf-8", newline="") as f:
        records = (_whitespace_records(src, f) if delimiter == WHITESPACE
                   else _csv_records(src, f, delimiter))
        rows, lines, size = [], [], 0
        for k, (row, line_num) in enumerate(records, 1):
            if k <= skip or not row:
                continue
            rows.append(row)
            lines.append(line_num)
            size += sum(map(len, row)) + len(row)
            if len(rows) >= buffer_rows or size >= buffer_bytes:
                yield rows, lines
                rows, lines, size = [], [], 0
        if rows:
            yield rows, lines


def _normalize_column(j, ncols, what, src):
    j = int(j)
    if not -ncols <= j < ncols:
        raise ValueError(f"{src}: {what} {j} is out of range for {ncols} columns")
    return j % ncols


def from_csv(src, path, label_column=0, delimiter=",", skip_header=False, drop_columns=(),
             rows_per_chunk=None, overwrite=False,
             buffer_rows=DEFAULT_BUFFER_ROWS, buffer_bytes=DEFAULT_BUFFER_BYTES, progress=None):
    """Convert a delimited text file (numeric features, one label column) to a dense store.

    Parameters
    ----------
    src : str or os.PathLike
        The text file (UTF-8; ``.gz``, ``.bz2``, ``.xz`` decompressed on the fly).  Blank
        lines are skipped; every other record must have the same number of fields.
    path : str or os.PathLike
        Target store directory.
    label_column : int
        Index of the label column; negative counts from the end (-1: last).  Labels that
        are all numbers are stored as int64/float64; otherwise every label is a string
        class (int64 codes into the sorted ``classes``).
    delimiter : str or None
        Field separator: one character, or ``"whitespace"`` (or None) for fields separated by
        any run of spaces or tabs, leading and trailing blanks ignored (e.g. the USPS
        ``zip.train.gz`` files).
    skip_header : bool or int
        Skip the first record (True) or this many records.
    drop_columns : sequence of int
        Columns that are neither features nor the label (ids, dates...).
    rows_per_chunk, overwrite, buffer_rows, buffer_bytes, progress
        As for :func:`from_svmlight`.

    Returns
    -------
    StoreInfo

    Raises
    ------
    ValueError
        For a record with the wrong number of fields, a feature that is not a number,
        NaN/inf features, a NaN label (naming the file and line), an empty file, or an
        existing target.  Nothing is left on disk.
    """
    delimiter = _check_delimiter(delimiter)
    target = _prepare_target(path, overwrite)
    src = _check_source(src)

    # pass 1: rows, columns, labels
    n, ncols = 0, None
    scan = _LabelScan()
    nonfinite_label = None
    meter = _Meter(progress, 2 * os.path.getsize(src)) if progress is not None else None
    for rows, lines in _csv_buffers(src, delimiter, skip_header, buffer_rows, buffer_bytes, meter):
        if ncols is None:
            ncols = len(rows[0])
            label_col = _normalize_column(label_column, ncols, "label_column", src)
            drops = {_normalize_column(j, ncols, "drop column", src) for j in drop_columns}
            if label_col in drops:
                raise ValueError(f"{src}: label_column {label_column} is also in drop_columns")
            feature_cols = [j for j in range(ncols) if j != label_col and j not in drops]
            if not feature_cols:
                raise ValueError(f"{src} has no feature columns")
        for row, ln in zip(rows, lines):
            if len(row) != ncols:
                raise ValueError(f"{src}, line {ln}: {len(row)} fields, expected {ncols}")
        labels = [row[label_col].strip() for row in rows]
        if scan.numeric:
            try:
                values = np.array(labels, dtype=str).astype(np.float64)
            except ValueError:
                scan.numeric = False
            else:
                bad = np.flatnonzero(~np.isfinite(values))
                if bad.size and nonfinite_label is None:
                    nonfinite_label = (lines[bad[0]], labels[bad[0]])
                scan.add_numbers(values[np.isfinite(values)])
        scan.add_strings(labels)
        n += len(rows)
    if n == 0:
        raise ValueError(f"{src} contains no samples")
    plan = scan.plan(src)
    if plan.classes is None and nonfinite_label is not None:
        raise ValueError(f"{src}, line {nonfinite_label[0]}: bad label {nonfinite_label[1]!r}")
    d = len(feature_cols)

    # pass 2: parse features and write
    with _StoreBuilder(target, overwrite) as builder:
        builder.create(n, d, False, rows_per_chunk, plan)
        row0 = 0
        for rows, lines in _csv_buffers(src, delimiter, skip_header, buffer_rows, buffer_bytes,
                                        meter):
            for row, ln in zip(rows, lines):
                if len(row) != ncols:
                    raise ValueError(f"{src}, line {ln}: {len(row)} fields, expected {ncols}")
            table = np.array(rows, dtype=str)
            try:
                X = table[:, feature_cols].astype(np.float64).astype(np.float32)
            except ValueError:
                _locate_csv_error(src, rows, lines, feature_cols)
            bad = _first_nonfinite_row(X)
            if bad is not None:
                raise ValueError(
                    f"{src} contains NaN or infinity at row {row0 + bad} (line {lines[bad]})"
                )
            y = plan.encode_strings(np.char.strip(table[:, label_col]))
            builder.append(X, y)
            row0 += len(rows)
        info = builder.commit()
    if meter is not None:
        meter.finish()
    return info


def _locate_csv_error(src, rows, lines, feature_cols):
    """Raise ValueError naming the line and column of the first feature that is not a number."""
    for row, ln in zip(rows, lines):
        for j in feature_cols:
            try:
                float(row[j])
            except ValueError:
                raise ValueError(
                    f"{src}, line {ln}: column {j} is not a number: {row[j]!r}"
                ) from None
    raise ValueError(f"{src}, line {lines[0]}: cannot parse the features of the lines from here")
