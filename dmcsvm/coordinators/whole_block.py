"""Rounds run inside the coordinator's Gram block when it holds the whole problem (docs/design.md,
'Batched rounds': a problem no larger than one working set).

A fresh fit of ``n <= batch_size`` rows puts every row in its first working set, so after that
round's solve the coordinator's Gram block holds ``K(X, X)`` (every row it stepped, over every
column).  The partitions' rounds would then compute again, column by column, kernel values the
block already holds, and each round would cost a message to every partition.  So the rounds
run here instead, each as the partitions' would: the scores of every row (``F``, CS 2001
Eq. 13), their ``psi`` (Eq. 32) and selection values, the working set by
:func:`~dmcsvm.engine.messages.pick_order`, its solve by
:func:`~dmcsvm.numerics.working_set.solve_working_set`, then ``F += K(X, X_moved) dB`` from
the block's rows.  The partitions then take the coefficients and scores of their rows in one
message (``RoundMessage.settle``) and check them in the next round as any other: the fit
stops only when the partitions find every ``psi <= tol`` on their own rows.

MulticlassSVC's ``batch_size=None`` is every row whenever their block fits the cache budget
(:func:`~dmcsvm.estimators._engine.whole_block_mb`).  Measured (defaults, float64 input, the
2-core VM; benchmarks/results/HISTORY.md, 'Rounds in the Gram block'): satimage, optdigits,
dna and the MNIST test split in 0.57-0.86x the time of the partitions' rounds, usps 0.75x,
25,000 deformed digits 0.70x, the same support vectors to ``tol``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..engine.messages import pick_order
from ..numerics import pattern as pt
from ..numerics.scores import add_moved_block
from ..numerics.selection import reference_violation
from ..numerics.working_set import solve_working_set

#: the share of the rows in the first working set.  At ``B = 0`` every row violates with the
#: same ``psi`` and selection value, and a working set of all of them steps nearly every row
#: once before its solve settles which are support vectors (satimage: 3,767 steps, a kernel row
#: for each of its 4,435 rows, for 1,383 support vectors); half of them settle it in 0.3-0.7x
#: that round's time and the next rounds take the violators left (HISTORY.md, 'Rounds in the
#: Gram block').  A quarter: the fits take about as many steps in all, but fewer on the whole
#: first set's columns, and its block is small enough for the solve's own copy of the stepped
#: rows (working_set.COPY_MOST_BYTES): 2-13 % faster on the real sets and on 25,000 deformed
#: digits, 3-5 % slower on a noisy synthetic set (HISTORY.md, session 45)
FIRST_SHARE = 0.25


class WholeBlock:
    """``K(X, X)`` of sparse rows computed at once (the coordinator keeps no Gram cache for
    them: :class:`~.crammer_singer._GramCache` holds dense rows), as the Gram cache offers it to
    :func:`run_in_block`: every row complete, no threads."""

    pool = None

    def __init__(self, spec, XB, dtype):
        from ..kernels import kernel_block

        self.G = kernel_block(spec, XB, XB, dtype=dtype)
        self.m = self.G.shape[0]
        self.stamp = np.full(self.m, self.m, dtype=np.int64)
        self.slot = np.arange(self.m, dtype=np.int64)  # (each place's row of G: its own)
        self.rows_computed = self.m

    def block(self, ids, XB):
        return self.G, np.arange(len(ids), dtype=np.int64)

    def ensure(self, rows) -> None:  # pragma: no cover - every row is complete
        return None

    def next_request(self) -> int:
        return 1


#: the update ``F += K(X, X_moved) dB`` in blocks of this many rows of ``F`` (one task each, on
#: the block's threads; each block's scores, transposed, stay in the core's cache while every
#: change is added); fixed, so that the sums, and the trajectory, do not depend on the thread
#: count
UPDATE_COLS = 1024


def add_moved(F, G, g, dB, pool) -> None:
    """``F += K(X, X_moved) dB``: the block's rows ``g`` of the moved patterns (their rows of
    ``G``, each complete over every placed column; column ``i`` is row ``i`` of ``F``) times
    their changes ``dB``, summed in float64 over the nonzero changes only
    (:func:`~dmcsvm.numerics.scores.add_moved_block`: letter's were 10 % of ``dB``; the dense
    float32 product took 0.41 s of its 2.2 s fit)."""
    n = F.shape[0]
    k, r = np.nonzero(dB)
    rows = np.ascontiguousarray(g[k], dtype=np.int64)
    cls = np.ascontiguousarray(r, dtype=np.int64)
    d = np.ascontiguousarray(dB[k, r], dtype=np.float64)

    def block(a):
        add_moved_block(F, G, rows, cls, d, a, min(a + UPDATE_COLS, n))

    on_blocks(block, n, UPDATE_COLS, pool)


def on_blocks(fn: Any, n: int, size: int, pool: Any) -> list:
    """``fn(a)`` for the starts ``a`` of the blocks of ``size`` rows of ``n``, on ``pool``'s
    threads when there are two or more blocks; their results in block order."""
    starts = range(0, n, size)
    if pool is None or len(starts) < 2:
        return [fn(a) for a in starts]
    return list(pool.map(fn, starts))


#: rows per task of :func:`scan_rows`; fixed, so that the sums do not depend on the threads
SCAN_ROWS = 4096


def scan_rows(sel, B, F, yb, cb, pcls, kdiag, Cb, tol, V, psi, pool):
    """:func:`~dmcsvm.numerics.pattern.scan_all_rows` over blocks of :data:`SCAN_ROWS` rows on
    the block's threads: every row's ``psi`` and selection value, and the dual's and primal's
    pieces summed block by block in block order."""
    n = B.shape[0]

    def block(a):
        b = min(a + SCAN_ROWS, n)
        return pt.scan_all_rows(
            sel, B[a:b], F[a:b], yb[a:b], cb[a:b], pcls, kdiag[a:b], Cb[a:b], tol, V[a:b], psi[a:b]
        )

    parts = on_blocks(block, n, SCAN_ROWS, pool)
    return tuple(sum(p[i] for p in parts) for i in range(3))


def run_in_block(
    s: Any,
    gram: Any,
    ids: NDArray[np.int64],
    XB: Any,
    B0: NDArray[np.float64],
    F0: NDArray[np.float64],
    yb: NDArray[np.int64],
    cb: NDArray[np.int64],
    pcls: NDArray[np.int64],
    kdiag: NDArray[np.float64],
    Cb: NDArray[np.float64],
    n_quota: int,
    max_rounds: int,
    on_row: Any,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.bool_], int, bool]:
    """Rounds on every row ``ids`` (X rows ``XB``, coefficients ``B0``, scores ``F0``, positive
    prototypes ``yb``, classes ``cb``, kernel diagonal ``kdiag``, bounds ``Cb``) in the Gram block
    ``gram``, with the settings ``s`` (:class:`~.crammer_singer.SolverSettings`), until every
    ``psi <= tol`` (or ``gap <= gap_tol``), no pattern moves, or ``max_rounds`` rounds.

    ``on_row(row, B)`` receives each round's history values (as the partitions' rounds give
    them) and the coefficients after it.
    Returns the coefficients and scores of the rows, which rows' coefficients changed, the rounds
    run and whether they ended at the stopping rule."""
    n, P = B0.shape
    code = pt.OPTIMIZERS[s.optimizer]
    sel = pt.SELECTIONS[s.selection]
    fp_eps = s.fp_eps if s.fp_eps is not None else s.tol / 2.0
    near_tol = 0.1 * s.tol  # (the partitions' 'auto' near_tol, engine.partition.near_tol_of)
    G, gpos = gram.block(ids, XB)
    # a fresh block places the rows in order (row i of F is column i): add_moved relies on it
    assert np.array_equal(gpos, np.arange(n))
    B = np.array(B0, dtype=np.float64)
    F = np.array(F0, dtype=np.float64)
    touched = np.zeros(n, dtype=bool)
    V, psi = np.empty(n), np.empty(n)
    rounds = 0
    while True:
        t0 = time.perf_counter()
        sa, sbf, sxi = scan_rows(
            sel, B, F, yb, cb, pcls, kdiag, Cb, float(s.tol), V, psi, gram.pool
        )
        dual, primal = sa - 0.5 * sbf, 0.5 * sbf + sxi
        gap = (primal - dual) / max(abs(primal), 1e-300) if primal > 0 else 0.0
        max_psi = float(psi.max())
        viol = psi > s.tol
        n_viol = int(np.count_nonzero(viol))
        row = dict(
            dual=dual, primal=primal, gap=gap, max_V=float(V.max()), max_psi=max_psi, n_viol=n_viol
        )
        if max_psi <= s.tol or (s.gap_tol > 0 and gap <= s.gap_tol):
            return B, F, touched, rounds, True
        # the candidates a partition reports: the violators, then (room left) the rows near
        cand = np.flatnonzero(viol)
        if cand.shape[0] < s.batch_size:
            cand = np.concatenate([cand, np.flatnonzero((psi > near_tol) & ~viol)])
        pick = cand[
            pick_order(
                V[cand],
                psi[cand],
                int(s.batch_size),
                float(s.tol),
                None,
                cls=cb[cand],
                n_classes=n_quota,
            )
        ]
        if rounds == 0:
            # every row violates alike at B = 0: the first working set takes every
            # 1 / FIRST_SHARE-th of them, and the next rounds the violators that are left
            pick = pick[:: int(round(1 / FIRST_SHARE))]
        if n_viol > int(np.count_nonzero(viol[pick])):
            # violators left out: reduce the working set's violations (as solve() does)
            inner_tol = max(s.tol, s.inner_frac * reference_violation(psi[pick], s.inner_skip))
        else:
            inner_tol = max(s.inner_floor * s.tol, s.inner_prog * max_psi)
        dB, _, st = solve_working_set(
            code,
            B[pick],
            F[pick],
            G,
            gpos[pick],
            yb[pick],
            cb[pick],
            pcls,
            kdiag[pick],
            np.ascontiguousarray(Cb[pick]),
            float(s.tol),
            float(fp_eps),
            int(max(1, s.inner_steps * len(pick))),
            inner_tol,
            s.inner_relax,
            rows=gram,
            first_request=gram.next_request(),
            pool=gram.pool,
        )
        moved = np.flatnonzero(np.any(dB != 0.0, axis=1))
        rounds += 1
        row.update(batch=int(moved.shape[0]), steps=int(st.sum()))
        if moved.shape[0]:
            at = pick[moved]
            B[at] += dB[moved]
            touched[at] = True
            # F += K(X, X_moved) dB_moved from the block's rows of the moved patterns (each
            # stepped, hence complete over every placed column), summed in float64
            add_moved(F, G, gram.slot[at], dB[moved], gram.pool)
        row["t_round"] = time.perf_counter() - t0
        on_row(row, B)
        if not moved.shape[0] or rounds >= max_rounds:
            return B, F, touched, rounds, False
