"""Pattern id -> slot maps for the stores keyed by pattern id (the coordinator's coefficient rows,
banked X rows, the Gram cache): two sorted ``int64`` arrays and a binary search.

Every round looks up a whole batch (thousands of ids) in each store; a ``dict`` of Python ints
did it one id at a time in the interpreter and held ~100 bytes per id, these arrays take 16 and
answer a batch with one vectorised ``searchsorted``.
"""

from __future__ import annotations

import numpy as np


class IdIndex:
    """Distinct pattern ids, each with a slot (a row number in the store that owns the index)."""

    def __init__(self, ids=None, slots=None):
        self._keys = np.empty(0, dtype=np.int64)
        self._slots = np.empty(0, dtype=np.int64)
        if ids is not None:
            self.add(ids, slots)

    def __len__(self) -> int:
        return int(self._keys.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self._keys.nbytes + self._slots.nbytes)

    def ids(self) -> np.ndarray:
        """The ids held, sorted."""
        return self._keys.copy()

    def lookup(self, ids) -> np.ndarray:
        """The slot of every id in ``ids``, -1 for ids not held."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        m = self._keys.shape[0]
        if m == 0 or ids.shape[0] == 0:
            return np.full(ids.shape[0], -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self._keys, ids), m - 1)
        return np.where(self._keys[at] == ids, self._slots[at], -1)

    def add(self, ids, slots) -> None:
        """Hold ``ids`` (distinct, none held yet) at ``slots``."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        if ids.shape != slots.shape:
            raise ValueError(f"{ids.shape[0]} ids for {slots.shape[0]} slots")
        if ids.shape[0] == 0:
            return
        order = np.argsort(ids, kind="stable")
        ids, slots = ids[order], slots[order]
        at = np.searchsorted(self._keys, ids)
        self._keys = np.insert(self._keys, at, ids)
        self._slots = np.insert(self._slots, at, slots)

    def keep(self, ids) -> tuple[np.ndarray, np.ndarray]:
        """Hold only those of ``ids`` that are held now, renumbered ``0 .. k-1`` in the order of
        their old slots (the owner's rows stay in order when it moves them to the front).
        Returns ``(where, old)``: the kept ones' positions in ``ids`` and their old slots, both
        in that order; the owner moves its rows ``old`` to ``0 .. k-1``."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        slots = self.lookup(ids)
        where = np.flatnonzero(slots >= 0)
        where = where[np.argsort(slots[where], kind="stable")]
        old = slots[where]
        fresh = IdIndex(ids[where], np.arange(where.shape[0]))
        self._keys, self._slots = fresh._keys, fresh._slots
        return where, old
