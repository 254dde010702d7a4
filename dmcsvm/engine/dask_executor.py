"""The Dask executor: the same :class:`Partition` objects, living on Dask workers.

Placement follows what xgboost's and lightgbm's Dask modules do: list the workers, assign each row
partition to one worker (round-robin over the workers, so every worker owns a contiguous share of
rows) and pin its data and state there.  A partition's state stays on its worker between rounds,
either behind an **actor** (default: one :class:`~dmcsvm.engine.worker_group.WorkerGroup` per
worker holding all its partitions, run on the worker's threads; one call per worker per round, no
scheduler transition) or as a **pinned future** (a task per partition per round that receives the
in-memory Partition object on its worker and mutates it).  Actor calls go straight from the client
to the workers when they are reachable; a ``Client`` left at its default
``direct_to_workers=None`` would otherwise relay each call and reply through the scheduler, a
second hop each way.  From ``TREE_MIN_GROUPS`` workers on, a round goes to one worker only and
travels down a binary tree of workers, the replies merging on the way back
(:mod:`~dmcsvm.engine.worker_group`).  Either way each worker gets one message carrying the batch
update and sends one reply with its candidates (only those the coordinator can still pick) and
aggregates, each packed into one opaque frame (``pack_message``): Dask then ships a single buffer
instead of serializing a dict of arrays array by array, which roughly halves the bare round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import uuid
from dataclasses import replace

import numpy as np
import scipy.sparse as sp
from distributed import Future, futures_of, wait
from distributed.utils import CancelledError

from .executor import partition_bounds, with_row_bounds
from .memory import plan_partition
from .messages import HeldIds, has_batch, pack_message, unpack_reply_rows
from .partition import Partition, PartitionSettings
from .rows import DaskSource, StoreRows
from .worker_group import WorkerGroup

ACTOR_POLL_S = 5.0    # how often a waiting call checks the scheduler and the partitions' workers
BUILD_POLL_S = 1.0    # the same while partitions are being created
CALL_TIMEOUT_S = 20.0   # bound of one request to the scheduler (its list of workers)
BUILD_RESTARTS = 3    # worker losses (nanny restarts for memory included) tolerated while building
MAX_LOSSES = 5        # times one partition may be rebuilt in a fit before the fit gives up
TREE_MIN_GROUPS = 8    # tree='auto': rounds go down the broadcast / reduction tree from this many
                       # workers on (scaling.md: below it, one call per worker costs less)
READ_ONLY_CALLS = frozenset({"stats", "close", "summary", "prototypes", "save_state",
                             "row_range"})
REACH_TIMEOUT_S = 3.0   # how long the client waits for a worker to answer directly before relaying
MiB = 2 ** 20


class SchedulerLostError(RuntimeError):
    """The client lost its Dask scheduler: the partitions' actors are gone with it."""


class _Lost:
    """Stands for the reply of a partition whose worker is known to be gone."""


_LOST = _Lost()


class _Watch:
    """What the scheduler pushes about the workers (``Client.subscribe_topic``): every removal of
    a worker (by address: a worker restarted by its nanny on the same address counts as removed,
    its actors are gone) and every restart of a worker by its nanny for memory."""

    def __init__(self):
        self.removed: dict = {}     # address -> removals seen
        self.memory: list = []      # (address, resident bytes) per restart for memory
        self.added = 0

    def on_all(self, event):
        msg = event[1] if isinstance(event, tuple) and len(event) == 2 else event
        if isinstance(msg, dict):
            if msg.get("action") == "remove-worker" and msg.get("worker"):
                self.removed[msg["worker"]] = self.removed.get(msg["worker"], 0) + 1
            elif msg.get("action") == "add-worker":
                self.added += 1

    def on_memory(self, event):
        msg = event[1] if isinstance(event, tuple) and len(event) == 2 else event
        if isinstance(msg, dict):
            self.memory.append((msg.get("worker"), int(msg.get("rss") or 0)))


#: one handler per client and topic (a client keeps one): it fans out to every executor's watch
_WATCHES: dict = {}


def _subscribe(client, watch: _Watch) -> None:
    key = id(client)
    if key not in _WATCHES:
        _WATCHES[key] = []
        watches = _WATCHES[key]
        client.subscribe_topic("all", lambda e: [w.on_all(e) for w in list(watches)])
        client.subscribe_topic("worker-restart-memory",
                               lambda e: [w.on_memory(e) for w in list(watches)])
    _WATCHES[key].append(watch)


def _unsubscribe(client, watch: _Watch) -> None:
    watches = _WATCHES.get(id(client))
    if watches is None or watch not in watches:
        return
    watches.remove(watch)
    if not watches:
        del _WATCHES[id(client)]
        for topic in ("all", "worker-restart-memory"):
            try:
                client.unsubscribe_topic(topic)
            except Exception:  # noqa: BLE001 - a closed client has nothing to unsubscribe
                pass


def _step_task(part: Partition, msg):
    """Pinned-future mode: run one round on the worker-resident partition."""
    return part.step(msg)


def _call_task(part: Partition, name: str, args: tuple):
    """Pinned-future mode: call any method of the worker-resident partition."""
    return getattr(part, name)(*args)


def resolve_client(client, n_workers=None, threads_per_worker=None, memory_limit=None):
    """Dask's conventions: a ``distributed.Client`` is used as is, a string is a scheduler
    address, ``'local'`` starts a ``LocalCluster``.  Returns ``(client, owned_objects)``; the
    owned objects (client and cluster we created) are closed by :func:`release_client`."""
    from distributed import Client, LocalCluster
    if isinstance(client, Client):
        return client, []
    if isinstance(client, str) and client == "local":
        kw = {"n_workers": n_workers, "threads_per_worker": threads_per_worker or 1,
              "processes": True, "dashboard_address": None}
        if memory_limit is not None:
            kw["memory_limit"] = memory_limit
        cluster = LocalCluster(**{k: v for k, v in kw.items() if v is not None})
        c = Client(cluster)
        return c, [c, cluster]
    if isinstance(client, str):
        c = Client(client)
        return c, [c]
    raise ValueError(f"client must be None, 'local', a scheduler address or a distributed.Client, "
                     f"got {client!r}")


def release_client(owned):
    for obj in owned:
        try:
            obj.close()
        except Exception:  # noqa: BLE001 - closing is best effort at shutdown
            pass


class DaskExecutor:
    """Partitions as Dask actors (or pinned futures) on the workers of ``client``.

    Parameters
    ----------
    client : distributed.Client
    n_partitions : int, optional
        Row partitions (default: one per worker thread).
    mode : {'actor', 'future'}
        How partition state is kept on its worker between rounds.
    recover : bool
        Actor mode: rebuild a partition lost with its worker (below) instead of failing.
    recover_timeout : float
        Seconds a lost partition waits for a live worker to take it over (when every worker is
        gone) before the fit fails with an error that says so.
    direct : bool, optional
        Whether actor calls go straight to the workers (True) or through the scheduler (False).
        Default: what the client's ``direct_to_workers`` says; when that is None (a ``Client``'s
        default), direct if every partition's worker answers the client directly at start.
    group : bool
        Actor mode: the partitions of a worker live behind one actor
        (:class:`~dmcsvm.engine.worker_group.WorkerGroup`), run on the worker's threads, and a
        round costs one call, one message copy and at most ``batch_size`` candidates per worker
        (default).  False: one actor per partition (the design before; kept for measuring).
    tree : {'auto', True, False}
        Actor mode: send each round to the root group only; the groups forward it along a binary
        tree and merge the replies on the way back, so the coordinator's link and CPU carry one
        message and one reply per round.  'auto': from ``TREE_MIN_GROUPS`` groups on
        (benchmarks/results/scaling.md: below that, direct calls cost less).
    bank_rows : bool
        Actor mode: each group banks the batch rows it applied and a message leaves out the rows
        every group holds (default).
    pack_rows : bool
        Actor mode: dense X rows travel as their nonzeros when that is smaller, in the messages
        and in the groups' replies (:mod:`~dmcsvm.engine.row_packing`; lossless, the same solve
        bit for bit).  False: always dense (for measuring; packing costs about 1 ns of CPU per
        entry, which a link faster than ~20 Gb/s could carry in less time).

    Fault tolerance (actor mode, ``recover=True``).  The partitions lost with their worker -- during
    a round, between rounds, or while no worker is alive for up to ``recover_timeout`` seconds --
    are rebuilt together on one live worker, each from its rows (the store, or the persisted /
    in-memory block) and the coordinator's current state, which the coordinator registers with
    :meth:`set_snapshot`: the support patterns' X rows and coefficients
    (``F = K(X_part, X_SV) B_SV``, one kernel block in row blocks of bounded size), its own
    coefficient rows, which of its rows the coordinator
    already holds, and kind-specific fields (``Partition.restore``).  All its rows are active
    again.  The rebuilt partition answers the round it was lost in without applying that round's
    update a second time (the coordinator's state already holds it); a surviving group asked again
    for a round it applied (its tree parent died) answers from memory.  Nothing is logged per round:
    the coordinator's memory does not grow with the round count.  The rebuilt scores equal the
    accumulated ones up to rounding, so a fit with a recovery is not bit-for-bit the uninterrupted
    one: it completes and converges to the same optimum within the solver's tolerances.  Without a
    recovery the rounds are exactly those of the in-process executor.  A lost scheduler ends the
    fit with :class:`SchedulerLostError`; every wait is bounded by the liveness of the scheduler
    and of the workers it waits on, by ``recover_timeout`` when no worker is left, and by
    ``BUILD_RESTARTS`` worker losses while the partitions are created (a worker whose nanny keeps
    restarting it for memory ends the fit with the memory numbers).
    """

    name = "dask"

    def __init__(self, client, n_partitions: int | None = None, mode: str = "actor",
                 recover: bool = True, recover_timeout: float = 60.0, direct: bool | None = None,
                 group: bool = True, tree="auto", bank_rows: bool = True,
                 pack_rows: bool = True):
        if mode not in ("actor", "future"):
            raise ValueError(f"mode must be 'actor' or 'future', got {mode!r}")
        if tree not in ("auto", True, False):
            raise ValueError(f"tree must be 'auto', True or False, got {tree!r}")
        self.group = bool(group)
        self.tree = tree
        self.groups: list = []       # per actor (or pinned future): its partitions, ascending
        self._seq = 0                # number of the last round sent
        self.client = client
        self.mode = mode
        self.recover = bool(recover) and mode == "actor"
        self.recover_timeout = float(recover_timeout)
        self.recoveries: list = []   # (partition, dead worker, new worker, seconds)
        self._build: list = []       # per partition: (lo, hi, rows source, yp, cls)
        self.plans: list = []        # per partition: its PartitionPlan (memory budget)
        self._x_bytes: list = []     # per partition: bytes of its rows in memory
        self._snapshots: dict = {}   # name -> provider(lo, hi) -> dict (see set_snapshot)
        self._mutated = False        # whether any operation changed the partitions' state
        self._gen: list = []         # per partition: removals of its worker seen when placed
        self._losses: list = []      # per partition: times it was rebuilt
        self._suspect: dict = {}     # address -> its removals when its connection broke
        self.parts = []          # actors or futures, in partition order
        self.placement = []      # worker address of each partition
        self._watch = _Watch()
        self._info_kw = {"n_workers": -1} if _takes_n_workers(client) else {}
        _subscribe(client, self._watch)
        self._subscribed = True
        self._t_start_restarts = 0
        self.worker_info = {}
        try:
            workers = self._first_workers()
        except BaseException:
            self.close()
            raise
        self.workers = sorted(workers)
        self.token = uuid.uuid4().hex[:8]
        threads = sum(w.get("nthreads", 1) for w in workers.values())
        self.n_partitions = int(n_partitions or threads)
        self.direct = direct     # resolved by start(): actor calls straight to the workers?
        self.bytes_sent = 0      # packed round messages sent to the partitions (actor mode)
        self.bytes_received = 0  # and their packed replies
        # ids whose X rows every group holds in its bank (WorkerGroup): a message leaves those
        # rows out; valid while no group was rebuilt since (a rebuilt group's bank is empty)
        self.bank_rows = bool(bank_rows)
        self.pack_rows = bool(pack_rows)
        self._held = HeldIds()
        self._held_at = 0        # len(self.recoveries) when _held was last valid
        self.rows_sent = 0       # batch X rows sent in round messages (actor mode)
        self.rows_held = 0       # batch X rows left out: the groups had them

    # ---------------------------------------------------------------- coordinator state
    def set_snapshot(self, fn, name: str = "state") -> None:
        """Register ``fn(lo, hi) -> dict``, the coordinator's current state as a partition of rows
        ``[lo, hi)`` needs it to be rebuilt (``Partition.restore``); providers registered under
        different names are merged (e.g. the coefficients from ``solve`` and the assignment from
        the multi-prototype search).  ``fn=None`` removes one.  A provider is called only when a
        partition is lost, at that moment: it must describe the state *after* every update the
        coordinator has sent or is sending."""
        if fn is None:
            self._snapshots.pop(name, None)
        else:
            self._snapshots[name] = fn

    def _snapshot(self, k):
        lo, hi = self._build[k][0], self._build[k][1]
        if not self._snapshots:
            if self._mutated:
                raise RuntimeError(
                    f"partition {k} was lost with its worker {self.placement[k]} after rounds had "
                    f"changed its state, and no coordinator state is registered to rebuild it "
                    f"from (DaskExecutor.set_snapshot); start the fit again")
            return None
        snap: dict = {}
        for fn in self._snapshots.values():
            snap.update(fn(lo, hi))
        return snap

    # ---------------------------------------------------------------- start
    def start(self, X, yp, cls, settings: PartitionSettings, bounds=None, partition_cls=Partition,
              row_C=None):
        """Create one partition per row block on its worker (with its rows' dual bounds
        ``row_C[lo:hi]`` when ``row_C``, one per row, is given).

        ``X`` is an in-memory array (each block is scattered to its worker), a
        :class:`~dmcsvm.engine.rows.StoreSource` (each worker reads its own rows from the zarr
        store, or streams them when its memory cannot hold them) or a
        :class:`~dmcsvm.engine.rows.DaskSource` (the array is persisted in partition-sized
        blocks and each partition is built on the worker that already holds its block).

        Every wait is bounded: a partition whose worker leaves while it is created is created
        again on a live worker, up to ``BUILD_RESTARTS`` times; a worker restarted that often
        (for instance by its nanny, for memory) ends the start with an error that names the
        cause and the numbers.
        """
        n = X.shape[0]
        bounds = bounds or partition_bounds(n, self.n_partitions)
        c = self.client
        if sp.issparse(X):
            X = X.tocsr()
        placement = [self.workers[k * len(self.workers) // len(bounds)] for k in range(len(bounds))]
        if self.mode == "actor":
            self.direct = self._direct_route(placement)
        with self._calls():
            if isinstance(X, DaskSource):
                blocks, placement = self._persist_blocks(X.array, bounds, placement)
            else:
                blocks = [X.slice(lo, hi) if hasattr(X, "slice") else X[lo:hi] for lo, hi in bounds]
            blocks, part_settings = self._plan_memory(blocks, bounds, placement, settings, X)
            part_settings = [with_row_bounds(ps, row_C, lo, hi)
                             for ps, (lo, hi) in zip(part_settings, bounds)]
            self._settings, self._partition_cls = part_settings, partition_cls
            rows_of = []
            for k, ((lo, hi), rows, w) in enumerate(zip(bounds, blocks, placement)):
                source = rows
                if isinstance(X, DaskSource):
                    source = X.array[lo:hi]                # recomputed if its worker is lost
                if not hasattr(rows, "load") and not isinstance(rows, Future):
                    rows = c.scatter(rows, workers=[w], direct=True,
                                     timeout=max(self.recover_timeout, CALL_TIMEOUT_S))
                self._build.append((lo, hi, source, yp[lo:hi], cls[lo:hi]))
                self.placement.append(w)
                self._gen.append(self._watch.removed.get(w, 0))
                self._losses.append(0)
                rows_of.append(rows)
            # actors: the partitions of a worker behind one WorkerGroup; pinned futures: one each
            if self.mode == "actor" and self.group:
                self.groups = [[k for k, p in enumerate(placement) if p == w]
                               for w in dict.fromkeys(placement)]
            else:
                self.groups = [[k] for k in range(len(bounds))]
            futs = [self._submit(g, self._worker_of(g), [rows_of[k] for k in ks],
                                 f"dmcsvm-{'group' if self.mode == 'actor' else 'partition'}-{g}-"
                                 f"{self.token}")
                    for g, ks in enumerate(self.groups)]
            self.parts = [self._await_built(g, f) for g, f in enumerate(futs)]
        # the partitions hold their own copies now: the scattered / persisted blocks are released
        # when ``blocks`` goes out of scope
        return self

    def _submit(self, g, w, rows, key):
        """Create group ``g`` on worker ``w`` from its partitions' ``rows`` (one per partition):
        a :class:`WorkerGroup` actor, or (pinned futures) its one partition."""
        specs = []
        for k, r in zip(self.groups[g], rows):
            lo, hi, _, yp, cls = self._build[k]
            specs.append((k, self._partition_cls, (k, lo, hi, r, yp, cls, self._settings[k])))
        if self.mode == "actor":
            threads = int((self.worker_info.get(w) or {}).get("nthreads") or 1)
            return self.client.submit(WorkerGroup, specs, threads, self.pack_rows, actor=True,
                                      workers=[w],
                                      allow_other_workers=False, key=key)
        _, part_cls, args = specs[0]
        return self.client.submit(part_cls, *args, workers=[w],
                                  allow_other_workers=False, pure=False, key=key)

    def _rows_for(self, k, w):
        """Rows of partition ``k`` for a new partition object on worker ``w``."""
        source = self._build[k][2]
        if isinstance(source, StoreRows):
            return source
        if hasattr(source, "dask"):                       # a dask array slice: recompute it
            return self.client.compute(source.map_blocks(np.ascontiguousarray,
                                                         dtype=source.dtype), workers=[w])
        # a fresh key (hash=False): the content-hashed key of the first scatter may still be
        # known to the scheduler as lost with the dead worker, which cancels its new dependents
        return self.client.scatter(source, workers=[w], direct=True, hash=False,
                                   timeout=max(self.recover_timeout, CALL_TIMEOUT_S))

    def _await_built(self, g, fut):
        """The actor (or pinned future) of group ``g`` once created; bounded (see start)."""
        attempts = 0
        while True:
            _settle(fut)
            if fut.status == "finished":
                return fut.result() if self.mode == "actor" else fut
            if fut.status == "error":
                if not self._group_lost(g) and not self._memory_restarts():
                    fut.result()                    # the constructor's own error
                lost = True
            elif fut.status in ("lost", "cancelled"):
                self._check_scheduler()
                lost = True
            else:
                lost = self._group_lost(g)
            self._check_scheduler()
            placed = set(self.placement)
            restarts = [r for r in self._memory_restarts() if r[0] in placed]
            k = self.groups[g][0]
            if len(restarts) >= BUILD_RESTARTS:
                raise self._memory_error(k, restarts, "while building")
            if not lost:
                continue
            attempts += 1
            if attempts > BUILD_RESTARTS:
                raise RuntimeError(
                    f"the Dask workers restarted {attempts} times while building partition {k} "
                    f"(rows {self._build[k][0]}..{self._build[k][1]}): the last one was "
                    f"{self.placement[k]}; see the workers' logs for why they died")
            with contextlib.suppress(Exception):
                self.client.cancel([fut])
            w = self._wait_for_worker(g, f"to create partition {k} on")
            self._place(g, w)
            fut = self._submit(g, w, [self._rows_for(j, w) for j in self.groups[g]],
                               f"dmcsvm-group-{g}-{self.token}-b{attempts}")

    def _place(self, g, w):
        """Group ``g``'s partitions now live on worker ``w``."""
        for k in self.groups[g]:
            self.placement[k] = w
            self._gen[k] = self._watch.removed.get(w, 0)

    def _first_workers(self) -> dict:
        """The cluster's workers; when it has none yet, wait for one up to ``recover_timeout``
        (a worker whose nanny keeps restarting it for memory ends the wait with the numbers)."""
        import time
        t0 = time.monotonic()
        while True:
            workers = self._live_workers()
            if workers:
                return workers
            restarts = self._memory_restarts()
            if len(restarts) >= BUILD_RESTARTS:
                raise self._memory_error(None, restarts, "before any worker could take")
            if time.monotonic() - t0 > self.recover_timeout:
                raise ValueError(f"the Dask cluster has no workers (waited "
                                 f"{self.recover_timeout:.0f} s for one to join)")
            time.sleep(0.5)

    def _memory_restarts(self):
        """Restarts of workers by their nanny for memory since this executor started."""
        return self._watch.memory[self._t_start_restarts:]

    def _memory_error(self, k, restarts, when) -> RuntimeError:
        addr, rss = restarts[-1]
        limit = int((self.worker_info.get(addr) or {}).get("memory_limit") or 0)
        if not limit:
            limit = max([int(w.get("memory_limit") or 0) for w in self.worker_info.values()]
                        or [0])
        if not limit:
            limit = _nanny_memory_limit(self.client, addr)
        plan = self.plans[k] if k is not None and k < len(self.plans) else None
        need = ""
        if plan is not None:
            xb = self._x_bytes[k] if k < len(self._x_bytes) and not plan.stream else 0
            st = getattr(self, "_settings", [])
            kb = st[k].kernel_block_bytes if k < len(st) else 0
            need = (f" plus about {(plan.state_bytes + kb + xb) / MiB:.0f} MiB for partition {k} "
                    f"(state {plan.state_bytes / MiB:.1f} MiB, one kernel block {kb / MiB:.0f} MiB"
                    + (f", rows {xb / MiB:.1f} MiB" if xb else "") + ")")
        from .memory import WORKER_BASELINE_BYTES
        return RuntimeError(
            f"the workers restarted {len(restarts)} times {when} "
            f"{'partition %d' % k if k is not None else 'a partition'}: their nannies "
            f"killed them for memory ({addr} held {rss / MiB:.0f} MiB against its memory_limit of "
            f"{limit / MiB:.0f} MiB). memory_limit {limit / MiB:.0f} MiB is too small for a Dask "
            f"worker process (about {WORKER_BASELINE_BYTES / MiB:.0f} MiB before any data)"
            f"{need}; give the workers more memory (--memory-limit / memory_limit)")

    def _persist_blocks(self, array, bounds, placement):
        """Persist ``array`` rechunked to the partition bounds; return the block futures and, for
        each, a worker that holds it."""
        sizes = tuple(hi - lo for lo, hi in bounds)
        arr = array.rechunk((sizes, (array.shape[1],)))
        arr = arr.map_blocks(np.ascontiguousarray, dtype=arr.dtype,
                             name=f"dmcsvm-train-rows-{self.token}")
        arr = self.client.persist(arr)
        futs = futures_of(arr)
        self._wait_futures(futs, "persisting the training rows")
        by_block = {f.key[1]: f for f in futs}
        blocks = [by_block[k] for k in range(len(bounds))]
        who = self.client.who_has(blocks)
        owners = []
        for f, w in zip(blocks, placement):
            holders = sorted(who.get(f.key, ()))
            owners.append(holders[0] if holders else w)
        return blocks, owners

    def _plan_memory(self, blocks, bounds, placement, settings, X):
        """Fit every partition to its worker's memory limit (:mod:`dmcsvm.engine.memory`): store
        rows that do not fit are streamed, and the in-memory column cache gets what is left.
        Returns the (possibly re-marked) blocks and each partition's settings."""
        limits = {w: info.get("memory_limit") or 0 for w, info in self.worker_info.items()}
        per_worker = {w: placement.count(w) for w in set(placement)}
        # score columns per row: P prototypes, or one for the SMO partitions (no pcls)
        P = 1 if settings.pcls is None else len(settings.pcls)
        mode = settings.x_in_memory
        force = "auto" if mode == "auto" else (not bool(mode))
        out_blocks, out_settings = [], []
        self.plans = []
        self._x_bytes = []
        for (lo, hi), rows, w in zip(bounds, blocks, placement):
            store = isinstance(rows, StoreRows)
            x_bytes = rows.nbytes if store else int(getattr(rows, "nbytes", 0) or 0)
            if sp.issparse(rows):
                x_bytes = rows.data.nbytes + rows.indices.nbytes + rows.indptr.nbytes
            plan = plan_partition(limits.get(w, 0), per_worker[w], hi - lo, P, x_bytes, store,
                                  settings.cache_bytes, settings.kernel_block_bytes,
                                  stream=force)
            self.plans.append(plan)
            self._x_bytes.append(x_bytes)
            if store:
                rows = replace(rows, stream=plan.stream)
            out_blocks.append(rows)
            out_settings.append(replace(settings, cache_bytes=plan.cache_bytes)
                                if plan.cache_bytes != settings.cache_bytes else settings)
        return out_blocks, out_settings

    def _direct_route(self, addresses) -> bool:
        """Whether actor calls can skip the scheduler.  A client that chose
        (``direct_to_workers`` True or False) or an explicit ``direct`` is obeyed; otherwise every
        worker is asked once, directly, and any that does not answer in time (a client outside the
        cluster's network) keeps the calls relayed."""
        if self.direct is not None:
            return bool(self.direct)
        if self.client.direct_to_workers is not None:
            return bool(self.client.direct_to_workers)

        async def reach():
            for a in sorted(set(addresses)):
                await asyncio.wait_for(self.client.rpc(a).identity(), REACH_TIMEOUT_S)
        try:
            self.client.sync(reach)
            return True
        except (OSError, TimeoutError, asyncio.TimeoutError):
            return False

    @contextlib.contextmanager
    def _calls(self):
        """Context for talking to the partitions: actor handles talk through the *current*
        client, so make it ours (not whichever client the user created last, else a call waits
        forever on another cluster), and route actor calls as :meth:`_direct_route` decided.  An
        actor handle reads ``direct_to_workers`` of that client when it sends a call; a client at
        its default (None) gets our choice for the duration of the call only."""
        c = self.client
        flip = bool(self.direct) and c.direct_to_workers is None
        if flip:
            c.direct_to_workers = True
        try:
            with c.as_current():
                yield
        finally:
            if flip:
                c.direct_to_workers = None

    def _wait_futures(self, futs, what):
        """``distributed.wait`` bounded by the scheduler's liveness and the workers' restarts."""
        while True:
            try:
                wait(futs, timeout=BUILD_POLL_S)
                return
            except (TimeoutError, asyncio.TimeoutError):
                pass
            self._check_scheduler()
            restarts = self._memory_restarts()
            if len(restarts) >= BUILD_RESTARTS:
                raise self._memory_error(None, restarts, f"while {what}, before building")

    # ---------------------------------------------------------------- liveness
    def _is_lost(self, k) -> bool:
        """Whether the scheduler has removed partition ``k``'s worker since it was placed there
        (pushed by the scheduler: no request per round)."""
        return self._watch.removed.get(self.placement[k], 0) != self._gen[k]

    def _group_lost(self, g) -> bool:
        """Whether group ``g``'s worker (the one all its partitions live on) is gone."""
        return self._is_lost(self.groups[g][0])

    def _worker_of(self, g) -> str:
        """The worker group ``g``'s partitions live on."""
        return self.placement[self.groups[g][0]]

    def _check_scheduler(self):
        status = getattr(self.client, "status", "running")
        if status not in ("running", "newly-created"):
            raise SchedulerLostError(
                f"the Dask scheduler {self._scheduler_address()} is lost: the client's connection "
                f"to it is {status!r}; the partitions' state went with it, so the fit cannot go "
                f"on (start it again, with --checkpoint / checkpoint= to resume from the last "
                f"checkpoint)")

    def _scheduler_address(self):
        try:
            return self.client.scheduler.address
        except Exception:  # noqa: BLE001 - only for the message
            return "(unknown address)"

    def _live_workers(self) -> dict:
        """The scheduler's running workers now (one request, bounded)."""
        self._check_scheduler()
        c = self.client
        try:
            info = c.sync(c.scheduler.identity, callback_timeout=CALL_TIMEOUT_S, **self._info_kw)
        except (OSError, TimeoutError, asyncio.TimeoutError) as e:
            self._check_scheduler()
            raise SchedulerLostError(
                f"the Dask scheduler {self._scheduler_address()} did not answer within "
                f"{CALL_TIMEOUT_S:.0f} s ({e!r}); the fit cannot go on") from e
        workers = {a: w for a, w in info.get("workers", {}).items()
                   if w.get("status", "running") == "running"}
        self.worker_info.update(workers)
        return workers

    def _wait_for_worker(self, g, what):
        """A live worker for group ``g`` (the least loaded; not one whose connection broke
        unless the scheduler has replaced it since), waiting up to ``recover_timeout``."""
        import time
        t0 = time.monotonic()
        k = self.groups[g][0]
        mine = set(self.groups[g])
        while True:
            alive = sorted(a for a in self._live_workers() if not self._is_suspect(a))
            if alive:
                counts = {w: sum(p == w for i, p in enumerate(self.placement) if i not in mine)
                          for w in alive}
                return min(alive, key=lambda a: (counts[a], a))
            if time.monotonic() - t0 > self.recover_timeout:
                raise RuntimeError(
                    f"no Dask worker is left {what} partition {k} (its worker "
                    f"{self.placement[k]} died); waited {self.recover_timeout:.0f} s for one "
                    f"to join")
            time.sleep(0.5)

    # ---------------------------------------------------------------- calls
    def step(self, msg) -> list:
        """Send the round message ``msg`` to every partition; their replies in partition order
        (each worker sends only the candidates the coordinator can still pick: ``msg.pick``,
        :func:`~dmcsvm.engine.messages.prune_candidates`)."""
        with self._calls():
            return self._step(msg)

    def _send(self, g, name, *args):
        """Call ``name`` on group ``g``'s actor, or :data:`_LOST` when its worker is gone."""
        if self._group_lost(g):
            return _LOST
        try:
            return getattr(self.parts[g], name)(*args)
        except RuntimeError:          # "Worker holding Actor was lost": its key is not in memory
            self._check_scheduler()
            return _LOST

    def _result(self, g, f, op):
        """The reply of group ``g`` to ``op``; a group lost with its worker is rebuilt
        (``recover``) and answers ``op``, else a clear error.  Bounded: the wait checks every
        ``ACTOR_POLL_S`` that the scheduler and the group's worker are still there."""
        while True:
            if f is _LOST:
                if not self.recover:
                    raise self._lost(self.groups[g][0])
                return self._recover(g, op)
            try:
                return f.result(timeout=ACTOR_POLL_S)
            except (TimeoutError, asyncio.TimeoutError):
                self._check_scheduler()
                if self._group_lost(g):
                    f = _LOST
            except Exception as e:  # noqa: BLE001 - decided below: lost worker or real error
                self._check_scheduler()
                if not self._confirm_lost(g, e):
                    raise
                f = _LOST

    def _confirm_lost(self, g, err) -> bool:
        """After a failed call: whether group ``g``'s worker is gone (the scheduler says so
        within a few seconds, or the connection broke)."""
        import time
        deadline = time.monotonic() + ACTOR_POLL_S
        while time.monotonic() < deadline:
            if self._group_lost(g):
                return True
            time.sleep(0.1)
        if isinstance(err, OSError):
            a = self._worker_of(g)
            self._suspect[a] = self._watch.removed.get(a, 0)
            return True
        return False

    def _is_suspect(self, a) -> bool:
        """A worker whose connection broke and that the scheduler has not replaced since."""
        return a in self._suspect and self._suspect[a] == self._watch.removed.get(a, 0)

    def _gather(self, futs, op, groups=None) -> dict:
        """``{group: reply}`` of the calls ``futs`` made to ``groups`` (default: all)."""
        groups = range(len(self.parts)) if groups is None else groups
        out = {g: self._result(g, f, op) for g, f in zip(groups, futs)}
        # a worker removed while its reply was in flight may have answered from a group the
        # scheduler re-created empty: answer from the coordinator's state instead
        for g in out:
            if self._group_lost(g) and self.recover:
                out[g] = self._recover(g, op)
        return out

    def _recover(self, g, op):
        """Rebuild group ``g`` (every partition of the lost worker) on one live worker from its
        rows and the coordinator's snapshot and return its answer to ``op`` (the operation that
        found it gone)."""
        import time
        t0 = time.monotonic()
        ks = self.groups[g]
        dead = self._worker_of(g)
        for k in ks:
            self._losses[k] += 1
        k = ks[0]                   # a group's partitions are lost (and counted) together
        if self._losses[k] > MAX_LOSSES:
            restarts = self._memory_restarts()
            if restarts:
                raise self._memory_error(k, restarts, "while running; lost again")
            raise RuntimeError(f"partition {k} was lost with its worker {self._losses[k]} times "
                               f"in this fit (last on {dead}); see the workers' logs")
        with contextlib.suppress(Exception):
            old = self.parts[g]
            self.client.cancel([getattr(old, "_future", old)])
        failure = None
        attempt = 0
        while True:
            try:
                w = self._wait_for_worker(g, "to take over")
            except RuntimeError as e:
                raise e from failure
            attempt += 1
            try:
                return self._rebuild(g, dead, w, op, t0, attempt)
            except SchedulerLostError:
                raise
            except Exception as e:  # noqa: BLE001 - the chosen worker may be dying too
                failure = e
                if not (self._group_lost(g) or self._is_suspect(w) or isinstance(e, OSError)):
                    raise
                if time.monotonic() - t0 > self.recover_timeout:
                    raise RuntimeError(
                        f"partition {ks[0]} could not be rebuilt within "
                        f"{self.recover_timeout:.0f} s after its worker {dead} died: "
                        f"{e!r}") from e

    def _rebuild(self, g, dead, w, op, t0, attempt):
        import time
        self._place(g, w)
        ks = self.groups[g]
        snaps = {k: self._snapshot(k) for k in ks}
        key = f"dmcsvm-group-{g}-{self.token}-r{len(self.recoveries) + 1}-{attempt}"
        fut = self._submit(g, w, [self._rows_for(k, w) for k in ks], key)
        actor = self._await_rebuilt(g, fut)
        snaps = {k: v for k, v in snaps.items() if v is not None}
        if snaps:
            self._wait_one(g, actor.restore(snaps))
        if op[0] == "step":
            # its state comes from the snapshot, which already holds the round's update
            reply = self._wait_one(g, actor.step_packed(*op[1:], True))
        else:
            reply = self._wait_one(g, actor.call(op[1], op[2]))
        self.parts[g] = actor
        for k in ks:
            self.recoveries.append((k, dead, w, time.monotonic() - t0))
        return reply

    def _await_rebuilt(self, g, fut):
        while True:
            _settle(fut)
            self._check_scheduler()
            if fut.status == "finished":
                return fut.result()
            if fut.status == "error":
                return fut.result()         # raises: the caller decides
            if self._group_lost(g) or fut.status in ("lost", "cancelled"):
                raise OSError(f"worker {self._worker_of(g)} left while rebuilding "
                              f"partition {self.groups[g][0]}")

    def _wait_one(self, g, f):
        """Result of one call on a rebuilt group, bounded by its worker's liveness."""
        while True:
            try:
                return f.result(timeout=ACTOR_POLL_S)
            except (TimeoutError, asyncio.TimeoutError):
                self._check_scheduler()
                if self._group_lost(g):
                    raise OSError(f"worker {self._worker_of(g)} left while "
                                  f"rebuilding partition {self.groups[g][0]}") from None

    def _lost(self, k) -> RuntimeError:
        return RuntimeError(f"the Dask worker {self.placement[k]} holding partition {k} has left "
                            f"the cluster; its state is lost (start the fit again)")

    def uses_tree(self) -> bool:
        """Whether a round goes down the broadcast / reduction tree (``tree``; 'auto': from
        ``TREE_MIN_GROUPS`` workers on)."""
        if self.mode != "actor" or len(self.parts) < 2:
            return False
        if self.tree == "auto":
            return len(self.parts) >= TREE_MIN_GROUPS
        return bool(self.tree)

    def _subtree(self, g) -> tuple:
        """Group ``g``'s node of the binary tree over the groups (children ``2g+1``, ``2g+2``):
        ``(address, actor key, children's nodes, groups of the subtree)``."""
        kids = [self._subtree(c) for c in (2 * g + 1, 2 * g + 2) if c < len(self.parts)]
        below = [g] + [x for kid in kids for x in kid[3]]
        return self._worker_of(g), self.parts[g].key, kids, below

    def _step(self, msg) -> list:
        self._mutated = True
        if self.mode == "actor":
            # one packed frame each way per group (WorkerGroup.step_packed / tree_step); a rebuilt
            # group answers through the same path
            have = self._held_rows(msg)
            blob = pack_message(msg, have, pack=self.pack_rows)
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
        c = self.client
        self._check_futures_mode()
        futs = [c.submit(_step_task, p, msg, workers=[w], allow_other_workers=False, pure=False,
                         key=f"dmcsvm-round-p{k}-{_next()}")
                for k, (p, w) in enumerate(zip(self.parts, self.placement))]
        return self._gather_futures(futs)

    def _held_now(self) -> HeldIds:
        """What every group banks; forgotten when a group was rebuilt (its bank starts empty)."""
        if len(self.recoveries) != self._held_at:
            self._held.clear()
            self._held_at = len(self.recoveries)
        return self._held

    def _held_rows(self, msg):
        """The batch rows of ``msg`` every group banks (:meth:`HeldIds.rows`), counted."""
        have = self._held_now().rows(msg) if self.bank_rows else None
        if has_batch(msg) and msg.XB is not None:
            n_have = 0 if have is None else int(np.count_nonzero(have))
            self.rows_held += n_have
            self.rows_sent += len(msg.ids) - n_have
        return have

    def _banked(self, msg) -> None:
        """After a round every group answered: the rows their banks now hold.  A group rebuilt
        during the round applied only the report-only fields, so its bank holds nothing yet."""
        if self.bank_rows and self._held_at == len(self.recoveries):
            self._held.applied(msg)
        else:
            self._held_now()

    def _tree_round(self, op):
        """One round down the tree: the replies of every group as lists of ``(partition,
        reply)``, the groups the tree could not reach asked directly (a group that applied the
        round answers from memory; a lost one is rebuilt).  None when the root itself failed or
        a worker left during the round: the caller then asks every group directly."""
        _, blob, seq = op
        self.bytes_sent += len(blob)
        node = self._subtree(0)
        f = self._send(0, "tree_step", blob, seq, node[2])
        if f is _LOST:
            return None
        while True:
            try:
                got, lost = self._loads(f.result(timeout=ACTOR_POLL_S))
                break
            except (TimeoutError, asyncio.TimeoutError):
                self._check_scheduler()
                if any(self._group_lost(g) for g in range(len(self.parts))):
                    return None
            except Exception:  # noqa: BLE001 - the root is gone or failed: ask every group
                self._check_scheduler()
                return None
        out = [got]
        if lost:
            self.bytes_sent += len(blob) * len(lost)
            futs = [self._send(g, "step_packed", *op[1:]) for g in lost]
            out += [self._loads(r) for r in self._gather(futs, op, lost).values()]
        return out

    def _loads(self, blob: bytes):
        """A group's pickled reply, its bytes counted."""
        self.bytes_received += len(blob)
        return pickle.loads(blob)

    def _check_futures_mode(self):
        """Pinned futures: a partition whose worker was removed would be re-created empty by the
        scheduler; fail instead."""
        self._check_scheduler()
        for k in range(len(self.parts)):
            if self._is_lost(k):
                raise self._lost(k)

    def _gather_futures(self, futs):
        while True:
            try:
                wait(futs, timeout=ACTOR_POLL_S)
                break
            except (TimeoutError, asyncio.TimeoutError):
                self._check_futures_mode()
        self._check_futures_mode()
        return self.client.gather(futs)

    def call(self, name: str, *args) -> list:
        """Call method ``name`` of every partition with ``args`` on its worker; results in
        partition order.  A partition lost with its worker is rebuilt from the coordinator's
        state and then answers the call (actor mode with ``recover``)."""
        with self._calls():
            if self.mode == "actor":
                if name not in READ_ONLY_CALLS:
                    self._mutated = True
                got = self._gather([self._send(g, "call", name, args)
                                    for g in range(len(self.parts))], ("call", name, args))
                out = [None] * len(self._build)
                for g, res in got.items():
                    for k, v in zip(self.groups[g], res):
                        out[k] = v
                return out
            c = self.client
            self._check_futures_mode()
            return self._gather_futures([c.submit(_call_task, p, name, args, workers=[w],
                                                  pure=False, key=f"dmcsvm-{name}-p{k}-{_next()}")
                                         for k, (p, w) in enumerate(zip(self.parts,
                                                                        self.placement))])

    def stats(self) -> list[dict]:
        return self.call("stats")

    def close(self):
        """Let every partition release its files, then drop the references (the scheduler then
        releases the actors / pinned state) and the coordinator's snapshot providers."""
        if self.parts:
            try:
                self.recover = False
                if self.mode == "actor":
                    with self._calls():
                        self._gather([self._send(g, "close") for g in range(len(self.parts))],
                                     ("call", "close", ()))
                else:
                    self.call("close")
            except Exception:  # noqa: BLE001 - a lost worker must not hide the training result
                pass
        self.parts = []
        self._build = []
        self._snapshots = {}
        if self._subscribed:
            _unsubscribe(self.client, self._watch)
            self._subscribed = False


_counter = [0]


def _settle(fut) -> None:
    """Wait up to ``BUILD_POLL_S`` for ``fut`` to leave 'pending' (inside ``_calls``: the
    executor's client is the current one); the caller reads its status and decides.
    ``distributed.wait`` raises for a cancelled future (a dependency lost with a dying worker),
    which the callers treat as a lost worker, not as the fit's error."""
    with contextlib.suppress(TimeoutError, asyncio.TimeoutError, CancelledError):
        wait([fut], timeout=BUILD_POLL_S)


def _next() -> int:
    _counter[0] += 1
    return _counter[0]


def _nanny_memory_limit(client, address) -> int:
    """The workers' memory limit from the cluster object behind ``client`` (a ``LocalCluster``'s
    worker spec; 0 when unknown): a worker restarted over and over may be missing from the
    scheduler's list."""
    try:
        from dask.utils import parse_bytes
        for spec in (getattr(getattr(client, "cluster", None), "worker_spec", None) or {}).values():
            limit = (spec.get("options") or {}).get("memory_limit")
            if isinstance(limit, str):
                limit = parse_bytes(limit)
            if limit:
                return int(limit)
    except Exception:  # noqa: BLE001 - only for the message
        pass
    return 0


def _takes_n_workers(client) -> bool:
    import inspect
    try:
        return "n_workers" in inspect.signature(client.scheduler_info).parameters
    except (TypeError, ValueError):
        return False
