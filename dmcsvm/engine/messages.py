"""Typed round messages and replies of the partitions, each reply field with its merge rule.

A round is one message from the coordinator to every partition and one reply back from each
(docs/design.md, 'Architecture').  Every reply field declares in its metadata how the partitions'
values combine (:data:`CONCAT`, :data:`SUM`, :data:`MAX`, :data:`MIN`, :data:`FIRST`, :data:`LIST`),
so one :func:`merge` serves every partition kind and both executors.  :func:`pack_message` /
:func:`unpack_message` give a message its compact wire form for the Dask actor path.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar, cast

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from .row_packing import PackedRows, pack_rows, unpack_rows

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

#: metadata key of a reply field's merge rule
MERGE = "merge"
#: metadata key of a message field that a rebuilt partition keeps when it answers the round it
#: was lost in (its state comes from the coordinator's snapshot, which holds the round's update)
REPORT_ONLY = "report_only"

#: X rows: dense (float32 or float64) or CSR
Rows: TypeAlias = NDArray[np.floating[Any]] | sp.csr_matrix

CONCAT = "concatenate"  # candidate arrays: partition after partition (CSR rows stacked)
SUM = "sum"  # aggregates and counters: Python sum in partition order
MAX = "max"  # extremes and wall times (arrays: element by element)
MIN = "min"
FIRST = "first"  # the same on every partition
LIST = "list"  # one value per partition, in partition order

#: a reply of either partition kind
ReplyT = TypeVar("ReplyT", "CSReply", "GradientReply")


def _rule(rule: str, default: object = None) -> Any:
    return field(default=default, metadata={MERGE: rule})


def _concat(values: Sequence[NDArray[Any] | sp.csr_matrix]) -> NDArray[Any] | sp.csr_matrix:
    if sp.issparse(values[0]):
        return sp.vstack(values).tocsr()
    return np.concatenate(values)


def _extreme(
    values: Sequence[Any],
    scalar: Callable[[Sequence[Any]], Any],
    array: Callable[..., NDArray[Any]],
) -> Any:
    if isinstance(values[0], np.ndarray):
        return array(np.stack(values), axis=0)
    return scalar(values)


_MERGERS: dict[str, Callable[[list[Any]], Any]] = {
    CONCAT: _concat,
    SUM: sum,
    MAX: lambda v: _extreme(v, max, np.max),
    MIN: lambda v: _extreme(v, min, np.min),
    FIRST: lambda v: v[0],
    LIST: list,
}


#: reply type -> ((field name, merger), ...): read once per type
_RULES: dict[type[Reply], tuple[tuple[str, Callable[[list[Any]], Any]], ...]] = {}


def merge(replies: Sequence[ReplyT]) -> ReplyT:
    """One reply of the same type from the partitions' replies (in partition order), each field
    combined by its declared rule; a field that a partition kind leaves None stays None."""
    first = replies[0]
    kind = type(first)
    rules = _RULES.get(kind)
    if rules is None:
        rules = _RULES[kind] = tuple((f.name, _MERGERS[f.metadata[MERGE]]) for f in fields(kind))
    out: dict[str, Any] = {}
    for name, combine in rules:
        values = [getattr(r, name) for r in replies]
        out[name] = None if values[0] is None else combine(values)
    return kind(**out)


# ------------------------------------------------------------------------------ replies
@dataclass(kw_only=True)
class Reply:
    """What every partition kind reports: who answered, column-cache counters, timings."""

    part: int = _rule(LIST, 0)
    rows_computed: int = _rule(SUM, 0)  # kernel columns computed / found cached, so far
    rows_cached: int = _rule(SUM, 0)
    t_kernel: float = _rule(MAX, 0.0)  # seconds of the round: kernel blocks, score update,
    t_update: float = _rule(MAX, 0.0)  # selection and all of it (the slowest partition)
    t_select: float = _rule(MAX, 0.0)
    t_total: float = _rule(MAX, 0.0)


@dataclass(kw_only=True)
class CSReply(Reply):
    """A Crammer-Singer partition's candidates (``cand_*``, by selection value then the rows
    about to violate) and its aggregates.  ``cand_X`` holds the X rows of the candidates marked
    ``cand_new`` only (the coordinator banks the others)."""

    cand_ids: NDArray[np.int64] = _rule(CONCAT)
    cand_V: NDArray[np.float64] = _rule(CONCAT)
    cand_psi: NDArray[np.float64] = _rule(CONCAT)
    cand_F: NDArray[np.float64] = _rule(CONCAT)
    cand_X: Rows | PackedRows = _rule(CONCAT)
    cand_new: NDArray[np.bool_] = _rule(CONCAT)
    cand_kdiag: NDArray[np.float64] = _rule(CONCAT)
    cand_yp: NDArray[np.int64] = _rule(CONCAT)
    cand_cls: NDArray[np.int64] = _rule(CONCAT)
    cand_C: NDArray[np.float64] | None = _rule(CONCAT)  # per-row bounds (weighted patterns only)
    max_V: float = _rule(MAX, 0.0)
    sum_V: float = _rule(SUM, 0.0)
    max_psi: float = _rule(MAX, 0.0)
    n_viol: int = _rule(SUM, 0)
    n_active: int = _rule(SUM, 0)
    n_rows: int = _rule(SUM, 0)
    sum_alpha: float = _rule(SUM, 0.0)
    sum_BF: float = _rule(SUM, 0.0)
    sum_xi: float = _rule(SUM, 0.0)
    sum_Cxi: float | None = _rule(SUM)  # sum_i C_i xi_i (weighted patterns only)
    rows_disk: int = _rule(SUM, 0)

    def cand_xrow(self) -> NDArray[np.int64]:
        """Row of every candidate in ``cand_X`` (-1: the coordinator's bank holds it)."""
        new = self.cand_new
        xrow = np.full(new.shape[0], -1, dtype=np.int64)
        xrow[new] = np.arange(int(np.count_nonzero(new)))
        return xrow


@dataclass(kw_only=True)
class GradientReply(Reply):
    """An SMO partition's working-set candidates per group (the ``k`` best of ``I_up`` and of
    ``I_low``, with gradient, sign, group and X row) and the per-group extremes."""

    cand_ids: NDArray[np.int64] = _rule(CONCAT)
    cand_g: NDArray[np.float64] = _rule(CONCAT)
    cand_vup: NDArray[np.float64] = _rule(CONCAT)
    cand_vlow: NDArray[np.float64] = _rule(CONCAT)
    cand_grp: NDArray[np.int64] = _rule(CONCAT)
    cand_y: NDArray[np.float64] = _rule(CONCAT)
    cand_X: Rows | PackedRows = _rule(CONCAT)
    cand_U: NDArray[np.float64] | None = _rule(CONCAT)  # per-row bounds (weighted patterns only)
    gmax: NDArray[np.float64] = _rule(MAX)  # per group: max over I_up of -y g
    gmin: NDArray[np.float64] = _rule(MIN)  # per group: min over I_low of -y g
    obj2: float = _rule(SUM, 0.0)  # twice the dual objective


# ------------------------------------------------------------------------------ messages
@dataclass(kw_only=True)
class RoundMessage:
    """The Crammer-Singer round: the batch ``ids`` with its X rows ``XB`` and update ``dB``
    (``F += K(X, X_B) dB``), the shrinking margin, an optional unshrink (the support patterns
    ``{"ids", "X", "B"}`` to rebuild shrunk rows from), an optional ``settle`` (rows' coefficients
    and scores to take as they are), optional ``scores`` (the working set's scores after the
    solve, taken in place of ``F += K dB`` on those rows), ``reship`` (the coordinator pruned its
    row bank to the support and this batch) and then ``bank_ids``, the ids its bank kept (the
    Dask workers' banks keep the same rows)."""

    ids: NDArray[np.int64] | None = None
    XB: Rows | None = None
    dB: NDArray[np.float64] | None = None
    shrink_margin: float = field(default=np.inf, metadata={REPORT_ONLY: True})
    unshrink: dict[str, Any] | None = None
    reship: bool = False
    bank_ids: NDArray[np.int64] | None = None
    # the result of rounds run in the coordinator's Gram block (coordinators.whole_block):
    # {"ids", "B", "F", "shipped"}, every row's coefficients and scores, the rows it banked
    settle: dict[str, Any] | None = None
    # {"ids", "F"}: the scores of the working set's rows after the coordinator's solve (every
    # batch step applied, moved rows or not).  A partition takes its rows' scores as they are and
    # computes the batch's kernel columns over its other active rows only: the coordinator's
    # solve has already added K(x_i, X_B) dB to every working-set row i
    scores: dict[str, Any] | None = None
    # (b, tol) or (b, tol, n_classes): the coordinator picks at most b candidates, violators
    # (psi > tol) first, every class's share with n_classes > 1; a worker sends only those it
    # can still pick (prune_candidates)
    pick: tuple[int, float] | tuple[int, float, int] | None = field(
        default=None, metadata={REPORT_ONLY: True}
    )


@dataclass(kw_only=True)
class PrototypeMessage(RoundMessage):
    """A multi-prototype round: optionally ``assign``, the seed of the re-assignment every
    partition drew and keeps pending (``PrototypePartition.redraw``), installed before the
    reply."""

    assign: int | None = None


@dataclass(kw_only=True)
class LinearMessage(PrototypeMessage):
    """A multi-prototype round on explicit prototypes: ``dW = dB^T X_B`` and ``ds = dB^T 1`` in
    place of the batch's X rows (``XB`` is None)."""

    dW: NDArray[np.float64] | None = None
    ds: NDArray[np.float64] | None = None


@dataclass(kw_only=True)
class GradientMessage:
    """An SMO round: ``alpha[ids] = a_new`` with ``da`` the change, the batch's X rows, signs
    ``yB`` and groups ``grpB``."""

    ids: NDArray[np.int64] | None = None
    XB: Rows | None = None
    da: NDArray[np.float64] | None = None
    a_new: NDArray[np.float64] | None = None
    yB: NDArray[np.float64] | None = None
    grpB: NDArray[np.int64] | None = None


#: a round message of either family
Message: TypeAlias = RoundMessage | GradientMessage
MessageT = TypeVar("MessageT", bound=Message)

MESSAGE_TYPES: dict[str, type[Message]] = {
    c.__name__: c for c in (RoundMessage, PrototypeMessage, LinearMessage, GradientMessage)
}


def has_batch(msg: Message) -> bool:
    """Whether ``msg`` carries a non-empty batch."""
    return msg.ids is not None and len(msg.ids) > 0


def report_only(msg: MessageT) -> MessageT:
    """The part of ``msg`` a partition rebuilt from the coordinator's snapshot still applies when
    it answers the round it was lost in (fields marked :data:`REPORT_ONLY`)."""
    return type(msg)(
        **{f.name: getattr(msg, f.name) for f in fields(msg) if f.metadata.get(REPORT_ONLY)}
    )


def _set_fields(msg: Message) -> dict[str, Any]:
    """The fields of ``msg`` worth sending: not None and, for flags and numbers, not at their
    default (the receiver's dataclass fills those in)."""
    out = {}
    for f in fields(msg):
        v = getattr(msg, f.name)
        if v is None or (
            isinstance(f.default, (bool, float))
            and not isinstance(v, np.ndarray)
            and v == f.default
        ):
            continue
        out[f.name] = v
    return out


def banked_batch(msg: Message) -> bool:
    """Whether a receiver banks ``msg``'s batch rows: a Crammer-Singer-family message with dense
    X rows (the SMO coordinators keep no bank for the workers to follow)."""
    return isinstance(msg, RoundMessage) and has_batch(msg) and isinstance(msg.XB, np.ndarray)


class HeldIds:
    """The ids whose X rows every receiver banks, as the sender sees them: each receiver keeps a
    message's ``bank_ids`` (when set) and then adds its banked batch rows
    (``WorkerGroup._bank_rows``); :meth:`applied` follows the same two steps."""

    def __init__(self) -> None:
        self.ids: set[int] = set()

    def rows(self, msg: Message) -> NDArray[np.bool_] | None:
        """Which batch rows of ``msg`` every receiver holds: a boolean mask over ``msg.ids`` for
        :func:`pack_message`, or None when none can be left out."""
        if not self.ids or not banked_batch(msg):
            return None
        assert msg.ids is not None  # (a banked batch)
        held = self.ids
        return np.fromiter((int(g) in held for g in msg.ids), dtype=bool, count=len(msg.ids))

    def applied(self, msg: Message) -> None:
        """Every receiver applied ``msg``."""
        if not isinstance(msg, RoundMessage):
            return
        if msg.bank_ids is not None:
            self.ids.intersection_update(msg.bank_ids.tolist())
        if banked_batch(msg):
            assert msg.ids is not None  # (a banked batch)
            self.ids.update(msg.ids.tolist())

    def clear(self) -> None:
        self.ids.clear()


def pack_message(msg: Message, have: NDArray[np.bool_] | None = None) -> bytes:
    """One round's message as one pickle blob of plain values (numpy arrays, its type's name),
    with ``dB`` sent as its nonzeros when that is smaller: a pattern's update touches only the few
    prototypes its sub-problem moved (about 3 of 26 on letter), so the dense ``|B| x P`` block is
    mostly zeros.  :func:`unpack_message` gives back the same values bit for bit (a signed zero
    comes back as +0.0, which adds the same).

    ``have``: which batch rows every receiver holds in its bank (:meth:`HeldIds.rows`); those rows
    of ``XB`` are left out (``XB_held``: their positions), the receiver takes them from its
    bank.  A batch is mostly support patterns that were in earlier batches, and ``XB`` is most
    of a round's message on wide data (MNIST-sized: 3.1 MB of X rows against ~0.1 MB of the
    rest, sent down every level of the tree; benchmarks/results/scaling.md).  The X rows sent
    (``XB``, an unshrink's ``X``) travel as their nonzeros when that is smaller
    (:func:`~dmcsvm.engine.row_packing.pack_rows`, bit for bit)."""
    wire = _set_fields(msg)
    wire["kind"] = type(msg).__name__
    dB = wire.get("dB")
    if isinstance(dB, np.ndarray) and dB.ndim == 2 and dB.size and dB.dtype == np.float64:
        flat = dB.reshape(-1)
        at = np.flatnonzero(flat != 0.0)  # ~10x faster than flatnonzero on the floats
        # a stored nonzero costs 12 bytes (float64 + int32 position) against 8 per dense entry
        if 12 * at.shape[0] < dB.nbytes:
            del wire["dB"]
            pos = at.astype(np.int32) if dB.size < 2**31 else at
            wire["dB_nonzero"] = (dB.shape, pos, flat[at])
    if have is not None and have.any():
        assert msg.XB is not None  # (have marks rows of a banked batch)
        wire["XB"] = msg.XB[~have]
        wire["XB_held"] = np.flatnonzero(have).astype(np.int32)
    if "XB" in wire:
        wire["XB"] = pack_rows(wire["XB"])
    if wire.get("unshrink") is not None and "X" in wire["unshrink"]:
        wire["unshrink"] = dict(wire["unshrink"], X=pack_rows(wire["unshrink"]["X"]))
    return pickle.dumps(wire, protocol=pickle.HIGHEST_PROTOCOL)


class RowSource(Protocol):
    """What :func:`unpack_message` asks of a receiver's bank (a
    :class:`~dmcsvm.engine.row_bank.RowBank`): a batch's X rows, sent or banked."""

    def batch(
        self,
        ids: NDArray[np.int64],
        xrow: NDArray[np.int64],
        Xnew: Rows,
        d: int,
        sparse: bool,
        dtype: DTypeLike,
    ) -> Rows: ...


def unpack_message(blob: bytes, bank: RowSource | None = None, rows: bool = True) -> Message:
    """The message :func:`pack_message` packed, with ``dB`` dense again and the ``XB`` rows it
    left out taken from ``bank`` (a :class:`~dmcsvm.engine.row_bank.RowBank`).  ``rows=False``:
    those rows are not needed (a partition rebuilt from the coordinator's state applies only
    the report-only fields); ``XB`` is then None."""
    wire = pickle.loads(blob)
    if isinstance(wire.get("XB"), PackedRows) and (rows or "XB_held" not in wire):
        wire["XB"] = unpack_rows(wire["XB"])
    if wire.get("unshrink") is not None and isinstance(wire["unshrink"].get("X"), PackedRows):
        wire["unshrink"] = dict(wire["unshrink"], X=unpack_rows(wire["unshrink"]["X"]))
    if "dB_nonzero" in wire:
        shape, at, val = wire.pop("dB_nonzero")
        dB = np.zeros(shape)
        dB.reshape(-1)[at] = val
        wire["dB"] = dB
    if "XB_held" in wire:
        at, sent = wire.pop("XB_held"), wire.pop("XB")
        if rows:
            if bank is None:
                raise RuntimeError(
                    "a round message left out X rows that this receiver has no bank for"
                )
            # row xrow[j] of the rows sent, or the banked row where xrow[j] = -1
            xrow = np.full(len(wire["ids"]), -1, dtype=np.int64)
            xrow[np.setdiff1d(np.arange(xrow.shape[0]), at)] = np.arange(sent.shape[0])
            wire["XB"] = bank.batch(wire["ids"], xrow, sent, sent.shape[1], False, sent.dtype)
    return MESSAGE_TYPES[wire.pop("kind")](**wire)


def pack_reply_rows(replies: Iterable[tuple[int, ReplyT]]) -> list[tuple[int, ReplyT]]:
    """``replies`` (``[(partition, reply)]``) with each reply's candidate X rows (``cand_X``) in
    their wire form (:func:`~dmcsvm.engine.row_packing.pack_rows`): a worker's reply carries the
    X rows of its new candidates, up every level of the tree."""
    out = []
    for k, r in replies:
        X = getattr(r, "cand_X", None)
        packed = pack_rows(X)
        out.append((k, r if packed is X else replace(r, cand_X=packed)))
    return out


def unpack_reply_rows(reply: ReplyT) -> ReplyT:
    """``reply`` with its ``cand_X`` dense again (after :func:`pack_reply_rows`)."""
    X = getattr(reply, "cand_X", None)
    return replace(reply, cand_X=unpack_rows(X)) if isinstance(X, PackedRows) else reply


def class_ranks(cls: NDArray[np.int64], n_classes: int) -> NDArray[np.int64]:
    """Each entry's rank among the entries of its class ``cls`` (0 for the first of its class,
    in the given order)."""
    cls = np.asarray(cls, dtype=np.int64)
    by = np.argsort(cls, kind="stable")
    counts = np.bincount(cls, minlength=n_classes)
    rank = np.empty(cls.shape[0], dtype=np.int64)
    rank[by] = np.arange(cls.shape[0]) - np.repeat(np.cumsum(counts) - counts, counts)
    return rank


def class_quota(
    V: NDArray[np.float64], cls: NDArray[np.int64], b: int, n_classes: int
) -> NDArray[np.intp]:
    """Positions of the best ``b // n_classes`` entries of each class by decreasing ``V`` (ties in
    entry order), in decreasing ``V``: the share of a working set that :func:`pick_order` keeps
    for every class (a partition reports them beside its overall best)."""
    order = np.argsort(-V, kind="stable")
    return order[class_ranks(np.asarray(cls)[order], n_classes) < b // max(n_classes, 1)]


def pick_order(
    V: NDArray[np.float64],
    psi: NDArray[np.float64],
    b: int,
    tol: float,
    theta: float | None = None,
    cls: NDArray[np.int64] | None = None,
    n_classes: int = 0,
) -> NDArray[np.intp]:
    """Positions of the candidates (selection values ``V``, KKT violations ``psi``) a batch of at
    most ``b`` takes: the violators (``psi > tol``) by decreasing ``V``, ties in candidate order;
    with ``theta`` (a one-pass batch) only those with ``V >= theta`` (all of them when none is),
    without (a working set solved by re-selection) the room left filled with the rows closest to
    violating, by decreasing ``psi``.

    With the candidates' classes ``cls`` (``n_classes > 1``) a working set with more violators
    than room keeps the best ``b // n_classes`` violators of every class and fills the rest by
    ``V``, still in decreasing ``V``.  A working set of the best by ``V`` alone can be mostly one
    class: its solve then settles that class's rows by moving the prototypes' common kernel
    component (the implicit class offsets of a wide RBF), which pushes the rows of the classes left
    out into violation, and the next round moves it back a little: deformed digits at 50,000 rows
    spent 1,000 rounds of a few dozen steps with 30,000 violators (one class 38 % of every batch).
    The coordinator picks by it (:func:`~dmcsvm.coordinators.crammer_singer.pick_candidates`) and
    a worker prunes by it (:func:`prune_candidates`)."""
    viol = psi > tol
    order = np.argsort(-V, kind="stable")
    order = order[viol[order]]
    if theta is not None:
        elig = order[V[order] >= theta]
        return (elig if elig.shape[0] else order)[:b]
    if cls is not None and n_classes > 1 and order.shape[0] > b:
        first = class_ranks(np.asarray(cls)[order], n_classes) < b // n_classes
        room = b - int(np.count_nonzero(first))
        # the best of the rest by V (their order in ``order``) fill the room
        first[np.flatnonzero(~first)[:room]] = True
        return order[first]
    pick = order[:b]
    if pick.shape[0] < b:
        near = np.flatnonzero(~viol)
        near = near[np.argsort(-psi[near], kind="stable")]
        pick = np.concatenate([pick, near[: b - pick.shape[0]]])
    return pick


def prune_candidates(
    replies: Sequence[tuple[int, Reply]],
    keep: tuple[int, float] | tuple[int, float, int] | None,
) -> Sequence[tuple[int, Reply]]:
    """``replies`` (a list of ``(partition, reply)`` in partition order) with their candidates cut
    to those the coordinator can still pick from them, aggregates untouched.

    ``keep = (b, tol)`` or ``(b, tol, n_classes)`` (a round message's ``pick``; a number of
    classes > 1: the working set keeps every class's share) for Crammer-Singer replies (None:
    unchanged).  The coordinator's batch (:func:`pick_order`) takes violators by decreasing
    ``V`` and, in a working set, the rows nearest to violating; any candidate it picks from the
    union of several groups' lists is among what :func:`pick_order` would take, with no
    threshold, from its own group's list alone.  So keeping exactly that per group leaves every
    pick, and every aggregate, as it was.  A kept candidate's X row stays with it (``cand_X``
    holds the rows of the ``cand_new`` candidates, in order)."""
    if keep is None or not replies or not isinstance(replies[0][1], CSReply):
        return replies
    # (a round's replies come from partitions of one kind: all CSReply, as the first)
    replies = cast("Sequence[tuple[int, CSReply]]", replies)
    b, tol = int(keep[0]), float(keep[1])
    n_classes = int(keep[2]) if len(keep) == 3 else 0
    V = np.concatenate([r.cand_V for _, r in replies])
    if V.shape[0] <= b:
        return replies
    psi = np.concatenate([r.cand_psi for _, r in replies])
    mask = np.zeros(V.shape[0], dtype=bool)
    mask[pick_order(V, psi, b, tol)] = True
    if n_classes > 1:
        # a class's best violators of the union are among its best in this group's list, and a
        # row that fills the room is among the group's b best by V (at most b - 1 violators of
        # the union precede it by V): this group's pick with quotas and without covers both
        cls = np.concatenate([r.cand_cls for _, r in replies])
        mask[pick_order(V, psi, b, tol, cls=cls, n_classes=n_classes)] = True
    out, at = [], 0
    for k, r in replies:
        m = mask[at : at + r.cand_V.shape[0]]
        at += r.cand_V.shape[0]
        out.append((k, r if m.all() else _take_candidates(r, m)))
    return out


def _take_candidates(reply: CSReply, m: NDArray[np.bool_]) -> CSReply:
    """``reply`` with only the candidates ``m`` marks (every CONCAT field)."""
    upd = {}
    for f in fields(reply):
        v = getattr(reply, f.name)
        if v is None or f.metadata[MERGE] != CONCAT:
            continue
        if f.name == "cand_X":
            rows = np.flatnonzero(m[reply.cand_new])
            upd[f.name] = v[rows]
        else:
            upd[f.name] = v[m]
    return replace(reply, **upd)
