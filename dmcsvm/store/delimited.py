"""Delimited text files (CSV, or columns separated by runs of whitespace) to a dense store:
the two-pass streaming converter :func:`from_csv`, through pandas' C parser where pandas is
installed (the ``csv`` extra), else (and to name the line of any problem) the ``csv``
module."""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, NoReturn

import numpy as np
from numpy.typing import NDArray

from ._builder import (
    DEFAULT_BUFFER_BYTES,
    DEFAULT_BUFFER_ROWS,
    _first_nonfinite_row,
    _LabelScan,
    _prepare_target,
    _StoreBuilder,
)
from .layout import StoreInfo
from .text import _check_source, _Meter, _open_binary

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["WHITESPACE", "from_csv"]


WHITESPACE = "whitespace"
"""``from_csv(delimiter=WHITESPACE)``: fields separated by any run of spaces or tabs."""


def _check_delimiter(delimiter: str | None) -> str:
    """The delimiter of :func:`from_csv`: one character, or ``"whitespace"`` / None."""
    if delimiter is None or delimiter == WHITESPACE:
        return WHITESPACE
    if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in '\r\n"':
        raise ValueError(
            f"delimiter must be one character (not a quote or a line break) or "
            f"'whitespace', got {delimiter!r}"
        )
    return delimiter


def _whitespace_records(src: str, f: Iterator[str]) -> Iterator[tuple[list[str], int]]:
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


def _csv_records(src: str, f: Iterable[str], delimiter: str) -> Iterator[tuple[list[str], int]]:
    reader = csv.reader(f, delimiter=delimiter)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except (csv.Error, UnicodeDecodeError) as exc:
            raise ValueError(f"{src}, line {reader.line_num + 1}: {exc}") from None
        yield row, reader.line_num


def _csv_buffers(
    src: str,
    delimiter: str,
    skip_header: bool | int,
    buffer_rows: int,
    buffer_bytes: int,
    meter: _Meter | None = None,
) -> Iterator[tuple[list[list[str]], list[int]]]:
    """Yield ``(rows, line_numbers)`` buffers of non-empty CSV records from a text file."""
    if int(buffer_rows) < 1:
        raise ValueError(f"buffer_rows must be at least 1, got {buffer_rows}")
    skip = int(skip_header)
    raw = _open_binary(src, meter)
    with io.TextIOWrapper(raw, encoding="utf-8", newline="") as f:
        records = (
            _whitespace_records(src, f)
            if delimiter == WHITESPACE
            else _csv_records(src, f, delimiter)
        )
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


def _normalize_column(j: int, ncols: int, what: str, src: str) -> int:
    j = int(j)
    if not -ncols <= j < ncols:
        raise ValueError(f"{src}: {what} {j} is out of range for {ncols} columns")
    return j % ncols


def from_csv(
    src: str | os.PathLike[str],
    path: str | os.PathLike[str],
    label_column: int = 0,
    delimiter: str | None = ",",
    skip_header: bool | int = False,
    drop_columns: Iterable[int] = (),
    rows_per_chunk: int | None = None,
    overwrite: bool = False,
    buffer_rows: int = DEFAULT_BUFFER_ROWS,
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    progress: Callable[[int, int], object] | None = None,
    weight_column: int | None = None,
) -> StoreInfo:
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
    weight_column : int, optional
        Index of a column of per-row weights (numbers >= 0; negative index counts from the
        end), stored as the store's ``sample_weight`` array: a fit on the store uses them as
        ``fit(..., sample_weight=...)`` does.  Not a feature.
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
    try:
        return _from_csv_pandas(
            src,
            target,
            label_column,
            delimiter,
            skip_header,
            drop_columns,
            rows_per_chunk,
            overwrite,
            buffer_rows,
            progress,
            weight_column,
        )
    except _Fallback:
        pass
    return _from_csv_exact(
        src,
        target,
        label_column,
        delimiter,
        skip_header,
        drop_columns,
        rows_per_chunk,
        overwrite,
        buffer_rows,
        buffer_bytes,
        progress,
        weight_column,
    )


class _Fallback(Exception):
    """The pandas reader met something it does not check as :func:`_from_csv_exact` does (a
    ragged or malformed record, a text feature, NaN, a label pandas would read as missing):
    the exact reader reads the file again and names the line."""


def _columns_of(
    src: str,
    delimiter: str,
    skip_header: bool | int,
    label_column: int,
    drop_columns: Iterable[int],
    weight_column: int | None,
) -> tuple[int, int, list[int], int | None]:
    """``(ncols, label_col, feature_cols, weight_col)`` from the first record after the
    header (the exact reader's rules and messages)."""
    for rows, _ in _csv_buffers(src, delimiter, skip_header, 1, 1):
        ncols = len(rows[0])
        break
    else:
        raise ValueError(f"{src} contains no samples")
    return (ncols, *_column_plan(src, ncols, label_column, drop_columns, weight_column))


def _column_plan(
    src: str, ncols: int, label_column: int, drop_columns: Iterable[int], weight_column: int | None
) -> tuple[int, list[int], int | None]:
    """``(label_col, feature_cols, weight_col)`` of records of ``ncols`` fields: the label,
    weight and dropped columns checked against each other (errors name the file)."""
    label_col = _normalize_column(label_column, ncols, "label_column", src)
    drops = {_normalize_column(j, ncols, "drop column", src) for j in drop_columns}
    if label_col in drops:
        raise ValueError(f"{src}: label_column {label_column} is also in drop_columns")
    weight_col = None
    if weight_column is not None:
        weight_col = _normalize_column(weight_column, ncols, "weight_column", src)
        if weight_col == label_col or weight_col in drops:
            raise ValueError(
                f"{src}: weight_column {weight_column} is also the label column or in drop_columns"
            )
        drops.add(weight_col)
    feature_cols = [j for j in range(ncols) if j != label_col and j not in drops]
    if not feature_cols:
        raise ValueError(f"{src} has no feature columns")
    return label_col, feature_cols, weight_col


def _pandas_chunks(
    src: str,
    delimiter: str,
    skip_header: bool | int,
    ncols: int,
    usecols: list[int] | None,
    dtype: Mapping[int, type],
    chunk_rows: int,
    meter: _Meter | None,
) -> Iterator[pd.DataFrame]:
    """``pandas.read_csv`` of ``src`` in chunks of ``chunk_rows`` records (C engine; every
    record must have ``ncols`` fields); any parser error is a :class:`_Fallback`."""
    import pandas as pd

    sep = r"\s+" if delimiter == WHITESPACE else delimiter
    raw = _open_binary(src, meter)
    try:
        reader = pd.read_csv(
            raw,
            sep=sep,
            header=None,
            skiprows=int(skip_header),
            usecols=usecols,
            dtype=dtype,
            chunksize=chunk_rows,
            engine="c",
            skip_blank_lines=True,
            encoding="utf-8",
            na_filter=True,
            keep_default_na=True,
            index_col=False,
        )
        yield from reader
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise _Fallback(str(exc)) from None
    finally:
        raw.close()


def _from_csv_pandas(
    src: str,
    target: str,
    label_column: int,
    delimiter: str,
    skip_header: bool | int,
    drop_columns: Iterable[int],
    rows_per_chunk: int | None,
    overwrite: bool,
    buffer_rows: int,
    progress: Callable[[int, int], object] | None,
    weight_column: int | None,
) -> StoreInfo:
    """:func:`from_csv` by ``pandas.read_csv(chunksize=)`` where pandas is installed
    (``pip install "dmcsvm[csv]"``): 15x faster than the ``csv`` module's parse, 11x the
    whole conversion (benchmarks/results/libraries.md).  Without pandas, or for a file it
    does not read exactly as the exact reader would, :class:`_Fallback` (raised before
    anything is written, or with the temporary store removed)."""
    try:
        import pandas  # noqa: F401
    except ImportError:
        raise _Fallback("pandas is not installed") from None
    if delimiter == WHITESPACE and int(skip_header):
        raise _Fallback("whitespace columns with a header")  # records vs lines differ
    ncols, label_col, feature_cols, weight_col = _columns_of(
        src, delimiter, skip_header, label_column, drop_columns, weight_column
    )
    chunk_rows = max(1, int(buffer_rows))
    meter = _Meter(progress, 2 * os.path.getsize(src)) if progress is not None else None

    # pass 1: rows and labels, the label column alone (as text, as the exact reader reads it)
    n, scan = 0, _LabelScan()
    for chunk in _pandas_chunks(
        src, delimiter, skip_header, ncols, [label_col], {label_col: str}, chunk_rows, meter
    ):
        col = chunk[label_col]
        if col.isna().any():
            raise _Fallback("a label pandas reads as missing")  # '', 'NA', 'null', ...
        labels = np.char.strip(col.to_numpy(dtype=str))
        if scan.numeric:
            try:
                values = labels.astype(np.float64)
            except ValueError:
                scan.numeric = False
            else:
                if not np.isfinite(values).all():
                    raise _Fallback("a NaN label")
                scan.add_numbers(values)
        scan.add_strings(labels.tolist())
        n += len(labels)
    if n == 0:
        raise ValueError(f"{src} contains no samples")
    plan = scan.plan(src)
    d = len(feature_cols)

    # pass 2: features (float64, then float32 as the exact reader), labels, weights
    # every column is read (with usecols pandas drops the extra fields of a long record
    # silently); a short record leaves the last field missing: checked below
    last = ncols - 1
    usecols = None
    dtype: dict[int, type] = {j: str for j in range(ncols)}
    dtype.update({j: np.float64 for j in feature_cols})
    if weight_col is not None:
        dtype[weight_col] = np.float64
    with _StoreBuilder(target, overwrite) as builder:
        builder.create(n, d, False, rows_per_chunk, plan, weights=weight_col is not None)
        rows = 0
        for chunk in _pandas_chunks(
            src, delimiter, skip_header, ncols, usecols, dtype, chunk_rows, meter
        ):
            X64 = chunk[feature_cols].to_numpy(dtype=np.float64)
            X = X64.astype(np.float32)
            if _first_nonfinite_row(X) is not None:
                raise _Fallback("NaN or infinity, or a short record")  # the line is named
            col = chunk[label_col]
            if col.isna().any() or chunk[last].isna().any():
                raise _Fallback("a label pandas reads as missing, or a short record")
            y = plan.encode_strings(np.char.strip(col.to_numpy(dtype=str)))
            w = None
            if weight_col is not None:
                w = chunk[weight_col].to_numpy(dtype=np.float64)
                if not (np.isfinite(w) & (w >= 0)).all():
                    raise _Fallback("a bad weight")
            builder.append(X, y, w)
            rows += len(X)
        if rows != n:
            raise _Fallback("the passes read different row counts")
        info = builder.commit()
    if meter is not None:
        meter.finish()
    return info


def _from_csv_exact(
    src: str,
    target: str,
    label_column: int,
    delimiter: str,
    skip_header: bool | int,
    drop_columns: Iterable[int],
    rows_per_chunk: int | None,
    overwrite: bool,
    buffer_rows: int,
    buffer_bytes: int,
    progress: Callable[[int, int], object] | None,
    weight_column: int | None,
) -> StoreInfo:
    """:func:`from_csv` by the ``csv`` module, record by record: the reader that names the
    line (and column) of every problem."""
    # pass 1: rows, columns, labels
    n, ncols = 0, None
    scan = _LabelScan()
    nonfinite_label = None
    meter = _Meter(progress, 2 * os.path.getsize(src)) if progress is not None else None
    for rows, lines in _csv_buffers(src, delimiter, skip_header, buffer_rows, buffer_bytes, meter):
        if ncols is None:
            ncols = len(rows[0])
            label_col, feature_cols, weight_col = _column_plan(
                src, ncols, label_column, drop_columns, weight_column
            )
        for row, ln in zip(rows, lines, strict=False):
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
        builder.create(n, d, False, rows_per_chunk, plan, weights=weight_col is not None)
        row0 = 0
        for rows, lines in _csv_buffers(
            src, delimiter, skip_header, buffer_rows, buffer_bytes, meter
        ):
            for row, ln in zip(rows, lines, strict=False):
                if len(row) != ncols:
                    raise ValueError(f"{src}, line {ln}: {len(row)} fields, expected {ncols}")
            table = np.array(rows, dtype=str)
            try:
                X = table[:, feature_cols].astype(np.float64).astype(np.float32)
            except ValueError:
                _locate_csv_error(src, rows, lines, feature_cols)
            bad_row = _first_nonfinite_row(X)
            if bad_row is not None:
                raise ValueError(
                    f"{src} contains NaN or infinity at row {row0 + bad_row} "
                    f"(line {lines[bad_row]})"
                )
            y = plan.encode_strings(np.char.strip(table[:, label_col]))
            w = None if weight_col is None else _weights_of(src, table[:, weight_col], lines)
            builder.append(X, y, w)
            row0 += len(rows)
        info = builder.commit()
    if meter is not None:
        meter.finish()
    return info


def _weights_of(src: str, column: NDArray[np.str_], lines: list[int]) -> NDArray[np.float64]:
    """The weight column of a block as float64 (one conversion for the block), refusing a
    non-number, NaN/inf or a negative weight with the file, line and value."""
    try:
        w = np.char.strip(column).astype(np.float64)
    except ValueError:
        for k, text in enumerate(column):  # only to name the first bad line
            try:
                float(text)
            except ValueError:
                raise ValueError(
                    f"{src}, line {lines[k]}: weight {text.strip()!r} is not a number"
                ) from None
        raise
    bad = np.flatnonzero(~(np.isfinite(w) & (w >= 0)))
    if bad.size:
        k = int(bad[0])
        raise ValueError(
            f"{src}, line {lines[k]}: weight {column[k].strip()!r} must be a finite number >= 0"
        )
    return w


def _locate_csv_error(
    src: str, rows: list[list[str]], lines: list[int], feature_cols: list[int]
) -> NoReturn:
    """Raise ValueError naming the line and column of the first feature that is not a number."""
    for row, ln in zip(rows, lines, strict=False):
        for j in feature_cols:
            try:
                float(row[j])
            except ValueError:
                raise ValueError(
                    f"{src}, line {ln}: column {j} is not a number: {row[j]!r}"
                ) from None
    raise ValueError(f"{src}, line {lines[0]}: cannot parse the features of the lines from here")
