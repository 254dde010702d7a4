"""Partitions of the multi-prototype SVM (Aiolli & Sperduti 2005): the Crammer-Singer
:class:`Partition` plus what the annealed epochs need, and the explicit-prototype partition of the
linear fast path.

* :class:`PrototypePartition` (any kernel) owns its rows' assignment: the coordinator holds none
  (docs/design.md, 'The coordinator's size').  It adds :meth:`slacks` (its share of the primal's
  slack term and of ``||M||^2``, keeping every row's slacks ``xi_i^s`` over its positive prototypes)
  and :meth:`redraw` (the re-assignment of Eq. 17 drawn from those slacks and kept pending; only the
  rows that have a coefficient to move travel back), and takes a
  :class:`~.messages.PrototypeMessage` whose ``assign`` (the seed of a draw) installs the pending
  draw with the message's update: the ``n x q`` slacks and the n-long assignment never leave the
  partition.
* :class:`LinearPrototypePartition` (kernel ``scale <x, z> + c0``) keeps the prototypes ``W``
  (P x d) and the coefficient sums ``s`` explicitly and scores its rows by
  ``F = scale X W^T + c0 s`` (docs/design.md,
  'MProtSVM': the fast path): a batch message (:class:`~.messages.LinearMessage`) carries ``dW =
  dB^T X_B`` and ``ds`` instead of the batch's X rows, and no kernel row is ever computed.
  :class:`LinearMessages` wraps an executor so that the coordinator's batch messages are encoded
  that way before they are sent.

Both run unchanged on the in-process and the Dask executors (``partition_cls=``).
"""

from __future__ import annotations

import time
from dataclasses import fields, replace

import numpy as np
import scipy.sparse as sp

from ..numerics import linear_prototypes as lp
from .messages import LinearMessage, RoundMessage
from .partition import Partition, PartitionSettings


def prototype_groups(pcls) -> tuple[np.ndarray, np.ndarray]:
    """``(first, count)`` of prototypes grouped by class: class ``c`` owns prototypes
    ``first[c] .. first[c] + count[c] - 1``.  ``pcls`` must be sorted (grouped by class)."""
    pcls = np.asarray(pcls, dtype=np.int64)
    if pcls.shape[0] and np.any(np.diff(pcls) < 0):
        raise ValueError("prototypes must be grouped by class (pcls sorted)")
    m = int(pcls.max()) + 1 if pcls.shape[0] else 0
    count = np.bincount(pcls, minlength=m).astype(np.int64)
    first = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
    return first, count


class PrototypePartition(Partition):
    """A :class:`Partition` whose rows can be re-assigned to other positive prototypes.

    Same constructor as :class:`Partition`; ``settings.pcls`` lists the class of every prototype,
    grouped by class.
    """

    def __init__(self, part_id, lo, hi, X, yp, cls, settings: PartitionSettings):
        if hasattr(yp, "draw"):
            # a RandomAssignment (coordinators.multiprototype): this partition draws its rows'
            # initial prototypes from their classes
            cls = np.asarray(cls, dtype=np.int64)
            yp = yp.draw(cls)
        super().__init__(part_id, lo, hi, X, yp, cls, settings)
        # this partition owns its rows' assignment and changes it in place: never a view of
        # the caller's array
        self.yp = self.yp.copy()
        self.first, self.count = prototype_groups(self.pcls)
        self._xi = None  # the slacks of the last `slacks` call, read by `redraw`
        self._pending = None  # (seed, rows, new prototypes) of the last `redraw`

    def _assign(self, seed) -> None:
        """Install the pending draw of :meth:`redraw` ``seed``.  The coordinator has moved the
        coefficients of every re-assigned row that had any to its new prototype (AS 2005 §6.1,
        module docstring of :mod:`dmcsvm.coordinators.multiprototype`) in the same message, so
        ``B`` stays feasible.  A partition rebuilt since the draw has none pending: its
        assignment was derived from the coefficients that already moved (:meth:`restore`)."""
        pending, self._pending = self._pending, None
        if pending is not None and pending[0] == int(seed):
            self.yp[pending[1]] = pending[2]

    def step(self, msg: RoundMessage):
        """One round (see :meth:`Partition.step`) with the ``assign`` of a
        :class:`~.messages.PrototypeMessage` (a plain round message assigns nothing).  The
        assignment does not enter the score update ``F += K dB``, so installing it first is the
        same as installing it after the update; the reply sees the new assignment."""
        assign = getattr(msg, "assign", None)
        if assign is not None:
            self._assign(assign)
        return super().step(msg)

    def assignment(self) -> np.ndarray:
        """This partition's rows' positive prototypes (the fit's ``assignment_`` at its end)."""
        return self.yp.copy()

    def _refresh_all(self, sv) -> None:
        """Make every row's score current (scores of shrunk rows are stale) via the core's
        unshrink from the support patterns ``sv = {"ids", "X", "B"}``."""
        if self.active.shape[0] < self.F.shape[0]:
            self._unshrink(sv)

    def slacks(self, sv=None) -> dict:
        """This partition's share of the primal at the current assignment, keeping every row's
        slacks over its positive prototypes for :meth:`redraw`.

        Parameters
        ----------
        sv : dict or None
            Support patterns ``{"ids", "X", "B"}`` to rebuild the scores of shrunk rows from
            (needed only when some rows are shrunk).

        Returns
        -------
        dict
            ``slack`` (``sum_i C_i xi_i`` over the rows, ``xi_i`` the slack w.r.t. the assigned
            prototype), ``sum_BF`` (``sum B * F`` over the rows) and ``sum_alpha``
            (``sum_i alpha_i^{y_i}``).
        """
        self._refresh_all(sv)
        qmax = int(self.count.max())
        n = self.F.shape[0]
        xi = np.empty((n, qmax))
        lp.positive_slacks(self.F, self.cls, self.pcls, self.first, self.count, xi)
        self._xi = xi
        return {
            "slack": self._slack_sum(self.yp - self.first[self.cls]),
            "sum_BF": float(np.sum(self.B * self.F)),
            "sum_alpha": float(self.B[np.arange(n), self.yp].sum()),
        }

    def _slack_sum(self, slot) -> float:
        """``C sum_i xi_i^{slot_i}`` (``sum_i C_i ...`` with per-row bounds) on the kept slacks."""
        return lp.slack_term(self._xi[np.arange(slot.shape[0]), slot], self.s.C, self.Crow)

    def redraw(self, seed: int, T: float) -> dict:
        """The re-assignment of AS 2005 Eq. 17 at temperature ``T`` from the slacks of the last
        :meth:`slacks` call (computed now if this partition has none, e.g. rebuilt after a lost
        worker), with this partition's slice of the epoch's uniforms
        (:func:`~dmcsvm.numerics.linear_prototypes.epoch_uniforms`).  The assignment itself is
        not installed (the coordinator sends it with the next round's message).

        Returns
        -------
        dict
            ``n_changed`` (rows whose prototype changes), ``moved`` (those of them with a
            coefficient to move, ``alpha_i^{y_i} != 0``: ``{"ids": global ids, "old": their
            prototypes, "new": their new ones}``) and ``slack`` (this partition's slack term at
            the new assignment).  The draw is kept until a message's ``assign`` names ``seed``.
        """
        if self._xi is None:
            # a partition rebuilt on another worker since the coordinator's `slacks` call (its
            # scores are whole again, and nothing has changed them since): the same slacks
            self.slacks()
        slot = self.yp - self.first[self.cls]
        new_slot, slack = lp.redraw_slots(self._xi, slot, seed, self.lo, T, self.s.C, self.Crow)
        changed = np.flatnonzero(new_slot != slot)
        new = self.first[self.cls[changed]] + new_slot[changed]
        self._pending = (int(seed), changed, new)
        has = lp.has_coefficients(self.B, changed, self.yp)
        return {
            "n_changed": int(changed.shape[0]),
            "moved": {"ids": changed[has] + self.lo, "old": self.yp[changed[has]], "new": new[has]},
            "slack": slack,
        }

    def restore(self, snapshot: dict) -> bool:
        """:meth:`Partition.restore`, then the assignment, which the coordinator does not hold:
        a row with coefficients keeps the prototype they name (its only positive one,
        ``alpha_i^{y_i} > 0``), a row without takes the prototype of its class that scores it
        best (least slack: Eq. 17's draw at ``T = 0``).  Any prototype of its class is
        admissible for a row without coefficients (Eq. 11), so the search goes on from a
        feasible state; it is not, bit for bit, the path the lost partition would have taken."""
        super().restore(snapshot)
        self._pending = None
        n = self.F.shape[0]
        xi = np.empty((n, int(self.count.max())))
        lp.positive_slacks(self.F, self.cls, self.pcls, self.first, self.count, xi)
        yp = self.first[self.cls] + np.argmin(xi, axis=1)
        has = np.any(self.B != 0.0, axis=1)
        yp[has] = np.argmax(self.B[has], axis=1)
        self.yp = yp
        self._xi = None
        return True


class LinearPrototypePartition(PrototypePartition):
    """Multi-prototype partition for a linear kernel ``scale <x, z> + c0``: explicit prototypes.

    Keeps ``W = B^T X`` (P x d, every pattern's contribution, the same on every partition) and
    ``sB = B^T 1``; a batch message with ``ids, dB, dW, ds`` (see :func:`encode_linear`)
    updates them and the scores of the active rows are recomputed as ``scale X W^T + c0 sB``.
    """

    def __init__(self, part_id, lo, hi, X, yp, cls, settings: PartitionSettings):
        super().__init__(part_id, lo, hi, X, yp, cls, settings)
        ac = lp.linear_coefficients(self.spec)
        if ac is None:
            raise ValueError(
                f"LinearPrototypePartition needs a linear kernel ('linear' or 'poly' "
                f"of degree 1), got {self.spec}"
            )
        self.scale, self.c0 = ac  # the kernel is scale <x, z> + c0
        Xl = getattr(self, "X", None)
        if Xl is None:  # rows streamed from a store: the W path keeps them in memory
            Xl = (
                sp.vstack([c for _, _, c in self.data.chunks()], format="csr")
                if self.data.sparse
                else np.concatenate([c for _, _, c in self.data.chunks()])
            )
        # float64 rows (the GEMM then runs in double without a per-round conversion)
        self.XL = Xl.astype(np.float64) if Xl.dtype != np.float64 else Xl
        P = self.pcls.shape[0]
        self.W = np.zeros((P, Xl.shape[1]))
        self.sB = np.zeros(P)
        self._XA = None  # X rows of the active set, rebuilt when the active set changes
        self._XA_of = None

    def _active_rows(self):
        """X rows of the active set (the partition's own rows when nothing is shrunk)."""
        if self.active.shape[0] == self.F.shape[0]:
            return self.XL
        if self._XA_of is not self.active:
            self._XA = (
                self.XL[self.active]
                if sp.issparse(self.XL)
                else np.ascontiguousarray(self.XL[self.active])
            )
            self._XA_of = self.active
        return self._XA

    def _score_rows(self, rows) -> None:
        """``F[rows] = scale X[rows] W^T + c0 sB`` (the active rows when ``rows`` is None)."""
        if rows is None:
            if self.active.shape[0] == self.F.shape[0]:
                lp.linear_scores(self.XL, self.W, self.sB, self.scale, self.c0, out=self.F)
            else:
                self.F[self.active] = lp.linear_scores(
                    self._active_rows(), self.W, self.sB, self.scale, self.c0
                )
        else:
            Xr = self.XL[rows] if sp.issparse(self.XL) else np.ascontiguousarray(self.XL[rows])
            self.F[rows] = lp.linear_scores(Xr, self.W, self.sB, self.scale, self.c0)

    def step(self, msg: LinearMessage):
        """One round: apply ``dW``/``ds`` (and the partition's own ``dB`` rows), rescore the active
        rows, then the Crammer-Singer reply (selection, aggregates, shrinking)."""
        t0 = time.perf_counter()
        if getattr(msg, "dW", None) is not None:
            ids, dB = msg.ids, msg.dB
            self.W += msg.dW
            self.sB += msg.ds
            own = (ids >= self.lo) & (ids < self.hi)
            if own.any():
                self.B[ids[own] - self.lo] += dB[own]
                self.shipped[ids[own] - self.lo] = True  # the coordinator now holds their X
            if msg.reship:
                self.reship(ids)
            self._score_rows(None)
            msg = replace(msg, ids=None, dB=None, dW=None, ds=None, XB=None, reship=False)
        t_update = time.perf_counter() - t0
        reply = super().step(msg)
        reply.t_update += t_update
        reply.t_total += t_update
        return reply

    def _unshrink(self, sv) -> float:
        """Scores of the shrunk rows from ``W`` (no support patterns needed), all rows active."""
        t = time.perf_counter()
        n = self.F.shape[0]
        if self.active.shape[0] < n:
            mask = np.ones(n, dtype=bool)
            mask[self.active] = False
            self._score_rows(np.flatnonzero(mask))
            self.active = np.arange(n, dtype=np.int64)
            self._X_active = None
            self._drop_compact()
            self.calm[:] = 0
        return time.perf_counter() - t

    def prototypes(self) -> tuple[np.ndarray, np.ndarray]:
        """This partition's ``(W, sB)`` (identical on every partition)."""
        return self.W.copy(), self.sB.copy()

    def _restore_extra(self, ids, Xsv, Bsv) -> None:
        """Recovery (:meth:`Partition.restore`): ``W = B_SV^T X_SV``, ``sB = B_SV^T 1`` (equal to
        the other partitions' accumulated ``W`` up to rounding); the restore's unshrink then
        scores every row from them."""
        P = self.pcls.shape[0]
        if ids.shape[0]:
            W, sB = lp.prototype_step(np.ascontiguousarray(Bsv, dtype=np.float64), Xsv)
            self.W = np.array(W, dtype=np.float64).reshape(P, -1)
            self.sB = np.array(sB, dtype=np.float64).reshape(P)
        else:
            self.W = np.zeros((P, self.XL.shape[1]))
            self.sB = np.zeros(P)
        self._XA = None
        self._XA_of = None


def encode_linear(msg: RoundMessage) -> LinearMessage:
    """The linear partitions' form of a coordinator message: ``dW = dB^T X_B``, ``ds = dB^T 1`` in
    place of the batch's X rows; an unshrink loses its support-pattern payload (the partitions
    rebuild from W)."""
    out = LinearMessage(**{f.name: getattr(msg, f.name) for f in fields(msg)})
    XB, out.XB = out.XB, None
    if out.ids is not None and len(out.ids):
        out.dW, out.ds = lp.prototype_step(np.asarray(out.dB, dtype=np.float64), XB)
    if out.unshrink is not None:
        out.unshrink = {}
    return out


class LinearMessages:
    """An executor seen through :func:`encode_linear`: ``step`` encodes the message, everything
    else is the wrapped executor's."""

    def __init__(self, executor):
        self.executor = executor

    def step(self, msg: RoundMessage) -> list:
        return self.executor.step(encode_linear(msg))

    def __getattr__(self, name):
        return getattr(self.executor, name)
