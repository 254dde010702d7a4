"""DaskExecutor: the thin front of the Dask executor, the same partitions as the in-process one.

It holds the executor's state and does the four things a coordinator asks of an executor
(:mod:`dmcsvm.engine.executor`): ``start`` the partitions, ``step`` a round, ``call`` a method of
every partition, ``close``.  The work is in the mixins, one job each: :mod:`.placement` (where
each partition lives, its memory plan), :mod:`.routing` (direct calls or the tree),
:mod:`.recovery` (rebuilding a lost worker's partitions), :mod:`.bank` (which batch rows the
workers hold) and :mod:`.liveness` (bounded waits on the scheduler and the workers).
"""

from __future__ import annotations

import uuid

import scipy.sparse as sp

from ..executor import partition_bounds, with_row_bounds
from ..messages import HeldIds, pack_message, unpack_reply_rows
from ..partition import Partition, PartitionSettings
from ..rows import DaskSource
from ..threads import BlasThreadHold
from . import limits
from .bank import HeldRows
from .client import Watch, subscribe, takes_n_workers, unsubscribe
from .liveness import Liveness
from .placement import Placement, block_of, groups_of, round_robin, scatter_rows
from .recovery import Recovery
from .routing import Routing

__all__ = ["DaskExecutor"]


class DaskExecutor(Placement, Routing, Recovery, HeldRows, Liveness):
    """Partitions as Dask actors on the workers of ``client``: the partitions of one worker live
    behind one :class:`~dmcsvm.engine.worker_group.WorkerGroup` actor, run on that worker's
    threads, so a round costs one call, one message and one reply per worker.

    Parameters
    ----------
    client : distributed.Client
    n_partitions : int, optional
        Row partitions (default: one per worker thread).
    recover : bool
        Rebuild a partition lost with its worker (:mod:`.recovery`) instead of failing.
    recover_timeout : float
        Seconds a lost partition waits for a live worker to take it over (when every worker is
        gone) before the fit fails with an error that says so.
    direct : bool, optional
        Whether actor calls go straight to the workers (True) or through the scheduler (False).
        Default: what the client's ``direct_to_workers`` says; when that is None (a ``Client``'s
        default), direct if every partition's worker answers the client directly at start.
    tree : {'auto', True, False}
        Send each round to the root group only; the groups forward it along a binary tree and
        merge the replies on the way back, so the coordinator's link and CPU carry one message
        and one reply per round.  'auto': from ``limits.TREE_MIN_GROUPS`` groups on.
    bank_rows : bool
        Each group banks the batch rows it applied and a message leaves out the rows every
        group holds (:mod:`.bank`; default).
    n_threads : int
        Threads of the coordinator's own kernel work in this process (the Gram rows of its
        working-set solves), as :class:`~dmcsvm.engine.executor.InProcessExecutor`'s: the
        workers wait while the coordinator solves, so its cores are free then.

    A lost scheduler ends the fit with :class:`~.client.SchedulerLostError`; every wait is
    bounded (:mod:`.liveness`).
    """

    name = "dask"

    def __init__(
        self,
        client,
        n_partitions: int | None = None,
        recover: bool = True,
        recover_timeout: float = 60.0,
        direct: bool | None = None,
        tree="auto",
        bank_rows: bool = True,
        n_threads: int = 1,
    ):
        if tree not in ("auto", True, False):
            raise ValueError(f"tree must be 'auto', True or False, got {tree!r}")
        self.tree = tree
        self.n_threads = max(1, int(n_threads))
        self.groups: list = []  # per actor: its partitions, ascending
        self._seq = 0  # number of the last round sent
        self.client = client
        self.recover = bool(recover)
        self.recover_timeout = float(recover_timeout)
        self.recoveries: list = []  # (partition, dead worker, new worker, seconds)
        self._build: list = []  # per partition: (lo, hi, rows source, yp, cls)
        self.plans: list = []  # per partition: its PartitionPlan (memory budget)
        self._x_bytes: list = []  # per partition: bytes of its rows in memory
        self._snapshots: dict = {}  # name -> provider(lo, hi) -> dict (see set_snapshot)
        self._mutated = False  # whether any operation changed the partitions' state
        self._gen: list = []  # per partition: removals of its worker seen when placed
        self._losses: list = []  # per partition: times it was rebuilt
        self._suspect: dict = {}  # address -> its removals when its connection broke
        self._not_running: dict = {}  # address -> status, of workers known but not running
        self.parts = []  # actors, one per group
        # the futures that created them: an actor lives while a future of its key does, and an
        # actor handle made on a worker of this process (a LocalCluster with processes=False) is
        # passed as is, without the future of its own that an unpickled handle creates
        self._actor_futs: dict = {}
        self.placement = []  # worker address of each partition
        self._watch = Watch()
        self._info_kw = {"n_workers": -1} if takes_n_workers(client) else {}
        subscribe(client, self._watch)
        self._subscribed = True
        self._t_start_restarts = 0
        self.worker_info = {}
        # BLAS on one thread in this process from now to close(): workers that are threads of
        # this process (LocalCluster(processes=False)) read the count this thread sets (one set
        # from their own threads is ignored, engine.threads), so their partitions' kernel work
        # gets the bits it gets on a worker process; without it optdigits' dual coefficients
        # differed by 1e-2
        self._blas = BlasThreadHold()
        try:
            workers = self._first_workers()
        except BaseException:
            self.close()
            raise
        self.workers = sorted(workers)
        self.token = uuid.uuid4().hex[:8]
        threads = sum(w.get("nthreads", 1) for w in workers.values())
        self.n_partitions = int(n_partitions or threads)
        self.direct = direct  # resolved by start(): actor calls straight to the workers?
        self.bytes_sent = 0  # packed round messages sent to the partitions
        self.bytes_received = 0  # and their packed replies
        # ids whose X rows every group holds in its bank (WorkerGroup): a message leaves those
        # rows out; valid while no group was rebuilt since (a rebuilt group's bank is empty)
        self.bank_rows = bool(bank_rows)
        self._held = HeldIds()
        self._held_at = 0  # len(self.recoveries) when _held was last valid
        self.rows_sent = 0  # batch X rows sent in round messages
        self.rows_held = 0  # batch X rows left out: the groups had them

    def start(
        self,
        X,
        yp,
        cls,
        settings: PartitionSettings,
        bounds=None,
        partition_cls=Partition,
        row_C=None,
    ):
        """Create one partition per row block on its worker (with its rows' dual bounds
        ``row_C[lo:hi]`` when ``row_C``, one per row, is given).

        ``X`` is an in-memory array (each block is scattered to its worker), a
        :class:`~dmcsvm.engine.rows.StoreSource` (each worker reads its own rows from the zarr
        store, or streams them when its memory cannot hold them) or a
        :class:`~dmcsvm.engine.rows.DaskSource` (the array is persisted in partition-sized
        blocks and each partition is built on the worker that already holds its block).

        Every wait is bounded: a partition whose worker leaves while it is created is created
        again on a live worker, up to ``limits.BUILD_RESTARTS`` times; a worker restarted that
        often (for instance by its nanny, for memory) ends the start with an error that names
        the cause and the numbers.
        """
        n = X.shape[0]
        bounds = bounds or partition_bounds(n, self.n_partitions)
        if sp.issparse(X):
            X = X.tocsr()
        placement = round_robin(self.workers, len(bounds))
        self.direct = self._direct_route(placement)
        with self._calls():
            if isinstance(X, DaskSource):
                blocks, placement = self._persist_blocks(X.array, bounds, placement)
            else:
                blocks = [block_of(X, lo, hi) for lo, hi in bounds]
            blocks, part_settings = self._plan_memory(blocks, bounds, placement, settings, X)
            part_settings = [
                with_row_bounds(ps, row_C, lo, hi)
                for ps, (lo, hi) in zip(part_settings, bounds, strict=False)
            ]
            self._settings, self._partition_cls = part_settings, partition_cls
            rows_of = []
            for (lo, hi), rows, w in zip(bounds, blocks, placement, strict=False):
                source = rows
                if isinstance(X, DaskSource):
                    source = X.array[lo:hi]  # recomputed if its worker is lost
                rows = scatter_rows(self.client, rows, w, self.recover_timeout)
                self._build.append((lo, hi, source, yp[lo:hi], cls[lo:hi]))
                self.placement.append(w)
                self._gen.append(self._watch.removed.get(w, 0))
                self._losses.append(0)
                rows_of.append(rows)
            self.groups = groups_of(placement)
            futs = [
                self._submit(
                    g,
                    self._worker_of(g),
                    [rows_of[k] for k in ks],
                    f"dmcsvm-group-{g}-{self.token}",
                )
                for g, ks in enumerate(self.groups)
            ]
            self.parts = [self._await_built(g, f) for g, f in enumerate(futs)]
        # the partitions hold their own copies now: the scattered / persisted blocks are released
        # when ``blocks`` goes out of scope
        return self

    def step(self, msg) -> list:
        """Send the round message ``msg`` to every partition; their replies in partition order
        (each worker sends only the candidates the coordinator can still pick: ``msg.pick``,
        :func:`~dmcsvm.engine.messages.prune_candidates`).  One packed frame each way per group
        (``WorkerGroup.step_packed`` / ``tree_step``); a rebuilt group answers the same way."""
        with self._calls():
            self._mutated = True
            have = self._held_rows(msg)
            blob = pack_message(msg, have)
            self._seq += 1
            op = ("step", blob, self._seq)
            got = self._tree_round(op) if self.uses_tree() else None
            if got is None:
                self.bytes_sent += len(blob) * len(self.parts)
                futs = [self._send(g, "step_packed", *op[1:]) for g in range(len(self.parts))]
                got = [self._loads(r) for r in self._gather(futs, op).values()]
            self._banked(msg)
            replies = sorted((kr for part in got for kr in part), key=lambda kr: kr[0])
            return [unpack_reply_rows(r) for _, r in replies]

    def call(self, name: str, *args) -> list:
        """Call method ``name`` of every partition with ``args`` on its worker; results in
        partition order.  A partition lost with its worker is rebuilt from the coordinator's
        state and then answers the call (with ``recover``)."""
        with self._calls():
            if name not in limits.READ_ONLY_CALLS:
                self._mutated = True
            got = self._gather(
                [self._send(g, "call", name, args) for g in range(len(self.parts))],
                ("call", name, args),
            )
            out = [None] * len(self._build)
            for g, res in got.items():
                for k, v in zip(self.groups[g], res, strict=False):
                    out[k] = v
            return out

    def stats(self) -> list[dict]:
        """Every partition's counters (rows, cache hits, bytes re-read), in partition order."""
        return self.call("stats")

    def close(self):
        """Let every partition release its files, then drop the references (the scheduler then
        releases the actors) and the coordinator's snapshot providers."""
        if self.parts:
            try:
                self.recover = False
                with self._calls():
                    self._gather(
                        [self._send(g, "close") for g in range(len(self.parts))],
                        ("call", "close", ()),
                    )
            except Exception:  # noqa: BLE001 - a lost worker must not hide the training result
                pass
        self.parts = []
        self._actor_futs = {}
        self._build = []
        self._snapshots = {}
        if self._subscribed:
            unsubscribe(self.client, self._watch)
            self._subscribed = False
        self._blas.release()
