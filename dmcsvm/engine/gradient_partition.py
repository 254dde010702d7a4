"""A row partition for the SMO duals with one equality constraint per group (docs/design.md:
'mScatter-SVM', 'Binary SMO').

Same constructor as :class:`~dmcsvm.engine.partition.Partition`, so both executors build it
(``executor.start(..., partition_cls=GradientPartition)``).  On top of the rows and kernel columns
of :class:`~dmcsvm.engine.partition_base.PartitionBase` it keeps, for its rows, the coefficients
``alpha``, ``tot = K (y o alpha)`` and ``own_i = sum_{j in group(i)} K_ij y_j a_j``, from
which :func:`dmcsvm.numerics.grouped_smo.scan` forms the gradient; it reports per group the best
working-set candidates (the ``k`` largest ``-y g`` of ``I_up`` and the ``k`` smallest of ``I_low``,
with gradient, sign, group and X row) and the per-group extremes that decide convergence.

Kernel columns are cached **over all rows of the partition** and keyed by global pattern index, so
that one cache serves every binary problem of one-vs-rest / one-vs-one (:meth:`reset` starts a new
problem on a subset of rows and keeps the cache).

Constructor arguments: ``signs`` = sign of each row (+1/-1; 0 = not in the problem), ``groups`` =
group of each row, ``settings.C`` = box bound ``U``, ``settings.n_candidates`` = ``k``,
``settings.extra`` = ``{"w_same", "w_diff", "p", "n_groups", "with_own"}``.
"""

from __future__ import annotations

import time

import numpy as np

from ..kernels import kernel_block
from ..numerics import grouped_smo as sc
from ..numerics.binary_smo import rho_parts
from .messages import GradientMessage, GradientReply, has_batch
from .partition_base import PartitionBase
from .rows import take_rows

#: largest block of kernel columns a round materializes at once
GROUP_BYTES = 16 * 2**20


class GradientPartition(PartitionBase):
    """Rows ``[lo, hi)`` of an SMO dual with per-group equality constraints (see module doc);
    ``signs`` and ``groups`` of its rows take the places of the Crammer-Singer ``yp`` and ``cls``
    in the executors' constructor call."""

    def __init__(self, part_id, lo, hi, X, signs, groups, settings):
        super().__init__(part_id, lo, hi, X, settings)
        ex = settings.extra
        self.w_same = float(ex["w_same"])
        self.w_diff = float(ex["w_diff"])
        self.p = float(ex["p"])
        self.n_groups = int(ex["n_groups"])
        self.with_own = bool(ex["with_own"])
        self.U = float(settings.C)
        self.k = int(settings.n_candidates)
        self._set_problem(np.asarray(signs), groups)

    # ---------------------------------------------------------------- problem state
    def _bounds(self):
        """The box of every row: the scalar ``U``, or the rows' own bounds ``U_i`` (weighted
        patterns, ``settings.row_C``: they hold for every problem on these partitions and take
        the place of ``U``)."""
        return self.U if self.Crow is None else self.Crow

    def _set_problem(self, signs, grp):
        n = self.hi - self.lo
        self.y = np.ascontiguousarray(signs, dtype=np.float64)
        self.grp = np.ascontiguousarray(grp, dtype=np.int64)
        self.rows = np.flatnonzero(self.y != 0).astype(np.int64)
        self.alpha = np.zeros(n)
        self.tot = np.zeros(n)
        self.own = np.zeros(n)
        self.g = np.zeros(n)
        self.vup = np.full(n, -np.inf)
        self.vlow = np.full(n, np.inf)

    def reset(self, signs, grp=None, U=None, extra=None):
        """Start a new problem on the same rows (``signs`` with 0 for rows outside the problem and
        optional groups, over all n rows: arrays or :mod:`~dmcsvm.engine.problem_rows` values,
        of which only this partition's slice is read); the kernel-column cache is kept."""
        sl = slice(self.lo, self.hi)
        self._new_problem(signs[sl], None if grp is None else grp[sl], U, extra)
        return True

    def _new_problem(self, signs, grp, U, extra):
        """Start the problem with this partition's ``signs`` and groups (None: keep them)."""
        if extra:
            self.w_same = float(extra.get("w_same", self.w_same))
            self.w_diff = float(extra.get("w_diff", self.w_diff))
            self.p = float(extra.get("p", self.p))
            self.n_groups = int(extra.get("n_groups", self.n_groups))
            self.with_own = bool(extra.get("with_own", self.with_own))
        if U is not None:
            self.U = float(U)
        self._set_problem(np.asarray(signs), self.grp if grp is None else np.asarray(grp))

    # ---------------------------------------------------------------- the round
    def step(self, msg: GradientMessage) -> GradientReply:
        """Apply a batch (``alpha[ids] = a_new``, with ``da`` the change) to ``tot``/``own`` and
        report candidates and aggregates."""
        t0 = time.perf_counter()
        tk = tu = 0.0
        if has_batch(msg):
            ids, XB = msg.ids, msg.XB
            dcoef = np.asarray(msg.yB, dtype=np.float64) * np.asarray(msg.da)
            grpB = np.asarray(msg.grpB, dtype=np.int64)
            n = self.hi - self.lo
            nr = self.rows.shape[0]
            s_acc, so_acc = np.zeros(nr), np.zeros(nr)
            # a batch whose new columns exceed the whole cache (the dense start of a small mu)
            # would only evict itself: cache nothing then
            col_bytes = n * self.kdtype.itemsize
            n_new = sum(int(g) not in self.cache for g in ids)
            cache_ok = n_new * col_bytes <= self.cache.budget
            # columns in groups of bounded size into one reused buffer
            g = self._group_size(len(ids), GROUP_BYTES)  # every row is active here
            for a in range(0, len(ids), g):
                b = min(a + g, len(ids))
                t1 = time.perf_counter()
                KT = self._columns(ids[a:b], XB[a:b], cache_ok).T
                t2 = time.perf_counter()
                sc.accumulate_columns_T(
                    KT, self.rows, self.grp, grpB[a:b], dcoef[a:b], s_acc, so_acc, self.with_own
                )
                tk += t2 - t1
                tu += time.perf_counter() - t2
            t2 = time.perf_counter()
            sc.finish_columns(self.rows, s_acc, so_acc, self.tot, self.own, self.with_own)
            mine = (ids >= self.lo) & (ids < self.hi)
            if mine.any():
                loc = ids[mine] - self.lo
                self.alpha[loc] = np.asarray(msg.a_new)[mine]
            tu += time.perf_counter() - t2
        t3 = time.perf_counter()
        return self._timed(self._report(), t0, tk, tu, t3)

    def _report(self) -> GradientReply:
        G = self.n_groups
        gmax = np.empty(G)
        gmin = np.empty(G)
        obj2 = sc.scan(
            self.rows,
            self.y,
            self.grp,
            self.alpha,
            self.tot,
            self.own,
            self.w_same,
            self.w_diff,
            self.p,
            self._bounds(),
            G,
            self.g,
            self.vup,
            self.vlow,
            gmax,
            gmin,
        )
        up = _top_per_group(self.rows, self.grp, -self.vup, self.k)
        low = _top_per_group(self.rows, self.grp, self.vlow, self.k)
        cand = np.union1d(up, low)
        return GradientReply(
            part=self.part_id,
            cand_ids=(cand + self.lo).astype(np.int64),
            cand_g=self.g[cand],
            cand_vup=self.vup[cand],
            cand_vlow=self.vlow[cand],
            cand_grp=self.grp[cand],
            cand_y=self.y[cand],
            cand_X=take_rows(self.X, cand),
            gmax=gmax,
            gmin=gmin,
            obj2=obj2,
            rows_computed=self.rows_computed,
            rows_cached=self.rows_cached,
            cand_U=None if self.Crow is None else self.Crow[cand],
        )

    # ---------------------------------------------------------------- results
    def summary(self) -> dict:
        """End-of-solve quantities: LIBSVM's rho pieces (per group) and the per-class sums of
        :func:`dmcsvm.numerics.grouped_smo.class_sums` (test rules of mScatter): O(groups)
        numbers, nothing per row (the coordinator does not grow with n; docs/design.md, 'The
        coordinator's size')."""
        G = self.n_groups
        cs = np.zeros((G, 6))
        sc.class_sums(
            self.rows, self.grp, self.alpha, self.g, self.tot, self.own, self._bounds(), G, cs
        )
        rho = np.empty(4)
        rho_parts(self.alpha, self.y, self.g, self._bounds(), self.rows, rho)
        return {"class_sums": cs, "rho": rho}

    # ---------------------------------------------------------------- recovery
    def restore(self, snapshot: dict) -> bool:
        """Take the coordinator's current problem and coefficients (how a partition rebuilt on a
        new worker catches up; docs/design.md, 'State that must survive').

        ``snapshot``: ``signs`` and ``grp`` (this partition's rows), optional ``U`` and ``extra``
        (as :meth:`reset`), and the variables with ``a != 0``: ``sv_ids`` (global ids), ``sv_a``,
        ``sv_y`` (their signs), ``sv_grp`` (their groups), ``sv_X`` (their X rows).  ``a`` of this
        partition's rows is taken from them and ``tot = K(X, X_SV) (y a)_SV``, ``own`` the same
        sum over the support variables of each row's group, are rebuilt in row blocks of bounded
        size: equal to the accumulated sums up to rounding."""
        from ..kernels import row_norms_sq

        self._new_problem(
            snapshot["signs"], snapshot["grp"], snapshot.get("U"), snapshot.get("extra")
        )
        ids = np.asarray(snapshot["sv_ids"], dtype=np.int64).reshape(-1)
        a_sv = np.asarray(snapshot["sv_a"], dtype=np.float64).reshape(-1)
        mine = (ids >= self.lo) & (ids < self.hi)
        self.alpha[ids[mine] - self.lo] = a_sv[mine]
        if ids.shape[0] == 0 or self.rows.shape[0] == 0:
            return True
        coef = np.asarray(snapshot["sv_y"], dtype=np.float64) * a_sv
        gsv = np.asarray(snapshot["sv_grp"], dtype=np.int64)
        G = int(max(gsv.max(), self.grp.max() if self.grp.shape[0] else 0)) + 1
        M = np.zeros((ids.shape[0], G))
        M[np.arange(ids.shape[0]), gsv] = coef
        Xsv = snapshot["sv_X"]
        sv_norms = row_norms_sq(Xsv)
        step = max(1, self.s.kernel_block_bytes // (8 * (ids.shape[0] + G)))
        for q in range(0, self.rows.shape[0], step):
            rows = self.rows[q : q + step]
            K = kernel_block(
                self.spec, take_rows(self.X, rows), Xsv, norms_a=self.norms[rows], norms_b=sv_norms
            )
            self.kernel_elements += K.size
            self.tot[rows] = K @ coef
            if self.with_own:
                self.own[rows] = (K @ M)[np.arange(rows.shape[0]), self.grp[rows]]
        return True


def _top_per_group(rows, grp, key, k):
    """Local indices of the ``k`` rows with the smallest finite ``key`` in every group."""
    if rows.shape[0] == 0:
        return rows
    kv = key[rows]
    ok = np.isfinite(kv)
    r = rows[ok]
    if r.shape[0] == 0:
        return r
    kv = kv[ok]
    gr = grp[r]
    o = np.lexsort((r, kv, gr))  # by group, then key, ties by row (deterministic)
    gs = gr[o]
    start = np.searchsorted(gs, gs, side="left")
    rank = np.arange(gs.shape[0]) - start
    return r[o[rank < k]]
