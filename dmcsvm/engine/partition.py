"""The Crammer-Singer partition: scores, coefficients and selection statistics of its rows.

docs/design.md, 'Batched rounds': on top of :class:`~dmcsvm.engine.partition_base.PartitionBase`
(rows, kernel columns, caches) the partition holds ``F_part`` (scores of its rows), its copy of
``B_part``, the assigned positive prototype of every row, the active set (shrinking) and which rows'
X the coordinator holds.  Each round it receives the batch
(:class:`~dmcsvm.engine.messages.RoundMessage`) chosen by the coordinator, applies it with one GEMM
``F_part += K(X_part, X_B) @ dB_B`` and replies (:class:`~dmcsvm.engine.messages.CSReply`) with its
best candidates and aggregates.
"""

from __future__ import annotations

import os
import time
import zlib

import numpy as np

from ..kernels import kernel_block, row_norms_sq
from ..numerics import pattern as pt
from ..numerics.scores import add_rows
from .messages import CSReply, RoundMessage, class_quota, has_batch
from .partition_base import PartitionBase, PartitionSettings  # noqa: F401
from .rows import CompactRows, StoreRows, StoreSource, make_rows, stack_rows, take_rows  # noqa: F401

#: a partition shrinks once at least this fraction of its active rows has stayed calm for
#: ``shrink_after`` rounds (each shrink re-packs the cached kernel columns)
SHRINK_STEP = 0.05

#: arrays of a partition's saved state (save_state / load_state)
_STATE_KEYS = ("F", "B", "active", "calm")
#: the unshrink's log in a saved state (Partition._log_arrays)
_LOG_KEYS = ("shrunk_at", "log_t0", "log_rows", "log_X", "log_dB")
#: rows of a float32 kernel block turned float64 at a time for the unshrink's product with B_SV
#: (a 512 x n_SV temporary, not a second copy of the whole block)
_F64_ROWS = 512
#: the most bytes of batch rows a partition logs for the unshrink (:meth:`Partition._unshrink`);
#: never more than its own rows
LOG_BYTES = 256 * 2**20


class Partition(PartitionBase):
    """Crammer-Singer state and round of rows ``[lo, hi)`` (see module doc).

    Parameters
    ----------
    part_id, lo, hi, X, settings
        As :class:`~dmcsvm.engine.partition_base.PartitionBase`.
    yp : ndarray of int, shape (hi - lo,)
        Assigned positive prototype of each row.
    cls : ndarray of int, shape (hi - lo,)
        Class index of each row.
    """

    def __init__(self, part_id, lo, hi, X, yp, cls, settings: PartitionSettings):
        super().__init__(part_id, lo, hi, X, settings)
        self.yp = np.ascontiguousarray(yp, dtype=np.int64)
        self.cls = np.ascontiguousarray(cls, dtype=np.int64)
        self.pcls = np.ascontiguousarray(settings.pcls, dtype=np.int64)
        n, P = self.n_rows, self.pcls.shape[0]
        self.B = np.zeros((n, P))
        self.F = np.zeros((n, P))
        self.calm = np.zeros(n, dtype=np.int64)  # consecutive rounds a row looked shrinkable
        # the unshrink's log (see _unshrink): the batches (X rows, dB) applied while rows were
        # shrunk, entry t at self._log[t - self._log_t0]; a shrunk row lags from entry
        # shrunk_at (-1, or below _log_t0: rebuilt from the support patterns instead)
        self.shrunk_at = np.full(n, -1, dtype=np.int64)
        self._log: list = []
        self._log_t0 = 0
        self._log_rows = 0
        # rows whose X the coordinator already holds (they were in a batch): candidates among them
        # are reported without their X row, which keeps the per-round reply small
        self.shipped = np.zeros(n, dtype=bool)

    # ---------------------------------------------------------------- the round
    def step(self, msg: RoundMessage) -> CSReply:
        """Apply the coordinator's message and report candidates and aggregates (one round)."""
        t0 = time.perf_counter()
        tk = tu = 0.0
        if msg.unshrink is not None:
            tk += self._unshrink(msg.unshrink)
        if msg.settle is not None:
            self._settle(msg.settle)
        if has_batch(msg):
            ids, dB, XB = msg.ids, msg.dB, msg.XB
            # the batch's kernel block K(X_active, X_B) is built in column groups of bounded size
            # (a few MB per group; a 1000-pattern batch over a million rows would need GBs)
            known = self._known_rows(msg.scores) if msg.scores is not None else None
            rest = self._rows_to_compute(known[0]) if known is not None else None
            if rest is not None:
                # the coordinator sent the working set's scores: columns over the other rows
                tk2, tu2 = self._apply_except_known(ids, XB, dB, rest)
                tk, tu = tk + tk2, tu + tu2
            elif not self.data.in_memory:
                # streamed rows: cached columns first, then one pass over X for all the misses
                tk2, tu2 = self._apply_streamed(ids, XB, dB)
                tk, tu = tk + tk2, tu + tu2
            else:
                g = self._group_size(len(ids))
                for a in range(0, len(ids), g):
                    b = min(a + g, len(ids))
                    t1 = time.perf_counter()
                    K = self._columns(ids[a:b], XB[a:b])
                    t2 = time.perf_counter()
                    # the GEMM runs in the kernel's precision (sgemm for float32 data); F stays
                    # float64
                    self._add_to_active(K @ dB[a:b].astype(K.dtype, copy=False))
                    tk += t2 - t1
                    tu += time.perf_counter() - t2
            t2 = time.perf_counter()
            if known is not None:
                self._take_scores(msg.scores, *known)
            own = (ids >= self.lo) & (ids < self.hi)
            if own.any():
                self.B[ids[own] - self.lo] += dB[own]
                self.shipped[ids[own] - self.lo] = True
            if msg.reship:
                self.reship(ids)
            if self.active.shape[0] < self.F.shape[0]:
                self._log_batch(XB, dB)
            tu += time.perf_counter() - t2
        t3 = time.perf_counter()
        return self._timed(self._report(float(msg.shrink_margin)), t0, tk, tu, t3)

    def _settle(self, got: dict) -> None:
        """Take the coefficients and scores of this partition's rows among ``got["ids"]`` as
        they are (rounds the coordinator ran in its Gram block, coordinators.whole_block), and
        count the rows of ``got["shipped"]`` as held by the coordinator."""
        ids = np.asarray(got["ids"], dtype=np.int64)
        own = (ids >= self.lo) & (ids < self.hi)
        rows = ids[own] - self.lo
        self.B[rows] = got["B"][own]
        self.F[rows] = got["F"][own]
        sh = np.asarray(got["shipped"], dtype=np.int64)
        self.shipped[sh[(sh >= self.lo) & (sh < self.hi)] - self.lo] = True

    def _add_to_active(self, dK) -> None:
        """``F += dK`` on the active rows (``dK``: one row per active row, in order)."""
        if self.active.shape[0] == self.F.shape[0]:
            self.F += dK
        else:
            add_rows(self.F, self.active, dK)

    def _known_rows(self, got):
        """The active positions of this partition's rows among ``got["ids"]`` (the working set
        whose scores came with the message, ``RoundMessage.scores``) and their places in
        ``got``.  Rows shrunk since they were reported are left out: their scores lag and the
        unshrink's log (:meth:`_unshrink`) brings them up to date, this batch included."""
        ids = np.asarray(got["ids"], dtype=np.int64)
        at = np.flatnonzero((ids >= self.lo) & (ids < self.hi))
        where = np.full(self.n_rows, -1, dtype=np.int64)
        where[ids[at] - self.lo] = at
        pos = np.flatnonzero(where[self.active] >= 0)
        return pos, where[self.active[pos]]

    def _take_scores(self, got: dict, pos, at) -> None:
        """Take the scores of the active rows at positions ``pos`` from ``got["F"][at]`` as the
        coordinator's working-set solve left them."""
        self.F[self.active[pos]] = np.asarray(got["F"])[at]

    def _rows_to_compute(self, pos):
        """The active positions whose scores the batch's kernel columns must update when those
        at ``pos`` come with the message: the others; None to compute over every active row as
        usual (rows streamed from a store, a zarr column tier, or no row to spare)."""
        if not self.data.in_memory or self.disk.capacity or pos.shape[0] == 0:
            return None
        keep = np.ones(self.active.shape[0], dtype=bool)
        keep[pos] = False
        return np.flatnonzero(keep)

    def _apply_except_known(self, ids, XB, dB, rest):
        """``F += K(X, X_B) dB`` on the active rows at positions ``rest`` only (the others'
        scores come with the message).  Columns the cache holds, or will keep, are taken over
        every active row as :meth:`_columns` does (a later round reuses them whole); the others
        are computed over the rows ``rest`` alone.  At 100,000 deformed digits a round's working
        set is a third to half of the active rows, and its columns are most of the fit."""
        tk = tu = 0.0
        na = self.active.shape[0]
        rows = self.active[rest]
        X_rest = None
        g = self._group_size(len(ids))
        for a in range(0, len(ids), g):
            b = min(a + g, len(ids))
            t1 = time.perf_counter()
            idg = ids[a:b]
            KT = self._kt(b - a, na)
            self.cache.start_round()
            miss = self.cache.gather(idg, KT)
            take = (
                self.cache.takes(idg[miss], na, self.kdtype)
                if self.cache.budget
                else [False] * len(miss)
            )
            whole = [j for j, t in zip(miss, take, strict=True) if t]
            part = [j for j, t in zip(miss, take, strict=True) if not t]
            # hits and the columns kept count as :meth:`_columns` counts them; the others cover
            # the rows `rest` alone
            self._count_lookup((b - a) - len(miss), 0, len(whole))
            self.rows_computed += len(part)
            self.kernel_elements += len(part) * rows.shape[0]
            # (the blocks below are computed into the partition's reused buffers: fresh ones
            # each round were fresh memory each round, _scratch)
            if whole:
                Kw = self._scratch("kw", len(whole), na)
                KT[whole] = self._kernel_T(take_rows(XB[a:b], np.asarray(whole)), out=Kw)
                self.cache.put_many(idg[whole], KT, rows=whole)
            Kp = None
            if part:
                if X_rest is None:
                    Xa = self.X if na == self.X.shape[0] else self._active_X()
                    xr = self._scratch("xr", rest.shape[0], Xa.shape[1], Xa.dtype)
                    X_rest = take_rows(Xa, rest, out=xr)
                Kp = kernel_block(
                    self.spec, take_rows(XB[a:b], np.asarray(part)), X_rest,
                    out=self._scratch("kp", len(part), rest.shape[0]),
                    norms_b=self.norms[rows], dtype=self.kdtype,
                )  # fmt: skip
            t2 = time.perf_counter()
            dBg = dB[a:b].astype(self.kdtype, copy=False)
            if not part:  # every column over every active row
                self._add_to_active(KT.T @ dBg)
            elif len(part) < b - a:
                # the columns over every active row: the block's other rows (not computed here)
                # zeroed, with their changes, so that one product reads the block in place (a
                # copy of its rows, KT[full], was 40-57 MB of fresh memory a round on shuttle)
                KT[part] = 0.0
                dBz = dBg.copy()
                dBz[part] = 0.0
                self._add_to_active(KT.T @ dBz)
            if Kp is not None:
                add_rows(self.F, rows, Kp.T @ dBg[part])
            tk += t2 - t1
            tu += time.perf_counter() - t2
        return tk, tu

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
        tk += time.perf_counter() - t0
        if hits:
            hj = np.fromiter(hits, dtype=np.int64)
            g = self._group_size(len(hj))
            for a in range(0, len(hj), g):
                t1 = time.perf_counter()
                sel = hj[a : a + g]
                KT = np.stack([hits[int(j)] for j in sel]).astype(self.kdtype, copy=False)
                dK = KT.T @ dB[sel].astype(self.kdtype, copy=False)
                self._add_to_active(dK)
                tu += time.perf_counter() - t1
        if miss:
            mj = np.asarray(miss, dtype=np.int64)
            keep = min(len(mj), self._group_size(len(mj)))
            KT = self._kt(keep, na)
            Xm = XB if len(mj) == len(ids) else take_rows(XB, mj)
            dBm = dB[mj].astype(self.kdtype, copy=False)
            hint = CandidateHint(self) if self._compact is None else None
            for pa, pb, rows, Xa in self._active_blocks():
                t1 = time.perf_counter()
                Kc = kernel_block(self.spec, Xm, Xa, norms_b=self.norms[rows], dtype=self.kdtype)
                t2 = time.perf_counter()
                if keep:
                    KT[:, pa:pb] = Kc[:keep]
                add_rows(self.F, rows, Kc.T @ dBm)
                t3 = time.perf_counter()
                tk += t2 - t1
                tu += t3 - t2
                if hint is not None:  # these rows' scores are final for this round
                    hint.offer(rows, Xa)
            for j in range(keep):
                g = int(ids[mj[j]])
                if self.cache.budget:
                    self.cache.put(g, KT[j])
                if self.disk.capacity:
                    self.disk.put(g, KT[j], self.active)
        return tk, tu

    def _log_batch(self, XB, dB) -> None:
        """Keep a batch applied while rows are shrunk, for :meth:`_unshrink`: dense rows only,
        at most :data:`LOG_BYTES` (and never more rows than the partition's own), the oldest
        dropped first (the rows shrunk before a dropped batch are then rebuilt in full)."""
        t = self._log_t0 + len(self._log)
        cap = min(self.F.shape[0], LOG_BYTES // max(1, XB.shape[1] * XB.dtype.itemsize))
        if not isinstance(XB, np.ndarray) or XB.shape[0] > cap:
            self._log, self._log_t0, self._log_rows = [], t + 1, 0
            return
        self._log.append((np.array(XB, order="C"), np.array(dB, dtype=np.float64)))
        self._log_rows += XB.shape[0]
        while self._log_rows > cap:
            X0, _ = self._log.pop(0)
            self._log_t0 += 1
            self._log_rows -= X0.shape[0]

    def _clear_log(self) -> None:
        self.shrunk_at[:] = -1
        self._log, self._log_t0, self._log_rows = [], 0, 0

    def _unshrink(self, sv: dict) -> float:
        """Bring the scores of shrunk rows up to date and make every row active again.

        A row shrunk a few batches ago catches up on those batches, ``F += K(X_row, X_b) dB_b``
        for each batch ``b`` logged since (:meth:`_log_batch`), when they hold fewer rows than
        the support; the others are rebuilt from the support patterns, ``K(X_in, X_SV) @ B_SV``
        (docs/design.md, 'State that must survive': F is always rebuildable from B).  A check
        soon after another (rows shrunk again near the end) then costs the last rounds' batches,
        not the whole support: letter's second check took 18 ms instead of 138 ms."""
        t = time.perf_counter()
        n = self.F.shape[0]
        if self.active.shape[0] < n:
            mask = np.ones(n, dtype=bool)
            mask[self.active] = False
            inactive = np.flatnonzero(mask)
            if len(sv["ids"]):
                inactive = self._catch_up(inactive, len(sv["ids"]))
                # K(X_inactive, X_SV) in row blocks of bounded size (n_SV can be large), in the
                # kernel dtype into the partition's reused block (a fresh float64 block per call
                # cost 5x the float32 one on letter, mostly in page faults); the product with
                # B_SV is summed in float64, a slice of rows at a time
                nsv = len(sv["ids"])
                step = max(1, self.s.kernel_block_bytes // (8 * nsv))
                sv_norms = row_norms_sq(sv["X"])
                for a, b, Xc in self.data.chunks():
                    pa, pb = np.searchsorted(inactive, [a, b])
                    for q in range(pa, pb, step):
                        rows = inactive[q : min(q + step, pb)]
                        self.kernel_elements += rows.shape[0] * nsv
                        K = kernel_block(
                            self.spec,
                            take_rows(Xc, rows - a),
                            sv["X"],
                            out=self._kt(rows.shape[0], nsv),
                            norms_a=self.norms[rows],
                            norms_b=sv_norms,
                        )
                        for u in range(0, rows.shape[0], _F64_ROWS):
                            Ku = K[u : u + _F64_ROWS].astype(np.float64, copy=False)
                            self.F[rows[u : u + _F64_ROWS]] = Ku @ sv["B"]
            else:
                self.F[inactive] = 0.0
            self.active = np.arange(n, dtype=np.int64)
            self._X_active = None
            self._drop_compact()
            self.calm[:] = 0
            self.cache.clear()
            self.disk.clear()
        self._clear_log()
        return time.perf_counter() - t

    def _catch_up(self, inactive, n_sv: int):
        """Apply the logged batches to the rows of ``inactive`` whose batches since their shrink
        hold fewer rows than the ``n_sv`` support patterns (in the kernel's precision, as
        :meth:`step` applies them); returns the rest, to rebuild from the support."""
        T = self._log_t0 + len(self._log)
        # rows in the log from entry t on, for t = _log_t0 .. T
        after = np.zeros(len(self._log) + 1, dtype=np.int64)
        after[:-1] = np.cumsum([X.shape[0] for X, _ in self._log][::-1])[::-1]
        sa = self.shrunk_at[inactive]
        ok = (sa >= self._log_t0) & (sa <= T)
        ok[ok] = after[sa[ok] - self._log_t0] < n_sv
        rows_up = inactive[ok]
        if rows_up.shape[0] and len(self._log):
            norms_b = [row_norms_sq(X) for X, _ in self._log]
            for a, b, Xc in self.data.chunks():
                pa, pb = np.searchsorted(rows_up, [a, b])
                if pa == pb:
                    continue
                rows = rows_up[pa:pb]
                Xr = take_rows(Xc, rows - a)
                lag = self.shrunk_at[rows]
                for e, (XB, dB) in enumerate(self._log):
                    sel = np.flatnonzero(lag <= self._log_t0 + e)
                    if sel.shape[0] == 0:
                        continue
                    self.kernel_elements += sel.shape[0] * XB.shape[0]
                    K = kernel_block(
                        self.spec,
                        take_rows(Xr, sel),
                        XB,
                        norms_a=self.norms[rows[sel]],
                        norms_b=norms_b[e],
                        dtype=self.kdtype,
                    )
                    self.F[rows[sel]] += K @ dB.astype(K.dtype, copy=False)
        return inactive[~ok]

    def _report(self, shrink_margin: float) -> CSReply:
        s = self.s
        rows = self.active
        na = rows.shape[0]
        V = np.empty(na)
        psi = np.empty(na)
        sa, sbf, sxi, max_v, sum_v, max_psi, n_viol = pt.scan_rows(
            s.selection,
            self.B,
            self.F,
            self.yp,
            self.cls,
            self.pcls,
            self.kdiag,
            self.row_bounds(),
            s.tol,
            rows,
            shrink_margin,
            self.calm,
            V,
            psi,
        )
        # candidates: the best n_candidates violators by selection value, then (near_tol) the
        # rows closest to violating by psi
        cand = np.flatnonzero(psi > s.tol)
        if cand.shape[0] > s.n_candidates:
            top = np.argpartition(-V[cand], s.n_candidates - 1)[: s.n_candidates]
            if s.class_quota and self.pcls is not None:
                # and every class's best share, which the coordinator's working set keeps
                # (messages.pick_order)
                n_cls = int(self.pcls.max()) + 1
                share = class_quota(V[cand], self.cls[rows[cand]], s.n_candidates, n_cls)
                top = np.union1d(top, share)
            cand = cand[top]
        elif s.near_tol is not None:
            room = s.n_candidates - cand.shape[0]
            near_tol = near_tol_of(s)
            near = np.flatnonzero((psi > near_tol) & (psi <= s.tol))
            if near.shape[0] > room:
                near = near[np.argpartition(-psi[near], room - 1)[:room]] if room else near[:0]
            cand = np.concatenate([cand, near])
        crow = rows[cand]
        new = ~self.shipped[crow]
        weighted = self.Crow is not None
        reply = CSReply(
            part=self.part_id,
            cand_ids=(crow + self.lo).astype(np.int64),
            cand_V=V[cand],
            cand_psi=psi[cand],
            cand_F=self.F[crow],
            cand_X=self._take(crow[new]),
            cand_new=new,
            cand_kdiag=self.kdiag[crow],
            cand_yp=self.yp[crow],
            cand_cls=self.cls[crow],
            max_V=max_v,
            sum_V=sum_v,
            max_psi=max_psi,
            n_viol=n_viol,
            n_active=int(na),
            n_rows=int(self.F.shape[0]),
            sum_alpha=sa,
            sum_BF=sbf,
            sum_xi=sxi,
            rows_computed=self.rows_computed,
            rows_cached=self.rows_cached,
            rows_disk=self.rows_disk,
            # weighted patterns: the coordinator needs the batch rows' bounds, and the primal
            # weighs each slack by its own bound
            cand_C=self.Crow[crow] if weighted else None,
            sum_Cxi=pt.weighted_slack(self.F, self.yp, self.cls, self.pcls, self.Crow)
            if weighted
            else None,
        )
        if s.shrinking:
            keep = self.calm[rows] < s.shrink_after
            # shrink in steps of >= SHRINK_STEP of the active set: every step re-packs the
            # cached columns
            if na - np.count_nonzero(keep) >= max(1, SHRINK_STEP * na):
                self._shrink(keep)
        return reply

    def _shrink(self, keep) -> None:
        """Keep the active rows where ``keep`` (a mask over them) holds; the others stop taking
        score updates from the next batch on (logged for :meth:`_unshrink`)."""
        rows = self.active
        self.shrunk_at[rows[~keep]] = self._log_t0 + len(self._log)
        self.active = rows[keep]
        self._X_active = None
        self.cache.compact(keep)
        self._refresh_compact()

    # ---------------------------------------------------------------- results
    def reship(self, ids=()) -> None:
        """The coordinator's row bank holds the support patterns' X rows and those of the batch
        ``ids`` only (it pruned them, or resumed from a checkpoint): only these rows count as
        shipped now (the others' are sent again if they enter a batch)."""
        self.shipped[:] = np.any(self.B != 0.0, axis=1)
        ids = np.asarray(ids, dtype=np.int64)
        own = (ids >= self.lo) & (ids < self.hi)
        self.shipped[ids[own] - self.lo] = True

    # ---------------------------------------------------------------- checkpoints
    def state_file(self, directory) -> str:
        return os.path.join(os.fspath(directory), f"part-{self.part_id:05d}.npz")

    def save_state(self, directory) -> tuple:
        """Write what the next rounds read of this partition (scores ``F``, its ``B`` rows, the
        active set, the shrinking counters and the unshrink's log) beside a checkpoint, so that
        a resumed fit takes the same rounds as the uninterrupted one (a rebuild from ``B``
        alone would give scores that differ in the last bits, and shrinking would start over).
        npz without pickle, crc32 per array; returns ``(part_id, lo, hi)``."""
        arrays = {
            "F": self.F,
            "B": self.B,
            "active": self.active,
            "calm": self.calm,
            "bounds": np.array([self.lo, self.hi], dtype=np.int64),
            **self._log_arrays(),
        }
        arrays["crc32"] = np.array(
            [zlib.crc32(np.ascontiguousarray(arrays[k])) for k in _STATE_KEYS + _LOG_KEYS],
            dtype=np.int64,
        )
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
                # (states written before the unshrink's log have none: their shrunk rows are
                # rebuilt from the support, as they were then)
                has_log = all(k in z.files for k in _LOG_KEYS)
                keys = _STATE_KEYS + (_LOG_KEYS if has_log else ())
                got.update({k: z[k] for k in _LOG_KEYS if has_log})
        except (OSError, ValueError, KeyError) as e:
            raise ValueError(f"{path}: cannot read the partition state ({e})") from None
        if list(got["bounds"]) != [self.lo, self.hi]:
            raise ValueError(
                f"{path} holds rows {list(got['bounds'])}, this partition [{self.lo}, {self.hi}]"
            )
        crc = [zlib.crc32(np.ascontiguousarray(got[k])) for k in keys]
        if crc != list(got["crc32"]) or got["F"].shape != (n, P) or got["B"].shape != (n, P):
            raise ValueError(f"{path}: the partition state fails its checksum or shape")
        self._load_log(got if has_log else None, path)
        self.F[:] = got["F"]
        self.B[:] = got["B"]
        self.calm[:] = got["calm"]
        self.active = np.ascontiguousarray(got["active"], dtype=np.int64)
        self._X_active = None
        self.reship()  # after a resume the coordinator banks the support only
        self.cache.clear()
        self.disk.clear()
        self._drop_compact()
        self._refresh_compact()

    def _log_arrays(self) -> dict:
        """The unshrink's log as plain arrays (:meth:`save_state`): a resumed fit then catches
        its shrunk rows up as the uninterrupted one would, bit for bit."""
        X = [X for X, _ in self._log]
        return {
            "shrunk_at": self.shrunk_at,
            "log_t0": np.array([self._log_t0], dtype=np.int64),
            "log_rows": np.array([x.shape[0] for x in X], dtype=np.int64),
            "log_X": np.concatenate(X) if X else np.zeros((0, 0)),
            "log_dB": np.concatenate([dB for _, dB in self._log]) if X else np.zeros((0, 0)),
        }

    def _load_log(self, got, path) -> None:
        """Take the log :meth:`_log_arrays` gave (None: no log, every shrunk row rebuilt from
        the support at the unshrink)."""
        self._clear_log()
        if got is None:
            return
        rows = got["log_rows"]
        if got["shrunk_at"].shape != self.shrunk_at.shape or int(rows.sum()) != len(got["log_X"]):
            raise ValueError(f"{path}: the partition state fails its checksum or shape")
        cuts = np.cumsum(rows)[:-1]
        self._log = (
            list(zip(np.split(got["log_X"], cuts), np.split(got["log_dB"], cuts), strict=True))
            if rows.shape[0]
            else []
        )
        self._log_t0 = int(got["log_t0"][0])
        self._log_rows = int(rows.sum())
        self.shrunk_at[:] = got["shrunk_at"]

    # ---------------------------------------------------------------- recovery
    def restore(self, snapshot: dict) -> bool:
        """Take the coordinator's current state: how a partition rebuilt on a new worker after its
        old worker died catches up (docs/design.md, 'State that must survive': a lost worker costs
        one kernel block, never a replay of history).

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
        self._clear_log()
        self._unshrink({"ids": ids, "X": snapshot["sv_X"], "B": Bsv})
        return True

    def _restore_extra(self, ids, Xsv, Bsv) -> None:
        """Kind-specific state derived from the support patterns in :meth:`restore` (none)."""


class CandidateHint:
    """Streamed rows: keeps, while a chunk is in memory during the round's pass over X, the X rows
    of the chunk's rows that would be reported as candidates if the round ended now (a running
    top ``n_candidates`` of the selection values, as :meth:`Partition._report` chooses), in the
    rows' small LRU.  The report then finds its candidates' X rows there instead of reading
    their chunks again: one pass over X per round instead of about 1.5 (docs/design.md, 'The
    coordinator's size').  Only a hint: a candidate it missed is read from the store, and the model
    is the same bit for bit."""

    def __init__(self, part):
        self.part = part
        self.k = int(part.s.n_candidates)
        self.top = np.zeros(0)  # the k largest selection values of violators so far
        self.n_viol = 0
        self.near = None if part.s.near_tol is None else near_tol_of(part.s)
        # with class shares (PartitionSettings.class_quota): each class's running top share too
        n_cls = int(part.pcls.max()) + 1 if part.s.class_quota and part.pcls is not None else 0
        self.share = self.k // n_cls if n_cls > 1 else 0
        self.class_top = [np.zeros(0) for _ in range(n_cls if self.share else 0)]

    def offer(self, rows, Xa) -> None:
        """Rows ``rows`` (partition-local, their scores final) with their X rows ``Xa``."""
        p, s = self.part, self.part.s
        if self.k <= 0 or rows.shape[0] == 0:
            return
        V = np.empty(rows.shape[0])
        psi = np.empty(rows.shape[0])
        pt.selection_values(
            s.selection, p.B, p.F, p.yp, p.cls, p.pcls, p.kdiag, p.row_bounds(), rows, V, psi
        )
        viol = psi > s.tol
        nv = int(np.count_nonzero(viol))
        if nv:
            self.top = _running_top(self.top, V[viol], self.k)
        self.n_viol += nv
        keep = viol & (V >= _threshold(self.top, self.k))
        if self.share and nv:
            cls = p.cls[rows]
            for c, top in enumerate(self.class_top):
                mine = viol & (cls == c)
                if mine.any():
                    self.class_top[c] = top = _running_top(top, V[mine], self.share)
                    keep |= mine & (V >= _threshold(top, self.share))
        if self.near is not None and self.n_viol < self.k:
            # too few violators so far: the report fills up with the rows nearest to violating
            keep |= (psi > self.near) & ~viol
        keep &= ~p.shipped[rows]
        for j in np.flatnonzero(keep):
            p.data.remember(int(rows[j]), Xa[j : j + 1] if p.data.sparse else Xa[j : j + 1].copy())


def _running_top(top, values, k):
    """The ``k`` largest of the running ``top`` and the new ``values`` (all when fewer)."""
    pool = np.concatenate([top, values])
    return pool if pool.shape[0] <= k else np.partition(pool, pool.shape[0] - k)[-k:]


def _threshold(top, k) -> float:
    """The least value a row needs to stay among ``top``'s ``k`` (any, before ``k`` are seen)."""
    return top.min() if top.shape[0] >= k else -np.inf


#: 'auto' near_tol as a share of tol.  Rows the working set leaves out are pushed up by its
#: steps: in letter's tail (gap 5e-5 from round 30 on) each round moved 30-60 patterns and the
#: next round's 5-20 violators were never the last batch's rows but rows below tol / 2, so 130
#: rounds passed at max psi 1.0e-3 to 1.6e-3.  From tol / 10 they are in the batch and kept
#: below tol with it: letter 25 rounds instead of 157 (3.3 s instead of 3.8), shuttle 31
#: instead of 54, pendigits 16 instead of 34, deformed digits (20,000) 15 instead of 30
#: (benchmarks/results/HISTORY.md, 'Near violators').
NEAR_TOL_FRACTION = 0.1


def near_tol_of(s) -> float:
    """The ``psi`` above which a row near violating fills the candidates (``s.near_tol``:
    'auto' is :data:`NEAR_TOL_FRACTION` of ``tol``, a number is capped at ``tol``)."""
    return NEAR_TOL_FRACTION * s.tol if s.near_tol == "auto" else min(float(s.near_tol), s.tol)
