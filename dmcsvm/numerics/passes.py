"""The passes of the coordinator's working-set solve
(:func:`~dmcsvm.numerics.working_set.solve_working_set`), on one thread or several, numba.

The passes visit the batch rows in order and step, each exactly
(:func:`~dmcsvm.numerics.pattern.relaxed_step`), those whose KKT violation ``psi`` (CS 2001
Eq. 32) exceeds the pass's cut (:func:`pass_cut`: half the largest violation at the pass's start);
each step moves every batch row's scores by one column of ``K_BB`` (:func:`apply_step`: one
stream of |B| values per changed prototype).  Each pass starts from every row's psi taken
prototype by prototype (:func:`psi_columns`); in the pass psi is recomputed only where an upper
bound ``U`` exceeds the cut: the rows never looked at are exactly those a full scan would find
below it, so the passes, cuts and steps are those of full scans, bit for bit.

**Threads.** The batch is cut into ``W`` blocks of consecutive rows, and thread ``w`` owns block
``w``'s rows *and their score columns* (laid out contiguously).  While the visits are in block
``w``, its thread decides each visit exactly as one thread would (only its own columns are read to
decide) and logs every step ``(j, dB_j)``; every thread applies every logged step to its own
columns, so each step's update is split ``W`` ways.  A thread starts its block once the visits
before it are decided and it has applied every step logged by then.  Hand-overs are acquire /
release stores on shared counters (:mod:`.atomics`): two barriers per pass and one hand-over per
block, not one per step.  Each column's values go through the same operations in the same order
whatever ``W``, so the scores, ``psi`` and every decision are those of one thread bit for bit;
only the rounding slack of ``U`` follows the largest score of each thread's own columns, and
``U`` decides which rows are evaluated, never a step.  The psi evaluations of the visited rows
stay on the thread that owns them: on two cores, replayed letter solves took 1.57 s against
2.0 s on one thread, deformed digits (20,000 rows) 1.34-1.41 s against 1.56 s.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from numpy.typing import NDArray

from .atomics import load_acquire, store_release, yield_cpu
from .pattern import _C_REL, _MAX_INNER, Bounds, bound_at, psi_value, relaxed_step

__all__ = [
    "run_passes",
    "sync_array",
    "psi_columns",
    "pass_cut",
    "apply_step",
    "ask_rows",
    "N_STATE",
    "CURSOR",
    "STOP_AT",
]

#: the passes' state between calls (a stop for kernel rows): phase (0 a pass starts, 1 inside a
#: pass, 2 done), the batch row a pass goes on from, steps taken, first pass, the pass moved,
#: passes
N_STATE = 6


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
    Kc: NDArray[np.floating[Any]],
    kr: int,
    fresh: bool,
) -> tuple[bool, float]:
    """A step ``d`` (the change of a batch row's coefficients, its kernel row in ``G[gj_pos]``)
    on the score columns ``lo:hi``: ``F_k += K_kj d`` for the prototypes that changed, and the
    bounds ``U`` (see :func:`run_passes`).  Each column goes through the same operations whatever
    the range, so a step applied in parts (:func:`run_passes`) gives the values of one applied
    whole, bit for bit.  With ``kr >= 0`` the row's values at these columns are read from
    ``Kc[kr, lo:hi]``, contiguous, and copied there from ``G`` first when ``fresh`` (the row's
    first step on these columns).  Returns whether anything changed and
    ``max_k |K_kj| max_r |d_r|`` over these columns."""
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
    copy = kr >= 0
    kc = Kc[kr, lo:hi] if copy else Kc.reshape(-1)[:0]
    if copy and fresh:
        for t in range(n):
            kc[t] = gj[sgl[t]]
    for t in range(n):  # one pass: the column, the first changed score row, the bounds
        # (from the copy, contiguous, or from its place in G; LLVM takes the test out of the
        # loop)
        k = np.float64(kc[t]) if copy else np.float64(gj[sgl[t]])
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
def _apply_row_step(
    d: NDArray[np.float64],
    j: int,
    lo: int,
    hi: int,
    G: NDArray[np.floating[Any]],
    grow: NDArray[np.int64],
    sg: NDArray[np.int64],
    FT: NDArray[np.float64],
    U: NDArray[np.float64],
    kcol: NDArray[np.float64],
    slack: float,
    Kc: NDArray[np.floating[Any]],
    have: NDArray[np.bool_],
) -> tuple[bool, float]:
    """:func:`apply_step` of batch row ``j``'s step (its values in row ``grow[j]`` of ``G``),
    read from (and on its first step copied into) row ``j`` of ``Kc`` when ``Kc`` is not empty;
    ``have`` marks the rows copied."""
    kr = j if Kc.shape[0] > 0 else -1
    fresh = kr >= 0 and not have[j]
    ch, mm = apply_step(d, lo, hi, G, grow[j], sg, FT, U, kcol, slack, Kc, kr, fresh)
    if fresh and ch:  # (a step that changes nothing returns before the copy)
        have[j] = True
    return ch, mm


#: columns per block of :func:`psi_columns`: a block's per-column values (positive prototype,
#: class, bound, running maximum and minimum) stay in L1 while the P score rows stream past
_PSI_BLOCK = 256


@numba.njit(cache=True, nogil=True)
def psi_columns(
    FT: NDArray[np.float64],
    BT: NDArray[np.float64],
    ycol: NDArray[np.int64],
    ccol: NDArray[np.int64],
    Ccol: NDArray[np.float64],
    pcls: NDArray[np.int64],
    lo: int,
    hi: int,
    out: NDArray[np.float64],
) -> None:
    """:func:`psi_value` of the columns ``lo:hi`` of the transposed scores ``FT`` (P x m,
    coefficients ``BT`` alike, positive prototype ``ycol``, class ``ccol``, bound ``Ccol`` per
    column) into ``out[:hi - lo]``, prototype by prototype within blocks of
    :data:`_PSI_BLOCK` columns: each step of the loop is one contiguous stream, where a column
    at a time reads P strided values (same arithmetic, same values bit for bit).  Blocked, the
    per-column values are read once per block instead of once per prototype, and the conditions
    are combined with ``&`` / ``|``, not ``and`` / ``or`` (whose short-circuit branches kept the
    loop scalar): 163-178 us against 317-369 us on 10,000 columns of 10 prototypes, 211-215 us
    against 404-450 us on 5,000 of 26 (``psi_value``, one column at a time, is faster with
    ``and`` / ``or``: 45-46 ns against 51-52 ns)."""
    P = FT.shape[0]
    mx = np.empty(_PSI_BLOCK)
    mn = np.empty(_PSI_BLOCK)
    for t0 in range(lo, hi, _PSI_BLOCK):
        t1 = min(t0 + _PSI_BLOCK, hi)
        n = t1 - t0
        yc = ycol[t0:t1]
        cc = ccol[t0:t1]
        Cc = Ccol[t0:t1]
        for t in range(n):
            mx[t] = -np.inf
            mn[t] = np.inf
        for r in range(P):
            Fr = FT[r, t0:t1]
            Br = BT[r, t0:t1]
            pr = pcls[r]
            for t in range(n):
                isy = yc[t] == r
                ok = isy | (pr != cc[t])
                g = Fr[t] - np.float64(isy)
                bound = Cc[t] * (1.0 - _C_REL) * np.float64(isy)
                a = mx[t]
                mx[t] = g if ok & (g > a) else a
                a = mn[t]
                mn[t] = g if ok & (Br[t] < bound) & (g < a) else a
        o = out[t0 - lo : t1 - lo]
        for t in range(n):
            v = mx[t] - mn[t]
            o[t] = v if v > 0.0 else 0.0


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


#: the shared counters, one 64-byte line apart (indices into ``sync``): the visits decided in the
#: pass (every visit below it), the steps logged in the pass, a stop (a step needs a kernel row
#: the cache lacks), the visit that stopped, then one barrier arrival per thread
_LINE = 8
CURSOR, NLOG, STOP, STOP_AT = 0, _LINE, 2 * _LINE, 3 * _LINE
_ARRIVE = 4 * _LINE
#: idle spins of a waiting thread between yields to the OS (a hand-over takes about 1 us)
_SPINS = 64


def sync_array(threads: int) -> NDArray[np.int64]:
    """The zeroed shared counters of :func:`run_passes` for ``threads`` threads."""
    return np.zeros(_ARRIVE + _LINE * int(threads), dtype=np.int64)


@numba.njit(cache=True, nogil=True)
def _follow(
    target: int,
    applied: int,
    sync: NDArray[np.int64],
    log_j: NDArray[np.int64],
    log_d: NDArray[np.float64],
    lo: int,
    hi: int,
    G: NDArray[np.floating[Any]],
    grow: NDArray[np.int64],
    sg: NDArray[np.int64],
    FT: NDArray[np.float64],
    U: NDArray[np.float64],
    kcol: NDArray[np.float64],
    Kc: NDArray[np.floating[Any]],
    have: NDArray[np.bool_],
    S: float,
    moved: bool,
) -> tuple[int, bool, float, bool]:
    """Apply the logged steps to the columns ``lo:hi`` until the visits below ``target`` are
    decided (or a stop), then every step logged by then.  Returns the steps applied, whether
    the passes stopped, ``S`` and ``moved`` brought up to date."""
    spins = 0
    while True:
        cur = load_acquire(sync, CURSOR)
        stop = load_acquire(sync, STOP) != 0
        n = load_acquire(sync, NLOG)  # read after CURSOR / STOP: complete for them
        if applied < n:
            spins = 0
        while applied < n:
            slack = 8e-16 * (S + 1.0)
            j = log_j[applied]
            ch, mm = _apply_row_step(
                log_d[applied], j, lo, hi, G, grow, sg, FT, U, kcol, slack, Kc, have
            )
            S += mm
            moved = moved or ch
            applied += 1
        if stop or cur >= target:
            return applied, stop, S, moved
        spins += 1
        if spins % _SPINS == 0:
            yield_cpu()


@numba.njit(cache=True, nogil=True)
def _barrier(sync: NDArray[np.int64], tid: int, threads: int, gen: int) -> None:
    """Wait until every thread has arrived at barrier ``gen`` (each thread counts its own)."""
    store_release(sync, _ARRIVE + _LINE * tid, gen)
    spins = 0
    for v in range(threads):
        while load_acquire(sync, _ARRIVE + _LINE * v) < gen:
            spins += 1
            if spins % _SPINS == 0:
                yield_cpu()


@numba.njit(cache=True, nogil=True)
def run_passes(
    tid: int,
    bounds: NDArray[np.int64],
    code: int,
    Bc: NDArray[np.float64],
    BT: NDArray[np.float64],
    FT: NDArray[np.float64],
    G: NDArray[np.floating[Any]],
    gpos: NDArray[np.int64],
    grow: NDArray[np.int64],
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
    S_of: NDArray[np.float64],
    mx_of: NDArray[np.float64],
    sync: NDArray[np.int64],
    log_j: NDArray[np.int64],
    log_d: NDArray[np.float64],
    steps: NDArray[np.int64],
    gains: NDArray[np.float64],
    U: NDArray[np.float64],
    Kc: NDArray[np.floating[Any]],
    have_of: NDArray[np.bool_],
) -> int:
    """Thread ``tid``'s part of the passes, on the arrays
    :func:`~dmcsvm.numerics.working_set.solve_working_set` prepared: ``Bc`` (the batch's
    coefficients, updated in place; ``BT`` the same by column), ``FT`` (scores, P x |B|, columns
    in cache place block by block), ``gpos`` (each batch row's cache place) and ``grow`` (the
    row of ``G`` that holds its values), ``col`` (batch row -> column), ``sg`` (cache place of
    each column) and the columns' positive prototypes, classes and bounds; ``steps`` and ``gains``
    are accumulated in place.  The thread owns the batch rows ``bounds[tid]:bounds[tid + 1]``
    and the same range of columns.  Every thread is called with the same arrays, at once.

    ``U`` (column order) holds an upper bound on every row's ``psi``: psi is a largest minus a
    smallest score (CS 2001 Eq. 32) over prototypes whose bounds only the row's own step moves,
    so a change ``K_kj d_r`` of row k's scores moves it by at most
    ``|K_kj| (max_r d_r^+ + max_r d_r^-)`` (:func:`apply_step`), plus the rounding of the update
    and of an evaluation: 8 ulp of the largest score magnitude ``S`` of the thread's columns
    (``S_of``; it grows by at most the largest change of any score per step).

    Resumable: when a step needs a row of ``G`` that is not there (``stamp[gpos[j]] < m``) every
    thread stops before it with every logged step applied, the visit in ``sync[STOP_AT]``, and
    returns 1; thread 0 has saved the passes' state (``state``, the cut in ``scal``).  Called
    again once the rows are in ``G`` (``sync`` zeroed but ``CURSOR``: that visit), they go on
    exactly where they stopped.  Returns 0 when done.

    ``Kc`` (``|B| x |B|``, or empty): each batch row's kernel values in column order, copied
    there on the row's first step (``have_of[tid]`` says which rows the thread has copied its
    columns of), so that its later steps read them contiguously
    (:func:`~dmcsvm.numerics.working_set.solve_working_set`)."""
    threads = bounds.shape[0] - 1
    lo, hi = bounds[tid], bounds[tid + 1]
    nb, P = Bc.shape
    have = have_of[tid]
    b0 = np.empty(P)
    f = np.empty(P)
    kcol = np.empty(hi - lo)
    psi0 = np.empty(hi - lo)
    phase, j0, total, first, moved, passes = (
        state[0],
        state[1],
        state[2],
        state[3] == 0,
        state[4] != 0,
        state[5],
    )
    cut = scal[0]
    if phase == 2:
        return 0
    S = S_of[tid]
    if phase == 0 and passes == 0:
        S = 1.0
        for t in range(lo, hi):
            for r in range(P):
                S = max(S, abs(FT[r, t]))
    follow = (sync, log_j, log_d, lo, hi, G, grow, sg, FT, U, kcol, Kc, have)
    gen = 0
    stopped = False
    while True:
        if phase == 0:
            if passes >= _MAX_INNER:
                break
            passes += 1
            slack = 8e-16 * (S + 1.0)
            psi_columns(FT, BT, ycol, ccol, Ccol, pcls, lo, hi, psi0)
            mx = 0.0
            for c in range(hi - lo):
                p = psi0[c]
                U[lo + c] = p * (1.0 + 1e-12) + slack
                mx = max(mx, p)
            mx_of[tid] = mx
            if tid == 0:  # (no thread reads them until every thread has passed the barrier)
                sync[CURSOR] = 0
                sync[NLOG] = 0
            gen += 1
            _barrier(sync, tid, threads, gen)
            mx = 0.0
            for v in range(threads):
                mx = max(mx, mx_of[v])
            cut = pass_cut(mx, tol, inner_tol, first, total, max_steps)
            if cut < 0.0:
                break
            first = False
            moved = False
            j0 = 0
            phase = 1
        base = total  # steps before this pass (or this call), the log's first
        applied = 0
        if hi > j0:
            applied, stopped, S, moved = _follow(max(lo, j0), applied, *follow, S, moved)
            if not stopped:
                slack = 8e-16 * (S + 1.0)
                for j in range(max(lo, j0), hi):
                    if base + applied >= max_steps:
                        break
                    c = col[j]
                    if U[c] <= cut:
                        continue
                    p = psi_value(Bc[j], FT[:, c], yb[j], cb[j], pcls, bound_at(C, j))
                    U[c] = p * (1.0 + 1e-12) + slack
                    if p <= cut:
                        continue
                    if stamp[gpos[j]] < m:
                        sync[STOP_AT] = j
                        store_release(sync, STOP, 1)
                        stopped = True
                        break
                    b = Bc[j]
                    for r in range(P):
                        b0[r] = b[r]
                        f[r] = FT[r, c]
                    kpp = kdiag[j]
                    phi = (0.1 * tol) ** 2 / (2.0 * kpp) if kpp > 0.0 else 0.0
                    g = relaxed_step(
                        code, b, b0, f, yb[j], cb[j], pcls, kpp, bound_at(C, j), phi, fp_eps, relax
                    )
                    d = log_d[applied]
                    for r in range(P):
                        BT[r, c] = b[r]
                        d[r] = b[r] - b0[r]
                    log_j[applied] = j
                    store_release(sync, NLOG, applied + 1)
                    ch, mm = _apply_row_step(
                        d, j, lo, hi, G, grow, sg, FT, U, kcol, slack, Kc, have
                    )
                    applied += 1
                    U[c] = np.inf  # the row's own step moved its bounds (as on one thread)
                    S += mm
                    slack = 8e-16 * (S + 1.0)
                    steps[j] += 1
                    gains[j] += g
                    moved = moved or ch
                if not stopped:
                    store_release(sync, CURSOR, hi)
        if not stopped:
            applied, stopped, S, moved = _follow(nb, applied, *follow, S, moved)
        total = base + applied
        if stopped:
            break
        gen += 1
        _barrier(sync, tid, threads, gen)  # every step applied before the next pass resets the log
        phase = 0
        if not moved:
            break
    S_of[tid] = S
    if stopped:
        if tid == 0:
            state[0], state[1], state[2] = 1, sync[STOP_AT], total
            state[3] = 0 if first else 1
            state[4], state[5] = 1 if moved else 0, passes
            scal[0] = cut
        return 1
    if tid == 0:
        state[0] = 2
    return 0
