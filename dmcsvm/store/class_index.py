"""The class index of a store's rows, read from its label array where and when it is needed, so
that the coordinator of a fit from a store holds no per-row label array (docs/design.md, 'The
coordinator's size': coordinator memory independent of n).

:func:`scan_classes` finds the classes in one pass over the label chunks (O(chunk) memory);
:class:`StoreClassIndex` stands for the class index of rows ``[lo, hi)``: slicing it gives another
one (nothing read), a partition turns its slice into an array on its own worker
(``np.asarray``), and the coordinator reads only the rows it asks for (``index[ids]``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from .layout import StoreInfo
from .readers import read_labels

#: rows of labels read at a time (8 MB of int64)
SCAN_ROWS = 1 << 20


def _blocks(info: StoreInfo, lo: int, hi: int) -> Iterator[tuple[int, int]]:
    """``[a, b)`` row blocks covering ``[lo, hi)``, aligned to the store's chunks."""
    step = max(
        int(info.rows_per_chunk), (SCAN_ROWS // int(info.rows_per_chunk)) * int(info.rows_per_chunk)
    )
    a = lo
    while a < hi:
        b = min(hi, (a // step + 1) * step)
        yield a, b
        a = b


def scan_classes(info: StoreInfo) -> tuple[np.ndarray, np.ndarray | None]:
    """``(classes, code_table)`` of the store ``info``: its sorted distinct labels, read chunk by
    chunk; for a store of string classes (labels stored as codes into ``info.classes``) also the
    class index of every code, else None."""
    found: np.ndarray | None = None
    for a, b in _blocks(info, 0, info.n_samples):
        u = np.unique(read_labels(info, a, b))
        found = u if found is None else np.union1d(found, u)
    found = np.zeros(0, dtype=np.int64) if found is None else found
    if info.classes is None:
        return found, None
    names = np.asarray(info.classes, dtype=object)
    classes = np.unique(names[found])
    table = np.full(len(names), -1, dtype=np.int64)
    table[found] = np.searchsorted(classes, names[found])
    return classes, table


def class_counts(y_idx: Any, m: int) -> np.ndarray:
    """Rows of each of the ``m`` classes of a class index: ``np.bincount`` of an array, chunk by
    chunk for a :class:`StoreClassIndex` (no n-long read)."""
    if isinstance(y_idx, StoreClassIndex):
        return y_idx.bincount(m)
    return np.bincount(np.asarray(y_idx, dtype=np.int64), minlength=m)


class StoreClassIndex:
    """Class index (int64, into ``classes``) of rows ``[lo, hi)`` of the store ``info`` (its
    :class:`~dmcsvm.store.layout.StoreInfo`, validated once by ``open_store``), read from the
    store when asked.  Picklable and small: a Dask partition receives its slice and reads its
    rows' labels itself; rebuilding a lost partition reads them again."""

    ndim = 1
    dtype = np.dtype(np.int64)

    def __init__(
        self, info: StoreInfo, lo: int, hi: int, classes: Any, code_table: Any = None
    ) -> None:
        self.info, self.lo, self.hi = info, int(lo), int(hi)
        self.classes = np.asarray(classes)
        self.code_table = None if code_table is None else np.asarray(code_table, dtype=np.int64)

    @property
    def shape(self) -> tuple[int]:
        return (self.hi - self.lo,)

    def __len__(self) -> int:
        return self.hi - self.lo

    def _index(self, raw: np.ndarray) -> np.ndarray:
        if self.code_table is not None:
            out: np.ndarray = self.code_table[np.asarray(raw, dtype=np.int64)]
            return out
        return np.searchsorted(self.classes, raw).astype(np.int64, copy=False)

    def _read(self, a: int, b: int) -> np.ndarray:
        return self._index(read_labels(self.info, self.lo + a, self.lo + b))

    def __getitem__(self, key: Any) -> StoreClassIndex | np.ndarray:
        if isinstance(key, slice):
            a, b, step = key.indices(len(self))
            if step != 1:
                raise IndexError("a StoreClassIndex slice takes no step")
            return StoreClassIndex(
                self.info, self.lo + a, self.lo + max(a, b), self.classes, self.code_table
            )
        ids = np.asarray(key, dtype=np.int64)
        if ids.ndim != 1:
            raise IndexError(f"index rows with a slice or a 1-d array, got shape {ids.shape}")
        if ids.size and (ids.min() < 0 or ids.max() >= len(self)):
            raise IndexError(f"row index out of range for {len(self)} rows")
        out = np.empty(ids.shape[0], dtype=np.int64)
        if not ids.size:
            return out
        order = np.argsort(ids, kind="stable")
        s = ids[order]
        for a, b in _blocks(self.info, self.lo, self.hi):
            i, j = np.searchsorted(s, [a - self.lo, b - self.lo])
            if i < j:
                out[order[i:j]] = self._read(a - self.lo, b - self.lo)[s[i:j] - (a - self.lo)]
        return out

    def bincount(self, minlength: int = 0) -> np.ndarray:
        """Rows of every class, read chunk by chunk (O(chunk) memory)."""
        out = np.zeros(max(int(minlength), len(self.classes)), dtype=np.int64)
        for a, b in _blocks(self.info, self.lo, self.hi):
            c = np.bincount(self._read(a - self.lo, b - self.lo), minlength=out.shape[0])
            out[: c.shape[0]] += c
        return out

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """Every row's class index, read now (O(rows) memory: for a partition's own rows)."""
        out = np.empty(len(self), dtype=np.int64)
        for a, b in _blocks(self.info, self.lo, self.hi):
            out[a - self.lo : b - self.lo] = self._read(a - self.lo, b - self.lo)
        return out if dtype is None else out.astype(dtype, copy=False)

    def __repr__(self) -> str:
        return (
            f"StoreClassIndex({self.info.url!r}, rows {self.lo}:{self.hi}, "
            f"{len(self.classes)} classes)"
        )
