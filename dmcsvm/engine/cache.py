"""In-memory LRU of kernel columns ``K(X_part_active, x_s)`` with a byte budget.

The columns live side by side in one preallocated buffer (a slab of equal-width slots) rather
than as one array each: shrinking then re-packs every cached column in one nogil numba pass
(:func:`compact_slots`) instead of one masked copy and one allocation per column under the GIL.
Per-column arrays made a fit with the cache on slower than with it off, and slower still when the
partitions are threads of one process (bench_thread_scaling.py, scaling.md).
"""

from __future__ import annotations

from collections import OrderedDict

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def compact_slots(buf, slots, old_width, keep_idx):
    """Re-pack the columns in ``slots`` (increasing) of ``buf``, each ``old_width`` long at offset
    ``slot * old_width``, to their entries ``keep_idx`` (increasing): the q-th of them to slot q
    of width ``len(keep_idx)``.

    In place and safe: every write position ``q * w_new + i`` lies at or before the position it
    reads, ``slots[q] * old_width + keep_idx[i]``, and before every later read."""
    w = keep_idx.shape[0]
    for q in range(slots.shape[0]):
        src = slots[q] * old_width
        dst = q * w
        for i in range(w):
            buf[dst + i] = buf[src + keep_idx[i]]


def gram_places(budget_bytes: float, itemsize: int) -> int:
    """Rows (and columns) of the largest square Gram block of ``itemsize``-byte values within
    ``budget_bytes`` (the coordinator's ``_GramCache``; what bounds MulticlassSVC's working set
    sized by the data, :func:`~dmcsvm.estimators._engine.auto_batch`)."""
    return int(np.sqrt(budget_bytes / itemsize))


def gram_bytes(places: int, itemsize: int) -> int:
    """Bytes of a square Gram block of ``places`` rows of ``itemsize``-byte values (the inverse
    of :func:`gram_places`)."""
    return int(places) ** 2 * int(itemsize)


@numba.njit(cache=True, nogil=True)
def compact_columns(G, rows, keep):
    """Move the values ``G[rows[i], keep]`` (``keep`` increasing) to ``G[rows[i], :k]`` in
    place, for each ``rows[i] >= 0`` (the rows of ``G`` that hold the kept places; -1: a place
    without values): the coordinator's Gram cache keeping one working set's places (a
    fancy-indexed copy made a k x k temporary, 100 MB on letter, page-faulted in at every
    eviction).  Safe in place: entry ``j`` of a row is written from entry ``keep[j] >= j``, not
    yet overwritten."""
    k = keep.shape[0]
    for i in range(rows.shape[0]):
        r = rows[i]
        if r < 0:
            continue
        for j in range(k):
            G[r, j] = G[r, keep[j]]


#: the column cache halves its request counts once it has been asked for this many columns per
#: column it can hold (see :class:`ColumnCache`): the counts weigh the last few rounds
ADMIT_WINDOW = 3


class ColumnCache:
    """LRU map from a global pattern id to its kernel column over the partition's active rows,
    with admission by request counts.

    When the cache is full, a new column takes the place of the least recently used one only if
    it was asked for more often (counts halved every :data:`ADMIT_WINDOW` cache-fulls of
    requests, so they weigh the last few rounds).  Plain LRU fails on a large problem, whose
    rounds each ask for more columns than fit, mostly of the same support patterns: every
    column was evicted before it was asked for again.  On 100,000 deformed digits (columns
    of 50,000 rows, batches of 13,000-31,000) 7.5 % of the requests hit with LRU, 20 % with
    admission, and the fit computed 396,021 columns instead of 461,339; on 50,000, 115,124
    instead of 112,407 (benchmarks/results/HISTORY.md, 'Column cache admission').

    The columns follow the partition's active set: when rows are shrunk away, :meth:`compact`
    drops the same rows from every cached column (as LIBSVM does on shrinking) and the freed
    bytes hold more columns; :meth:`clear` empties the cache when the active set grows again.
    :meth:`get` returns a view into the buffer, valid until the next :meth:`put`, :meth:`compact`
    or :meth:`clear`; the columns read since :meth:`start_round` are not evicted by a
    :meth:`put` in the same round (a caller may still hold them).

    Parameters
    ----------
    budget_bytes : int
        Upper bound on the bytes held by cached columns; 0 disables caching.
    """

    def __init__(self, budget_bytes: int):
        self.budget = int(max(0, budget_bytes))
        self._buf: np.ndarray | None = None
        self._width = 0
        self._slot: OrderedDict[int, int] = OrderedDict()  # key -> slot, least recent first
        self._next = 0  # slots from here on were never used at this width
        self._pinned: set[int] = set()
        # key -> times asked for (get / gather), cached or not, halved every ADMIT_WINDOW
        # cache-fulls of requests
        self._freq: dict[int, int] = {}
        self._asked = 0  # requests since the counts were last halved

    def __len__(self):
        return len(self._slot)

    def __contains__(self, key):
        return key in self._slot

    @property
    def nbytes(self) -> int:
        """Bytes held by the cached columns."""
        return 0 if self._buf is None else len(self._slot) * self._width * self._buf.itemsize

    def _view(self, slot: int) -> np.ndarray:
        return self._buf[slot * self._width : (slot + 1) * self._width]

    def start_round(self) -> None:
        """Columns read from now on are kept until the next call (see the class docstring).
        The request counts are halved here once ``ADMIT_WINDOW`` times as many columns as fit
        were asked for since they last were."""
        self._pinned.clear()
        if self._width and self._buf is not None:
            fits = max(1, self.budget // (self._width * self._buf.itemsize))
            if self._asked >= ADMIT_WINDOW * fits:
                self._asked = 0
                self._freq = {k: v >> 1 for k, v in self._freq.items() if v > 1}

    def _count(self, keys) -> None:
        """Count a request of each of ``keys`` (what admission compares, :meth:`put_many`)."""
        freq = self._freq
        for k in keys:
            freq[k] = freq.get(k, 0) + 1
        self._asked += len(keys)

    def get(self, key: int):
        self._count((key,))
        slot = self._slot.get(key)
        if slot is None:
            return None
        self._slot.move_to_end(key)
        self._pinned.add(key)
        return self._view(slot)

    def gather(self, keys, out) -> list:
        """:meth:`get` of every key at once: the cached columns of ``keys`` copied into the rows
        ``out[j]`` (one gather, not one view and one copy per column: a round asks for hundreds
        of columns, and the per-column Python cost was a tenth of a small fit); returns the
        positions ``j`` of the misses.  Hits become the most recently used and are pinned."""
        slot_of = self._slot.get
        keys = [int(k) for k in keys]
        self._count(keys)
        pos, slots, miss = [], [], []
        for j, k in enumerate(keys):
            s = slot_of(k)
            if s is None:
                miss.append(j)
            else:
                pos.append(j)
                slots.append(s)
        if pos:
            touch = self._slot.move_to_end
            for j in pos:
                touch(keys[j])
            self._pinned.update(keys[j] for j in pos)
            table = self._buf[: self._next * self._width].reshape(-1, self._width)
            out[pos] = table[slots]
        return miss

    def put_many(self, keys, cols, rows=None) -> None:
        """:meth:`put` of ``cols[j]`` under ``keys[j]`` for every ``j``, in order (the same slots
        and evictions); with ``rows``, of ``cols[rows[j]]`` (copied straight from ``cols``: the
        misses of a round's first rounds were hundreds of MB gathered twice into temporaries,
        page-faulted in afresh every round)."""
        keys = [int(k) for k in keys]
        if not keys:
            return
        cols = np.asarray(cols)
        src = range(len(keys)) if rows is None else [int(r) for r in rows]
        if cols.shape[1] * cols.itemsize > self.budget or cols.shape[1] == 0:
            return
        if self._buf is None or cols.dtype != self._buf.dtype:
            self.clear()
            self._buf = np.empty(0, dtype=cols.dtype)
        elif self._slot and cols.shape[1] != self._width:
            self.clear()
        if not self._slot:
            self._width, self._next = cols.shape[1], 0
        self._grow()  # (the whole budget at once; nothing once it is there)
        placed, self._next = self._admit(
            self._slot, self._next, self._buf.shape[0] // self._width, keys
        )
        # a slot taken twice in this call (a column evicted by a later one) ends with the later
        # column, as sequential puts leave it
        table = self._buf[: self._next * self._width].reshape(-1, self._width)
        for j, slot in placed:
            table[slot] = cols[src[j]]

    def _admit(self, held, used: int, cap: int, keys) -> tuple[list, int]:
        """Place ``keys`` in order in ``held`` (key -> slot, least recent first; ``used`` of
        ``cap`` slots taken): a key held moves up, a new one takes a free slot, or the least
        recent unpinned key's slot if it was asked for more often than that key.  Returns the
        ``(position in keys, slot)`` of every key placed and the slots used: what
        :meth:`put_many` does to the cache, and :meth:`takes` to a copy of it."""
        placed = []
        for j, key in enumerate(keys):
            slot = held.pop(key, None)
            if slot is None:
                if used < cap:
                    slot, used = used, used + 1
                else:
                    victim = next((k for k in held if k not in self._pinned), None)
                    if victim is None or self._freq.get(key, 0) <= self._freq.get(victim, 0):
                        continue  # nothing evictable, or not asked for more often than it
                    slot = held.pop(victim)
            held[key] = slot
            placed.append((j, slot))
        return placed, used

    def takes(self, keys, width: int, dtype) -> list[bool]:
        """Which of ``keys`` the cache holds after a :meth:`put_many` of columns of ``width``
        values of ``dtype`` under them now, in order; nothing changes.  A partition computes a
        column over every active row only when the cache will keep it (RoundMessage.scores)."""
        keys = [int(k) for k in keys]
        itemsize = np.dtype(dtype).itemsize
        if width * itemsize > self.budget or width == 0:
            return [False] * len(keys)
        cleared = (
            self._buf is None
            or np.dtype(dtype) != self._buf.dtype
            or (bool(self._slot) and width != self._width)
        )
        held = OrderedDict() if cleared else OrderedDict(self._slot)
        used = 0 if cleared or not self._slot else self._next
        # (the buffer at the whole budget, as _grow makes it)
        self._admit(held, used, (self.budget // itemsize) // width, keys)
        return [key in held for key in keys]  # (a key taken may be evicted by a later one)

    def put(self, key: int, col: np.ndarray) -> None:
        """Copy ``col`` into the cache (evicting the least recently used unpinned columns)."""
        self.put_many([key], np.asarray(col)[None])

    def _grow(self) -> None:
        """The buffer at the whole budget, allocated once and never copied (slots keep their
        places).  The budget is reserved, not taken: ``np.empty`` leaves the pages unmapped
        until a column is written into them, so a problem whose columns never fill it holds only
        what it wrote.  Doubling instead copied every column at each growth and faulted in
        twice the memory: 1.5 of 12.7 s of a letter fit on one thread (8 growths)."""
        size = self.budget // self._buf.itemsize
        if size > self._buf.shape[0]:
            buf = np.empty(size, dtype=self._buf.dtype)
            used = self._next * self._width
            buf[:used] = self._buf[:used]
            self._buf = buf

    def compact(self, keep: np.ndarray) -> None:
        """Keep only the entries ``keep`` (boolean mask over the old active rows) of every
        column."""
        if not self._slot:
            return
        keep_idx = np.flatnonzero(keep).astype(np.int64)
        if keep_idx.shape[0] == 0:
            self.clear()
            return
        keys = np.fromiter(self._slot.keys(), dtype=np.int64, count=len(self._slot))
        slots = np.fromiter(self._slot.values(), dtype=np.int64, count=len(self._slot))
        order = np.argsort(slots)
        compact_slots(self._buf, slots[order], self._width, keep_idx)
        # the q-th used slot (by position) is now slot q; the LRU order is unchanged
        new_slot = np.empty_like(slots)
        new_slot[order] = np.arange(slots.shape[0])
        for k, q in zip(keys.tolist(), new_slot.tolist(), strict=False):
            self._slot[k] = q
        self._width, self._next = keep_idx.shape[0], len(self._slot)

    def release(self) -> None:
        """:meth:`clear` and free the buffer (the next column put makes a new one)."""
        self.clear()
        self._buf = None

    def clear(self) -> None:
        self._slot.clear()
        self._next = 0
        self._pinned.clear()
        self._width = 0
