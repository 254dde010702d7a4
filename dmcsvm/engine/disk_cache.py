"""The on-disk tier of a partition's kernel-column cache: columns ``K(X_part, x_s)`` in a zarr
array.

docs/design.md, 'Data and kernel columns': "kernel-row blocks live in zarr too ... an LRU in memory
in front of them".  A column is stored over all ``n`` rows of the partition (rows not active when it
was computed hold 0 and are never read back before the next unshrink, which empties the cache), one
column per zarr chunk of shape ``(n, 1)``: one read of ``4 n`` bytes serves a pattern selected
again, against reading ``X`` (``4 n d`` bytes when the rows do not fit in memory) plus ``2 n d``
flops to recompute it. Slots are reused least-recently-used first.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import OrderedDict

import numpy as np


class ZarrColumnCache:
    """LRU map from a global pattern id to its kernel column, held in a zarr array on disk.

    Parameters
    ----------
    n_rows : int
        Rows of the partition (length of every column).
    budget_bytes : int
        Disk budget; the array has ``budget_bytes // (4 n_rows)`` column slots.  0 disables it.
    directory : str, optional
        Where to create the array (a private temporary directory inside it, removed by
        :meth:`close`); default: the system temporary directory.
    dtype : numpy dtype
        Stored precision (float32 halves the I/O and matches float32 data).
    """

    def __init__(
        self, n_rows: int, budget_bytes: int, directory: str | None = None, dtype=np.float32
    ):
        self.n = int(n_rows)
        self.dtype = np.dtype(dtype)
        col_bytes = max(1, self.n * self.dtype.itemsize)
        self.capacity = int(max(0, budget_bytes) // col_bytes) if self.n else 0
        self.budget = self.capacity * col_bytes
        self._slot: OrderedDict[int, int] = OrderedDict()
        self._free: list[int] = list(range(self.capacity - 1, -1, -1))
        self.hits = self.misses = self.writes = 0
        self.bytes_read = self.bytes_written = 0
        self.path = None
        self._arr = None
        if self.capacity:
            import zarr

            if directory:
                os.makedirs(directory, exist_ok=True)
            self.path = tempfile.mkdtemp(prefix="dmcsvm-kcache-", dir=directory)
            # uncompressed: kernel values do not compress and decompression would cost more than
            # the bytes it saves; one column per chunk, so a read or write touches one file
            self._arr = zarr.create_array(
                os.path.join(self.path, "columns.zarr"),
                shape=(self.n, self.capacity),
                chunks=(self.n, 1),
                dtype=self.dtype,
                compressors=None,
                fill_value=0,
                overwrite=True,
            )

    def __len__(self):
        return len(self._slot)

    def __contains__(self, key):
        return key in self._slot

    def get(self, key: int, rows: np.ndarray | None = None):
        """The stored column of ``key`` (restricted to ``rows`` when given) or None."""
        slot = self._slot.get(key)
        if slot is None:
            self.misses += 1
            return None
        self._slot.move_to_end(key)
        col = np.asarray(self._arr[:, slot])
        self.hits += 1
        self.bytes_read += col.nbytes
        return col if rows is None or rows.shape[0] == self.n else col[rows]

    def put(self, key: int, values: np.ndarray, rows: np.ndarray | None = None) -> None:
        """Store ``values`` (over ``rows`` of the partition, all rows when None) for ``key``."""
        if not self.capacity or key in self._slot:
            return
        if self._free:
            slot = self._free.pop()
        else:
            _, slot = self._slot.popitem(last=False)
        if rows is None or rows.shape[0] == self.n:
            col = np.ascontiguousarray(values, dtype=self.dtype)
        else:
            col = np.zeros(self.n, dtype=self.dtype)
            col[rows] = values
        self._arr[:, slot] = col
        self._slot[key] = slot
        self.writes += 1
        self.bytes_written += col.nbytes

    def clear(self) -> None:
        """Forget every column (after an unshrink the stored columns miss the re-activated rows)."""
        self._free = list(range(self.capacity - 1, -1, -1))
        self._slot.clear()

    def stats(self) -> dict:
        return {
            "disk_capacity": self.capacity,
            "disk_cols": len(self._slot),
            "disk_hits": self.hits,
            "disk_writes": self.writes,
            "disk_bytes_read": self.bytes_read,
            "disk_bytes_written": self.bytes_written,
        }

    def close(self) -> None:
        self._arr = None
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None
