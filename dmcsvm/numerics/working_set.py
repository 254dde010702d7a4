"""The coordinator's working-set solve of one round's batch on cached kernel values (docs/design.md,
'Batched rounds').

:func:`solve_working_set` optimizes the batch patterns by re-selection: passes over the batch
step, each exactly (:func:`~dmcsvm.numerics.pattern.relaxed_step`), the rows whose KKT violation
``psi`` (CS 2001 Eq. 32) exceeds a cut that halves with the largest violation, each step moving
every batch row's scores by one column of ``K_BB``.  This module lays the batch out and asks for
kernel rows; the passes themselves, on one thread or several, are :mod:`.passes`.  The
per-pattern optimizers, ``psi`` and the papers' one-pass batch solve
(:func:`~dmcsvm.numerics.pattern.solve_batch`) live in :mod:`.pattern`; the explicit-prototype
form of the same passes (linear kernels) in :mod:`.linear_prototypes`, which shares
:func:`~.passes.pass_cut`.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from .passes import CURSOR, N_STATE, STOP_AT, ask_rows, run_passes, sync_array
from .pattern import Bounds

__all__ = [
    "solve_working_set",
    "ROWS_FIRST_REQUEST",
    "ROWS_MOST_REQUEST",
    "SPLIT_MIN_BLOCK",
    "COPY_MOST_BYTES",
    "COPY_MOST_SHARE",
]


#: batch rows whose kernel rows the working-set solve asks for at once (the row it needs now and
#: the next ones its pass may step): the first request of a solve asks for up to FIRST, each next
#: one for twice as many, up to MOST (few rows when few move, large GEMMs when many do); fixed,
#: so that the requests, and hence the values the caller computes, do not depend on its threads
ROWS_FIRST_REQUEST = 16
ROWS_MOST_REQUEST = 4096


#: batch rows per thread below which the passes run on one thread: each thread's share of a step
#: must outweigh following the others' steps and handing the visits on
SPLIT_MIN_BLOCK = 1024


#: a solve keeps its own copy of each stepped row's ``K_BB`` values (written as the row's first
#: step reads them from ``G``) when that block takes at most COPY_MOST_BYTES and the batch
#: holds at most COPY_MOST_SHARE of ``G``'s columns: a step reads its row at the batch's places,
#: which in ``G`` lie scattered over the row of every placed column, so each step streams the
#: whole row from memory (letter: 60 KB rows of 15,000 columns, for working sets of 1,500-4,000
#: rows stepped 1-11 times each), where the copy is 6-16 KB read contiguously from the cache
COPY_MOST_BYTES = 64 * 2**20
COPY_MOST_SHARE = 0.5


class ThreadPool(Protocol):
    """The ``pool`` of :func:`solve_working_set` (:class:`~dmcsvm.engine.threads.LazyPool`):
    ``workers`` threads that run ``submit(fn, *args)``."""

    workers: int

    def submit(self, fn: Any, *args: Any) -> Any: ...


class KernelRows(Protocol):
    """The ``rows`` of :func:`solve_working_set`: place ``g`` holds the columns below
    ``stamp[g]`` among the ``m`` in use; ``ensure(positions)`` computes the missing ones (the
    coordinator's ``_GramCache``).  Its values are row ``g`` of ``G``, or, where the rows have
    a ``slot`` array, row ``slot[g]``."""

    stamp: NDArray[np.int64]
    m: int

    def ensure(self, rows: NDArray[np.int64]) -> None: ...


def solve_working_set(
    code: int,
    Bb: NDArray[np.float64],
    Fb: NDArray[np.float64],
    G: NDArray[np.floating[Any]],
    gpos: NDArray[np.int64],
    yb: NDArray[np.int64],
    cb: NDArray[np.int64],
    pcls: NDArray[np.int64],
    kdiag: NDArray[np.float64],
    C: Bounds,
    tol: float,
    fp_eps: float,
    max_steps: int,
    inner_tol: float,
    relax: float = 1.0,
    rows: KernelRows | None = None,
    first_request: int = ROWS_FIRST_REQUEST,
    pool: ThreadPool | None = None,
    F_out: NDArray[np.float64] | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]]:
    """Coordinator's working-set solve on ``K_BB`` by re-selection (docs/design.md, 'Batched
    rounds': updates inside a batch touch only batch rows): passes over the batch optimize, each
    exactly (``optimize_pattern``), the rows whose KKT violation ``psi`` (CS 2001 Eq. 32) NOW
    exceeds a cut, the cut being half the largest violation at the start of the pass (never below
    ``inner_tol``), until every batch row has ``psi <= inner_tol`` or ``max_steps`` steps were
    taken.  The most violated rows are thus optimized first and again while they stay the most
    violated (the papers' sequential algorithm restricted to the batch, with the threshold
    cooling of CS 2001 §7 inside the round), each step costing ``O(|B|)`` score updates.

    ``K_BB[j, k] = G[gpos[j], gpos[k]]`` (the coordinator's cached kernel values); ``C`` is a
    scalar or one bound per batch row; ``relax > 1`` over-relaxes the exact optimizer's steps
    (:func:`_over_relax`).  ``rows`` (optional) says which rows of ``G`` hold their values:
    row ``g`` holds the columns below ``rows.stamp[g]`` (``-1``: none yet) among the
    ``rows.m`` in use, and ``rows.ensure(positions)`` computes the missing ones.  A row is asked
    for only when a step needs it, with the next ones the pass will step
    (``first_request`` rows first, then twice as many each time, at most
    :data:`ROWS_MOST_REQUEST`): a working set of thousands of candidates of which a few dozen
    move (a round of shuttle's first hundred) computes a few dozen kernel rows, not thousands.
    The passes, cuts and steps are the same whether rows are given whole or on request.
    Where the batch is a small share of ``G``'s columns, each row's values at the batch's
    places are copied into a block of the solve's own on the row's first step, and its later
    steps read them there (:data:`COPY_MOST_BYTES`): the same values, so the same steps.
    With a ``pool`` of 2+ workers, a batch of at least :data:`SPLIT_MIN_BLOCK` rows per thread
    runs the passes on that many threads (the caller's and ``pool``'s), each owning a block of
    the batch (:mod:`.passes`), with the same steps and results bit for bit.
    Returns ``dB`` (change of every batch row), the gains and the number of per-pattern
    optimizations of every batch row; ``F_out`` (optional, the shape of ``Fb``) receives the batch
    rows' scores after the solve (``Fb`` plus every step's update), which the partitions take
    instead of computing the batch rows' kernel columns (``RoundMessage.scores``).

    The set-up (the sort by cache place, the gathers) is NumPy and the passes numba functions:
    inside numba, ``argsort`` and fancy indexing compiled a sort and the shape-error formatting
    into the first fit (about 3.5 s of its 23 s of compilation)."""
    nb, P = Bb.shape
    W = 1 if pool is None else int(max(1, min(pool.workers, nb // SPLIT_MIN_BLOCK)))
    # score columns in increasing cache place, block by block: each update is one contiguous
    # axpy per changed prototype, and the kernel column G[gpos[j], sg] is read in increasing
    # order (1.06-1.15x the whole solve on saved letter, satimage and usps working sets against
    # batch order, same results bit for bit); rows are still visited in batch order, so the
    # passes, cuts and steps are those of batch-ordered columns
    bounds = (np.arange(W + 1, dtype=np.int64) * nb) // W
    place = np.lexsort((gpos, np.repeat(np.arange(W), np.diff(bounds))))  # (stable)
    col = np.empty(nb, dtype=np.int64)  # batch row j -> its column
    col[place] = np.arange(nb)
    sg = np.ascontiguousarray(gpos[place])
    FT = np.ascontiguousarray(Fb[place].T)
    Bc = np.array(Bb, dtype=np.float64, order="C")
    BT = np.ascontiguousarray(Bc[place].T)
    Ccol = (
        np.full(nb, float(C))
        if np.ndim(C) == 0
        else np.ascontiguousarray(np.asarray(C, dtype=np.float64)[place])
    )
    if rows is None:
        stamp, m = np.full(G.shape[0], G.shape[0], dtype=np.int64), G.shape[0]
    else:
        stamp, m = rows.stamp, int(rows.m)
    gpos = np.ascontiguousarray(gpos, dtype=np.int64)
    # the row of G holding each batch row's values: its place, unless the rows say otherwise
    # (the coordinator's cache takes G's rows in the order it computes them)
    slot = None if rows is None else getattr(rows, "slot", None)
    grow = gpos.copy() if slot is None else np.ascontiguousarray(slot[gpos], dtype=np.int64)
    ycol = np.ascontiguousarray(yb[place])
    ccol = np.ascontiguousarray(cb[place])
    state = np.zeros(N_STATE, dtype=np.int64)
    scal = np.zeros(1)  # the pass's cut
    steps = np.zeros(nb, dtype=np.int64)
    gains = np.zeros(nb)
    U = np.empty(nb)
    want = np.empty(min(nb, ROWS_MOST_REQUEST), dtype=np.int64)
    ask = int(min(max(first_request, 1), want.shape[0]))
    S_of, mx_of = np.zeros(W), np.zeros(W)  # each thread's score bound, pass-start largest psi
    log_j, log_d = np.zeros(nb, dtype=np.int64), np.zeros((nb, P))  # a pass's steps
    rest = np.empty(want.shape[0], dtype=np.int64)
    if nb * nb * G.itemsize <= COPY_MOST_BYTES and nb <= COPY_MOST_SHARE * m:
        Kc = np.empty((nb, nb), dtype=G.dtype)  # (pages touched by the rows stepped only)
    else:
        Kc = np.empty((0, 0), dtype=G.dtype)
    have_of = np.zeros((W, nb if Kc.shape[0] else 0), dtype=np.bool_)
    while True:
        sync = sync_array(W)
        sync[CURSOR] = state[1] if state[0] == 1 else 0  # (the visits already decided)
        passes = (
            *(bounds, code, Bc, BT, FT, G, gpos, grow, col, sg, yb, cb, ycol, ccol, Ccol, pcls),
            kdiag,
            *(C, tol, fp_eps, max_steps, inner_tol, float(relax), stamp, m, state, scal),
            *(S_of, mx_of, sync, log_j, log_d, steps, gains, U, Kc, have_of),
        )
        # (W - 1 tasks on a pool of at least W - 1 idle threads: every thread starts, which the
        # passes' barriers need)
        others = [pool.submit(run_passes, w, *passes) for w in range(1, W)] if pool else []
        stopped = run_passes(0, *passes)
        for fut in others:
            fut.result()
        if stopped == 0:
            break
        # every thread stopped at the same visit with every step applied: ask for its kernel row
        # and those the passes may step next
        stop = int(sync[STOP_AT])
        k = ask_rows(
            stop, want[:ask], rest, col, gpos, stamp, m, U, inner_tol, Bc, FT, yb, cb, pcls, C
        )
        assert rows is not None  # (without rows every row of G is complete: no stop)
        rows.ensure(gpos[want[:k]])
        if slot is not None:
            grow[:] = rows.slot[gpos]  # type: ignore[attr-defined]
        ask = min(2 * ask, want.shape[0])
    if F_out is not None:
        F_out[:] = FT.T[col]
    return Bc - Bb, gains, steps
