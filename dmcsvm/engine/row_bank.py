"""A bank of X rows keyed by pattern id (the coordinator's and each Dask worker's copy)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .id_index import IdIndex


class RowBank:
    """X rows by pattern id.  The coordinator's holds the patterns that entered a batch since the
    last :meth:`keep` and the support patterns (the partitions ship a row's X once, ``cand_new``);
    each Dask worker's holds the same rows, so that a round's message carries only the batch rows
    the workers have not seen (:func:`~dmcsvm.engine.messages.pack_message`).
    Dense rows sit in one array (rows by :class:`IdIndex` slot, gathered with one fancy index a
    batch), CSR rows one 1-row matrix per id."""

    def __init__(self):
        self._index = IdIndex()
        self._X = None  # dense rows: (capacity x d); rows [0, _used) are live
        self._used = 0
        self._sparse: dict[int, object] = {}

    def __len__(self) -> int:
        return len(self._index) + len(self._sparse)

    def ids(self) -> np.ndarray:
        """The banked ids, sorted."""
        if self._sparse:
            return np.sort(np.fromiter(self._sparse, dtype=np.int64, count=len(self._sparse)))
        return self._index.ids()

    def add(self, ids, X):
        ids = np.asarray(ids, dtype=np.int64)
        if sp.issparse(X):
            for j, g in enumerate(ids.tolist()):
                if g not in self._sparse:
                    self._sparse[g] = X[j : j + 1]
            return
        new = np.flatnonzero(self._index.lookup(ids) < 0)
        if new.shape[0] == 0:
            return
        new = new[np.unique(ids[new], return_index=True)[1]]  # an id once
        need = self._used + new.shape[0]
        if self._X is None or need > self._X.shape[0]:
            grown = np.empty((max(need, 2 * self._used, 64), X.shape[1]), dtype=X.dtype)
            if self._used:
                grown[: self._used] = self._X[: self._used]
            self._X = grown
        slots = np.arange(self._used, need)
        self._X[slots] = X[new]
        self._index.add(ids[new], slots)
        self._used = need

    def _rows(self, ids) -> np.ndarray:
        slots = self._index.lookup(ids)
        if (slots < 0).any():
            raise KeyError(int(np.asarray(ids)[np.flatnonzero(slots < 0)[0]]))
        return self._X[slots]

    def batch(self, ids, xrow, Xnew, d, sparse, dtype):
        """X rows of a batch in order: row ``xrow[j]`` of ``Xnew`` where ``xrow[j] >= 0``, else the
        banked row of ``ids[j]``."""
        if sparse:
            return (
                sp.vstack(
                    [
                        Xnew[int(r)] if r >= 0 else self._sparse[int(g)]
                        for g, r in zip(ids, xrow, strict=False)
                    ],
                    format="csr",
                )
                if len(ids)
                else sp.csr_matrix((0, d), dtype=dtype)
            )
        ids, xrow = np.asarray(ids, dtype=np.int64), np.asarray(xrow, dtype=np.int64)
        out = np.empty((len(ids), d), dtype=Xnew.dtype if Xnew.shape[0] else dtype)
        fresh = xrow >= 0
        out[fresh] = Xnew[xrow[fresh]]
        if not fresh.all():
            out[~fresh] = self._rows(ids[~fresh])
        return out

    def keep(self, ids) -> None:
        """Drop every banked row but those of ``ids`` (the partitions forget the same rows'
        ``shipped`` marks with the message's ``reship``)."""
        ids = np.asarray(ids, dtype=np.int64)
        if self._sparse:
            live = set(ids.tolist())
            self._sparse = {g: x for g, x in self._sparse.items() if g in live}
            return
        _, old = self._index.keep(ids)
        if self._X is not None:
            self._X[: old.shape[0]] = self._X[old]  # (the fancy index reads into a temporary)
        self._used = old.shape[0]

    def stack(self, ids, d, sparse, dtype):
        if len(ids) == 0:
            return sp.csr_matrix((0, d), dtype=dtype) if sparse else np.zeros((0, d), dtype=dtype)
        if sparse:
            return sp.vstack([self._sparse[int(g)] for g in ids]).tocsr()
        return self._rows(ids)
