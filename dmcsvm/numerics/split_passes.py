"""The working-set solve's passes on several threads, each owning a block of the batch
(:func:`~dmcsvm.numerics.working_set.solve_working_set`), with the steps, and hence the results,
of the one-thread passes bit for bit.

The passes visit the batch rows in order and step those whose ``psi`` (CS 2001 Eq. 32) exceeds
the pass's cut; each step moves every batch row's scores by one column of ``K_BB``, and that
update is nearly all of the work (one stream of |B| values per changed prototype).  Here the batch
is cut into ``W`` blocks of consecutive rows, and thread ``w`` owns block ``w``'s rows *and their
score columns* (laid out contiguously, in cache place within the block).  While the visits are in
block ``w``, its thread decides each visit exactly as one thread would (only its own columns are
read to decide) and publishes every step ``(j, dB_j)`` in a log; every thread applies every
logged step to its own columns, so the update of each step is split ``W`` ways.  A thread starts
its block once the visits before it are decided and it has applied every step logged by then.
Hand-overs are acquire / release stores on shared counters (:mod:`.atomics`): two barriers per
pass and one hand-over per block, not one per step.

Each column's values go through the same operations in the same order as on one thread, so the
scores, ``psi`` and every decision are bit for bit those of one thread.  What differs is only the
upper bound ``U`` of each row's ``psi`` (its rounding slack follows the largest score of the
thread's own columns): ``U`` decides only which rows' ``psi`` is evaluated, never a step.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from numpy.typing import NDArray

from .atomics import load_acquire, store_release, yield_cpu
from .pattern import _MAX_INNER, Bounds, bound_at, psi_value, relaxed_step
from .working_set import apply_step, pass_cut, psi_columns

__all__ = ["split_passes", "SYNC_SLOTS", "CURSOR", "NLOG", "STOP", "STOP_AT", "sync_array"]

#: the shared counters, one 64-byte line apart (``sync[8 * slot]``): the visits decided in the
#: pass (every visit below it), the steps logged in the pass, a stop (a step needs a kernel row
#: the cache lacks), the visit that stopped, then one barrier arrival per thread
CURSOR, NLOG, STOP, STOP_AT = 0, 1, 2, 3
SYNC_SLOTS = 4
_LINE = 8
#: idle spins of a waiting thread between yields to the OS (a hand-over takes about 1 us)
_SPINS = 64


def sync_array(threads: int) -> NDArray[np.int64]:
    """The zeroed shared counters of :func:`split_passes` for ``threads`` threads."""
    return np.zeros(_LINE * (SYNC_SLOTS + int(threads)), dtype=np.int64)


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
    gpos: NDArray[np.int64],
    sg: NDArray[np.int64],
    FT: NDArray[np.float64],
    U: NDArray[np.float64],
    kcol: NDArray[np.float64],
    S: float,
    moved: bool,
) -> tuple[int, bool, float, bool]:
    """Apply the logged steps to the columns ``lo:hi`` until the visits below ``target`` are
    decided (or a stop), then every step logged by then.  Returns the steps applied, whether
    the passes stopped, ``S`` and ``moved`` brought up to date."""
    spins = 0
    while True:
        cur = load_acquire(sync, _LINE * CURSOR)
        stop = load_acquire(sync, _LINE * STOP) != 0
        n = load_acquire(sync, _LINE * NLOG)  # read after CURSOR / STOP: complete for them
        if applied < n:
            spins = 0
        while applied < n:
            slack = 8e-16 * (S + 1.0)
            gp = gpos[log_j[applied]]
            ch, mm = apply_step(log_d[applied], lo, hi, G, gp, sg, FT, U, kcol, slack)
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
    store_release(sync, _LINE * (SYNC_SLOTS + tid), gen)
    spins = 0
    for v in range(threads):
        while load_acquire(sync, _LINE * (SYNC_SLOTS + v)) < gen:
            spins += 1
            if spins % _SPINS == 0:
                yield_cpu()


@numba.njit(cache=True, nogil=True)
def split_passes(
    tid: int,
    bounds: NDArray[np.int64],
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
    S_of: NDArray[np.float64],
    mx_of: NDArray[np.float64],
    sync: NDArray[np.int64],
    log_j: NDArray[np.int64],
    log_d: NDArray[np.float64],
    steps: NDArray[np.int64],
    gains: NDArray[np.float64],
    U: NDArray[np.float64],
) -> int:
    """Thread ``tid``'s part of the passes of
    :func:`~dmcsvm.numerics.working_set._working_set_passes` (same arguments and state), for
    the batch rows ``bounds[tid]:bounds[tid + 1]`` and their columns (the same range: columns
    are laid out block by block).  ``S_of`` / ``mx_of`` hold each thread's largest score bound
    and pass-start violation, ``sync`` the shared counters (:func:`sync_array`; ``CURSOR`` set
    to the visit to resume from), ``log_j`` / ``log_d`` the pass's steps.  Every thread is
    called with the same arrays, at once.  Returns 0 when done, 1 when a step needs a row of
    ``G`` that is not there: the visit is in ``sync[8 * STOP_AT]``, every logged step is applied
    on every column, and thread 0 has saved the passes' state for the caller, which computes
    the rows and calls every thread again."""
    threads = bounds.shape[0] - 1
    lo, hi = bounds[tid], bounds[tid + 1]
    nb, P = Bc.shape
    b0 = np.empty(P)
    f = np.empty(P)
    kcol = np.empty(hi - lo)
    psi0 = np.empty(hi - lo)
    mx_s = np.empty(hi - lo)
    mn_s = np.empty(hi - lo)
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
    gen = 0
    stopped = False
    while True:
        if phase == 0:
            if passes >= _MAX_INNER:
                break
            passes += 1
            slack = 8e-16 * (S + 1.0)
            psi_columns(
                FT[:, lo:hi],
                BT[:, lo:hi],
                ycol[lo:hi],
                ccol[lo:hi],
                Ccol[lo:hi],
                pcls,
                mx_s,
                mn_s,
                psi0,
            )
            mx = 0.0
            for c in range(hi - lo):
                p = psi0[c]
                U[lo + c] = p * (1.0 + 1e-12) + slack
                mx = max(mx, p)
            mx_of[tid] = mx
            if tid == 0:  # (no thread reads them until every thread has passed the barrier)
                sync[_LINE * CURSOR] = 0
                sync[_LINE * NLOG] = 0
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
            applied, stopped, S, moved = _follow(
                max(lo, j0), applied, sync, log_j, log_d, lo, hi, G, gpos, sg, FT, U, kcol, S, moved
            )
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
                        sync[_LINE * STOP_AT] = j
                        store_release(sync, _LINE * STOP, 1)
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
                    store_release(sync, _LINE * NLOG, applied + 1)
                    ch, mm = apply_step(d, lo, hi, G, gpos[j], sg, FT, U, kcol, slack)
                    applied += 1
                    U[c] = np.inf  # the row's own step moved its bounds (as on one thread)
                    S += mm
                    slack = 8e-16 * (S + 1.0)
                    steps[j] += 1
                    gains[j] += g
                    moved = moved or ch
                if not stopped:
                    store_release(sync, _LINE * CURSOR, hi)
        if not stopped:
            applied, stopped, S, moved = _follow(
                nb, applied, sync, log_j, log_d, lo, hi, G, gpos, sg, FT, U, kcol, S, moved
            )
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
            state[0], state[1], state[2] = 1, sync[_LINE * STOP_AT], total
            state[3] = 0 if first else 1
            state[4], state[5] = 1 if moved else 0, passes
            scal[0] = cut
        return 1
    if tid == 0:
        state[0] = 2
    return 0
