"""The coordinator's working-set solve of one round's batch on cached kernel values (docs/design.md,
'Batched rounds').

:func:`solve_working_set` optimizes the batch patterns by re-selection: passes over the batch
step, each exactly (:func:`~dmcsvm.numerics.pattern.relaxed_step`), the rows whose KKT violation
``psi`` (CS 2001 Eq. 32) exceeds a cut that halves with the largest violation, each step moving
every batch row's scores by one column of ``K_BB``.  The per-pattern optimizers, ``psi`` and the
papers' one-pass batch solve (:func:`~dmcsvm.numerics.pattern.solve_batch`) live in
:mod:`.pattern`; the explicit-prototype form of the same passes (linear kernels) in
:mod:`.linear_prototypes`, which shares :func:`pass_cut`.
"""

from __future__ import annotations

from typing import Any, Protocol

import numba
import numpy as np
from numpy.typing import NDArray

from .pattern import _C_REL, _MAX_INNER, Bounds, bound_at, psi_value, relaxed_step

__all__ = ["solve_working_set", "psi_columns", "pass_cut", "apply_step", "ask_rows"]


@numba.njit(cache=True, nogil=True)
def _step_row(
    code: int,
    j: int,
    cj: int,
    Bc: NDArray[np.float64],
    BT: NDArray[np.float64],
    FT: NDArray[np.float64],
    G: NDArray[np.floating[Any]],
    gj_pos: int,
    sg: NDArray[np.int64],
    yb: NDArray[np.int64],
    cb: NDArray[np.int64],
    pcls: NDArray[np.int64],
    kdiag: NDArray[np.float64],
    C: Bounds,
    tol: float,
    fp_eps: float,
    b0: NDArray[np.float64],
    f: NDArray[np.float64],
    kcol: NDArray[np.float64],
    U: NDArray[np.float64],
    slack: float,
    relax: float,
) -> tuple[float, bool, float]:
    """Optimize batch row ``j`` exactly on its own (``optimize_pattern``) and move the scores of
    every batch row with it, ``F_k += K_kj dB_j`` for the prototypes that changed.  ``FT`` holds
    the batch scores transposed, P x |B|, row ``j`` in column ``cj``, the columns in increasing
    Gram-cache place ``sg``: each update is one contiguous axpy, and the kernel column
    ``G[gj_pos, sg]`` is read in increasing order (1.06-1.15x the whole solve on saved letter,
    satimage and usps working sets against batch order, same results bit for bit).

    ``U`` (column order) holds an upper bound on every row's ``psi``: psi is a largest minus a
    smallest score (CS 2001 Eq. 32) over prototypes whose bounds only the row's own step moves,
    so a change ``K_kj d_r`` of row k's scores moves it by at most
    ``|K_kj| (max_r d_r^+ + max_r d_r^-)`` (the largest score up, the smallest down);
    ``slack`` covers the rounding of the update (``solve_working_set``).  ``BT`` (the
    coefficients by column, P x |B|) follows ``Bc``.
    ``relax > 1`` over-relaxes an exact step (:func:`relaxed_step`).
    Returns the gain, whether anything changed, and ``max_k |K_kj| max_r |d_r|`` (the most any
    score moved)."""
    nb, P = Bc.shape
    b = Bc[j]
    for r in range(P):
        b0[r] = b[r]
        f[r] = FT[r, cj]
    kpp = kdiag[j]
    phi = (0.1 * tol) ** 2 / (2.0 * kpp) if kpp > 0.0 else 0.0
    g = relaxed_step(code, b, b0, f, yb[j], cb[j], pcls, kpp, bound_at(C, j), phi, fp_eps, relax)
    for r in range(P):
        BT[r, cj] = b[r]
        b0[r] = b[r] - b0[r]  # (b0 now holds the step)
    ch, moved_most = apply_step(b0, 0, nb, G, gj_pos, sg, FT, U, kcol, slack)
    return g, ch, moved_most


@numba.njit(cache=True, nogil=True)
def apply_step(
    d: NDArray[np.float64],
    lo: int,
    hi: int,
    G: NDArray[np.floating[Any]],
    gj_pos: int,
    sg: NDArray[np.int64],
    FT: NDArray[np.float64],
    U: NDArray[np.float64],
    kcol: NDArray[np.float64],
    slack: float,
) -> tuple[bool, float]:
    """A step ``d`` (the change of a batch row's coefficients, its kernel row in ``G[gj_pos]``)
    on the score columns ``lo:hi``: ``F_k += K_kj d`` for the prototypes that changed, and the
    bounds ``U`` (see :func:`_step_row`).  Each column goes through the same operations whatever
    the range, so a step applied in parts (:mod:`.split_passes`) gives the values of one applied
    whole, bit for bit.  Returns whether anything changed and ``max_k |K_kj| max_r |d_r|`` over
    these columns."""
    P = d.shape[0]
    first = -1
    dup = 0.0  # the largest rise and the largest fall of a coefficient
    ddown = 0.0
    for r in range(P):
        dr = d[r]
        if dr != 0.0 and first < 0:
            first = r
        dup = max(dup, dr)
        ddown = max(ddown, -dr)
    if first < 0:
        return False, 0.0
    dmax = max(dup, ddown)
    gj = G[gj_pos]  # K_BB is symmetric: row j is the column, read contiguously
    # row k's largest score rises by at most |K_kj| times one of dup / ddown and its smallest
    # falls by at most |K_kj| times the other (which one: the sign of K_kj)
    w = (1.0 + 1e-9) * (dup + ddown)
    n = hi - lo
    sgl = sg[lo:hi]  # (slices from 0: a loop over range(lo, hi) keeps negative-index
    Ul = U[lo:hi]  # wraparound and does not vectorize)
    Fr = FT[first, lo:hi]
    dr = d[first]
    kmax = 0.0
    for t in range(n):  # one pass: the column, the first changed score row, the bounds
        k = gj[sgl[t]]
        kcol[t] = k
        Fr[t] += k * dr
        a = abs(k)
        Ul[t] += w * a + slack
        kmax = max(kmax, a)
    for r in range(first + 1, P):
        dr = d[r]
        if dr == 0.0:
            continue
        Fr = FT[r, lo:hi]
        for t in range(n):
            Fr[t] += kcol[t] * dr
    return True, kmax * dmax


@numba.njit(cache=True, nogil=True)
def psi_columns(
    FT: NDArray[np.float64],
    BT: NDArray[np.float64],
    ycol: NDArray[np.int64],
    ccol: NDArray[np.int64],
    Ccol: NDArray[np.float64],
    pcls: NDArray[np.int64],
    mx: NDArray[np.float64],
    mn: NDArray[np.float64],
    out: NDArray[np.float64],
) -> None:
    """:func:`psi_value` of every column of the transposed scores ``FT`` (P x m, coefficients
    ``BT`` alike, positive prototype ``ycol``, class ``ccol``, bound ``Ccol`` per column) into
    ``out``, prototype by prototype: each step of the loop is one contiguous stream that LLVM
    vectorizes, where a column at a time reads P strided values (same arithmetic, same values
    bit for bit).  ``mx`` / ``mn`` are scratch of length m."""
    P, m = FT.shape
    for t in range(m):
        mx[t] = -np.inf
        mn[t] = np.inf
    for r in range(P):
        Fr = FT[r]
        Br = BT[r]
        pr = pcls[r]
        for t in range(m):
            isy = ycol[t] == r
            ok = isy or pr != ccol[t]
            g = Fr[t] - 1.0 if isy else Fr[t]
            bound = Ccol[t] * (1.0 - _C_REL) if isy else 0.0
            a = mx[t]
            mx[t] = g if ok and g > a else a
            a = mn[t]
            mn[t] = g if ok and Br[t] < bound and g < a else a
    for t in range(m):
        v = mx[t] - mn[t]
        out[t] = v if v > 0.0 else 0.0


@numba.njit(cache=True, nogil=True)
def pass_cut(
    mx: float, tol: float, inner_tol: float, first: bool, total: int, max_steps: int
) -> float:
    """The working-set solve's rule for its next pass, from the largest violation ``mx`` of the
    batch now: -1 to stop (below ``inner_tol``, or ``tol`` on the first pass, which always runs
    while some row violates ``tol``; or ``max_steps`` spent), else the pass's cut (optimize the
    rows whose ``psi`` exceeds it): half the largest violation, never below ``inner_tol``."""
    if mx <= tol or (mx <= inner_tol and not first) or total >= max_steps:
        return -1.0
    return max(0.5 * mx, inner_tol) if mx > inner_tol else 0.5 * mx


#: batch rows whose kernel rows the working-set solve asks for at once (the row it needs now and
#: the next ones its pass may step): the first request of a solve asks for up to FIRST, each next
#: one for twice as many, up to MOST (few rows when few move, large GEMMs when many do); fixed,
#: so that the requests, and hence the values the caller computes, do not depend on its threads
ROWS_FIRST_REQUEST = 16
ROWS_MOST_REQUEST = 4096


#: batch rows per thread below which the passes run on one thread: each thread's share of a step
#: must outweigh following the others' steps and handing the visits on
SPLIT_MIN_BLOCK = 1024


class ThreadPool(Protocol):
    """The ``pool`` of :func:`solve_working_set` (:class:`~dmcsvm.engine.threads.LazyPool`):
    ``workers`` threads that run ``submit(fn, *args)``."""

    workers: int

    def submit(self, fn: Any, *args: Any) -> Any: ...


class KernelRows(Protocol):
    """The ``rows`` of :func:`solve_working_set`: row ``g`` of ``G`` holds the columns below
    ``stamp[g]`` among the ``m`` in use; ``ensure(positions)`` computes the missing ones (the
    coordinator's ``_GramCache``)."""

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
    With a ``pool`` of 2+ workers, a batch of at least :data:`SPLIT_MIN_BLOCK` rows per thread
    runs the passes on that many threads, each owning a block of the batch
    (:mod:`.split_passes`), with the same steps and results bit for bit.
    Returns ``dB`` (change of every batch row), the gains and the number of per-pattern
    optimizations of every batch row.

    The set-up (the sort by cache place, the gathers) is NumPy and the passes one numba function:
    inside numba, ``argsort`` and fancy indexing compiled a sort and the shape-error formatting
    into the first fit (about 3.5 s of its 23 s of compilation)."""
    nb, P = Bb.shape
    W = 1 if pool is None else int(max(1, min(pool.workers, nb // SPLIT_MIN_BLOCK)))
    # score columns in increasing cache place (see _step_row), by block when the passes are
    # split; rows are still visited in batch order, so the passes, cuts and steps are those of
    # batch-ordered columns
    bounds = (np.arange(W + 1, dtype=np.int64) * nb) // W
    if W > 1:
        place = np.lexsort((gpos, np.repeat(np.arange(W), np.diff(bounds))))
    else:
        place = np.argsort(gpos, kind="stable")
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
    ycol = np.ascontiguousarray(yb[place])
    ccol = np.ascontiguousarray(cb[place])
    state = np.zeros(_N_STATE, dtype=np.int64)
    scal = np.zeros(2)  # the pass's cut; S (see _working_set_passes)
    steps = np.zeros(nb, dtype=np.int64)
    gains = np.zeros(nb)
    U = np.empty(nb)
    want = np.empty(min(nb, ROWS_MOST_REQUEST), dtype=np.int64)
    ask = int(min(max(first_request, 1), want.shape[0]))
    args = (code, Bc, BT, FT, G, gpos, col, sg, yb, cb, ycol, ccol, Ccol, pcls, kdiag, C, tol)
    args2 = (fp_eps, max_steps, inner_tol, float(relax), stamp, m, state, scal)
    if W > 1:
        from .split_passes import CURSOR, STOP_AT, split_passes, sync_array

        S_of, mx_of = np.zeros(W), np.zeros(W)
        log_j, log_d = np.zeros(nb, dtype=np.int64), np.zeros((nb, P))
        rest = np.empty(want.shape[0], dtype=np.int64)
    while True:
        if W == 1:
            k = _working_set_passes(*args, *args2, steps, gains, U, want[:ask])
            if k == 0:
                break
        else:
            sync = sync_array(W)
            sync[8 * CURSOR] = state[1] if state[0] == 1 else 0
            split = (bounds, *args, *args2, S_of, mx_of, sync, log_j, log_d, steps, gains, U)
            assert pool is not None
            others = [pool.submit(split_passes, w, *split) for w in range(1, W)]
            stopped = split_passes(0, *split)
            for fut in others:
                fut.result()
            if stopped == 0:
                break
            k = ask_rows(
                int(sync[8 * STOP_AT]),
                want[:ask],
                rest,
                col,
                gpos,
                stamp,
                m,
                U,
                inner_tol,
                Bc,
                FT,
                yb,
                cb,
                pcls,
                C,
            )
        assert rows is not None  # (without rows every row of G is complete: k is 0)
        rows.ensure(gpos[want[:k]])
        ask = min(2 * ask, want.shape[0])
    return Bc - Bb, gains, steps


@numba.njit(cache=True, nogil=True)
def ask_rows(
    j: int,
    want: NDArray[np.int64],
    rest: NDArray[np.int64],
    col: NDArray[np.int64],
    gpos: NDArray[np.int64],
    stamp: NDArray[np.int64],
    m: int,
    U: NDArray[np.float64],
    inner_tol: float,
    Bc: NDArray[np.float64],
    FT: NDArray[np.float64],
    yb: NDArray[np.int64],
    cb: NDArray[np.int64],
    pcls: NDArray[np.int64],
    C: Bounds,
) -> int:
    """The passes stopped at batch row ``j``, whose row of ``K_BB`` is not computed: write into
    ``want`` the batch rows to compute, ``j`` and the rows this solve may step next, those
    violating more than ``inner_tol`` now, in the order the passes visit them (this one's rest,
    then the next's start); what room is left goes to the next missing rows in visiting order
    (``rest``, filled in the same scan): a request of a few rows streams all of X's placed rows
    through memory for a handful of values, and the requests double in size
    (:func:`solve_working_set`).  Returns how many."""
    nb = Bc.shape[0]
    want[0] = j
    k = 1
    n_rest = 0
    for q in range(1, nb):
        if k == want.shape[0]:
            break
        jj = j + q if j + q < nb else j + q - nb
        if stamp[gpos[jj]] >= m:
            continue
        cc = col[jj]
        if (
            U[cc] > inner_tol
            and psi_value(Bc[jj], FT[:, cc], yb[jj], cb[jj], pcls, bound_at(C, jj)) > inner_tol
        ):
            want[k] = jj
            k += 1
        elif n_rest < rest.shape[0]:
            rest[n_rest] = jj
            n_rest += 1
    for i in range(min(n_rest, want.shape[0] - k)):
        want[k] = rest[i]
        k += 1
    return k


#: the passes' state between requests for kernel rows: phase (0 a pass starts, 1 inside a pass,
#: 2 done), the batch row a pass goes on from, steps taken, first pass, the pass moved, passes
_N_STATE = 6


@numba.njit(cache=True, nogil=True)
def _working_set_passes(
    code: int,
    Bc: NDArray[np.float64],
    BT: NDArray[np.float64],
    FT: NDArray[np.float64],
    G: NDArray[np.floating[Any]],
    gpos: NDArray[np.int64],
    col: NDArray[np.int64],
    sg: NDArray[np.int64],
    yb: NDArray[np.int64],
    cb: NDArray[np.int64],
    ycol: NDArray[np.int64],
    ccol: NDArray[np.int64],
    Ccol: NDArray[np.float64],
    pcls: NDArray[np.int64],
    kdiag: NDArray[np.float64],
    C: Bounds,
    tol: float,
    fp_eps: float,
    max_steps: int,
    inner_tol: float,
    relax: float,
    stamp: NDArray[np.int64],
    m: int,
    state: NDArray[np.int64],
    scal: NDArray[np.float64],
    steps: NDArray[np.int64],
    gains: NDArray[np.float64],
    U: NDArray[np.float64],
    want: NDArray[np.int64],
) -> int:
    """The passes of :func:`solve_working_set` on its prepared arrays: ``Bc`` (the batch's
    coefficients, updated in place; ``BT`` the same by column), ``FT`` (scores, P x |B|,
    columns in cache place), ``col`` (batch row -> column), ``sg`` (cache place of each column)
    and the columns' positive prototypes, classes and bounds; ``steps`` and ``gains`` are
    accumulated in place.

    Resumable: when a step needs a row of ``G`` that is not there (``stamp[gpos[j]] < m``) the
    passes stop before it, write into ``want`` the batch rows whose kernel rows to compute (that
    one, then those whose ``psi`` exceeds ``inner_tol`` now, in the order the passes visit them)
    and
    return how many; called again with the same arrays (``state``, ``scal``, ``U``) once those
    rows are in ``G``, they go on exactly where they stopped.  Returns 0 when done."""
    nb, P = Bc.shape
    b0 = np.empty(P)
    f = np.empty(P)
    kcol = np.empty(nb)
    rest = np.empty(want.shape[0], dtype=np.int64)  # a request's rows below inner_tol
    # each pass starts from every row's psi, taken prototype by prototype (psi_columns: one
    # vectorized stream per prototype, where row-by-row evaluations read P strided values); in
    # the pass psi is recomputed only where its upper bound U (see _step_row) exceeds the cut:
    # the rows never looked at are exactly those a full scan would find below it, so the passes,
    # cuts and steps are those of full scans, bit for bit, at a fraction of the psi evaluations.
    # The pass-start psi of every row, against only the rows whose bound exceeded the running
    # maximum: replayed letter / satimage / usps working sets 1.54-1.58 / 0.18 / 0.18-0.20 s
    # against 1.59-1.60 / 0.20 / 0.21 s, same steps; whole fits (alternated) usps 0.51-0.54 s
    # against 0.55-0.63 s, satimage 0.28-0.29 against 0.30-0.31 s, letter and pendigits equal.
    # slack: the rounding of one score update and of a psi evaluation, 8 ulp of the largest
    # score magnitude S (S grows by at most the largest change of any score per step)
    psi0 = np.empty(nb)
    mx_s = np.empty(nb)
    mn_s = np.empty(nb)
    phase, j0, total, first, moved, passes = (
        state[0],
        state[1],
        state[2],
        state[3] == 0,
        state[4] != 0,
        state[5],
    )
    cut, S = scal[0], scal[1]
    if phase == 2:
        return 0
    if phase == 0 and passes == 0:
        S = 1.0
        for t in range(nb):
            for r in range(P):
                S = max(S, abs(FT[r, t]))
    while True:
        if phase == 0:
            if passes >= _MAX_INNER:
                break
            passes += 1
            slack = 8e-16 * (S + 1.0)
            psi_columns(FT, BT, ycol, ccol, Ccol, pcls, mx_s, mn_s, psi0)
            mx = 0.0
            for c in range(nb):
                p = psi0[c]
                U[c] = p * (1.0 + 1e-12) + slack
                mx = max(mx, p)
            cut = pass_cut(mx, tol, inner_tol, first, total, max_steps)
            if cut < 0.0:
                break
            first = False
            moved = False
            j0 = 0
            phase = 1
        slack = 8e-16 * (S + 1.0)
        for j in range(j0, nb):
            if total >= max_steps:
                break
            c = col[j]
            if U[c] <= cut:
                continue
            p = psi_value(Bc[j], FT[:, c], yb[j], cb[j], pcls, bound_at(C, j))
            U[c] = p * (1.0 + 1e-12) + slack
            if p <= cut:
                continue
            if stamp[gpos[j]] < m:
                k = ask_rows(
                    j, want, rest, col, gpos, stamp, m, U, inner_tol, Bc, FT, yb, cb, pcls, C
                )
                state[0], state[1], state[2], state[3] = 1, j, total, 0 if first else 1
                state[4], state[5] = 1 if moved else 0, passes
                scal[0], scal[1] = cut, S
                return k
            g, ch, moved_most = _step_row(
                code,
                j,
                c,
                Bc,
                BT,
                FT,
                G,
                gpos[j],
                sg,
                yb,
                cb,
                pcls,
                kdiag,
                C,
                tol,
                fp_eps,
                b0,
                f,
                kcol,
                U,
                slack,
                relax,
            )
            U[c] = np.inf  # the row's own step moved its bounds: evaluate it when next asked
            S += moved_most
            slack = 8e-16 * (S + 1.0)
            total += 1
            steps[j] += 1
            gains[j] += g
            moved = moved or ch
        phase = 0
        if not moved:
            break
    state[0] = 2
    return 0
