"""The coordinator of the Crammer-Singer family solver (docs/design.md, 'Batched rounds'): batched
rounds over partitions.

Each round every partition reports its best candidates (by selection value ``V_p``, then the
rows about to violate) and its aggregates; the coordinator picks a batch and solves it using only
``K_BB`` and the reported scores, and sends ``(ids, X_B, dB_B)`` back to every partition in one
message.  Two batch solves:

* ``inner_steps > 0`` (MulticlassSVC, MultiPrototypeSVC): the ``batch_size`` best candidates form
  a working set that
  is solved by re-selection (:func:`~dmcsvm.numerics.working_set.solve_working_set`: the patterns
  most violated NOW first, again while they stay so) to ``max(tol, inner_frac * max psi of the
  batch)`` (its 0.1 % most violated rows set aside) while violators are left out, to
  ``max(inner_floor * tol, inner_prog * max psi)`` once it holds them all; ``K_BB`` comes from a
  Gram block kept between rounds (:class:`_GramCache`), or a ``batch_solver``'s ``working_set``
  does the same on explicit prototypes;
* ``inner_steps = 0``: the round's threshold picks the batch and its patterns are optimized once
  in order (:func:`~dmcsvm.numerics.pattern.solve_batch`, or ``batch_solver``).

Batch size 1 is the papers' sequential algorithm (pick the pattern of largest ``V_p``, optimize
it, update all scores).  The solve stops when every ``psi <= tol`` (checked with every row
unshrunk), or, when ``gap_tol > 0``, at that relative duality gap.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field, replace

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..engine import kept_block
from ..engine.cache import compact_columns, gram_places
from ..engine.id_index import IdIndex
from ..engine.messages import RoundMessage, has_batch, merge, pick_order
from ..engine.row_bank import RowBank
from ..engine.threads import BlasThreadHold, LazyPool
from ..errors import check_finite_round
from ..kernels import KernelSpec, kernel_block, row_norms_sq
from ..numerics import pattern as pt
from ..numerics.selection import THRESHOLDS, reference_violation, threshold_value
from ..numerics.working_set import ROWS_FIRST_REQUEST, solve_working_set
from ..solver_options import DEFAULTS
from .coefficients import CoefficientRows
from .history import RoundHistory
from .whole_block import WholeBlock, run_in_block

_DEFAULTS = DEFAULTS["MulticlassSVC"]

HISTORY_KEYS = (
    "round",
    "dual",
    "primal",
    "gap",
    "max_V",
    "max_psi",
    "threshold",
    "n_active",
    "n_viol",
    "n_sv",
    "batch",
    "elapsed",
    "rows_computed",
    "rows_cached",
    "rows_disk",
    "t_round",
    "t_solve",
    "t_kernel",
    "t_update",
    "t_select",
    "t_parts",
    "steps",
    "gram_rows",
)


@dataclass
class SolverSettings:
    """Settings of one solve; validated by :meth:`check` (errors name the bad value)."""

    # the solver options' defaults are MulticlassSVC's, from the one table of them
    # (dmcsvm.solver_options.DEFAULTS); selection is the option pattern_selection
    C: float = 1.0
    optimizer: str = _DEFAULTS["optimizer"]
    selection: str = _DEFAULTS["pattern_selection"]
    threshold: str = _DEFAULTS["threshold"]
    threshold_fraction: float = _DEFAULTS["threshold_fraction"]
    tol: float = 1e-3
    gap_tol: float = _DEFAULTS["gap_tol"]
    max_iter: int = -1
    #: (MulticlassSVC's batch_size=None sizes it by the data, estimators._engine.auto_batch; this
    #: is its least, and what the settings take alone)
    batch_size: int = 5000
    batch_sweeps: int = _DEFAULTS["batch_sweeps"]
    # the coordinator's working-set solve (working_set.solve_working_set; 0: one pass in order,
    # pattern.solve_batch, as MultiPrototypeSVC's linear path uses): at most inner_steps per-pattern
    # optimizations per batch row; while violators are left out of the batch it stops at
    # max psi <= max(tol, inner_frac * max psi of the batch), once the batch holds every violator
    # at max(inner_floor * tol, inner_prog * max psi) (measurements: benchmarks/results/HISTORY.md,
    # 'Working-set solve settings').  Rows with psi in (tol / 10, tol]
    # (PartitionSettings.near_tol) fill a batch that has room (they are about to violate)
    inner_steps: float = _DEFAULTS["inner_steps"]
    # the working-set solves' over-relaxation of exact steps (pattern._over_relax, kernel and
    # explicit-prototype; 1: none), chosen by measurement (benchmarks/results/HISTORY.md,
    # 'Working-set solve settings')
    inner_relax: float = 1.4
    inner_frac: float = 0.3
    # ... where "max psi of the batch" sets aside its inner_skip most violated rows
    # (numerics.selection.reference_violation): after a large round a few dozen rows of a
    # 46,000-row working set could violate 3x more than the rest, and the solve stopped after
    # their steps (deformed digits, 200,000 rows: 6 of 40 rounds moved 1-356 patterns)
    inner_skip: float = 0.001
    inner_floor: float = 0.5
    inner_prog: float = 0.3
    # a working set with more violators than room keeps every class's best share
    # (engine.messages.pick_order: one class's rows alone drag the others' into violation)
    class_quota: bool = True
    shrinking: bool = True
    shrink_after: int = 3
    shrink_cap: float = 0.1
    cache_size: float = 200.0
    #: budget (MB) of the coordinator's Gram block of the working sets (:class:`_GramCache`);
    #: None: ``cache_size``
    gram_cache_size: float | None = None
    fp_eps: float | None = None
    verbose: bool = False
    #: a fresh fit whose first working set holds every row runs its rounds in the coordinator's
    #: Gram block (:mod:`.whole_block`); False: always the partitions' rounds
    whole_block: bool = True

    def check(self) -> SolverSettings:
        if not (isinstance(self.C, (int, float, np.number)) and np.isfinite(self.C) and self.C > 0):
            raise ValueError(f"C must be a positive finite number, got {self.C!r}")
        if self.optimizer not in pt.OPTIMIZERS:
            raise ValueError(
                f"optimizer must be one of {tuple(pt.OPTIMIZERS)}, got {self.optimizer!r}"
            )
        if self.selection not in pt.SELECTIONS:
            raise ValueError(
                f"selection must be one of {tuple(pt.SELECTIONS)}, got {self.selection!r}"
            )
        if self.threshold not in THRESHOLDS:
            raise ValueError(f"threshold must be one of {THRESHOLDS}, got {self.threshold!r}")
        if not (0.0 <= self.threshold_fraction <= 1.0):
            raise ValueError(
                f"threshold_fraction must be in [0, 1], got {self.threshold_fraction!r}"
            )
        if not (np.isfinite(self.tol) and self.tol > 0):
            raise ValueError(f"tol must be a positive number, got {self.tol!r}")
        if not (np.isfinite(self.gap_tol) and self.gap_tol >= 0):
            raise ValueError(f"gap_tol must be a number >= 0, got {self.gap_tol!r}")
        if int(self.max_iter) != self.max_iter or (self.max_iter < 1 and self.max_iter != -1):
            raise ValueError(
                f"max_iter must be a positive integer or -1 (no limit), got {self.max_iter!r}"
            )
        if int(self.batch_sweeps) != self.batch_sweeps or self.batch_sweeps < 1:
            raise ValueError(f"batch_sweeps must be an integer >= 1, got {self.batch_sweeps!r}")
        if int(self.batch_size) != self.batch_size or self.batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {self.batch_size!r}")
        if not (1.0 <= self.inner_relax < 2.0):
            raise ValueError(f"inner_relax must be in [1, 2), got {self.inner_relax!r}")
        if not (0.0 <= self.inner_skip < 1.0):
            raise ValueError(f"inner_skip must be in [0, 1), got {self.inner_skip!r}")
        if self.gram_cache_size is not None and not (
            np.isfinite(self.gram_cache_size) and self.gram_cache_size >= 0
        ):
            raise ValueError(
                f"gram_cache_size must be a number of MB >= 0, got {self.gram_cache_size!r}"
            )
        if not (np.isfinite(self.cache_size) and self.cache_size >= 0):
            raise ValueError(f"cache_size must be a number of MB >= 0, got {self.cache_size!r}")
        return self

    @property
    def gram_mb(self) -> float:
        """The budget (MB) of the coordinator's Gram block: ``gram_cache_size``, or
        ``cache_size`` when it is None."""
        return self.cache_size if self.gram_cache_size is None else self.gram_cache_size


@dataclass
class SolveResult:
    """What a solve leaves: the support patterns' ids, their ``B`` rows and ``X`` rows, history."""

    support: np.ndarray
    coef: np.ndarray
    X_sv: object
    history: dict
    n_iter: int
    converged: bool
    partitions: list = field(default_factory=list)


@dataclass
class CoordinatorState:
    """What the coordinator owns between rounds, kept across :func:`solve` calls so that a solve
    can continue where another stopped (MProtSVM epochs, resumed checkpoints): the coefficients
    ``B`` (n x P, stored for the rows that have any), the X rows of the support patterns and of
    the batches since the last prune, the round counter, the history (bounded: :mod:`.history`)."""

    B: CoefficientRows
    bank: RowBank = field(default_factory=RowBank)
    rounds: int = 0
    history: RoundHistory = field(default_factory=lambda: RoundHistory(HISTORY_KEYS))
    #: the message chosen in the last round, not yet sent to the partitions (its ``dB`` is in
    #: ``B`` already): a checkpoint saves it with the partitions' states, so a resume sends it
    pending: RoundMessage | None = None
    #: the support count last shown in the history (refreshed every 50 rounds)
    n_sv: int | None = None

    @classmethod
    def fresh(cls, n: int, P: int) -> CoordinatorState:
        return cls(B=CoefficientRows(n, P))

    def support(self) -> np.ndarray:
        return self.B.support()


def block_has_room(s: SolverSettings, n: int, x_dtype) -> bool:
    """Whether the settings ``s`` let a fresh solve of ``n`` rows (of ``x_dtype``) run its rounds
    in the coordinator's Gram block (:mod:`.whole_block`): the working-set solve, the block
    allowed, and room in it for every row."""
    room = gram_places(s.gram_mb * 2**20, block_dtype(x_dtype).itemsize)
    return s.whole_block and s.inner_steps > 0 and room >= n


def runs_in_block(s: SolverSettings, n: int, x_dtype) -> bool:
    """Whether a fresh solve of ``n`` rows with the settings ``s`` and no batch solver runs every
    round in the coordinator's Gram block: :func:`block_has_room`, and a first working set that
    takes every row (at ``B = 0`` every row is a candidate).  Such a fit needs no partitions
    but for their check of the result, so an estimator runs it in process whatever its
    ``client`` (:func:`~dmcsvm.estimators._engine.make_executor`)."""
    return s.batch_size >= n and block_has_room(s, n, x_dtype)


#: the working set's scores go to the partitions (``RoundMessage.scores``) only when ``tol`` is
#: at least this many units of the kernel values' rounding: the coordinator's Gram block and a
#: partition's column hold the same kernel values computed by GEMMs of other shapes, a few ulps
#: apart, and a row whose scores are updated from one, then the other, carries that difference
#: (at ``tol=1e-9`` on float32 kernel values, 36 repeated rows held ``psi`` at 5.6e-8 round after
#: round; with the partitions' columns alone the fit ended at 8e-10)
SCORES_MIN_TOL_EPS = 100


def sends_scores(tol: float, x_dtype) -> bool:
    """Whether the rounds send the working set's scores to the partitions
    (:data:`SCORES_MIN_TOL_EPS`)."""
    return float(tol) >= SCORES_MIN_TOL_EPS * float(np.finfo(block_dtype(x_dtype)).eps)


def block_dtype(x_dtype) -> np.dtype:
    """The coordinator's kernel values for rows of ``x_dtype``: float32 rows give float32 values
    (the default kernel precision), any other float64."""
    return np.dtype(np.float32 if np.dtype(x_dtype) == np.float32 else np.float64)


class _GramCache:
    """The coordinator's kernel values among the patterns of recent working sets.

    Consecutive rounds' working sets share most of their patterns (the support vectors), so
    ``K_BB`` is kept between rounds.  :meth:`block` only places a round's patterns (their X rows)
    in the cache; a pattern's kernel row is computed when the working-set solve first steps it
    (:meth:`ensure`, asked by :func:`~dmcsvm.numerics.working_set.solve_working_set`), against
    every pattern placed by then.  Place ``g``'s row (row ``slot[g]`` of ``G``, taken in the
    order rows are computed: :meth:`_take_slots`) holds the columns below ``stamp[g]`` (the
    number placed when it was computed; ``-1``: not computed); a row computed earlier is
    completed over the patterns placed since.  A working set of 5,000 of which a few dozen move
    (shuttle's first hundred rounds) thus costs a few dozen rows, not 5,000.  Held within
    ``budget_bytes``; when a round would overflow it, only that round's working set stays (its
    rows kept, their columns moved left in order, with the stamps renumbered).  Values are a
    pure function of the rows and of the solve's requests, so the trajectory does not depend on
    where the partitions run; only dense rows are cached (sparse batches compute ``K_BB`` every
    round).  Rows are computed in fixed chunks, on ``threads`` threads when the fit runs in
    process (its partitions' threads idle while the coordinator works), same values.  Measured
    at defaults (load ~6, same trajectory both ways): shuttle 5.2 s against 6.8 s with every
    placed row computed, letter, usps equal (benchmarks/results/vs_libsvm_defaults.md).
    """

    #: rows are computed in chunks of this many (a GEMM's rounding depends on its shape, so a
    #: fixed chunk keeps the values, and the trajectory, the same whatever the thread count)
    CHUNK = 128
    #: from this many placed values (columns x features) on, a chunk is :attr:`WIDE_CHUNK` rows
    #: cut into column blocks (:meth:`_tasks`): each GEMM call reads and packs all the X rows it
    #: multiplies, about 15 ms for 25,000 rows of 784 features, so 128-row chunks over every
    #: placed column spent 15-20 % of a large block's time packing the same rows again
    WIDE_VALUES = 1 << 22
    WIDE_CHUNK = 1024
    #: column blocks of a wide chunk: about this many, at least :attr:`WIDE_MIN_COLS` columns each
    WIDE_BLOCKS = 16
    WIDE_MIN_COLS = 512

    def __init__(self, spec, budget_bytes, dtype, threads=1, n_rows=None):
        self.spec = spec
        self.n_rows = n_rows  # patterns in the problem: the block never needs more places
        self.threads = int(threads)  # threads for the chunks (the partitions idle meanwhile)
        self._pool = LazyPool(self.threads, "gram")  # started at the first request of 2+ chunks
        self.budget = int(budget_bytes)
        self.dtype = block_dtype(dtype)
        self.pos = IdIndex()  # pattern id -> its row / column in G
        self.m = 0
        self.G = np.zeros((0, 0), dtype=self.dtype)
        self._block = None  # the flat block G is a view of (engine.kept_block)
        self.X = None
        self.stamp = np.zeros(0, dtype=np.int64)
        # the row of G that holds each place's values (-1: none): rows are taken in the order
        # they are computed, so the pages written are those of the rows computed
        self.slot = np.zeros(0, dtype=np.int64)
        self.n_slots = 0  # rows of G taken (free ones among them in _free)
        # rows of G left by evicted places, taken first, lowest first
        self._free = np.zeros(0, dtype=np.int64)
        self.norms = np.zeros(0)
        self.rows_computed = 0  # kernel rows computed (a completed row counts again)
        self._asked_at = 0  # rows_computed at the last next_request

    def block(self, ids, XB):
        """``(G, p)``: the places ``p`` of the patterns ``ids`` (X rows ``XB``) in ``G``, new
        ones placed; their values are computed on request (:meth:`ensure`)."""
        p = self.pos.lookup(ids)
        new = np.flatnonzero(p < 0)
        if new.shape[0] == 0:
            return self.G, p
        need = self.m + new.shape[0]
        if need > self.G.shape[0]:
            limit = self._limit()
            if need > limit:
                self._evict(ids, p, limit)
                new = np.flatnonzero(p < 0)
                need = self.m + new.shape[0]
            if need > self.G.shape[0]:
                # at once to the places it may need, the budget's or the problem's (only the
                # values written are paged in, and growing copied the block into fresh pages:
                # pendigits' first fit, 7,494 rows, paged in 5,000^2 values twice, 0.3-0.9 s on
                # this VM, against SVC's 0.1 s); past the budget only for a working set larger
                # than the budget alone
                cap = max(need, limit if self.n_rows is None else min(limit, int(self.n_rows)))
                # (the last fit's block when it is large enough: its pages are paged in
                # already, engine.kept_block)
                block = kept_block.take(cap * cap, self.dtype)
                G = block[: cap * cap].reshape(cap, cap)
                X = np.empty((cap, XB.shape[1]), dtype=XB.dtype)
                stamp = np.full(cap, -1, dtype=np.int64)
                slot = np.full(cap, -1, dtype=np.int64)
                norms = np.empty(cap)
                G[: self.n_slots, : self.m] = self.G[: self.n_slots, : self.m]
                if self.m:
                    X[: self.m] = self.X[: self.m]
                    stamp[: self.m] = self.stamp[: self.m]
                    slot[: self.m] = self.slot[: self.m]
                    norms[: self.m] = self.norms[: self.m]
                self.G, self.X, self.stamp, self.norms = G, X, stamp, norms
                self.slot = slot
                self._block = block
        m, nn = self.m, new.shape[0]
        self.X[m : m + nn] = XB[new]
        if self.spec.name == "rbf":  # (the squared norms of RBF's distances, once per row)
            self.norms[m : m + nn] = row_norms_sq(self.X[m : m + nn])
        self.stamp[m : m + nn] = -1
        self.slot[m : m + nn] = -1
        p[new] = m + np.arange(nn)
        self.pos.add(np.asarray(ids)[new], p[new])
        self.m = m + nn
        return self.G, p

    @property
    def pool(self) -> LazyPool | None:
        """The threads of the Gram rows, lent to the working-set solve's passes between
        requests (:mod:`dmcsvm.numerics.passes`); None on one thread."""
        return self._pool if self.threads > 1 else None

    def next_request(self) -> int:
        """Rows the next working-set solve asks for at first: as many as the last solve had
        computed (at least :data:`~dmcsvm.numerics.working_set.ROWS_FIRST_REQUEST`), so that a
        round stepping thousands of new rows (deformed digits' early rounds) gets them in large
        GEMMs on every thread at once, and one stepping a few dozen (shuttle's) a few dozen."""
        n, self._asked_at = self.rows_computed - self._asked_at, self.rows_computed
        return max(ROWS_FIRST_REQUEST, n)

    def ensure(self, rows) -> None:
        """Compute rows ``rows`` of ``G`` (places) over the columns placed since each was last
        computed, ``K(X_rows, X[lo:m])``: rows of one stamp together, in chunks of
        :attr:`CHUNK`, on the pool when there are several.  Only rows are written: a row is
        read only once it is complete (``stamp == m``), so the symmetric half would never be
        read (writing it cost a strided pass over every row of ``G`` per request)."""
        rows = np.asarray(rows, dtype=np.int64)
        m = self.m
        rows = rows[self.stamp[rows] < m]
        if rows.shape[0] == 0:
            return
        # rows of one stamp together (new rows, rows computed in the same earlier round), each
        # group in chunks of CHUNK
        order = np.argsort(self.stamp[rows], kind="stable")
        rows = rows[order]
        self._take_slots(rows)
        cuts = np.flatnonzero(np.diff(self.stamp[rows])) + 1
        tasks = [t for g in np.split(rows, cuts) for t in self._tasks(g, m)]

        def compute(task):
            r, lo, hi = task
            ra = r if r.shape[0] > 1 else np.repeat(r, 2)
            kw = (
                {"norms_a": self.norms[ra], "norms_b": self.norms[lo:hi]}
                if self.spec.name == "rbf"
                else {}
            )
            K = kernel_block(self.spec, self.X[ra], self.X[lo:hi], dtype=self.dtype, **kw)
            # written by the thread that computed it (tasks own disjoint parts of rows): the
            # block's fresh pages are faulted in on every thread at once, and a small problem's
            # block is mostly fresh pages (pendigits: 200 MB in its first rounds)
            self.G[self.slot[r], lo:hi] = K[: r.shape[0]]

        if self.threads < 2 or len(tasks) < 2:
            for t in tasks:
                compute(t)
        else:
            for _ in self._pool.map(compute, tasks):
                pass
        self.stamp[rows] = m
        self.rows_computed += rows.shape[0]

    def _take_slots(self, rows) -> None:
        """Give the places ``rows`` that have no row of ``G`` one: rows evicted places left
        first, then the next unused ones, in order.  Placed by place, a first working set of
        every fourth row (:data:`~.whole_block.FIRST_SHARE`) wrote into every page of the
        block: letter's rows are 60 KB, and a 2 MB page holds 34 of them."""
        need = rows[self.slot[rows] < 0]
        _, first = np.unique(need, return_index=True)
        need = need[np.sort(first)]  # (each place once, in order)
        k = min(self._free.shape[0], need.shape[0])
        self.slot[need[:k]] = self._free[:k]
        self._free = self._free[k:]
        new = need[k:]
        self.slot[new] = self.n_slots + np.arange(new.shape[0])
        self.n_slots += new.shape[0]

    def _tasks(self, g, m) -> list:
        """The GEMMs ``(rows, lo, hi)`` that compute the rows ``g`` (one stamp) over the columns
        ``lo:m`` they lack: chunks of :attr:`CHUNK` rows over every column, or, from
        :attr:`WIDE_VALUES` placed values on, chunks of :attr:`WIDE_CHUNK` rows cut into column
        blocks, so that each call packs a slice of X, not all of it.  The cut depends on the
        rows, ``m`` and the features only, never on the threads, so the values do not either."""
        lo = max(int(self.stamp[g[0]]), 0)
        # one row, or one column, alone would be a GEMV, which rounds differently from a
        # GEMM: two rows (the row twice) and two columns (one known again), so that the
        # values do not depend on how the requests fell
        lo = min(lo, max(m - 2, 0))
        cols = m - lo
        if cols * self.X.shape[1] < self.WIDE_VALUES:
            return [(g[a : a + self.CHUNK], lo, m) for a in range(0, g.shape[0], self.CHUNK)]
        width = max(self.WIDE_MIN_COLS, -(-cols // self.WIDE_BLOCKS))
        # (a last block of one column would be a GEMV: it joins the block before it)
        edges = list(range(lo, m - 1, width)) + [m]
        return [
            (g[a : a + self.WIDE_CHUNK], c0, c1)
            for a in range(0, g.shape[0], self.WIDE_CHUNK)
            for c0, c1 in zip(edges[:-1], edges[1:], strict=True)
        ]

    def close(self) -> None:
        """End the pool; the block is kept for the next fit (:mod:`~dmcsvm.engine.kept_block`):
        nothing reads it after this."""
        self._pool.close()
        if self._block is not None:
            self.G = np.zeros((0, 0), dtype=self.dtype)
            kept_block.give(self._block)
            self._block = None

    def _limit(self) -> int:
        """Rows (and columns) of the largest block within the budget."""
        return gram_places(self.budget, self.dtype.itemsize)

    def _evict(self, ids, p, limit) -> None:
        """Keep only the rows of this working set (``p >= 0``; ``p`` is rewritten to their new
        places): the block among them is copied to the top-left corner, in place and in order,
        instead of computing it again (kernel values cost O(d) each, a copy O(1); consecutive
        working sets share most of their rows); a kept row's stamp becomes the number of kept
        places below the old one, which keeps every known value known.  A working set that
        alone overflows the budget keeps nothing (``limit``: :meth:`_limit`)."""
        have, keep = self.pos.keep(ids if len(ids) <= limit else ids[:0])
        k = keep.shape[0]
        kept = np.zeros(0, dtype=np.int64)
        if k:
            kept = self.slot[keep]
            compact_columns(self.G, kept, keep)
            self.X[:k] = self.X[keep]
            self.norms[:k] = self.norms[keep]
            old = self.stamp[keep]
            self.stamp[:k] = np.where(old < 0, -1, np.searchsorted(keep, old))
            self.slot[:k] = kept
        self.slot[k : self.m] = -1
        # the rows of G no kept place holds are free for the next rows computed
        used = np.zeros(self.n_slots, dtype=bool)
        used[kept[kept >= 0]] = True
        self._free = np.flatnonzero(~used)
        p[:] = -1
        p[have] = np.arange(k)
        self.m = k


def primal_slack(agg, C) -> float:
    """The primal's slack term from merged replies: ``C sum_i xi_i``, or ``sum_i C_i xi_i``
    when the partitions hold per-pattern bounds (class / sample weights)."""
    return agg.sum_Cxi if agg.sum_Cxi is not None else C * agg.sum_xi


def pick_candidates(agg, b, tol, theta, greedy, n_classes=0):
    """The batch: positions in the merged reply ``agg``'s candidates
    (:func:`~dmcsvm.engine.messages.pick_order`), and which candidates violate (``psi > tol``).
    A one-pass batch takes the violators at or above the threshold ``theta``; a working set
    solved by re-selection (``greedy``) takes the best and decides itself which to optimize how
    often, the room left filled with the rows closest to violating, so that its solve keeps them
    below ``tol`` too, and keeps every class's share when there are more violators than room
    (``n_classes > 1``).  Dask workers send only what this can pick
    (:func:`~dmcsvm.engine.messages.prune_candidates`)."""
    pick = pick_order(
        agg.cand_V,
        agg.cand_psi,
        b,
        tol,
        None if greedy else theta,
        cls=agg.cand_cls if greedy else None,
        n_classes=n_classes,
    )
    return pick, agg.cand_psi > tol


def batch_bounds(agg, pick, C, key):
    """Dual upper bounds of the batch rows ``pick`` of the merged candidates for the SMO
    decomposition: the scalar ``C`` when every one of them has it (always without weights: the
    arithmetic of an unweighted solve), else their per-row bounds (``key``, e.g. ``cand_U``,
    reported by the partitions that own them)."""
    Cb = getattr(agg, key)
    if Cb is None:
        return float(C)
    Cb = np.ascontiguousarray(Cb[pick], dtype=np.float64)
    return float(C) if np.all(Cb == C) else Cb


def batch_row_bounds(agg, pick, C):
    """One dual upper bound per batch row ``pick`` of the merged candidates: their ``C_i``
    (``cand_C``, reported by the partitions that own them), or ``C`` repeated without weights.
    Always an array, as the partitions' ``row_bounds``: the Crammer-Singer batch solves
    (``pattern.solve_batch``, ``solve_working_set``, a ``batch_solver``) then compile one
    variant for weighted and unweighted fits."""
    if agg.cand_C is None:
        return np.full(len(pick), float(C))
    return np.ascontiguousarray(agg.cand_C[pick], dtype=np.float64)


def _progress(settings, n):
    if not settings.verbose:
        return None
    from tqdm.auto import tqdm

    return tqdm(desc="dmcsvm rounds", unit="round", leave=True)


def solve(
    executor,
    n: int,
    pcls: np.ndarray,
    spec: KernelSpec,
    settings: SolverSettings,
    d: int,
    sparse: bool,
    x_dtype=np.float64,
    on_round=None,
    state=None,
    first_msg=None,
    stop=None,
    batch_solver=None,
) -> SolveResult:
    """Run rounds on ``executor`` (already started on the partitions) until convergence.

    Parameters
    ----------
    executor : InProcessExecutor or DaskExecutor
    n : int
        Number of training patterns.
    pcls : ndarray of int, shape (P,)
        Class index of every prototype.
    spec : KernelSpec
    settings : SolverSettings
    d : int
        Number of features (for an empty support set).
    sparse : bool
        Whether X rows arrive as CSR.
    on_round : callable, optional
        Called with ``(round, B)`` after each round's update (checkpoints).
    state : CoordinatorState, optional
        Continue from this state (its ``B`` must match the partitions' scores after
        ``first_msg``); updated in place.  Default: a fresh state, ``B = 0``.
    first_msg : RoundMessage, optional
        Message (or a subclass's, e.g. a PrototypeMessage) sent to the partitions in the first
        round (e.g. an update that zeroes the coefficients of re-assigned patterns); the caller
        keeps ``state.B`` consistent with it.
    stop : callable, optional
        ``stop(row) -> bool`` on each round's history row; True ends the solve (converged=False)
        in the state that row describes (the batch chosen in that round is dropped).
    batch_solver : callable, optional
        Replaces :func:`~dmcsvm.numerics.pattern.solve_batch` and is called with the same
        arguments (the bounds ``C``: one per batch row, :func:`batch_row_bounds`) except the
        batch's X rows in place of ``K_BB`` (e.g. the explicit-prototype solve of linear
        kernels, :class:`~dmcsvm.numerics.linear_prototypes.LinearBatchSolver`); with
        ``inner_steps > 0`` its ``working_set`` method replaces
        :func:`~dmcsvm.numerics.working_set.solve_working_set` the same way.
    """
    s = settings
    # a fresh solve of its own (rounds in the Gram block need one: .whole_block)
    fresh = state is None and first_msg is None and on_round is None and stop is None
    opt_code = pt.OPTIMIZERS[s.optimizer]
    P = len(pcls)
    pcls = np.ascontiguousarray(pcls, dtype=np.int64)
    fp_eps = s.fp_eps if s.fp_eps is not None else s.tol / 2.0  # CS 2001 Fig. 4 passes eps / 2
    if state is None:
        state = CoordinatorState.fresh(n, P)
    B, bank, hist = state.B, state.bank, state.history
    bar = _progress(s, n)
    register_snapshot(executor, state, d, sparse, x_dtype)  # rebuilds a lost partition (Dask)
    msg = replace(first_msg) if first_msg is not None else RoundMessage()
    if has_batch(msg):
        bank.add(msg.ids, msg.XB)  # partitions now count these rows as shipped
    t_start = time.perf_counter()
    rounds = state.rounds
    max_rounds = rounds + s.max_iter if s.max_iter > 0 else 10**12
    converged = False
    just_unshrunk = False
    stalled = False
    n_sv = state.n_sv if state.n_sv is not None else B.count_support()
    # the coordinator's own BLAS calls run on one thread whatever the executor, so that its
    # floating-point results (and hence the whole trajectory) do not depend on where partitions run
    # (engine.threads: held by count, so a fit beside this one cannot change it half-way)
    # the working-set solve needs K_BB, or a batch_solver with a working_set method (explicit
    # prototypes)
    greedy = s.inner_steps > 0 and (batch_solver is None or hasattr(batch_solver, "working_set"))
    # the executor's threads idle while the coordinator works (in-process: the partitions'; on
    # Dask: this process's cores, the workers waiting for the next round): its Gram rows use them
    gram_mb = s.gram_mb
    gram = (
        _GramCache(
            spec,
            gram_mb * 2**20,
            x_dtype,
            threads=getattr(executor, "n_threads", 1),
            n_rows=n,
        )
        if greedy and batch_solver is None and not sparse and gram_mb > 0
        else None
    )
    # rounds in the coordinator's Gram block (.whole_block): a fresh fit of its own whose block
    # (or, for sparse rows, one computed at once) has room for every row
    whole = fresh and batch_solver is None and block_has_room(s, n, x_dtype)
    limits = BlasThreadHold()
    prune = False
    send_scores = sends_scores(s.tol, x_dtype)
    # classes whose share a working set keeps (0: none; the partitions report each class's best,
    # PartitionSettings.class_quota)
    n_quota = int(pcls.max()) + 1 if greedy and s.class_quota and P > 1 else 0
    try:
        while True:
            t_round = time.perf_counter()
            if prune and msg.ids is not None:
                # the bank follows the support too: it keeps the support and the batch sent now,
                # and the partitions keep the same marks when they apply this message (pruned
                # here, at sending, since a solve that stops drops the batch it chose last)
                bank.keep(np.union1d(B.support(), msg.ids))
                msg.reship = True
                msg.bank_ids = bank.ids()  # the Dask workers' banks keep the same rows
                prune = False
            # how this loop picks candidates: a Dask worker sends only those it can still pick
            msg.pick = (int(s.batch_size), float(s.tol), n_quota)
            agg = merge(executor.step(msg))
            t_solve0 = time.perf_counter()
            mM = agg.sum_BF  # ||M||^2
            dual = agg.sum_alpha - 0.5 * mM
            primal = 0.5 * mM + primal_slack(agg, s.C)
            # a NaN primal would read as gap 0 and "converge": non-finite values end the solve
            check_finite_round(rounds, dual=dual, primal=primal, max_psi=agg.max_psi)
            gap = (primal - dual) / max(abs(primal), 1e-300) if primal > 0 else 0.0
            mean_v = agg.sum_V / max(agg.n_active, 1)
            theta = threshold_value(s.threshold, rounds, agg.max_V, mean_v, s.threshold_fraction)
            done = agg.max_psi <= s.tol or (s.gap_tol > 0 and gap <= s.gap_tol)
            batch_ids = np.zeros(0, dtype=np.int64)
            n_steps = 0
            msg = RoundMessage()
            if done and agg.n_active < agg.n_rows and not just_unshrunk:
                # converged on the active set: rebuild the shrunk rows' scores and check again
                sv = B.support()
                msg = RoundMessage(
                    unshrink={"ids": sv, "X": bank.stack(sv, d, sparse, x_dtype), "B": B[sv]}
                )
                just_unshrunk = True
            elif done:
                converged = True
            else:
                just_unshrunk = False
                scores = None
                pick, viol = pick_candidates(agg, s.batch_size, s.tol, theta, greedy, n_quota)
                ids = agg.cand_ids[pick]
                XB = bank.batch(ids, agg.cand_xrow()[pick], agg.cand_X, d, sparse, x_dtype)
                if whole and rounds == 0 and len(ids) == n:
                    whole = False  # (once: the rounds after it are the partitions')
                    block = gram if gram is not None else WholeBlock(spec, XB, block_dtype(x_dtype))
                    msg, rounds, _ = _rounds_in_block(
                        s,
                        block,
                        agg,
                        pick,
                        ids,
                        XB,
                        B,
                        bank,
                        pcls,
                        n_quota,
                        max_rounds,
                        hist,
                        bar,
                        t_start,
                    )
                    n_sv = B.count_support()
                    state.n_sv, state.rounds = n_sv, rounds
                    if rounds >= max_rounds:  # (as a partitions' round: no check round)
                        executor.step(msg)  # the partitions take the block's result
                        _warn_max_iter(s, agg.max_psi, gap)
                        break
                    continue
                if greedy and gram is not None:
                    G, gpos = gram.block(ids, XB)
                    Kbb = None
                else:
                    Kbb = kernel_block(spec, XB, XB) if batch_solver is None else XB
                    G, gpos = Kbb, np.arange(len(ids))
                batch = pt.solve_batch if batch_solver is None else batch_solver
                Bb = B[ids]
                args = (
                    Bb,
                    agg.cand_F[pick],
                    Kbb,
                    agg.cand_yp[pick],
                    agg.cand_cls[pick],
                    pcls,
                    agg.cand_kdiag[pick],
                    batch_row_bounds(agg, pick, s.C),
                    float(s.tol),
                    float(fp_eps),
                    int(s.batch_sweeps),
                )
                if greedy:
                    rest = viol.copy()
                    rest[pick] = False
                    if rest.any() or agg.n_viol > int(np.count_nonzero(viol[pick])):
                        # violators are left out: reduce the batch's violations, do not overfit
                        # it; relative to the batch's own largest violation, not the round's
                        # (the batch is chosen by gain: rows of large psi and little gain, held
                        # near a bound, kept the cut above nearly all of it, and deformed digits
                        # at 20,000 rows spent 400 rounds of 1-600 steps; 578 -> 266 rounds)
                        inner_tol = max(
                            s.tol,
                            s.inner_frac * reference_violation(agg.cand_psi[pick], s.inner_skip),
                        )
                    else:
                        inner_tol = max(s.inner_floor * s.tol, s.inner_prog * agg.max_psi)
                    max_steps = int(max(1, s.inner_steps * len(ids)))
                    if batch_solver is None:
                        # the working set's scores after the solve: the partitions take them
                        # instead of computing these rows' kernel columns (RoundMessage.scores)
                        F_ws = np.empty((len(ids), P)) if send_scores else None
                        dB, gains, st = solve_working_set(
                            opt_code,
                            *args[:2],
                            G,
                            gpos,
                            # (mypy maps a starred tuple slice after another one wrongly)
                            *args[3:-1],  # type: ignore[arg-type]
                            max_steps,
                            inner_tol,
                            s.inner_relax,
                            rows=gram,
                            first_request=(
                                ROWS_FIRST_REQUEST if gram is None else gram.next_request()
                            ),
                            pool=None if gram is None else gram.pool,
                            F_out=F_ws,
                        )
                        if F_ws is not None:
                            scores = {"ids": ids, "F": F_ws}
                    else:
                        dB, gains, st = batch_solver.working_set(
                            opt_code,
                            *args[:2],
                            XB,
                            *args[3:-1],
                            max_steps,
                            inner_tol,
                            s.inner_relax,
                        )
                    n_steps = int(st.sum())
                else:
                    # (mypy cannot tell that Kbb, args[2], is None only on the greedy path)
                    dB, gains = batch(opt_code, *args)  # type: ignore[arg-type]
                    n_steps = len(ids) * int(s.batch_sweeps)
                check_finite_round(rounds, coefficients=dB)
                moved = np.any(dB != 0.0, axis=1)
                if not moved.any() and opt_code != pt.OPT_EXACT:
                    # the chosen optimizer stalled below its own tolerance: finish exactly
                    if args[2] is None:
                        args = args[:2] + (kernel_block(spec, XB, XB),) + args[3:]
                    dB, gains = batch(pt.OPT_EXACT, *args)  # type: ignore[arg-type]  # (as above)
                    moved = np.any(dB != 0.0, axis=1)
                    scores = None  # (the scores are those of the solve above, not this one)
                if not moved.any():
                    stalled = True
                if moved.any():
                    ids, XB, dB = ids[moved], XB[np.flatnonzero(moved)], dB[moved]
                    B_prev = Bb[moved]  # (the batch solves do not write their Bb)
                    B[ids] = B_prev + dB
                    bank.add(ids, XB)
                    msg = RoundMessage(
                        ids=ids,
                        XB=XB,
                        dB=dB,
                        shrink_margin=min(agg.max_psi, s.shrink_cap),
                        scores=scores,
                    )
                    batch_ids = ids
            t_end = time.perf_counter()
            if rounds % 50 == 0 or converged:  # O(stored rows): now and then, and at the end
                B.compact()  # rows that left the support: the store follows it
                n_sv = B.count_support()
                prune = len(bank) > n_sv + s.batch_size
            row = dict(
                round=rounds,
                dual=dual,
                primal=primal,
                gap=gap,
                max_V=agg.max_V,
                max_psi=agg.max_psi,
                threshold=theta,
                n_active=agg.n_active,
                n_viol=agg.n_viol,
                n_sv=n_sv,
                batch=int(batch_ids.shape[0]),
                elapsed=t_end - t_start,
                rows_computed=agg.rows_computed,
                rows_cached=agg.rows_cached,
                rows_disk=agg.rows_disk,
                t_round=t_end - t_round,
                t_solve=t_end - t_solve0,
                t_kernel=agg.t_kernel,
                t_update=agg.t_update,
                t_select=agg.t_select,
                t_parts=agg.t_total,
                steps=n_steps,
                gram_rows=gram.rows_computed if gram is not None else 0,
            )
            hist.append(row)
            if bar is not None:
                bar.update(1)
                post = dict(
                    gap=f"{gap:.2e}",
                    psi=f"{agg.max_psi:.2e}",
                    active=agg.n_active,
                    computed=agg.rows_computed,
                    cached=agg.rows_cached,
                )
                if agg.rows_disk:
                    post["from_disk"] = agg.rows_disk
                bar.set_postfix(**post)
            rounds += 1
            state.n_sv = n_sv
            if on_round is not None and batch_ids.shape[0]:
                state.pending = msg
                on_round(rounds, B)
                state.pending = None
            state.rounds = rounds
            if converged:
                break
            if stop is not None and stop(row):
                if msg.ids is not None:
                    # end in the state this row describes: the batch chosen in it is not applied
                    B[msg.ids] = B_prev
                break
            if stalled:
                warnings.warn(
                    f"dmcsvm solver stopped: no batch pattern can be improved in floating "
                    f"point although max psi {agg.max_psi:.3g} > tol={s.tol}; the "
                    f"solution is optimal to machine precision",
                    ConvergenceWarning,
                    stacklevel=3,
                )
                break
            if rounds >= max_rounds:
                if msg.ids is not None:
                    executor.step(msg)  # apply the last batch so partitions match B
                _warn_max_iter(s, agg.max_psi, gap)
                break
    finally:
        limits.release()
        if gram is not None:
            gram.close()
        if bar is not None:
            bar.close()
    state.rounds = rounds
    sv = state.support()
    return SolveResult(
        support=sv,
        coef=B[sv],
        X_sv=bank.stack(sv, d, sparse, x_dtype),
        history=hist,
        n_iter=rounds,
        converged=converged,
    )


def _warn_max_iter(s, max_psi, gap) -> None:
    warnings.warn(
        f"dmcsvm solver stopped at max_iter={s.max_iter} rounds before "
        f"reaching tol={s.tol} (max psi {max_psi:.3g}, gap {gap:.3g})",
        ConvergenceWarning,
        stacklevel=4,
    )


def _rounds_in_block(
    s, gram, agg, pick, ids, XB, B, bank, pcls, n_quota, max_rounds, hist, bar, t_start
):
    """Round 0 of a fresh fit whose working set holds every row: the rounds run in the Gram
    block (:func:`~.whole_block.run_in_block`), each recorded in ``hist`` as a partitions' round
    would be; ``B`` and the row bank take the result.  Returns the message that hands it to the
    partitions (``settle``), the rounds run and whether they ended at the stopping rule."""
    count = [0]

    def on_row(row, Bw):
        full = dict.fromkeys(HISTORY_KEYS, 0.0)
        full.update(
            round=count[0],
            threshold=0.0,
            n_active=agg.n_rows,
            n_sv=int(np.count_nonzero(np.any(Bw != 0.0, axis=1))),
            elapsed=time.perf_counter() - t_start,
            gram_rows=gram.rows_computed,
            **row,
        )
        full["t_solve"] = row["t_round"]
        hist.append(full)
        count[0] += 1
        if bar is not None:
            bar.update(1)

    Bw, Fw, touched, k, done = run_in_block(
        s,
        gram,
        ids,
        XB,
        B[ids],
        agg.cand_F[pick],
        agg.cand_yp[pick],
        agg.cand_cls[pick],
        pcls,
        agg.cand_kdiag[pick],
        batch_row_bounds(agg, pick, s.C),
        n_quota,
        max_rounds,
        on_row,
    )
    at = np.flatnonzero(touched)
    B[ids[at]] = Bw[at]
    bank.add(ids[at], XB[at])
    msg = RoundMessage(settle={"ids": ids, "B": Bw, "F": Fw, "shipped": ids[at]})
    return msg, k, done


def register_snapshot(
    executor, state: CoordinatorState, d: int, sparse: bool, x_dtype=np.float64
) -> None:
    """Let ``executor`` rebuild a lost partition from ``state`` (``DaskExecutor.set_snapshot``;
    executors without recovery ignore it).  The snapshot is read when a partition is lost: the
    support patterns (rows of ``B`` with any non-zero), their X rows from the row bank and their
    coefficient rows, and which rows the coordinator holds.  :func:`solve` adds a batch's ``dB`` to
    ``B`` before it sends the batch, so the snapshot taken while a round is in flight already holds
    that round's update (the rebuilt partition only answers the round)."""
    setter = getattr(executor, "set_snapshot", None)
    if setter is None:
        return

    def snapshot(lo, hi):
        sv = state.support()
        held = state.bank.ids()
        return {
            "sv_ids": sv,
            "sv_X": state.bank.stack(sv, d, sparse, x_dtype),
            "sv_B": state.B[sv].copy(),
            "shipped": held[(held >= lo) & (held < hi)],
        }

    setter(snapshot)
