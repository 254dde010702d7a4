"""What every row partition has, whatever dual it solves: its rows and their kernel columns.

docs/design.md, 'Batched rounds': a partition owns rows ``[lo, hi)`` of the training set and answers
one message per round.  :class:`PartitionBase` holds the rows (in memory or streamed from a store),
their norms and kernel diagonal, the column caches (memory LRU, zarr tier on disk), the
kernel-column fetch over the active rows, the compact copy of streamed active rows, the counters
behind :meth:`stats`, and the BLAS hold.  Each formulation is a subclass that adds its state and its
round: the Crammer-Singer partition (:mod:`.partition`), the SMO one (:mod:`.gradient_partition`)
and the multi-prototype ones (:mod:`.prototype_partition`).  The same object runs in-process and as
a Dask actor.
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass, field

import numpy as np

from ..errors import check_finite_rows
from ..kernels import KernelSpec, kernel_block, kernel_diag, row_norms_sq
from .cache import ColumnCache
from .disk_cache import ZarrColumnCache
from .messages import unpack_message
from .rows import CompactRows, make_rows, take_rows
from .threads import BlasThreadHold

#: a streamed partition copies its active rows into a compact copy once they are at most this
#: fraction of the rows its kernel passes read (see PartitionBase._refresh_compact)
COMPACT_FRACTION = 0.5


@dataclass
class PartitionSettings:
    """What a partition needs to know of the solver (plain values, cheap to ship to a worker)."""

    kernel: dict
    C: float
    selection: int
    tol: float
    n_candidates: int
    pcls: np.ndarray | None = None  # class of every prototype (Crammer-Singer kinds)
    shrinking: bool = True
    shrink_after: int = 3
    cache_bytes: int = 0
    kernel_dtype: str = "float64"
    disk_cache_bytes: int = 0
    disk_cache_stream_only: bool = True
    cache_dir: str | None = None
    x_in_memory: object = "auto"  # True, False (stream from the store) or 'auto'
    kernel_block_bytes: int = 64 * 2**20  # largest kernel block a partition materializes
    extra: dict = field(default_factory=dict)
    #: rows with ``tol >= psi > near_tol`` are reported too (after every violator), so that the
    #: coordinator's working set can hold the rows about to violate; 'auto': tol / 10; None:
    #: violators only
    near_tol: float | str | None = "auto"
    #: report, beside the best ``n_candidates`` violators, every class's best
    #: ``n_candidates // n_classes`` (the working set's share of each class,
    #: :func:`~dmcsvm.engine.messages.pick_order`)
    class_quota: bool = False
    #: this partition's rows' dual upper bounds ``C_i`` (weighted patterns,
    #: :func:`dmcsvm.estimators._weights.pattern_bounds`), set per partition by
    #: ``executor.start(..., row_C=...)``; None: every row's bound is ``C``
    row_C: np.ndarray | None = None


class PartitionBase:
    """Rows ``[lo, hi)`` of the training set and their kernel columns (see module doc).

    Parameters
    ----------
    part_id : int
    lo, hi : int
        Global row range owned by this partition.
    X : ndarray, CSR matrix (shape (hi - lo, d)) or StoreRows
        The rows, or where to read them: a :class:`StoreRows` is loaded on the partition's
        worker, or re-read chunk by chunk every time when marked ``stream``.
    settings : PartitionSettings
    """

    def __init__(self, part_id, lo, hi, X, settings: PartitionSettings):
        self.part_id = int(part_id)
        self.lo, self.hi = int(lo), int(hi)
        self.data = make_rows(X)
        # in memory: X is the partition's own copy; streaming: None, rows come from self.data
        self.X = self.data.X if self.data.in_memory else None
        self.s = settings
        self.spec = KernelSpec(**settings.kernel)
        n = self.hi - self.lo
        self.norms = np.empty(n, dtype=np.float64)
        self.kdiag = np.empty(n, dtype=np.float64)
        for a, b, Xc in self.data.chunks():
            self.norms[a:b] = row_norms_sq(Xc)
            self.kdiag[a:b] = kernel_diag(self.spec, Xc, self.norms[a:b])
            # NaN / inf in the rows, or values whose squares overflow, would turn every score
            # they touch into NaN: refuse them here, naming the row
            check_finite_rows("its squared norm", self.lo + a, self.norms[a:b])
            check_finite_rows("its kernel value k(x, x)", self.lo + a, self.kdiag[a:b])
        # per-row bounds (weighted patterns) or None (every row's bound is settings.C)
        self.Crow = None
        if settings.row_C is not None:
            self.Crow = np.ascontiguousarray(settings.row_C, dtype=np.float64)
            if self.Crow.shape != (n,):
                raise ValueError(f"partition {part_id}: {self.Crow.shape} row bounds for {n} rows")
        self._C_full = None
        # the rows the kernel passes cover: all of them unless a subclass shrinks the set
        self.active = np.arange(n, dtype=np.int64)
        self.cache = ColumnCache(settings.cache_bytes)
        # the zarr tier pays where recomputing a column means re-reading X from the store; for
        # rows in memory it is used only when asked for explicitly (disk_cache_stream_only=False)
        disk_bytes = settings.disk_cache_bytes
        if settings.disk_cache_stream_only and self.data.in_memory:
            disk_bytes = 0
        self.disk = ZarrColumnCache(n, disk_bytes, settings.cache_dir, dtype=settings.kernel_dtype)
        self.kdtype = np.dtype(settings.kernel_dtype)
        self.rows_computed = 0
        self.rows_cached = 0
        self.rows_disk = 0
        self.compact_writes = 0
        self.kernel_elements = 0  # kernel entries computed (columns x active rows)
        self.kernel_s = 0.0  # seconds in kernel blocks (I/O waits excluded)
        self.step_s = 0.0  # seconds in step() (everything, I/O included)
        self.compact_bytes_read = 0
        self._X_active = None  # X rows of the active set, rebuilt when the active set changes
        # streamed rows: a compact copy of the active rows once shrinking has left few of them
        self._compact: CompactRows | None = None
        self._bufs: dict = {}  # buffers reused round after round (_scratch)
        # BLAS on one thread for as long as the partition lives, wherever it lives (a worker
        # without a nanny has no OMP_NUM_THREADS=1): the same rounding in every executor.  Taken
        # last, so a constructor that fails (non-finite rows) leaves no hold behind
        self._blas = BlasThreadHold()

    @property
    def n_rows(self) -> int:
        """Rows this partition owns."""
        return self.hi - self.lo

    def row_bounds(self) -> np.ndarray:
        """Every row's dual upper bound as one array: the weighted ``C_i``, or ``settings.C``
        repeated.  The numba passes then compile one variant for weighted and unweighted fits
        alike (a scalar ``C`` compiled a second copy of the scan and the working-set solve,
        about 6 s in a process that runs both)."""
        if self.Crow is not None:
            return self.Crow
        if self._C_full is None:  # settings are fixed for the partition's life
            self._C_full = np.full(self.n_rows, float(self.s.C))
        return self._C_full

    # ---------------------------------------------------------------- kernel columns
    def _scratch(self, name: str, n_cols: int, n_rows: int, dtype=None):
        """A ``(n_cols, n_rows)`` view of the partition's buffer ``name`` (of ``dtype``, the
        kernel's by default), reused round after round: a fresh block each round is fresh
        memory each round, paged in again (on the project's VM 0.1-2 ms per MB; a block as
        large as a dense start's costs more in page faults than computing it).  Made at once
        as large as a kernel block may be (``kernel_block_bytes``; only the pages written are
        paged in): grown block by block instead, each larger one was fresh memory again
        (shuttle: 41, 42, 52, 57, 57 and 63 MB a fit on each partition)."""
        dtype = np.dtype(self.kdtype if dtype is None else dtype)
        size = n_cols * n_rows
        buf = self._bufs.get(name)
        if buf is None or buf.shape[0] < size or buf.dtype != dtype:
            most = self.s.kernel_block_bytes // dtype.itemsize
            buf = self._bufs[name] = np.empty(max(size, most), dtype=dtype)
        return buf[:size].reshape(n_cols, n_rows)

    def _kt(self, n_cols: int, n_rows: int):
        """The kernel block ``K^T`` of a round's columns (:meth:`_scratch`)."""
        return self._scratch("kt", n_cols, n_rows)

    def _columns(self, ids, XB, cache_ok=True):
        """``K(X_active, X_B)``: columns from the memory LRU, then from the zarr tier on disk;
        the misses are computed in one block (one streaming pass over X when the rows are not
        in memory) and cached unless ``cache_ok`` is False.  Built as ``K^T`` (one contiguous
        row per batch pattern), returned transposed."""
        KT = self._kt(len(ids), self.active.shape[0])
        if self.disk.capacity:
            hits, miss = self._lookup(ids)
            for j, col in hits.items():
                KT[j] = col
        else:  # memory tier only: one gather
            self.cache.start_round()
            miss = self.cache.gather(ids, KT)
            self._count_lookup(len(ids) - len(miss), 0, len(miss))
        if miss:
            Xm = XB if len(miss) == len(ids) else take_rows(XB, np.asarray(miss))
            if len(miss) == len(ids):
                self._kernel_T(Xm, out=KT)
            else:
                KT[miss] = self._kernel_T(Xm, out=self._scratch("kw", len(miss), KT.shape[1]))
            if cache_ok and self.cache.budget:
                self.cache.put_many(np.asarray(ids)[miss], KT, rows=miss)
            for j in miss if cache_ok and self.disk.capacity else ():
                self.disk.put(int(ids[j]), KT[j], self.active)
        return KT.T

    def _kernel_T(self, XB, out=None):
        """``K(X_B, X_active)``: one block in memory, or chunk by chunk from the store."""
        na = self.active.shape[0]
        if out is None:
            out = np.empty((XB.shape[0], na), dtype=self.kdtype)
        if self.data.in_memory:
            Xa = self.X if na == self.X.shape[0] else self._active_X()
            return kernel_block(self.spec, XB, Xa, out=out, norms_b=self.norms[self.active])
        for pa, pb, rows, Xa in self._active_blocks():
            out[:, pa:pb] = kernel_block(
                self.spec, XB, Xa, norms_b=self.norms[rows], dtype=self.kdtype
            )
        return out

    def _active_X(self):
        """The X rows of the active set (rows in memory), copied once per active set."""
        if self._X_active is None:
            self._X_active = take_rows(self.X, self.active)
        return self._X_active

    def _active_blocks(self):
        """Streamed rows: ``(pa, pb, rows, X[rows])`` covering the active set in order (``rows``
        = ``active[pa:pb]``), from the compact copy of the active rows when there is one, else
        from the store chunks that hold active rows."""
        act = self.active
        if self._compact is not None:
            yield from self._compact.blocks(act)
            return
        for a, b, Xc in self.data.chunks(self._active_chunks()):
            pa, pb = np.searchsorted(act, [a, b])
            rows = act[pa:pb]
            yield pa, pb, rows, (Xc if pb - pa == b - a else take_rows(Xc, rows - a))

    def _refresh_compact(self):
        """Streamed dense rows: once the active set is at most ``COMPACT_FRACTION`` of the rows
        the passes read (all rows, or the current compact copy), copy the active rows into a new
        compact copy, so every later pass reads only them (one extra pass per halving)."""
        if self.data.in_memory or self.data.sparse:
            return
        held = self.n_rows if self._compact is None else self._compact.ids.shape[0]
        if self.active.shape[0] > COMPACT_FRACTION * held:
            return
        old = self._compact
        blocks = ((rows, Xa) for _, _, rows, Xa in self._active_blocks())
        self._compact = CompactRows(
            self.active.copy(), blocks, self.data.d, self.data.dtype, self.s.cache_dir
        )
        self.compact_writes += 1
        if old is not None:
            self.compact_bytes_read += old.bytes_read
            old.close()

    def _drop_compact(self):
        if self._compact is not None:
            self.compact_bytes_read += self._compact.bytes_read
            self._compact.close()
            self._compact = None

    def _take(self, rows):
        """X rows by partition-local index (candidates): from the compact copy when it holds
        them, else from the rows' own storage."""
        if self._compact is not None and rows.shape[0] and self._compact.holds(rows):
            return self._compact.take(rows)
        return self.data.take(rows)

    def _active_chunks(self):
        """Indices of the store chunks that hold at least one active row."""
        starts = np.array([a for a, _ in self.data.bounds])
        return np.unique(np.searchsorted(starts, self.active, side="right") - 1)

    def _lookup(self, ids):
        """Cached columns of ``ids`` (memory LRU, then the zarr tier): ``{j: column}`` and the
        positions ``j`` of the misses."""
        hits, miss = {}, []
        n_disk = 0
        self.cache.start_round()  # the columns returned stay valid through this round
        for j, g in enumerate(ids):
            col = self.cache.get(int(g))
            if col is None and self.disk.capacity:
                col = self.disk.get(int(g), self.active)
                if col is not None:
                    n_disk += 1
                    if self.cache.budget:
                        self.cache.put(int(g), col)
            if col is None:
                miss.append(j)
            else:
                hits[j] = col
        self._count_lookup(len(hits), n_disk, len(miss))
        return hits, miss

    def _count_lookup(self, n_hits, n_disk, n_miss) -> None:
        self.rows_cached += n_hits
        self.rows_disk += n_disk
        self.rows_computed += n_miss
        self.kernel_elements += n_miss * int(self.active.shape[0])

    def _group_size(self, n_cols: int, block_bytes: int | None = None) -> int:
        """Batch columns per kernel block so that one block stays within ``block_bytes``
        (default ``kernel_block_bytes``)."""
        per_col = max(1, self.active.shape[0]) * self.kdtype.itemsize
        limit = self.s.kernel_block_bytes if block_bytes is None else block_bytes
        return int(min(n_cols, max(1, limit // per_col)))

    def _timed(self, reply, t0, tk, tu, t_select0):
        """``reply`` with the round's timings (kernel blocks ``tk``, update ``tu``, selection
        since ``t_select0``, all since ``t0``), added to the partition's totals."""
        reply.t_kernel = tk
        reply.t_update = tu
        reply.t_select = time.perf_counter() - t_select0
        reply.t_total = time.perf_counter() - t0
        self.kernel_s += tk
        self.step_s += reply.t_total
        return reply

    def step(self, msg):
        """One round: apply ``msg`` and reply (each formulation defines it)."""
        raise NotImplementedError

    def step_packed(self, blob: bytes) -> bytes:
        """:meth:`step` with the message and the reply each packed into one pickle blob.

        Transport only (between the coordinator and its own workers, which Dask pickles anyway;
        nothing is read from files): one opaque frame instead of a message of arrays that Dask
        serializes array by array roughly halves an actor round trip (engine overhead benchmark).
        The message comes as :func:`~dmcsvm.engine.messages.pack_message` wrote it.
        """
        return pickle.dumps(self.step(unpack_message(blob)), protocol=pickle.HIGHEST_PROTOCOL)

    # ---------------------------------------------------------------- results
    def stats(self) -> dict:
        """Counters of the column caches, kernel work, row reads and compact copies (what an
        estimator's ``engine_stats_`` shows per partition)."""
        out = {
            "part": self.part_id,
            "rows": self.hi - self.lo,
            "active": int(self.active.shape[0]),
            "in_memory": bool(self.data.in_memory),
            "cache_bytes": self.cache.nbytes,
            "cache_cols": len(self.cache),
            "rows_computed": self.rows_computed,
            "rows_cached": self.rows_cached,
            "rows_disk": self.rows_disk,
            "x_bytes_read": int(getattr(self.data, "bytes_read", 0)),
            "x_chunks_read": int(getattr(self.data, "chunks_read", 0)),
            "kernel_elements": self.kernel_elements,
            "kernel_s": self.kernel_s,
            "step_s": self.step_s,
            "compact_writes": self.compact_writes,
            "compact_rows": 0 if self._compact is None else int(self._compact.ids.shape[0]),
            "compact_bytes_read": self.compact_bytes_read
            + (0 if self._compact is None else self._compact.bytes_read),
        }
        out.update(self.disk.stats())
        return out

    def row_range(self) -> tuple:
        """``(lo, hi)``: the global rows this partition owns."""
        return self.lo, self.hi

    def close(self) -> None:
        """Release what the partition holds outside Python objects (the on-disk column cache,
        the prefetch thread), and its large blocks (kernel buffers, column cache, the active
        rows' copy) now, not whenever the partition object goes: on a worker the next fit's
        partitions are made before the scheduler lets go of this fit's actors, and a worker
        that keeps its freed memory (``engine.dask.local.KeepFreedMemory``) could otherwise not
        give them these blocks' memory."""
        self.disk.close()
        self._drop_compact()
        self.data.close()
        self._blas.release()
        self._bufs.clear()
        self._X_active = None
        self.cache.release()
