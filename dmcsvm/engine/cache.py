"""In-memory LRU of kernel columns ``K(X_part_active, x_s)`` with a byte budget."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np


class ColumnCache:
    """LRU map from a global pattern id to its kernel column over the partition's active rows.

    The columns follow the partition's active set: when rows are shrunk away, :meth:`compact`
    drops the same rows from every cached column (as LIBSVM does on shrinking), and
    :meth:`clear` empties the cache when the active set grows again.

    Parameters
    ----------
    budget_bytes : int
        Upper bound on the bytes held by cached columns; 0 disables caching.
    """

    def __init__(self, budget_bytes: int):
        self.budget = int(max(0, budget_bytes))
        self._cols: OrderedDict[int, np.ndarray] = OrderedDict()
        self.nbytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self):
        return len(self._cols)

    def __contains__(self, key):
        return key in self._cols

    def get(self, key: int):
        col = self._cols.get(key)
        if col is None:
            return None
        self._cols.move_to_end(key)
        return col

    def put(self, key: int, col: np.ndarray) -> None:
        if col.nbytes > self.budget:
            return
        old = self._cols.pop(key, None)
        if old is not None:
            self.nbytes -= old.nbytes
        while self._cols and self.nbytes + col.nbytes > self.budget:
            _, ev = self._cols.popitem(last=False)
            self.nbytes -= ev.nbytes
        self._cols[key] = col
        self.nbytes += col.nbytes

    def compact(self, keep: np.ndarray) -> None:
        """Keep only the entries ``keep`` (boolean mask over the old active rows) of every column."""
        total = 0
        for k, col in self._cols.items():
            c = np.ascontiguousarray(col[keep])
            self._cols[k] = c
            total += c.nbytes
        self.nbytes = total

    def clear(self) -> None:
        self._cols.clear()
        self.nbytes = 0
