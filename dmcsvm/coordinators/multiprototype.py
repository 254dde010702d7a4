"""Multi-prototype SVM (Aiolli & Sperduti 2005, §4-6): the annealed search over assignments.

With the assignment ``pi`` fixed the problem is the convex dual of Eq. 11 (docs/design.md, 'The
Crammer-Singer dual'), solved by the core coordinator
(:func:`dmcsvm.coordinators.crammer_singer.solve`) on ``P = sum_c q_c`` prototypes; the non-convex
problem of Eq. 8 is then searched as in Fig. 11:

    T := T0;  random pi(1);  E(1) := P_pi(1)(alpha = 0) = C n
    for t = 1 .. t_max:
        optimize the dual of pi(t) until the primal P_pi(t)(alpha) < E(t)      (§6.1)
        draw pi(t+1) per pattern by Eq. 17 at temperature T(t) = T0 (1 - tau)^t
        E(t+1) := P_pi(t+1)(alpha)
        restore KKT: move alpha_i^{old} of every re-assigned pattern to its new prototype

§6.1 restores admissibility by zeroing ``alpha_i`` of every re-assigned pattern.  Any admissible
``alpha`` serves the search (its stop is the primal beating ``E(t+1)``); moving the pattern's
positive coefficient to its new positive prototype (the negative ones stay, the row still sums
to zero and ``0 <= alpha_i^{new} <= C_i``) keeps what the pattern has learned against the other
classes: fewer passes and a lower final energy than zeroing (benchmarks/results/HISTORY.md,
'MProtSVM re-assignment').

One executor serves the whole search: every epoch is one ``solve(..., state=st, first_msg=...,
stop=...)`` on the same partitions, the :class:`CoordinatorState` keeping ``B`` across epochs.
The partitions own the assignment (docs/design.md, 'The coordinator's size': the coordinator holds
no per-row array): each draws its rows' initial prototypes (:class:`RandomAssignment`) and their
re-assignments of Eq. 17, from the slacks it keeps, with its slice of the epoch's uniform stream
(the epoch's seed comes from the coordinator's generator), so the draws do not depend on the
partitioning or the executor.  Only the re-assigned rows that have coefficients travel back; the
move of their coefficients is an ordinary batch update (``dB`` with ``-alpha`` on the old and
``+alpha`` on the new prototype) sent as the next epoch's first message, whose ``assign`` (the
draw's seed) tells every :class:`~dmcsvm.engine.prototype_partition.PrototypePartition` to install
its draw. After the last epoch the convex problem of the final assignment is solved to the solver's
tolerances, and the assignment is gathered once, as the result.
"""

from __future__ import annotations

import numbers
import time
from dataclasses import dataclass

import numpy as np

from ..engine.messages import PrototypeMessage
from ..engine.prototype_partition import LinearMessages, prototype_groups
from ..kernels import KernelSpec
from ..numerics import linear_prototypes as lp
from . import linear_cs as lcs
from .crammer_singer import CoordinatorState, SolveResult, SolverSettings, solve

EPOCH_KEYS = (
    "epoch",
    "energy",
    "primal",
    "dual",
    "temperature",
    "n_changed",
    "n_moved",
    "rounds",
    "inner_converged",
    "elapsed",
)


@dataclass
class AnnealSettings:
    """Annealing schedule of AS 2005 §6.2 / §8: ``T(t) = T0 (1 - tau)^t`` for ``t_max`` epochs."""

    T0: float = 10.0
    tau: float = 0.05
    max_epochs: int = 200

    def check(self) -> AnnealSettings:
        if (
            isinstance(self.T0, bool)
            or not isinstance(self.T0, numbers.Real)
            or not np.isfinite(self.T0)
            or self.T0 < 0
        ):
            raise ValueError(f"T0 must be a number >= 0, got {self.T0!r}")
        if (
            isinstance(self.tau, bool)
            or not isinstance(self.tau, numbers.Real)
            or not (0.0 < self.tau < 1.0)
        ):
            raise ValueError(f"tau must be in (0, 1), got {self.tau!r}")
        if (
            isinstance(self.max_epochs, bool)
            or not isinstance(self.max_epochs, numbers.Integral)
            or self.max_epochs < 0
        ):
            raise ValueError(f"max_epochs must be an integer >= 0, got {self.max_epochs!r}")
        return self

    def temperature(self, t: int) -> float:
        """``T(t) = T0 (1 - tau)^t`` (AS 2005 §8)."""
        return float(self.T0) * (1.0 - float(self.tau)) ** t


@dataclass
class AnnealResult:
    """The state the search leaves: coefficients, assignment, the final convex solve, history."""

    state: CoordinatorState
    yp: np.ndarray
    final: SolveResult
    epochs: dict
    energy: float
    dual: float
    n_epochs: int  # epochs that ended with a re-assignment (rows of ``epochs``)
    round_epoch: np.ndarray  # the epoch of every round of ``state.history`` (0: the final solve)


def prototype_classes(q_per_class) -> np.ndarray:
    """Class of every prototype, grouped by class: ``q_c`` copies of ``c`` for each class."""
    q = np.asarray(q_per_class, dtype=np.int64)
    return np.repeat(np.arange(q.shape[0], dtype=np.int64), q)


def initial_assignment(cls, pcls, seed: int, lo: int = 0) -> np.ndarray:
    """Random initial assignment ``pi(1)`` (Fig. 11) of the rows ``lo, lo + 1, ...`` whose class
    indices are ``cls``: each row to one of its class's prototypes, uniformly, by the row's value
    of the uniform stream of ``seed`` (:func:`~dmcsvm.numerics.linear_prototypes.epoch_uniforms`).
    A row's prototype depends only on ``seed``, its global index and its class, so a partition
    draws its own rows' (:class:`RandomAssignment`) and the coordinator holds no n-long array."""
    first, count = prototype_groups(pcls)
    cls = np.asarray(cls, dtype=np.int64)
    u = lp.epoch_uniforms(seed, lo, lo + cls.shape[0])
    q = count[cls]
    return first[cls] + np.minimum((u * q).astype(np.int64), q - 1)


class RandomAssignment:
    """The initial assignment :func:`initial_assignment` of rows ``[lo, hi)``, drawn where it is
    used: the executors slice it per partition (``ra[a:b]``, nothing drawn) and a
    :class:`~dmcsvm.engine.prototype_partition.PrototypePartition` draws its rows' prototypes
    from its own class indices (:meth:`draw`).  Small and picklable (docs/design.md, 'The
    coordinator's size': the coordinator of a store fit holds no per-row array)."""

    ndim = 1
    dtype = np.dtype(np.int64)

    def __init__(self, seed: int, pcls, lo: int, hi: int):
        self.seed, self.lo, self.hi = int(seed), int(lo), int(hi)
        self.pcls = np.ascontiguousarray(pcls, dtype=np.int64)

    @property
    def shape(self) -> tuple[int]:
        return (self.hi - self.lo,)

    def __len__(self) -> int:
        return self.hi - self.lo

    def __getitem__(self, key):
        if not isinstance(key, slice):
            raise IndexError("a RandomAssignment takes only slices (draw() gives the values)")
        a, b, step = key.indices(len(self))
        if step != 1:
            raise IndexError("a RandomAssignment slice takes no step")
        return RandomAssignment(self.seed, self.pcls, self.lo + a, self.lo + max(a, b))

    def draw(self, cls) -> np.ndarray:
        """The prototypes of the rows, whose class indices are ``cls`` (one per row)."""
        cls = np.asarray(cls, dtype=np.int64)
        if cls.shape != self.shape:
            raise ValueError(f"{cls.shape[0]} class indices for {len(self)} rows")
        return initial_assignment(cls, self.pcls, self.seed, self.lo)

    def __repr__(self) -> str:
        return f"RandomAssignment(seed={self.seed}, rows {self.lo}:{self.hi})"


def _redraw(xi, yp, cls, first, seed, T, C, mM, B, row_C=None):
    """The draw of Eq. 17 at temperature ``T`` from the slacks ``xi`` (all rows in memory, the
    sequential path), with the epoch's uniforms of ``seed``
    (:func:`~dmcsvm.numerics.linear_prototypes.epoch_uniforms`, the values the partitions of the
    rounds path draw): ``(new_yp, E(t+1), re-assigned rows, those of them with a coefficient to
    move)``, ``E(t+1) = 1/2 ||M||^2 + C sum_i xi_i^{new}`` (the new assignment's primal at the
    current alpha; ``C_i`` per pattern with ``row_C``, also in the energy differences of
    Eq. 17)."""
    new_slot, slack = lp.redraw_slots(xi, yp - first[cls], seed, 0, T, C, row_C)
    new_yp = first[cls] + new_slot
    E_new = 0.5 * mM + slack
    changed = np.flatnonzero(new_yp != yp)
    return new_yp, E_new, changed, _moved(B, changed, yp)


def _moved(B, changed, yp):
    """The re-assigned rows that have coefficients (:func:`lp.has_coefficients`)."""
    return changed[lp.has_coefficients(B, changed, yp)] if changed.size else changed


def _redraw_parts(executor, seed, T, mM):
    """:func:`_redraw` on the partitions (each draws its rows from the slacks its last
    ``slacks`` call kept, and keeps the draw until a message's ``assign`` installs it):
    ``(rows re-assigned, E(t+1), those with a coefficient to move as (ids, old prototypes, new
    prototypes))``.  Only the moved rows travel (docs/design.md, 'The coordinator's size': no n-long
    assignment here)."""
    parts = executor.call("redraw", seed, float(T))
    n_changed = sum(int(p["n_changed"]) for p in parts)
    moved = tuple(
        np.concatenate([p["moved"][k] for p in parts]).astype(np.int64)
        for k in ("ids", "old", "new")
    )
    E_new = 0.5 * mM + sum(p["slack"] for p in parts)
    return n_changed, E_new, moved


def _first_energy(C, n, row_C, start) -> float:
    """``E(1)``: from zero, ``P(alpha = 0) = C n`` (every slack is 1, ``M = 0``); from a warm
    ``start`` inf, so that the first epoch stops after one round and draws from the slacks of
    the start."""
    if start is not None:
        return np.inf
    return C * n if row_C is None else float(row_C.sum())


def _record(hist, progress, **row):
    for k in EPOCH_KEYS:
        hist[k].append(row[k])
    if progress is not None:
        progress(row)


def _slacks(executor, state, linear, shrinking, d, sparse, x_dtype):
    """The primal's slack term at the current assignment, ``||M||^2`` and ``sum alpha_y``,
    summed over the partitions (scores of shrunk rows rebuilt first; the kernel path needs the
    support patterns for that).  Each partition keeps its rows' slacks for the next draw."""
    sv = None
    if shrinking and not linear:
        ids = state.support()
        sv = {"ids": ids, "X": state.bank.stack(ids, d, sparse, x_dtype), "B": state.B[ids]}
    parts = executor.call("slacks", sv)
    return (
        sum(p["slack"] for p in parts),
        sum(p["sum_BF"] for p in parts),
        sum(p["sum_alpha"] for p in parts),
    )


def anneal(
    executor,
    n: int,
    pcls: np.ndarray,
    spec: KernelSpec,
    settings: SolverSettings,
    schedule: AnnealSettings,
    d: int,
    sparse: bool,
    rng,
    x_dtype=np.float64,
    linear: bool = False,
    progress=None,
    final_settings: SolverSettings | None = None,
    row_C=None,
    start=None,
    epoch0: int = 0,
) -> AnnealResult:
    """Run the annealed MProtSVM search (AS 2005 Fig. 11) on ``executor``.

    Parameters
    ----------
    executor : InProcessExecutor or DaskExecutor
        Started on :class:`~dmcsvm.engine.prototype_partition.PrototypePartition` (any kernel) or,
        with ``linear=True``, :class:`~dmcsvm.engine.prototype_partition.LinearPrototypePartition`
        partitions, given the class of every row and the initial assignment (an array, or a
        :class:`RandomAssignment` each partition draws its rows' from).  The partitions own the
        assignment from then on; the coordinator holds no per-row array (docs/design.md, 'The
        coordinator's size').
    n : int
        Number of training patterns.
    pcls : ndarray of int, shape (P,)
        Class of every prototype, grouped by class (:func:`prototype_classes`).
    spec : KernelSpec
    settings : SolverSettings
        Inner solver options (``C``, optimizer, selection, tolerances of the final solve ...).
    schedule : AnnealSettings
        ``T0``, ``tau``, ``max_epochs``.  ``max_epochs = 0`` (or one prototype per class) solves
        the convex problem of the initial assignment only.
    d, sparse, x_dtype
        Feature count, whether X rows are CSR, their dtype.
    rng : numpy.random.RandomState
        The coordinator's generator: the seed of each epoch's draws of Eq. 17.
    linear : bool
        Partitions are linear (explicit ``W``): batch messages are sent as ``dW``.
    progress : callable, optional
        ``progress(row)`` after every epoch with that epoch's history row.
    final_settings : SolverSettings, optional
        Options of the final convex solve (default: ``settings``), e.g. more batch sweeps: the
        epochs check the primal after every round, the final solve only needs to converge.
    row_C : ndarray of float, shape (n,), optional
        Per-pattern bounds ``C_i`` (class / sample weights), also given to the partitions by
        ``executor.start``; None: every pattern's bound is ``C``.
    start : tuple, optional
        ``(ids, X_ids, B_ids)``: coefficients to start from (a warm start, feasible for
        the initial assignment), sent to the partitions in the first round; None: from zero.
    epoch0 : int
        Epochs already searched (a warm start goes on at the temperature ``T(epoch0 + 1)``, for
        at most ``max_epochs`` more epochs).

    Returns
    -------
    AnnealResult
        Its ``yp`` is the final assignment, gathered from the partitions at the end.
    """
    C = float(settings.C)
    pcls = np.ascontiguousarray(pcls, dtype=np.int64)
    first, count = prototype_groups(pcls)
    P = pcls.shape[0]
    ex = LinearMessages(executor) if linear else executor
    kw = {}
    if linear:  # explicit prototypes on the coordinator too: no K_BB (docs/design.md, 'MProtSVM')
        kw["batch_solver"] = lp.LinearBatchSolver(*lp.linear_coefficients(spec))
    state = CoordinatorState.fresh(n, P)
    state.history["epoch"] = []  # each round tagged with its epoch (0: the final solve)
    B = state.B
    hist = {k: [] for k in EPOCH_KEYS}
    args = (n, pcls, spec, settings, d, sparse, x_dtype)
    t_start = time.perf_counter()
    E = _first_energy(C, n, row_C, start)
    msg = None
    if start is not None:  # the first message installs the start's coefficients
        ids, XB, dB = start
        B[ids] = dB
        msg = PrototypeMessage(ids=ids, XB=XB, dB=dB.copy())
    t = int(epoch0)
    search = schedule.max_epochs > 0 and int(count.max()) > 1
    while search and t < epoch0 + schedule.max_epochs:
        t += 1
        r0 = state.rounds
        state.history.tags["epoch"] = t
        fired = []

        def stop(row, E=E, fired=fired):  # §6.1: stop as soon as the primal beats E(t)
            if row["primal"] < E:
                fired.append(True)
                return True
            return False

        res = solve(ex, *args, state=state, first_msg=msg, stop=stop, **kw)
        msg = None
        slack, mM, sa = _slacks(ex, state, linear, settings.shrinking, d, sparse, x_dtype)
        primal = 0.5 * mM + slack
        # with shrinking the rounds read the primal on stale scores of shrunk rows: go on until
        # the exact primal beats E(t), unless the solve ended for another reason (solved,
        # max_iter rounds, stalled in floating point)
        while primal >= E and fired and not res.converged:
            fired.clear()
            prev_dual = sa - 0.5 * mM
            res = solve(ex, *args, state=state, stop=stop, **kw)
            slack, mM, sa = _slacks(ex, state, linear, settings.shrinking, d, sparse, x_dtype)
            primal = 0.5 * mM + slack
            if sa - 0.5 * mM <= prev_dual:
                break  # no progress left
        T = schedule.temperature(t)
        seed = lp.epoch_seed(rng)
        n_changed, E_new, (moved, old, new) = _redraw_parts(ex, seed, T, mM)
        if T == 0.0 and E_new >= E:
            break  # greedy search at a stationary point: no epoch can lower the energy
        _record(
            hist,
            progress,
            epoch=t,
            energy=E_new,
            primal=primal,
            dual=sa - 0.5 * mM,
            temperature=T,
            n_changed=n_changed,
            n_moved=int(moved.size),
            rounds=state.rounds - r0,
            inner_converged=bool(res.converged),
            elapsed=time.perf_counter() - t_start,
        )
        E = E_new
        if n_changed == 0:
            if res.converged or T == 0.0:
                # stationary: the assignment is stable and its problem solved, or the greedy
                # search (T = 0) keeps it; the final solve below finishes its problem
                break
            continue
        # the partitions install their draw with the next message; admissibility is restored
        # in it (module docstring): alpha_i^{old} moves to the new prototype, a batch update
        # like any other
        msg = PrototypeMessage(assign=seed)
        if moved.size:
            msg.ids, msg.XB = moved, state.bank.stack(moved, d, sparse, x_dtype)
            msg.dB = lp.move_step(B, moved, old, new)
            B[moved] += msg.dB
    # the convex problem of the final assignment, to the solver's tolerances
    fs = final_settings or settings
    state.history.tags["epoch"] = 0
    res = solve(ex, n, pcls, spec, fs, d, sparse, x_dtype, state=state, first_msg=msg, **kw)
    slack, mM, sa = _slacks(ex, state, linear, fs.shrinking, d, sparse, x_dtype)
    energy = 0.5 * mM + slack
    epochs = {k: np.asarray(v) for k, v in hist.items()}
    yp = np.concatenate(ex.call("assignment")).astype(np.int64, copy=False)
    return AnnealResult(
        state=state,
        yp=yp,
        final=res,
        epochs=epochs,
        energy=energy,
        dual=sa - 0.5 * mM,
        n_epochs=len(hist["epoch"]),
        round_epoch=np.asarray(state.history["epoch"], dtype=np.int64),
    )


@dataclass
class SequentialAnnealResult:
    """What :func:`anneal_sequential` leaves: the solver state (``B``, ``W``, ``s``, ``yp``),
    the epochs' history, the passes' history and the final solve's outcome."""

    state: lcs.SequentialState
    epochs: dict
    passes: dict
    energy: float
    dual: float
    n_epochs: int
    converged: bool
    round_epoch: np.ndarray  # the epoch of every row of ``passes`` (0: the final solve)


def anneal_sequential(
    prob,
    cls,
    pcls,
    yp0,
    settings: SolverSettings,
    schedule: AnnealSettings,
    rng,
    seed: int,
    progress=None,
    final_settings: SolverSettings | None = None,
    row_C=None,
    start=None,
    epoch0: int = 0,
    threads: int = 1,
) -> SequentialAnnealResult:
    """The annealed MProtSVM search of :func:`anneal` (AS 2005 Fig. 11, the same epochs, draws
    and stops) on in-memory rows with a linear kernel, each epoch's convex problem optimized by
    the sequential dual method of :mod:`dmcsvm.coordinators.linear_cs` (explicit prototypes, no
    rounds).  Every epoch runs passes until the exact primal beats the last energy ``E(t)``
    (each check is one pass over the rows, n P d flops; see :func:`~dmcsvm.coordinators.linear_cs.
    solve_fixed` for when they are made) or, as the rounds of :func:`anneal` do, until its
    convex problem is solved to ``tol`` / ``gap_tol`` (then no pass can lower the primal by more
    than the gap), then draws the new assignment by Eq. 17 from the slacks of that check and
    moves the positive coefficient of every re-assigned pattern to its new prototype (``W``
    follows; module docstring).  ``rng`` draws the assignments, ``seed`` the pass order.
    ``prob`` is a :class:`~dmcsvm.coordinators.linear_cs.LinearProblem`; ``row_C`` the
    per-pattern bounds (class / sample weights) or None; ``start`` and ``epoch0`` a warm start
    as in :func:`anneal`."""
    C = float(settings.C)
    pcls = np.ascontiguousarray(pcls, dtype=np.int64)
    cls = np.ascontiguousarray(cls, dtype=np.int64)
    first, count = prototype_groups(pcls)
    n = cls.shape[0]
    st = lcs.SequentialState(
        prob,
        yp0,
        cls,
        pcls,
        C,
        settings.tol,
        settings.shrinking,
        seed,
        row_C=row_C,
        threads=threads,
    )
    try:
        hist = {k: [] for k in EPOCH_KEYS}
        passes = lcs.new_history()
        passes["epoch"] = []  # each check tagged with its epoch (0: the final solve)
        t_start = time.perf_counter()
        E = _first_energy(C, n, row_C, start)
        if start is not None:
            st.add(start[0], start[2])
        t = int(epoch0)
        search = schedule.max_epochs > 0 and int(count.max()) > 1
        while search and t < epoch0 + schedule.max_epochs:
            t += 1
            p0 = st.passes
            passes.tags["epoch"] = t
            conv, _ = lcs.solve_fixed(
                st,
                settings.max_iter,
                history=passes,
                t0=t_start,
                stop=lcs.Below(E),
                warn=False,
                gap_tol=settings.gap_tol,
            )
            xi, primal, dual, mM = st.last
            T = schedule.temperature(t)
            new_yp, E_new, changed, moved = _redraw(
                xi, st.yp, cls, first, lp.epoch_seed(rng), T, C, mM, st.B, row_C
            )
            if T == 0.0 and E_new >= E:
                break  # greedy search at a stationary point
            _record(
                hist,
                progress,
                epoch=t,
                energy=E_new,
                primal=primal,
                dual=dual,
                temperature=T,
                n_changed=int(changed.size),
                n_moved=int(moved.size),
                rounds=st.passes - p0,
                inner_converged=bool(conv),
                elapsed=time.perf_counter() - t_start,
            )
            E = E_new
            if changed.size == 0:
                if conv or T == 0.0:
                    break  # stationary (see anneal)
                continue
            st.reassign(changed, new_yp[changed])
        fs = final_settings or settings
        st.tol = float(fs.tol)
        st.ctl[1] = max(10.0 * st.tol, 1.0)
        passes.tags["epoch"] = 0
        conv, _ = lcs.solve_fixed(st, fs.max_iter, history=passes, t0=t_start, gap_tol=fs.gap_tol)
        if st.last is None or passes["round"][-1] != st.passes:
            st.last = st.objective()
        _, primal, dual, _ = st.last
        return SequentialAnnealResult(
            state=st,
            epochs={k: np.asarray(v) for k, v in hist.items()},
            passes={k: np.asarray(v) for k, v in passes.items()},
            energy=primal,
            dual=dual,
            n_epochs=len(hist["epoch"]),
            converged=bool(conv),
            round_epoch=np.asarray(passes["epoch"], dtype=np.int64),
        )
    finally:
        st.close()  # the primal checks' threads
