"""LIBSVM/svmlight text files to a store: a vectorized parser with a line-by-line fallback
that names the bad line, and the two-pass streaming converter :func:`from_svmlight`."""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable, Iterator
from typing import Literal, TypeAlias

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from ._builder import (
    DEFAULT_BUFFER_BYTES,
    DEFAULT_BUFFER_ROWS,
    _block_rows,
    _LabelScan,
    _prepare_target,
    _StoreBuilder,
)
from .layout import StoreInfo
from .text import _check_source, _line_buffers, _Meter

__all__ = ["TextFormatError", "from_svmlight"]


class TextFormatError(ValueError):
    """A line of a LIBSVM/svmlight file that looks like another text format.

    ``suggestion`` is ``"csv"`` (comma-separated values) or ``"whitespace"`` (columns separated
    by runs of spaces or tabs: :func:`from_csv` with ``delimiter="whitespace"``)."""

    def __init__(self, message: str, suggestion: str) -> None:
        super().__init__(message)
        self.suggestion = suggestion


def _short(token: str, limit: int = 30) -> str:
    return token if len(token) <= limit else token[:limit] + "..."


def _looks_like(parts: list[bytes]) -> Literal["csv", "whitespace"] | None:
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


_LOOKS_LIKE = {
    "csv": "the line looks like comma-separated values, not LIBSVM",
    "whitespace": "the line looks like whitespace-separated columns, not LIBSVM",
}


class _SvmlightBlock:
    """One buffer of svmlight lines, parsed: labels, CSR pieces and the line of every row."""

    __slots__ = ("labels", "indptr", "index", "values", "lines")
    labels: NDArray[np.float64]
    indptr: NDArray[np.int64]
    index: NDArray[np.int64]
    values: NDArray[np.float32]
    lines: NDArray[np.int64]


#: a parsed buffer: ``(labels, counts, index, values, lineno)``
ParsedLines: TypeAlias = tuple[
    NDArray[np.float64],
    NDArray[np.int64],
    NDArray[np.int64],
    NDArray[np.float64],
    NDArray[np.int64],
]


def _svmlight_error(src: str, line: int | None, msg: str) -> ValueError:
    return ValueError(f"{src}, line {line}: {msg}")


def _parse_svmlight_fast(lines: list[bytes], first: int) -> ParsedLines | None:
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
        blob = b"".join(ln[: ln.find(b"#")] + b"\n" if b"#" in ln else ln for ln in lines)
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
    per_token = np.bincount(
        np.searchsorted(starts, colons, side="right") - 1, minlength=starts.size
    )
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


def _parse_svmlight_slow(src: str, lines: list[bytes], first: int) -> ParsedLines:
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
                raise TextFormatError(
                    f"{src}, line {line_no}: bad label {lab!r} ({_LOOKS_LIKE[other]})", other
                ) from None
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
                    raise TextFormatError(
                        f"{src}, line {line_no}: cannot parse feature {what!r} "
                        f"({_LOOKS_LIKE[other]})",
                        other,
                    ) from None
                raise _svmlight_error(
                    src,
                    line_no,
                    f"cannot parse feature {what!r} (expected index:value)",
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


def _parse_svmlight(src: str, lines: list[bytes], first: int) -> _SvmlightBlock:
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
        raise _svmlight_error(
            src, lineno[row_of[neg[0]]], f"negative feature index {index[neg[0]]}"
        )
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

    def __init__(self, row: int, line: int) -> None:
        super().__init__(row, line)
        self.row, self.line = row, line


def _svmlight_blocks(
    src: str, buffer_rows: int, buffer_bytes: int, meter: _Meter | None = None
) -> Iterator[tuple[int, _SvmlightBlock]]:
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


def from_svmlight(
    src: str | os.PathLike[str],
    path: str | os.PathLike[str],
    n_features: int | None = None,
    sparse: bool | None = None,
    zero_based: bool | Literal["auto"] = "auto",
    rows_per_chunk: int | None = None,
    overwrite: bool = False,
    buffer_rows: int = DEFAULT_BUFFER_ROWS,
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    progress: Callable[[int, int], object] | None = None,
) -> StoreInfo:
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
        raise _svmlight_error(
            src, first_zero, "feature index 0 in a file read as one-based (zero_based=False)"
        )
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


def _find_svmlight_index(src: str, value: int, buffer_rows: int, buffer_bytes: int) -> int:
    """Line number of the first row holding feature index ``value`` (for error messages)."""
    for _, blk in _svmlight_blocks(src, buffer_rows, buffer_bytes):
        hit = np.flatnonzero(blk.index == value)
        if hit.size:
            return int(blk.lines[np.searchsorted(blk.indptr, hit[0], side="right") - 1])
    return 0
