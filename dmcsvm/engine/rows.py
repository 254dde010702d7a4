"""Where a partition's feature rows live: in memory, or re-read from the zarr store chunk by chunk.

docs/design.md, 'Data and kernel columns': "workers that cannot hold their X chunks re-read them
from the store".  A partition asks its rows for three things only — rows by index (candidates,
shrunk rows), the rows in store-chunk order (a streaming pass that computes kernel blocks), and
their count — so the same partition code runs whether the rows fit in the worker's memory or not.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


def take_rows(X, rows, out=None):
    """Rows of a dense array or CSR matrix, as a C-contiguous array / CSR matrix; dense rows
    into ``out`` (C-contiguous, ``len(rows) x d`` of ``X``'s dtype) when given, a buffer the
    caller reuses (a CSR matrix ignores it)."""
    if sp.issparse(X):
        return X[rows]
    if out is not None:
        return np.take(X, rows, axis=0, out=out)
    return np.ascontiguousarray(X[rows])


def stack_rows(blocks, d, sparse, dtype):
    """Stack row blocks (dense arrays or CSR matrices) into one block of ``d`` columns."""
    if not blocks:
        return sp.csr_matrix((0, d), dtype=dtype) if sparse else np.zeros((0, d), dtype=dtype)
    if sparse:
        return sp.vstack(blocks, format="csr")
    return np.concatenate(blocks) if len(blocks) > 1 else blocks[0]


@dataclass(frozen=True)
class StoreRows:
    """Rows ``[lo, hi)`` of a zarr data store, read where the partition lives (on its worker).

    ``stream=True`` asks the partition not to hold them but to re-read them from the store chunk
    by chunk every time it needs them (the executor sets it when the worker's memory cannot hold
    the partition); ``rows_per_chunk`` is the store's chunking, so reads never split a chunk.
    """

    url: str
    lo: int
    hi: int
    rows_per_chunk: int = 0
    stream: bool = False
    nbytes: int = 0

    def load(self):
        from ..store import read_rows

        return read_rows(self.url, self.lo, self.hi)


@dataclass(frozen=True)
class StoreSource:
    """A zarr data store seen as a row source: ``shape`` and ``slice(lo, hi) -> StoreRows``."""

    url: str
    n_samples: int
    n_features: int
    rows_per_chunk: int = 0
    row_bytes: float = 0.0

    @property
    def shape(self):
        return (self.n_samples, self.n_features)

    def slice(self, lo, hi) -> StoreRows:
        return StoreRows(
            self.url, lo, hi, self.rows_per_chunk, nbytes=int((hi - lo) * self.row_bytes)
        )


@dataclass(frozen=True)
class DaskRows:
    """Rows ``[lo, hi)`` of a dask array, computed where the partition is built (in-process)."""

    array: object

    def load(self):
        return np.asarray(self.array.compute(scheduler="threads"))


@dataclass(frozen=True)
class DaskSource:
    """A 2-D dask array seen as a row source.  The in-process executor computes each partition's
    slice; the Dask executor rechunks it to the partition bounds, persists it on the cluster and
    builds each partition on the worker that holds its block (data locality, as xgboost's and
    lightgbm's Dask modules place their partitions)."""

    array: object

    @property
    def shape(self):
        return self.array.shape

    def slice(self, lo, hi) -> DaskRows:
        return DaskRows(self.array[lo:hi])


class MemoryRows:
    """The partition's rows held in memory, as a private, freshly allocated copy (the same memory
    alignment in-process and on a worker, so SIMD paths — and the last bits of every result — do
    not depend on the executor)."""

    in_memory = True

    def __init__(self, X):
        if hasattr(X, "load"):
            # freshly read rows are already a private, freshly allocated array: no second copy
            X = X.load()
            self.X = X.tocsr() if sp.issparse(X) else np.ascontiguousarray(X)
        else:
            self.X = X.tocsr(copy=True) if sp.issparse(X) else np.array(X, order="C", copy=True)
        self.n, self.d = self.X.shape
        self.sparse = sp.issparse(self.X)
        self.dtype = self.X.dtype

    def take(self, idx):
        return take_rows(self.X, idx)

    def chunks(self):
        """``(a, b, rows a..b-1)`` blocks covering all rows, in order: here a single block."""
        yield 0, self.n, self.X

    def close(self):
        pass


class StreamingRows:
    """Rows re-read from the store, one store chunk at a time, with the next chunk read in the
    background while the current one is used (zarr decompression and file reads release the GIL).

    Memory held: at most two store chunks (about 2 x 8 MiB with the default chunking).
    """

    in_memory = False

    #: rows kept from :meth:`take` (candidates tend to be asked for again in the next rounds)
    ROW_CACHE_BYTES = 32 * 2**20

    def __init__(self, src: StoreRows):
        from collections import OrderedDict

        from ..store import open_store

        self.src = src
        self._row_cache: OrderedDict = OrderedDict()
        self._row_cache_bytes = 0
        info = open_store(src.url)
        self.info = info
        self.n = src.hi - src.lo
        self.d = info.n_features
        self.sparse = info.sparse
        self.dtype = np.dtype(np.float32)
        R = src.rows_per_chunk or info.rows_per_chunk
        # local chunk edges on the store's global chunk grid
        edges = [0] + [g - src.lo for g in range((src.lo // R + 1) * R, src.hi, R)] + [self.n]
        self.bounds = [(a, b) for a, b in zip(edges[:-1], edges[1:], strict=False) if b > a]
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="dmcsvm-prefetch")
        self.chunks_read = 0
        self.bytes_read = 0

    def _read(self, a, b):
        from ..store import read_rows

        X = read_rows(self.info, self.src.lo + a, self.src.lo + b)
        self.chunks_read += 1
        self.bytes_read += X.data.nbytes if self.sparse else X.nbytes
        return X

    def chunks(self, only=None):
        """Yield ``(a, b, X[a:b])`` for every store chunk (or the chunk indices in ``only``), in
        order, prefetching the next chunk."""
        todo = list(range(len(self.bounds))) if only is None else list(only)
        if not todo:
            return
        fut = self._pool.submit(self._read, *self.bounds[todo[0]])
        for k, j in enumerate(todo):
            X = fut.result()
            if k + 1 < len(todo):
                fut = self._pool.submit(self._read, *self.bounds[todo[k + 1]])
            a, b = self.bounds[j]
            yield a, b, X

    def take(self, idx):
        """Rows ``idx`` (sorted or not): from the small row LRU, else reading only the chunks
        that hold them."""
        idx = np.asarray(idx, dtype=np.int64)
        if idx.shape[0] == 0:
            return stack_rows([], self.d, self.sparse, self.dtype)
        cache = self._row_cache
        hit = np.array([int(i) in cache for i in idx], dtype=bool)
        if hit.all():
            rows = [cache[int(i)] for i in idx]
            for i in idx:
                cache.move_to_end(int(i))
            return stack_rows(rows, self.d, self.sparse, self.dtype)
        # the hits are taken before the fresh rows enter the LRU (which may evict them)
        cached = {int(i): cache[int(i)] for i in idx[hit]}
        fresh = self._take_from_store(idx[~hit])
        for j, i in enumerate(idx[~hit]):
            self._remember(int(i), fresh[j : j + 1] if self.sparse else fresh[j : j + 1].copy())
        if not hit.any():
            return fresh
        rows = []
        k = 0
        for i, h in zip(idx, hit, strict=False):
            if h:
                rows.append(cached[int(i)])
            else:
                rows.append(fresh[k : k + 1])
                k += 1
        return stack_rows(rows, self.d, self.sparse, self.dtype)

    def remember(self, i, row):
        """Keep row ``i`` (local index; ``row`` of shape (1, d)) in the small LRU that
        :meth:`take` reads first (rows seen during a pass that are likely to be asked for)."""
        if i not in self._row_cache:
            self._remember(i, row)

    def _remember(self, i, row):
        nbytes = row.data.nbytes if self.sparse else row.nbytes
        if nbytes > self.ROW_CACHE_BYTES:
            return
        while self._row_cache and self._row_cache_bytes + nbytes > self.ROW_CACHE_BYTES:
            _, old = self._row_cache.popitem(last=False)
            self._row_cache_bytes -= old.data.nbytes if self.sparse else old.nbytes
        self._row_cache[i] = row
        self._row_cache_bytes += nbytes

    def _take_from_store(self, idx):
        order = np.argsort(idx, kind="stable")
        sidx = idx[order]
        starts = np.array([a for a, _ in self.bounds])
        which = np.searchsorted(starts, sidx, side="right") - 1
        blocks = []
        for a, b, X in self.chunks(np.unique(which)):
            sel = sidx[(sidx >= a) & (sidx < b)] - a
            blocks.append(take_rows(X, sel))
        out = stack_rows(blocks, self.d, self.sparse, self.dtype)
        inv = np.empty_like(order)
        inv[order] = np.arange(order.shape[0])
        return take_rows(out, inv)

    def close(self):
        self._pool.shutdown(wait=True)


class CompactRows:
    """Dense X rows of a sorted subset ``ids`` of a streamed partition, written once into a
    private copy: in memory when small, else an uncompressed zarr array on local disk.

    After shrinking, a streamed partition's kernel passes only need the active rows, but those
    are scattered over every store chunk; reading this compact copy instead costs
    ``4 |active| d`` bytes per pass instead of ``4 n d`` (LIBSVM's shrinking, carried over to I/O).

    Parameters
    ----------
    ids : ndarray of int64
        Sorted partition-local row indices held.
    blocks : iterable of (ndarray, ndarray)
        ``(rows, X[rows])`` in increasing row order, covering ``ids`` exactly.
    d : int
        Features.
    dtype : numpy dtype
    directory : str, optional
        Where to create the on-disk copy (a private temporary directory, removed by :meth:`close`).
    """

    #: rows per zarr chunk of the on-disk copy
    CHUNK_BYTES = 8 * 2**20
    #: copies up to this size stay in memory
    IN_MEMORY_BYTES = 16 * 2**20

    def __init__(self, ids, blocks, d, dtype, directory=None):
        import os
        import tempfile

        self.ids = np.ascontiguousarray(ids, dtype=np.int64)
        self.d = int(d)
        self.dtype = np.dtype(dtype)
        n = self.ids.shape[0]
        row_bytes = max(1, self.d * self.dtype.itemsize)
        self.rows_per_chunk = max(1, self.CHUNK_BYTES // row_bytes)
        self.nbytes = n * row_bytes
        self.path = None
        self.bytes_read = 0
        self._mem = None
        self._arr = None
        if self.nbytes <= self.IN_MEMORY_BYTES:
            self._mem = np.empty((n, self.d), dtype=self.dtype)
            write = self._mem.__setitem__
        else:
            import zarr

            if directory:
                os.makedirs(directory, exist_ok=True)
            self.path = tempfile.mkdtemp(prefix="dmcsvm-active-", dir=directory)
            self._arr = zarr.create_array(
                os.path.join(self.path, "rows.zarr"),
                shape=(n, self.d),
                chunks=(self.rows_per_chunk, self.d),
                dtype=self.dtype,
                compressors=None,
                fill_value=0,
                overwrite=True,
            )
            write = self._arr.__setitem__
        try:
            # buffered so that every write fills whole chunks (zarr rewrites partial ones)
            R = self.rows_per_chunk
            buf = np.empty((min(R, n), self.d), dtype=self.dtype)
            filled = done = 0
            for rows, X in blocks:
                k = 0
                while k < rows.shape[0]:
                    m = min(R - filled, rows.shape[0] - k)
                    buf[filled : filled + m] = X[k : k + m]
                    filled, k = filled + m, k + m
                    if filled == R or done + filled == n:
                        write(slice(done, done + filled), buf[:filled])
                        done, filled = done + filled, 0
            if done + filled != n:
                raise RuntimeError(f"compact copy got {done + filled} of {n} rows")
        except BaseException:
            self.close()
            raise

    def _chunk(self, k):
        a = k * self.rows_per_chunk
        b = min(a + self.rows_per_chunk, self.ids.shape[0])
        if self._mem is not None:
            return self._mem[a:b]
        X = np.asarray(self._arr[a:b])
        self.bytes_read += X.nbytes
        return X

    def blocks(self, active):
        """``(pa, pb, rows, X[rows])`` over the sorted ``active`` rows (a subset of ``ids``), in
        order: positions ``pa:pb`` of ``active`` and their rows."""
        R = self.rows_per_chunk
        for k in range(-(-self.ids.shape[0] // R)):
            ids = self.ids[k * R : (k + 1) * R]
            pa, pb = np.searchsorted(active, [ids[0], ids[-1] + 1])
            if pb == pa:
                continue
            rows = active[pa:pb]
            Xc = self._chunk(k)
            yield (
                pa,
                pb,
                rows,
                (
                    Xc
                    if pb - pa == ids.shape[0]
                    else np.ascontiguousarray(Xc[np.searchsorted(ids, rows)])
                ),
            )

    def holds(self, rows) -> bool:
        pos = np.searchsorted(self.ids, rows)
        return bool(
            np.all(pos < self.ids.shape[0])
            and np.array_equal(self.ids[np.minimum(pos, self.ids.shape[0] - 1)], rows)
        )

    def take(self, rows):
        """Rows ``rows`` (all held, any order)."""
        rows = np.asarray(rows, dtype=np.int64)
        pos = np.searchsorted(self.ids, rows)
        out = np.empty((rows.shape[0], self.d), dtype=self.dtype)
        which = pos // self.rows_per_chunk
        for k in np.unique(which):
            sel = np.flatnonzero(which == k)
            out[sel] = self._chunk(int(k))[pos[sel] - k * self.rows_per_chunk]
        return out

    def close(self):
        import shutil

        self._mem = self._arr = None
        if self.path:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None


def make_rows(X):
    """:class:`StreamingRows` for a store source marked ``stream``, else :class:`MemoryRows`."""
    if isinstance(X, StoreRows) and X.stream:
        return StreamingRows(X)
    return MemoryRows(X)
