"""A row partition: owns its slice of the solver state and answers one message per round.

DESIGN §4: the partition holds ``F_part`` (scores of its rows), its copy of ``B_part``, the
selection statistics, the active set (shrinking) and a kernel-column cache.  Each round it receives
the batch ``(ids, X_B, dB_B)`` chosen by the coordinator, applies it with one GEMM
``F_part += K(X_part, X_B) @ dB_B`` and replies with its best candidates and aggregates.  The same
object runs in-process and as a Dask actor, so both executors execute exactly this code.
"""

from __future__ import annotations

import os
import pickle
import time
import zlib
from dataclasses import dataclass, field

import numpy as np

from ..errors import check_finite_rows
from ..kernels import KernelSpec, kernel_block, kernel_diag, row_norms_sq
from ..numerics import pattern as pt
from .cache import ColumnCache
from .disk_cache import ZarrColumnCache
from .threads import BlasThreadHold
from .rows import (CompactRows, StoreRows, StoreSource, make_rows, stack_rows,  # noqa: F401
                   take_rows)


#: arrays of a partition's saved state (save_state / load_state)
_STATE_KEYS = ("F", "B", "active", "calm")

#: a streamed partition copies its active rows into a compact copy once they are at most this
#: fraction of the rows its kernel passes read (see Partition._refresh_compact)
COMPACT_FRACTION = 0.5


@dataclass
class PartitionSettings:
    """What a partition needs to know of the solver (plain values, cheap to ship to a worker)."""

    kernel: dict
    C: float
    selection: int
    tol: float
    n_candidates: int
    pcls: np.ndarray
    shrinking: bool = True
    shrink_after: int = 3
    cache_bytes: int = 0
    kernel_dtype: str = "float64"
    disk_cache_bytes: int = 0
    disk_cache_stream_only: bool = True
    cache_dir: str | None = None
    x_in_memory: object = "auto"      # True, False (stream from the store) or 'auto'
    kernel_block_bytes: int = 64 * 2 ** 20   # largest kernel block a partition materializes
    extra: dict = field(default_factory=dict)
    #: rows with ``tol >= psi > near_tol`` are reported too (after every violator), so that the
    #: coordinator's working set can hold the rows about to violate; 'auto': tol / 2; None:
    #: violators only
    near_tol: float | str | None = "auto"
    #: this partition's rows' dual upper bounds ``C_i`` (weighted patterns,
    #: :func:`dmcsvm.estimators._weights.pattern_bounds`), set per partition by
    #: ``executor.start(..., row_C=...)``; None: every row's bound is ``C``
    row_C: np.ndarray | None = None


class Partition:
    """State and work of rows ``[lo, hi)`` of the training set.

    Parameters
    ----------
    part_id : int
    lo, hi : int
        Global row range owned by this partition.
    X : ndarray, CSR matrix (shape (hi - lo, d)) or StoreRows
        The rows, or where to read them: a :class:`StoreRows` is loaded on the partition's
        worker, or re-read chunk by chunk every time when marked ``stream``.
    yp : ndarray of int, shape (hi - lo,)
        Assigned positive prototype of each row.
    cls : ndarray of int, shape (hi - lo,)
        Class index of each row.
    settings : PartitionSettings
    """

    def __init__(self, part_id, lo, hi, X, yp, cls, settings: PartitionSettings):
        self.part_id = int(part_id)
        self.lo, self.hi = int(lo), int(hi)
        self.data = make_rows(X)
        # in memory: X is the partition's own copy; streaming: None, rows come from self.data
        self.X = self.data.X if self.data.in_memory else None
        self.yp = np.ascontiguousarray(yp, dtype=np.int64)
        self.cls = np.ascontiguousarray(cls, dtype=np.int64)
        self.s = settings
        self.spec = KernelSpec(**settings.kernel)
        self.pcls = np.ascontiguousarray(settings.pcls, dtype=np.int64)
        n = self.hi - self.lo
        P = self.pcls.shape[0]
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
        self.B = np.zeros((n, P))
        self.F = np.zeros((n, P))
        self.active = np.arange(n, dtype=np.int64)
        self.calm = np.zeros(n, dtype=np.int64)   # consecutive rounds a row looked shrinkable
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
        self.kernel_elements = 0      # kernel entries computed (columns x active rows)
        self.kernel_s = 0.0           # seconds in kernel blocks (I/O waits excluded)
        self.step_s = 0.0             # seconds in step() (everything, I/O included)
        self.compact_bytes_read = 0
        self._X_active = None     # X rows of the active set, rebuilt when the active set changes
        # streamed rows: a compact copy of the active rows once shrinking has left few of them
        self._compact: CompactRows | None = None
        # rows whose X the coordinator already holds (they were in a batch): candidates among them
        # are reported without their X row, which keeps the per-round reply small
        self.shipped = np.zeros(n, dtype=bool)
        self._kt_buf = None
        # BLAS on one thread for as long as the partition lives, wherever it lives (a worker
        # without a nanny has no OMP_NUM_THREADS=1): the same rounding in every executor.  Taken
        # last, so a constructor that fails (non-finite rows) leaves no hold behind
        self._blas = BlasThreadHold()

    # ---------------------------------------------------------------- kernel columns
    def _columns(self, ids, XB):
        """``K(X_active, X_B)``: columns from the memory LRU, then from the zarr tier on disk;
        the misses are computed in one block (one streaming pass over X when the rows are not
        in memory).  Built as ``K^T`` (one contiguous row per batch pattern), returned transposed."""
        na = self.active.shape[0]
        # one buffer reused round after round (see kernel_block: no fresh block per round)
        size = len(ids) * na
        if self._kt_buf is None or self._kt_buf.shape[0] < size:
            self._kt_buf = np.empty(size, dtype=self.kdtype)
        KT = self._kt_buf[:size].reshape(len(ids), na)
        hits, miss = self._lookup(ids)
        for j, col in hits.items():
            KT[j] = col
        if miss:
            Xm = XB if len(miss) == len(ids) else take_rows(XB, np.asarray(miss))
            if len(miss) == len(ids):
                self._kernel_T(Xm, out=KT)
            else:
                KT[miss] = self._kernel_T(Xm)
            for j in miss:
                if self.cache.budget:
                    self.cache.put(int(ids[j]), KT[j].copy())
                if self.disk.capacity:
                    self.disk.put(int(ids[j]), KT[j], self.active)
        return KT.T

    def _kernel_T(self, XB, out=None):
        """``K(X_B, X_active)``: one block in memory, or chunk by chunk from the store."""
        na = self.active.shape[0]
        if out is None:
            out = np.empty((XB.shape[0], na), dtype=self.kdtype)
        if self.data.in_memory:
            if na == self.X.shape[0]:
                Xa = self.X
            else:
                if self._X_active is None:
                    self._X_active = take_rows(self.X, self.active)
                Xa = self._X_active
            return kernel_block(self.spec, XB, Xa, out=out, norms_b=self.norms[self.active])
        for pa, pb, rows, Xa in self._active_blocks():
            out[:, pa:pb] = kernel_block(self.spec, XB, Xa, norms_b=self.norms[rows],
                                         dtype=self.kdtype)
        return out

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
        held = self.F.shape[0] if self._compact is None else self._compact.ids.shape[0]
        if self.active.shape[0] > COMPACT_FRACTION * held:
            return
        old = self._compact
        blocks = ((rows, Xa) for _, _, rows, Xa in self._active_blocks())
        self._compact = CompactRows(self.active.copy(), blocks, self.data.d, self.data.dtype,
                                    self.s.cache_dir)
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

    # ---------------------------------------------------------------- the round
    def step(self, msg: dict) -> dict:
        """Apply the coordinator's message and report candidates and aggregates (one round)."""
        t0 = time.perf_counter()
        tk = tu = 0.0
        if msg.get("unshrink") is not None:
            tk += self._unshrink(msg["unshrink"])
        ids = msg.get("ids")
        if ids is not None and len(ids):
            dB = msg["dB"]
            XB = msg["XB"]
            # the batch's kernel block K(X_active, X_B) is built in column groups of bounded size
            # (a few MB per group; a 1000-pattern batch over a million rows would need GBs)
            g = self._group_size(len(ids))
            if not self.data.in_memory:
                # streamed rows: cached columns first, then one pass over X for all the misses
                tk2, tu2 = self._apply_streamed(ids, XB, dB)
                tk, tu, g = tk + tk2, tu + tu2, len(ids)
            for a in range(0, len(ids) if self.data.in_memory else 0, g):
                b = min(a + g, len(ids))
                t1 = time.perf_counter()
                K = self._columns(ids[a:b], XB[a:b])
                t2 = time.perf_counter()
                # the GEMM runs in the kernel's precision (sgemm for float32 data); F stays float64
                dK = K @ dB[a:b].astype(K.dtype, copy=False)
                if self.active.shape[0] == self.F.shape[0]:
                    self.F += dK
                else:
                    self.F[self.active] += dK
                tk += t2 - t1
                tu += time.perf_counter() - t2
            t2 = time.perf_counter()
            own = (ids >= self.lo) & (ids < self.hi)
            if own.any():
                self.B[ids[own] - self.lo] += dB[own]
                self.shipped[ids[own] - self.lo] = True
            if msg.get("reship"):
                self.reship(ids)
            tu += time.perf_counter() - t2
        t3 = time.perf_counter()
        reply = self._report(float(msg.get("shrink_margin", np.inf)))
        reply["t_kernel"] = tk
        reply["t_update"] = tu
        reply["t_select"] = time.perf_counter() - t3
        reply["t_total"] = time.perf_counter() - t0
        self.kernel_s += tk
        self.step_s += reply["t_total"]
        return reply

    def _lookup(self, ids):
        """Cached columns of ``ids`` (memory LRU, then the zarr tier): ``{j: column}`` and the
        positions ``j`` of the misses."""
        hits, miss = {}, []
        n_disk = 0
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
        self.rows_cached += len(hits)
        self.rows_disk += n_disk
        self.rows_computed += len(miss)
        self.kernel_elements += len(miss) * int(self.active.shape[0])
        return hits, miss

    def _apply_streamed(self, ids, XB, dB):
        """``F += K(X_active, X_B) @ dB`` when the rows are re-read from the store: the cached
        columns are applied in bounded groups, and all missing columns are computed in ONE pass
        over the store's chunks (chunk-major: each chunk's block K(X_c, X_miss) updates its rows
        of F at once).  The first columns that fit the block budget are kept whole and cached;
        a pass over X costs ``4 n d`` bytes, so it must not be repeated per column group."""
        tk = tu = 0.0
        t0 = time.perf_counter()
        hits, miss = self._lookup(ids)
        na = self.active.shape[0]
        full = na == self.F.shape[0]
        tk += time.perf_counter() - t0
        if hits:
            hj = np.fromiter(hits, dtype=np.int64)
            g = self._group_size(len(hj))
            for a in range(0, len(hj), g):
                t1 = time.perf_counter()
                sel = hj[a:a + g]
                KT = np.stack([hits[int(j)] for j in sel]).astype(self.kdtype, copy=False)
                dK = KT.T @ dB[sel].astype(self.kdtype, copy=False)
                if full:
                    self.F += dK
                else:
                    self.F[self.active] += dK
                tu += time.perf_counter() - t1
        if miss:
            mj = np.asarray(miss, dtype=np.int64)
            keep = min(len(mj), self._group_size(len(mj)))
            size = keep * na
            if self._kt_buf is None or self._kt_buf.shape[0] < size:
                self._kt_buf = np.empty(size, dtype=self.kdtype)
            KT = self._kt_buf[:size].reshape(keep, na)
            Xm = XB if len(mj) == len(ids) else take_rows(XB, mj)
            dBm = dB[mj].astype(self.kdtype, copy=False)
            for pa, pb, rows, Xa in self._active_blocks():
                t1 = time.perf_counter()
                Kc = kernel_block(self.spec, Xm, Xa, norms_b=self.norms[rows], dtype=self.kdtype)
                t2 = time.perf_counter()
                if keep:
                    KT[:, pa:pb] = Kc[:keep]
                self.F[rows] += Kc.T @ dBm
                t3 = time.perf_counter()
                tk += t2 - t1
                tu += t3 - t2
            for j in range(keep):
                g = int(ids[mj[j]])
                if self.cache.budget:
                    self.cache.put(g, KT[j].copy())
                if self.disk.capacity:
                    self.disk.put(g, KT[j], self.active)
        return tk, tu

    def _group_size(self, n_cols: int, block_bytes: int | None = None) -> int:
        """Batch columns per kernel block so that one block stays within ``block_bytes``
        (default ``kernel_block_bytes``)."""
        per_col = max(1, self.active.shape[0]) * self.kdtype.itemsize
        limit = self.s.kernel_block_bytes if block_bytes is None else block_bytes
        return int(min(n_cols, max(1, limit // per_col)))

    def _unshrink(self, sv: dict) -> float:
        """Rebuild the scores of shrunk rows from the support patterns, ``K(X_in, X_SV) @ B_SV``,
        and make every row active again (DESIGN §4: F is always rebuildable from B)."""
        t = time.perf_counter()
        n = self.F.shape[0]
        if self.active.shape[0] < n:
            mask = np.ones(n, dtype=bool)
            mask[self.active] = False
            inactive = np.flatnonzero(mask)
            if len(sv["ids"]):
                # K(X_inactive, X_SV) in row blocks of bounded size (n_SV can be large)
                step = max(1, self.s.kernel_block_bytes // (8 * len(sv["ids"])))
                sv_norms = row_norms_sq(sv["X"])
                for a, b, Xc in self.data.chunks():
                    pa, pb = np.searchsorted(inactive, [a, b])
                    for q in range(pa, pb, step):
                        rows = inactive[q:min(q + step, pb)]
                        self.kernel_elements += rows.shape[0] * len(sv["ids"])
                        K = kernel_block(self.spec, take_rows(Xc, rows - a), sv["X"],
                                         norms_a=self.norms[rows], norms_b=sv_norms)
                        self.F[rows] = K @ sv["B"]
            else:
                self.F[inactive] = 0.0
            self.active = np.arange(n, dtype=np.int64)
            self._X_active = None
            self._drop_compact()
            self.calm[:] = 0
            self.cache.clear()
            self.disk.clear()
        return time.perf_counter() - t

    def _report(self, shrink_margin: float) -> dict:
        s = self.s
        rows = self.active
        na = rows.shape[0]
        V = np.empty(na)
        psi = np.empty(na)
        sa, sbf, sxi, max_v, sum_v, max_psi, n_viol = pt.scan_rows(
            s.selection, self.B, self.F, self.yp, self.cls, self.pcls, self.kdiag,
            s.C if self.Crow is None else self.Crow, s.tol, rows, shrink_margin, self.calm, V, psi)
        # candidates: the best n_candidates violators by selection value, then (near_tol) the
        # rows closest to violating by psi
        cand = np.flatnonzero(psi > s.tol)
        if cand.shape[0] > s.n_candidates:
            top = np.argpartition(-V[cand], s.n_candidates - 1)[: s.n_candidates]
            cand = cand[top]
        elif s.near_tol is not None:
            room = s.n_candidates - cand.shape[0]
            near_tol = 0.5 * s.tol if s.near_tol == "auto" else min(float(s.near_tol), s.tol)
            near = np.flatnonzero((psi > near_tol) & (psi <= s.tol))
            if near.shape[0] > room:
                near = near[np.argpartition(-psi[near], room - 1)[:room]] if room else near[:0]
            cand = np.concatenate([cand, near])
        crow = rows[cand]
        new = ~self.shipped[crow]
        reply = {
            "part": self.part_id,
            "cand_ids": (crow + self.lo).astype(np.int64),
            "cand_V": V[cand],
            "cand_psi": psi[cand],
            "cand_F": self.F[crow],
            "cand_X": self._take(crow[new]),
            "cand_new": new,
            "cand_kdiag": self.kdiag[crow],
            "cand_yp": self.yp[crow],
            "cand_cls": self.cls[crow],
            "max_V": max_v,
            "sum_V": sum_v,
            "max_psi": max_psi,
            "n_viol": n_viol,
            "n_active": int(na),
            "n_rows": int(self.F.shape[0]),
            "sum_alpha": sa,
            "sum_BF": sbf,
            "sum_xi": sxi,
            "rows_computed": self.rows_computed,
            "rows_cached": self.rows_cached,
            "rows_disk": self.rows_disk,
        }
        if self.Crow is not None:
            # weighted patterns: the coordinator needs the batch rows' bounds, and the primal
            # weighs each slack by its own bound
            reply["cand_C"] = self.Crow[crow]
            reply["sum_Cxi"] = pt.weighted_slack(self.F, self.yp, self.cls, self.pcls, self.Crow)
        if s.shrinking:
            keep = self.calm[rows] < s.shrink_after
            # shrink in steps of >= 5% of the active set: every step re-packs the cached columns
            if na - np.count_nonzero(keep) >= max(1, 0.05 * na):
                self.active = rows[keep]
                self._X_active = None
                self.cache.compact(keep)
                self._refresh_compact()
        return reply

    # ---------------------------------------------------------------- results
    def stats(self) -> dict:
        out = {"part": self.part_id, "rows": self.hi - self.lo, "active": int(self.active.shape[0]),
               "in_memory": bool(self.data.in_memory),
               "cache_bytes": self.cache.nbytes, "cache_cols": len(self.cache),
               "rows_computed": self.rows_computed, "rows_cached": self.rows_cached,
               "rows_disk": self.rows_disk,
               "x_bytes_read": int(getattr(self.data, "bytes_read", 0)),
               "x_chunks_read": int(getattr(self.data, "chunks_read", 0)),
               "kernel_elements": self.kernel_elements, "kernel_s": self.kernel_s,
               "step_s": self.step_s,
               "compact_writes": self.compact_writes,
               "compact_rows": 0 if self._compact is None else int(self._compact.ids.shape[0]),
               "compact_bytes_read": self.compact_bytes_read + (
                   0 if self._compact is None else self._compact.bytes_read)}
        out.update(self.disk.stats())
        return out

    def reship(self, ids=()) -> None:
        """The coordinator's row bank holds the support patterns' X rows and those of the batch
        ``ids`` only (it pruned them, or resumed from a checkpoint): only these rows count as
        shipped now (the others' are sent again if they enter a batch)."""
        self.shipped[:] = np.any(self.B != 0.0, axis=1)
        ids = np.asarray(ids, dtype=np.int64)
        own = (ids >= self.lo) & (ids < self.hi)
        self.shipped[ids[own] - self.lo] = True

    def step_packed(self, blob: bytes) -> bytes:
        """:meth:`step` with the message and the reply each packed into one pickle blob.

        Transport only (between the coordinator and its own workers, which Dask pickles anyway;
        nothing is read from files): one opaque frame instead of a dict of arrays that Dask
        serializes array by array roughly halves an actor round trip (engine overhead benchmark).
        The message comes as :func:`pack_message` wrote it.
        """
        return pickle.dumps(self.step(unpack_message(blob)), protocol=pickle.HIGHEST_PROTOCOL)

    # ---------------------------------------------------------------- checkpoints
    def row_range(self) -> tuple:
        """``(lo, hi)``: the global rows this partition owns."""
        return self.lo, self.hi

    def state_file(self, directory) -> str:
        return os.path.join(os.fspath(directory), f"part-{self.part_id:05d}.npz")

    def save_state(self, directory) -> tuple:
        """Write what the next rounds read of this partition (scores ``F``, its ``B`` rows, the
        active set and the shrinking counters) beside a checkpoint, so that a resumed fit takes
        the same rounds as the uninterrupted one (a rebuild from ``B`` alone would give scores
        that differ in the last bits, and shrinking would start over).  npz without pickle,
        crc32 per array; returns ``(part_id, lo, hi)``."""
        arrays = {"F": self.F, "B": self.B, "active": self.active, "calm": self.calm,
                  "bounds": np.array([self.lo, self.hi], dtype=np.int64)}
        arrays["crc32"] = np.array([zlib.crc32(np.ascontiguousarray(arrays[k]))
                                    for k in _STATE_KEYS], dtype=np.int64)
        path = self.state_file(directory)
        tmp = f"{path}.tmp-{os.getpid()}"
        try:
            with open(tmp, "wb") as fh:
                np.savez(fh, **arrays)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return self.part_id, self.lo, self.hi

    def load_state(self, directory) -> None:
        """Take the state :meth:`save_state` wrote (same rows, checked by bounds, shapes and
        checksums); ValueError naming the file otherwise."""
        path = self.state_file(directory)
        n, P = self.F.shape
        try:
            with np.load(path, allow_pickle=False) as z:
                got = {k: z[k] for k in (*_STATE_KEYS, "bounds", "crc32")}
        except (OSError, ValueError, KeyError) as e:
            raise ValueError(f"{path}: cannot read the partition state ({e})") from None
        if list(got["bounds"]) != [self.lo, self.hi]:
            raise ValueError(f"{path} holds rows {list(got['bounds'])}, this partition "
                             f"[{self.lo}, {self.hi}]")
        crc = [zlib.crc32(np.ascontiguousarray(got[k])) for k in _STATE_KEYS]
        if crc != list(got["crc32"]) or got["F"].shape != (n, P) or got["B"].shape != (n, P):
            raise ValueError(f"{path}: the partition state fails its checksum or shape")
        self.F[:] = got["F"]
        self.B[:] = got["B"]
        self.calm[:] = got["calm"]
        self.active = np.ascontiguousarray(got["active"], dtype=np.int64)
        self._X_active = None
        self.reship()               # after a resume the coordinator banks the support only
        self.cache.clear()
        self.disk.clear()
        self._drop_compact()
        self._refresh_compact()

    def close(self) -> None:
        """Release what the partition holds outside Python objects (the on-disk column cache,
        the prefetch thread)."""
        self.disk.close()
        self._drop_compact()
        self.data.close()
        self._blas.release()

    # ---------------------------------------------------------------- recovery
    def restore(self, snapshot: dict) -> bool:
        """Take the coordinator's current state: how a partition rebuilt on a new worker after its
        old worker died catches up (DESIGN §4: a lost worker costs one kernel block, never a
        replay of history).

        ``snapshot`` holds plain arrays: ``sv_ids`` (global ids of the support patterns, the rows
        with any non-zero coefficient), ``sv_X`` (their X rows), ``sv_B`` (their coefficient
        rows), and optionally ``shipped`` (global ids of this partition's rows whose X the
        coordinator holds) and ``yp`` (this partition's assignment).  The partition's own ``B``
        rows are taken from the support rows, its scores rebuilt as ``F = K(X_part, X_SV) B_SV``
        in row blocks of bounded size (:meth:`_unshrink`), every row is active again, and the
        column caches start empty.  The scores equal the accumulated ones up to rounding.
        """
        n = self.hi - self.lo
        ids = np.asarray(snapshot["sv_ids"], dtype=np.int64).reshape(-1)
        Bsv = np.asarray(snapshot["sv_B"], dtype=np.float64).reshape(ids.shape[0], -1)
        if snapshot.get("yp") is not None:
            self.yp = np.ascontiguousarray(snapshot["yp"], dtype=np.int64)
        P = self.pcls.shape[0]
        self.B = np.zeros((n, P))
        own = (ids >= self.lo) & (ids < self.hi)
        self.B[ids[own] - self.lo] = Bsv[own]
        self.shipped = np.zeros(n, dtype=bool)
        shipped = np.asarray(snapshot.get("shipped", ()), dtype=np.int64).reshape(-1)
        shipped = shipped[(shipped >= self.lo) & (shipped < self.hi)]
        self.shipped[shipped - self.lo] = True
        self.F = np.zeros((n, P))
        self._restore_extra(ids, snapshot["sv_X"], Bsv)
        # every row's score is stale: the unshrink rebuilds them all from the support patterns
        # (row blocks of bounded size), makes every row active and empties the caches
        self.active = np.zeros(0, dtype=np.int64)
        self._unshrink({"ids": ids, "X": snapshot["sv_X"], "B": Bsv})
        return True

    def _restore_extra(self, ids, Xsv, Bsv) -> None:
        """Kind-specific state derived from the support patterns in :meth:`restore` (none)."""


def pack_message(msg: dict) -> bytes:
    """One round's message as one pickle blob for the wire, with ``dB`` sent as its nonzeros when
    that is smaller: a pattern's update touches only the few prototypes its sub-problem moved
    (about 3 of 26 on letter), so the dense ``|B| x P`` block is mostly zeros.
    :func:`unpack_message` gives back the same values bit for bit (a signed zero comes back as
    +0.0, which adds the same)."""
    dB = msg.get("dB")
    if isinstance(dB, np.ndarray) and dB.ndim == 2 and dB.size and dB.dtype == np.float64:
        flat = dB.reshape(-1)
        at = np.flatnonzero(flat != 0.0)       # ~10x faster than flatnonzero on the floats
        # a stored nonzero costs 12 bytes (float64 + int32 position) against 8 per dense entry
        if 12 * at.shape[0] < dB.nbytes:
            msg = {k: v for k, v in msg.items() if k != "dB"}
            pos = at.astype(np.int32) if dB.size < 2 ** 31 else at
            msg["dB_nonzero"] = (dB.shape, pos, flat[at])
    return pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)


def unpack_message(blob: bytes) -> dict:
    """The message :func:`pack_message` packed, with ``dB`` dense again."""
    msg = pickle.loads(blob)
    if "dB_nonzero" in msg:
        shape, at, val = msg.pop("dB_nonzero")
        dB = np.zeros(shape)
        dB.reshape(-1)[at] = val
        msg["dB"] = dB
    return msg
