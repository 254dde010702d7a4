"""Per-row values of an SMO problem (its signs and groups) that stand for an n-long array without
holding one (docs/design.md, 'The coordinator's size': a coordinator whose memory does not grow with
n).

Both are computed where they are read, from a class index that may itself live in a store
(:class:`~dmcsvm.store.class_index.StoreClassIndex`): slicing gives another one (a partition's
rows, nothing computed), ``np.asarray`` gives the values (on the partition's own worker), and
``values[ids]`` gives the values at rows ``ids`` only (the coordinator's batch and support rows).
A one-vs-rest / one-vs-one fit then sends each binary problem to its partitions as a few numbers
instead of an n-long sign vector.
"""

from __future__ import annotations

import numpy as np


class _RowValues:
    """An int64 vector of ``len(self)`` rows, computed where it is read (see module doc)."""

    ndim = 1
    dtype = np.dtype(np.int64)

    def __len__(self) -> int:
        raise NotImplementedError

    @property
    def shape(self) -> tuple[int]:
        return (len(self),)

    def _sliced(self, key: slice):
        raise NotImplementedError

    def _at(self, rows) -> np.ndarray:
        raise NotImplementedError

    def __getitem__(self, key):
        if isinstance(key, slice):
            return self._sliced(key)
        return self._at(key)

    def __array__(self, dtype=None, copy=None):
        out = self._at(slice(None))
        return out if dtype is None else out.astype(dtype, copy=False)


class PairSigns(_RowValues):
    """Signs of the binary problem "class ``pos`` against class ``neg``" over a class index:
    +1 for rows of class ``pos``, -1 for rows of class ``neg`` (of every other class when
    ``neg`` is -1, one-vs-rest), 0 for rows outside the problem (one-vs-one).

    Parameters
    ----------
    index : ndarray of int or StoreClassIndex
        Class index of every row (sliceable, and indexable by an array of rows).
    pos, neg : int
        The positive class and the negative class (-1: all others).
    """

    def __init__(self, index, pos: int, neg: int):
        self.index, self.pos, self.neg = index, int(pos), int(neg)

    def __len__(self) -> int:
        return len(self.index)

    def _sliced(self, key):
        return PairSigns(self.index[key], self.pos, self.neg)

    def _at(self, rows) -> np.ndarray:
        idx = np.asarray(self.index[rows], dtype=np.int64)
        if self.neg < 0:
            return np.where(idx == self.pos, 1, -1).astype(np.int64)
        return (idx == self.pos).astype(np.int64) - (idx == self.neg)

    def __repr__(self) -> str:
        return f"PairSigns({self.pos} vs {'rest' if self.neg < 0 else self.neg}, {len(self)} rows)"


class ConstantRows(_RowValues):
    """``n`` rows of the one value ``value`` (the groups of a binary problem, the signs of
    mScatter's dual)."""

    def __init__(self, n: int, value: int):
        self.n, self.value = int(n), int(value)

    def __len__(self) -> int:
        return self.n

    def _sliced(self, key):
        return ConstantRows(len(range(self.n)[key]), self.value)

    def _at(self, rows) -> np.ndarray:
        m = len(range(self.n)[rows]) if isinstance(rows, slice) else np.asarray(rows).shape[0]
        return np.full(m, self.value, dtype=np.int64)

    def __repr__(self) -> str:
        return f"ConstantRows({self.value}, {self.n} rows)"
