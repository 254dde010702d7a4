"""Sequential dual method for the Crammer-Singer family with explicit prototypes (linear kernels).

Keerthi, Sundararajan, Chang, Hsieh & Lin (2008), "A sequential dual method for large scale
multi-class linear SVMs" (LIBLINEAR's ``-s 4`` solver), on the dual of DESIGN §1 with ``q >= 1``
prototypes per class and a *fixed* assignment ``yp`` (the convex problem of one MProtSVM epoch;
``q = 1`` is Crammer-Singer).  For a kernel ``k(x, z) = a <x, z> + c0`` the scores are
``f_r(x) = a W_r . x + c0 s_r`` with ``W = B^T X`` (P x d) and ``s = B^T 1`` kept explicitly:

* a *pass* visits the active patterns in a random order; pattern ``i`` gets its scores on its
  active prototypes (O(|A_i| d)), its KKT violation ``psi`` (CS 2001 Eq. 32, margin units), and
  the exact solution of its reduced problem (sort-based, as :func:`dmcsvm.solvers.pattern.opt_exact`),
  after which ``W`` and ``s`` are updated in place (O(changed d)): no score matrix, no rounds;
* shrinking (Keerthi et al. §4 / LIBLINEAR): a prototype at its bound whose score is below every
  free one leaves the pattern's active list, a pattern with one active prototype leaves the pass;
  once a pass's largest violation drops below ``eps_shrink`` everything is re-activated and
  ``eps_shrink`` halves (down to ``tol``); the solve ends on a pass that started from every
  pattern and prototype and saw no violation above ``tol``.

Stopping: ``MulticlassSVC`` stops on LIBLINEAR's rule alone, ``tol`` bounding the largest KKT
violation ``psi`` seen in a pass over every pattern and prototype (its ``gap_tol`` does not apply
here: at the default ``tol=1e-3`` the relative duality gap ends between 4e-6 and 3e-4 on digits,
letter, usps and dna, primal within 0.03 % of LIBLINEAR's at ``tol=1e-4``); ``max_iter`` counts
passes (-1: :data:`DEFAULT_MAX_PASSES`).  MProtSVM's epochs stop when the exact primal beats the
last energy, its final solve on ``tol`` or ``gap_tol``, whichever comes first.

The kernels below are plain functions on arrays (numba), tested alone against NumPy references;
the orchestration (:func:`fit_arrays`, the estimator hooks) lives apart from them.  This is the
in-memory path: Dask clusters and zarr stores stay on the batched-round machinery
(:mod:`dmcsvm.solvers.multiclass`), which scales past one machine.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import numba
from numba.extending import overload
import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from ..engine.prototype_partition import prototype_groups
from . import linear_prototypes as lp
from . import pattern as pt

_C_REL = pt._C_REL      # alpha_y within C * (1 - _C_REL) of C is at the bound

#: passes when ``max_iter = -1`` (LIBLINEAR's own cap is 1000 in scikit-learn, 100000 in its CLI)
DEFAULT_MAX_PASSES = 100000

PASS_KEYS = ("round", "dual", "primal", "gap", "max_psi", "n_active", "n_active_protos", "n_sv",
             "elapsed", "t_pass", "t_check")


# --------------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------------

#: reassociation lets LLVM vectorize the dot products (4x on this box); no nnan/ninf flags, the
#: kernels compare with infinities
_FM = {"reassoc", "contract", "nsz", "arcp"}

# Rows reach the kernels as a tuple: ``(Xd,)`` for dense rows (n x d, float64) or
# ``(indptr, indices, data)`` for CSR rows.  The two are different numba types, so every kernel
# is compiled once per layout with the row access resolved at compile time (a run-time
# ``dense`` flag in the inner loop kept LLVM from vectorizing it: 10x slower).


def row_dot(W, r, rows, i):
    """``W[r] . x_i`` (numba only)."""


def row_axpy(W, r, rows, i, v):
    """``W[r] += v x_i`` (numba only)."""


@overload(row_dot, jit_options={"fastmath": _FM})
def _row_dot(W, r, rows, i):
    if len(rows) == 1:
        def impl(W, r, rows, i):
            Xd = rows[0]
            acc = 0.0
            for k in range(Xd.shape[1]):
                acc += W[r, k] * Xd[i, k]
            return acc
    else:
        def impl(W, r, rows, i):
            indptr, indices, data = rows
            acc = 0.0
            for t in range(indptr[i], indptr[i + 1]):
                acc += W[r, indices[t]] * data[t]
            return acc
    return impl


@overload(row_axpy, jit_options={"fastmath": _FM})
def _row_axpy(W, r, rows, i, v):
    if len(rows) == 1:
        def impl(W, r, rows, i, v):
            Xd = rows[0]
            for k in range(Xd.shape[1]):
                W[r, k] += v * Xd[i, k]
    else:
        def impl(W, r, rows, i, v):
            indptr, indices, data = rows
            for t in range(indptr[i], indptr[i + 1]):
                W[r, indices[t]] += v * data[t]
    return impl


@numba.njit(cache=True, nogil=True)
def subproblem(G, b, k, ypos, Ai, C, work, out):
    """Exact solution of one pattern's reduced problem on its ``k`` active prototypes
    (LIBLINEAR's ``solve_sub_problem``; the sort-based method of CS 2001 §6).

    ``G[t]`` are the gradients ``f_r + [r != y]`` and ``b[t]`` the signed coefficients of the
    active prototypes, ``ypos`` the slot of the positive prototype (``-1`` when it is not
    active: then it sits at its bound ``C``), ``Ai = k(x_i, x_i) > 0``.  Minimizes
    ``Ai/2 |b'|^2 + sum_t (G_t - Ai b_t) b'_t`` subject to ``b'_t <= C [t = ypos]`` and
    ``sum_t b'_t = sum_t b_t``: ``b'_t = min(bound_t, (beta - G_t + Ai b_t) / Ai)`` with ``beta``
    solving ``sum_t max(0, D_t - beta) = Ai C``, ``D_t = G_t - Ai b_t + Ai C [t = ypos]``.
    Writes ``out[:k]``; ``work`` is scratch of length >= k."""
    AC = Ai * C
    mx = -np.inf
    for t in range(k):
        dt = G[t] - Ai * b[t]
        if t == ypos:
            dt += AC
        out[t] = dt
        if dt > mx:
            mx = dt
    # beta >= max D - Ai C, so only D_t above that take part: insertion-sort just those
    lo = mx - AC - 1e-12 * (1.0 + abs(mx))
    m = 0
    for t in range(k):
        dt = out[t]
        if dt > lo:
            j = m
            while j > 0 and work[j - 1] < dt:
                work[j] = work[j - 1]
                j -= 1
            work[j] = dt
            m += 1
    beta = work[0] - AC
    r = 1
    while r < m and beta < r * work[r]:
        beta += work[r]
        r += 1
    beta /= r
    for t in range(k):
        v = (beta - G[t] + Ai * b[t]) / Ai
        bound = C if t == ypos else 0.0
        out[t] = v if v < bound else bound


@numba.njit(cache=True, nogil=True)
def seed(s):
    """Seed numba's generator (the pass order) of this thread."""
    np.random.seed(s)


@numba.njit(cache=True, nogil=True)
def reset_active(yp, cls, pcls, act, asz, nfull, rows):
    """Active prototype list of every row in ``rows``: its positive prototype ``yp[i]`` first,
    then the prototypes of the other classes (``nfull[i]`` of them in all)."""
    P = pcls.shape[0]
    for j in range(rows.shape[0]):
        i = rows[j]
        act[i, 0] = yp[i]
        k = 1
        for r in range(P):
            if pcls[r] != cls[i]:
                act[i, k] = r
                k += 1
        nfull[i] = k
        asz[i] = k


@numba.njit(cache=True, nogil=True)
def passes(rows, xsq, a, c0, yp, B, W, s, C, act, asz, nfull, order, ctl, tol, max_passes,
           shrinking, stage):
    """Up to ``max_passes`` passes of the sequential dual method (module docstring).

    State carried between calls (so a caller may stop after any pass, e.g. to check the primal):
    ``B`` (n x P), ``W`` (P x d), ``s`` (P), the active prototype lists ``act`` / ``asz`` (full
    length ``nfull``), the pattern order ``order`` whose first ``ctl[0]`` entries are active,
    ``ctl[1] = eps_shrink``, ``ctl[2] = 1`` when the current pass starts from everything.
    With ``stage`` the call also returns after a pass that re-activates everything (the end of
    a shrinking stage).
    ``rows`` are the X rows (``(Xd,)`` or ``(indptr, indices, data)``), ``xsq`` their squared
    norms; ``C`` the bound of every row, or one per row (weighted patterns; a row with bound 0
    keeps its coefficients at 0).

    Returns ``(passes run, converged, largest violation of the last pass, prototypes visited)``.
    """
    n, P = B.shape
    G = np.empty(P)
    bb = np.empty(P)
    nb = np.empty(P)
    work = np.empty(P)
    stopping = 0.0
    visited = 0
    for it in range(max_passes):
        n_act = int(ctl[0])
        for j in range(n_act):
            t = j + np.random.randint(n_act - j)
            o = order[j]
            order[j] = order[t]
            order[t] = o
        stopping = -np.inf
        j = 0
        while j < n_act:
            i = order[j]
            Ai = a * xsq[i] + c0
            y = yp[i]
            Ci = pt.bound_at(C, i)
            if Ci <= 0.0:
                # a weight-0 row: its coefficients stay 0; it leaves the pass
                n_act -= 1
                order[j] = order[n_act]
                order[n_act] = i
                continue
            if Ai <= 0.0:
                # k(x_i, x_i) = 0: the row never changes a score and its dual term is linear,
                # maximal at alpha_y = Ci against any negative prototype (the kernel path's
                # pair steps end there too).  Set once, then the row leaves the pass.
                if B[i, y] < Ci:
                    r = act[i, 1] if act[i, 0] == y else act[i, 0]
                    for t in range(nfull[i]):
                        q = act[i, t]
                        s[q] -= B[i, q]
                        B[i, q] = 0.0
                    B[i, y] = Ci
                    B[i, r] = -Ci
                    s[y] += Ci
                    s[r] -= Ci
                n_act -= 1
                order[j] = order[n_act]
                order[n_act] = i
                continue
            k = asz[i]
            visited += k
            mn = np.inf
            mxg = -np.inf
            for t in range(k):
                r = act[i, t]
                g = a * row_dot(W, r, rows, i) + c0 * s[r]
                if r != y:
                    g += 1.0
                G[t] = g
                bt = B[i, r]
                bb[t] = bt
                bound = Ci if r == y else 0.0
                if bt < bound and g < mn:
                    mn = g
                if g > mxg:
                    mxg = g
            if shrinking:
                t = 0
                while t < k:
                    r = act[i, t]
                    bound = Ci if r == y else 0.0
                    if bb[t] == bound and G[t] < mn:
                        k -= 1
                        act[i, t] = act[i, k]
                        act[i, k] = r
                        gt = G[t]
                        G[t] = G[k]
                        G[k] = gt
                        gt = bb[t]
                        bb[t] = bb[k]
                        bb[k] = gt
                    else:
                        t += 1
                asz[i] = k
                if k <= 1:
                    n_act -= 1
                    order[j] = order[n_act]
                    order[n_act] = i
                    continue
            viol = mxg - mn
            if viol > stopping:
                stopping = viol
            if viol <= 1e-12:
                j += 1
                continue
            ypos = -1
            for t in range(k):
                if act[i, t] == y:
                    ypos = t
                    break
            subproblem(G, bb, k, ypos, Ai, Ci, work, nb)
            if ypos >= 0:
                # rounding leaves no ~1e-17 coefficients (patterns that only look like support
                # vectors) and alpha_y at Ci is exactly Ci (the bound tests compare with Ci)
                tot = 0.0
                for t in range(k):
                    if t != ypos:
                        if nb[t] > -1e-14 * Ci:
                            nb[t] = 0.0
                        tot -= nb[t]
                if nb[ypos] < Ci and tot < Ci * (1.0 - _C_REL):
                    nb[ypos] = tot
                else:
                    nb[ypos] = Ci
            for t in range(k):
                dv = nb[t] - bb[t]
                if dv != 0.0:
                    r = act[i, t]
                    B[i, r] = nb[t]
                    s[r] += dv
                    row_axpy(W, r, rows, i, dv)
            j += 1
        ctl[0] = n_act
        if stopping < 0.0:
            stopping = 0.0
        if not shrinking:
            if stopping <= tol:
                return it + 1, True, stopping, visited
            continue
        if stopping < ctl[1]:
            if stopping <= tol and ctl[2] == 1.0:
                return it + 1, True, stopping, visited
            ctl[0] = n
            for i in range(n):
                asz[i] = nfull[i]
            ctl[1] = max(ctl[1] / 2.0, tol)
            ctl[2] = 1.0
            if stage:
                return it + 1, False, stopping, visited
        else:
            ctl[2] = 0.0
    return max_passes, False, stopping, visited


@numba.njit(cache=True, nogil=True)
def slacks(rows, a, c0, W, s, cls, pcls, first, count, out):
    """Slack of every row w.r.t. each of its positive prototypes, as
    :func:`~dmcsvm.solvers.linear_prototypes.positive_slacks` gives from a score matrix, with
    the scores ``a <W_r, x_i> + c0 s_r`` made row by row (no n x P score matrix: one pass over
    the rows, n P d flops, the cost of the primal checks of :func:`solve_fixed`)."""
    n = out.shape[0]
    P = W.shape[0]
    qmax = out.shape[1]
    f = np.empty(P)
    for i in range(n):
        c = cls[i]
        th = -np.inf
        for r in range(P):
            fr = a * row_dot(W, r, rows, i) + c0 * s[r]
            f[r] = fr
            if pcls[r] != c and fr > th:
                th = fr
        f0 = first[c]
        for q in range(qmax):
            if q < count[c]:
                xi = th + 1.0 - f[f0 + q]
                out[i, q] = xi if xi > 0.0 else 0.0
            else:
                out[i, q] = np.inf
    return out


# --------------------------------------------------------------------------------------------
# orchestration
# --------------------------------------------------------------------------------------------

@dataclass
class LinearProblem:
    """The training rows in the form the kernels take (``rows``: ``(Xd,)`` or ``(indptr,
    indices, data)``, float64), their squared norms and the kernel ``a <x, z> + c0``."""

    rows: tuple
    xsq: np.ndarray
    a: float
    c0: float
    X: object              # the float64 rows (dense or CSR)

    @classmethod
    def of(cls, X, a, c0):
        # float64 rows: W is float64 and a mixed-precision dot does not vectorize
        if sp.issparse(X):
            Xc = sp.csr_matrix(X, dtype=np.float64)
            Xc.sort_indices()
            xsq = np.asarray(Xc.multiply(Xc).sum(axis=1), dtype=np.float64).ravel()
            rows = (Xc.indptr.astype(np.int64), Xc.indices.astype(np.int64),
                    np.ascontiguousarray(Xc.data))
            return cls(rows, xsq, float(a), float(c0), Xc)
        Xd = np.ascontiguousarray(X, dtype=np.float64)
        xsq = np.einsum("ij,ij->i", Xd, Xd)
        return cls((Xd,), xsq, float(a), float(c0), Xd)


class SequentialState:
    """``B``, ``W``, ``s`` and the shrinking state of a sequential-dual solve (kept across the
    epochs of an MProtSVM search)."""

    def __init__(self, prob: LinearProblem, yp, cls, pcls, C, tol, shrinking, seed_value,
                 row_C=None):
        n = prob.xsq.shape[0]
        P = pcls.shape[0]
        self.prob = prob
        self.yp = np.ascontiguousarray(yp, dtype=np.int64)
        self.cls = np.ascontiguousarray(cls, dtype=np.int64)
        self.pcls = np.ascontiguousarray(pcls, dtype=np.int64)
        self.first, self.count = prototype_groups(self.pcls)
        self.C, self.tol, self.shrinking = float(C), float(tol), bool(shrinking)
        # per-pattern bounds C_i (class / sample weights) or None (every bound is C)
        self.row_C = None if row_C is None else np.ascontiguousarray(row_C, dtype=np.float64)
        self.B = np.zeros((n, P))
        d = prob.X.shape[1]
        self.W = np.zeros((P, d))
        self.s = np.zeros(P)
        self.act = np.empty((n, P), dtype=np.int32)
        self.asz = np.empty(n, dtype=np.int64)
        self.nfull = np.empty(n, dtype=np.int64)
        reset_active(self.yp, self.cls, self.pcls, self.act, self.asz, self.nfull,
                     np.arange(n, dtype=np.int64))
        self.order = np.arange(n, dtype=np.int64)
        self.ctl = np.array([n, max(10.0 * self.tol, 1.0), 1.0])
        self.passes = 0
        self.visited = 0
        self.last = None         # the objective() computed after the last pass, if any
        seed(int(seed_value))

    def run(self, max_passes, stage=False):
        p = self.prob
        C = self.C if self.row_C is None else self.row_C
        k, conv, viol, vis = passes(p.rows, p.xsq, p.a, p.c0, self.yp, self.B, self.W, self.s,
                                    C, self.act, self.asz, self.nfull, self.order, self.ctl,
                                    self.tol, int(max_passes), self.shrinking, bool(stage))
        self.passes += int(k)
        self.visited += int(vis)
        return bool(conv), float(viol)

    def reassign(self, rows, new_yp):
        """Give ``rows`` new positive prototypes: each row's positive coefficient moves to its
        new prototype (the restore of :mod:`dmcsvm.solvers.multiprototype`; ``W``, ``s``
        follow), rebuild their active lists, re-activate every pattern and restart the
        shrinking schedule."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size:
            old = self.yp[rows]
            has = self.B[rows, old] != 0.0
            if has.any():
                r = rows[has]
                dB = lp.move_step(self.B, r, old[has], new_yp[has])
                dW, ds = lp.prototype_step(dB, self.prob.X[r])
                self.W += dW
                self.s += ds
                self.B[r] += dB
            self.yp[rows] = new_yp
            reset_active(self.yp, self.cls, self.pcls, self.act, self.asz, self.nfull, rows)
        n = self.B.shape[0]
        self.asz[:] = self.nfull
        self.ctl[:] = [n, max(10.0 * self.tol, 1.0), 1.0]

    def objective(self):
        """``(xi, primal, dual, ||M||^2)`` of the current state: the slacks (rows x max q) of
        :func:`slacks`, fused with the scores (2.3x faster than a GEMM ``a X W^T + c0 s`` then
        :func:`~dmcsvm.solvers.linear_prototypes.positive_slacks` on letter, n=15000, P=130)."""
        p = self.prob
        xi = np.empty((self.B.shape[0], int(self.count.max())))
        slacks(p.rows, p.a, p.c0, self.W, self.s, self.cls, self.pcls, self.first, self.count, xi)
        rows = np.arange(self.B.shape[0])
        sa = float(self.B[rows, self.yp].sum())
        xi_own = xi[rows, self.yp - self.first[self.cls]]
        slack = self.C * float(xi_own.sum()) if self.row_C is None else float(self.row_C @ xi_own)
        mM = p.a * float(np.sum(self.W * self.W)) + p.c0 * float(self.s @ self.s)
        return xi, 0.5 * mM + slack, sa - 0.5 * mM, mM


def max_passes_of(max_iter) -> int:
    return DEFAULT_MAX_PASSES if int(max_iter) == -1 else int(max_iter)


def solve_fixed(st: SequentialState, max_iter, history=None, stop=None, t0=None, warn=True,
                gap_tol=0.0, gap_every=10):
    """Passes until converged, ``max_iter`` passes, or ``stop(primal)`` is True.

    Converged: a pass over every pattern and prototype saw no KKT violation above ``tol``
    (LIBLINEAR's rule), or, with ``gap_tol > 0``, the relative duality gap is at most
    ``gap_tol`` (checked at the end of every shrinking stage and every ``gap_every`` passes).
    ``stop(primal)`` (MProtSVM: the primal beats the last energy) is checked after the first
    pass and then on a schedule predicted from the primal's descent so far (each check is a
    pass over the rows, as costly as an unshrunk pass): the next check comes when the linear
    extrapolation of the last two checks reaches the target, at most twice the last interval
    later.  Every check writes a row of ``history`` (keys :data:`PASS_KEYS`).  Returns
    ``(converged, stopped)``."""
    t0 = time.perf_counter() if t0 is None else t0
    limit = max_passes_of(max_iter)
    done = 0
    conv = stopped = False
    interval = 1
    prev = None                     # (passes, primal) of the previous stop check
    while done < limit:
        t = time.perf_counter()
        before = st.passes
        k = limit - done
        if stop is not None:
            k = min(k, interval)
        if gap_tol > 0.0:
            k = min(k, gap_every)
        conv, viol = st.run(k, stage=history is not None or gap_tol > 0.0)
        done += st.passes - before
        t_pass = time.perf_counter() - t
        if history is None and stop is None and gap_tol <= 0.0 and not conv and done < limit:
            continue
        t = time.perf_counter()
        st.last = st.objective()
        _, primal, dual, _ = st.last
        gap = (primal - dual) / max(abs(primal), 1e-300)
        if history is not None:
            row = dict(round=st.passes, dual=dual, primal=primal, gap=gap, max_psi=viol,
                       n_active=int(st.ctl[0]),
                       n_active_protos=int(st.asz[st.order[:int(st.ctl[0])]].sum()),
                       n_sv=int(np.count_nonzero(np.any(st.B != 0.0, axis=1))),
                       elapsed=time.perf_counter() - t0, t_pass=t_pass,
                       t_check=time.perf_counter() - t)
            for key in PASS_KEYS:
                history[key].append(row[key])
        if not conv and gap_tol > 0.0 and gap <= gap_tol:
            conv = True
        if conv:
            break
        if stop is not None:
            if stop(primal):
                stopped = True
                break
            if prev is not None and prev[1] > primal:
                rate = (prev[1] - primal) / max(st.passes - prev[0], 1)
                target = getattr(stop, "target", None)
                need = (primal - target) / rate if target is not None else interval
                interval = int(max(1, min(need, 2 * interval)))
            prev = (st.passes, primal)
    if not conv and not stopped and warn:
        warnings.warn(f"dmcsvm linear solver stopped at max_iter={limit} passes before reaching "
                      f"tol={st.tol}", ConvergenceWarning, stacklevel=3)
    return conv, stopped


class Below:
    """``stop`` for :func:`solve_fixed`: the primal is below ``target``."""

    def __init__(self, target):
        self.target = float(target)

    def __call__(self, primal):
        return primal < self.target


def new_history():
    return {k: [] for k in PASS_KEYS}


# --------------------------------------------------------------------------------------------
# estimator hooks
# --------------------------------------------------------------------------------------------

def in_memory(est, td) -> bool:
    """Rows in this process (ndarray / CSR), no cluster, no checkpointing: where the sequential
    method applies.  Dask clusters, dask arrays and zarr stores keep the batched rounds."""
    if getattr(est, "client", None) is not None or getattr(est, "checkpoint", None):
        return False
    return isinstance(td.source, np.ndarray) or sp.issparse(td.source)


def seed_of(random_state) -> int:
    """Seed of the pass order: 0 for ``None`` (a deterministic default), else drawn from
    ``random_state``."""
    if random_state is None:
        return 0
    from sklearn.utils import check_random_state
    return int(check_random_state(random_state).randint(2 ** 31 - 1))


def sequential_applies(est, td, spec) -> bool:
    """MulticlassSVC routes ``kernel='linear'`` on in-memory rows here (``est._linear_path =
    'rounds'`` forces the batched rounds, for comparisons)."""
    if getattr(est, "_linear_path", "auto") == "rounds":
        return False
    return spec.name == "linear" and in_memory(est, td)


def fit_multiclass(est, td, settings, classes, y_idx, row_C=None):
    """Fit :class:`~dmcsvm.MulticlassSVC` with a linear kernel by the sequential dual method and
    fill its fitted attributes as the batched solver does (``n_iter_`` and ``history_`` count
    passes instead of rounds; ``history_`` has a row per pass)."""
    t0 = time.perf_counter()
    m = classes.shape[0]
    pcls = np.arange(m, dtype=np.int64)
    prob = LinearProblem.of(td.source, 1.0, 0.0)
    st = SequentialState(prob, y_idx, y_idx, pcls, settings.C, settings.tol, settings.shrinking,
                         seed_of(est.random_state), row_C=row_C)
    hist = new_history()
    from threadpoolctl import threadpool_limits
    with threadpool_limits(1):      # the checks' small GEMMs: threads cost more than they save
        conv, _ = solve_fixed(st, settings.max_iter, history=hist, t0=t0)
    sv = np.flatnonzero(np.any(st.B != 0.0, axis=1))
    X = td.source
    est.classes_ = classes
    est.support_ = sv
    est.support_vectors_ = X[sv]
    est.dual_coef_ = st.B[sv].copy()
    est.n_support_ = np.bincount(y_idx[sv], minlength=m).astype(np.int32)
    est.n_iter_ = int(st.passes)
    est.converged_ = bool(conv)
    est.history_ = {k: np.asarray(v) for k, v in hist.items()}
    est.engine_stats_ = [{"part": 0, "rows": int(td.n), "active": int(st.ctl[0]),
                          "in_memory": True, "solver": "sequential_dual", "passes": st.passes,
                          "prototypes_visited": int(st.visited), "rows_computed": 0,
                          "rows_cached": 0, "rows_disk": 0}]
    return est
