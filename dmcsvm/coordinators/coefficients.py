"""The coordinator's coefficients ``B`` (docs/design.md, 'The Crammer-Singer dual': ``n x P``, one
row per pattern), stored for the patterns that have any: a sparse row store instead of a dense
``n x P`` array, so the coordinator's memory follows the support set and the recent batches, not
``n`` (50 M rows x 26 classes would be 10 GB of float64 dense).
"""

from __future__ import annotations

import numpy as np

from ..engine.id_index import IdIndex


class CoefficientRows:
    """Rows of ``B`` by pattern id, indexed like the dense array they replace.

    ``B[ids]`` gathers rows (zeros for patterns without coefficients), ``B[ids] = rows`` and
    ``B[ids] += dB`` write them, ``B[ids, cols]`` picks one entry per row; ``ids`` hold distinct
    pattern ids in ``[0, n)``.  A pattern gets a stored row the first time one is written;
    :meth:`compact` drops the stored rows that are all zero again (the solver calls it when it
    recounts the support), so the store holds the support patterns and those touched since.
    """

    def __init__(self, n: int, P: int):
        self.n, self.P = int(n), int(P)
        self._slot = IdIndex()  # pattern id -> its row in _data
        self._ids = np.empty(16, dtype=np.int64)
        self._data = np.zeros((16, self.P))
        self._used = 0

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.P)

    @property
    def nbytes(self) -> int:
        """Bytes held by the store (rows, ids and their index)."""
        return int(self._data.nbytes + self._ids.nbytes + self._slot.nbytes)

    def __len__(self) -> int:
        return self.n

    # ---------------------------------------------------------------- indexing
    def _ids_of(self, key) -> np.ndarray:
        ids = np.asarray(key, dtype=np.int64).reshape(-1)
        if ids.shape[0] and (ids.min() < 0 or ids.max() >= self.n):
            raise IndexError(
                f"pattern ids must be in [0, {self.n}), got {int(ids.min())}..{int(ids.max())}"
            )
        return ids

    def _lookup(self, ids: np.ndarray) -> np.ndarray:
        return self._slot.lookup(ids)

    def __getitem__(self, key):
        cols = None
        if isinstance(key, tuple):
            key, cols = key
        scalar = np.ndim(key) == 0
        ids = self._ids_of(key)
        slots = self._lookup(ids)
        have = slots >= 0
        if cols is not None:
            # one entry per row, read in place: no (len(ids) x P) gather (the re-assignment
            # asks this of every changed pattern, up to n of them)
            cols = np.broadcast_to(np.asarray(cols, dtype=np.int64).reshape(-1), ids.shape)
            out = np.zeros(ids.shape[0])
            out[have] = self._data[slots[have], cols[have]]
        else:
            out = np.zeros((ids.shape[0], self.P))
            out[have] = self._data[slots[have]]
        return out[0] if scalar else out

    def __setitem__(self, key, values) -> None:
        ids = self._ids_of(key)
        values = np.broadcast_to(np.asarray(values, dtype=np.float64), (ids.shape[0], self.P))
        slots = self._lookup(ids)
        new = slots < 0
        if new.any():
            slots[new] = self._append(ids[new])
        self._data[slots] = values

    def _append(self, ids: np.ndarray) -> np.ndarray:
        need = self._used + ids.shape[0]
        if need > self._data.shape[0]:
            cap = max(need, 2 * self._data.shape[0])
            data = np.zeros((cap, self.P))
            data[: self._used] = self._data[: self._used]
            idx = np.empty(cap, dtype=np.int64)
            idx[: self._used] = self._ids[: self._used]
            self._data, self._ids = data, idx
        slots = np.arange(self._used, need)
        self._ids[slots] = ids
        self._data[slots] = 0.0
        self._slot.add(ids, slots)
        self._used = need
        return slots

    # ---------------------------------------------------------------- the support
    def _live(self) -> np.ndarray:
        return np.any(self._data[: self._used] != 0.0, axis=1)

    def support(self) -> np.ndarray:
        """Sorted ids of the patterns with any non-zero coefficient."""
        return np.sort(self._ids[: self._used][self._live()])

    def count_support(self) -> int:
        return int(np.count_nonzero(self._live()))

    def compact(self) -> None:
        """Drop the stored rows that are all zero (patterns that left the support)."""
        live = self._live()
        if live.all():
            return
        ids, rows = self._ids[: self._used][live], self._data[: self._used][live]
        cap = max(16, 2 * ids.shape[0])
        self._data = np.zeros((cap, self.P))
        self._ids = np.empty(cap, dtype=np.int64)
        self._used = 0
        self._slot = IdIndex()
        self._append(ids)
        self._data[: ids.shape[0]] = rows

    def toarray(self) -> np.ndarray:
        """The dense ``n x P`` array (tests and small problems only)."""
        out = np.zeros((self.n, self.P))
        out[self._ids[: self._used]] = self._data[: self._used]
        return out
