"""The Dask executor: the same :class:`Partition` objects, living on Dask workers.

Placement follows what xgboost's and lightgbm's Dask modules do: list the workers, assign each row
partition to one worker (round-robin over the workers, so every worker owns a contiguous share of
rows) and pin its data and state there.  A partition's state stays on its worker between rounds,
either as an **actor** (default: one call per partition per round, no scheduler transition) or as
a **pinned future** (a task per partition per round that receives the in-memory Partition object
on its worker and mutates it).  Actor calls go straight from the client to the partition's worker
when the workers are reachable; a ``Client`` left at its default ``direct_to_workers=None`` would
otherwise relay each call and reply through the scheduler, a second hop each way.  Either way a
round is one message per partition carrying the batch update and one reply with its candidates
and aggregates.  Actors get both packed into one opaque frame each (``Partition.step_packed``):
Dask then ships a single buffer instead of serializing a dict of arrays array by array, which
roughly halves the bare round trip.
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

from .executor import partition_bounds
from .memory import plan_partition
from .partition import Partition, PartitionSettings, pack_message
from .rows import DaskSource, StoreRows


ACTOR_POLL_S = 5.0    # how often a waiting round checks that the partitions' workers are alive
REPLAY_CHUNK = 32     # logged operations sent per call when a lost partition is rebuilt
READ_ONLY_CALLS = frozenset({"stats", "close", "save_state", "row_range"})
REACH_TIMEOUT_S = 3.0   # how long the client waits for a worker to answer directly before relaying


def _step_task(part: Partition, msg: dict) -> dict:
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
    direct : bool, optional
        Whether actor calls go straight to the workers (True) or through the scheduler (False).
        Default: what the client's ``direct_to_workers`` says; when that is None (a ``Client``'s
        default), direct if every partition's worker answers the client directly at start.
    """

    name = "dask"

    def __init__(self, client, n_partitions: int | None = None, mode: str = "actor",
                 recover: bool = True, recover_timeout: float = 60.0, direct: bool | None = None):
        if mode not in ("actor", "future"):
            raise ValueError(f"mode must be 'actor' or 'future', got {mode!r}")
        self.client = client
        self.mode = mode
        # fault tolerance (actor mode): every message is logged so that a partition lost with its
        # worker is rebuilt on a live worker by replaying the same messages in the same order,
        # which reproduces its state bit for bit (the partition code is deterministic)
        self.recover = bool(recover) and mode == "actor"
        self.recover_timeout = float(recover_timeout)
        self.log: list = []          # ("step", msg) / ("call", name, args), in order
        self.recoveries: list = []   # (partition, dead worker, new worker, seconds)
        self._build: list = []       # per partition: (lo, hi, rows source, yp, cls)
        self.plans: list = []        # per partition: its PartitionPlan (memory budget)
        self._info_kw = {"n_workers": -1} if _takes_n_workers(client) else {}
        info = client.scheduler_info(**self._info_kw)
        self.worker_info = info["workers"]
        self.workers = sorted(info["workers"])
        self.token = uuid.uuid4().hex[:8]
        if not self.workers:
            raise ValueError("the Dask cluster has no workers")
        threads = sum(w.get("nthreads", 1) for w in info["workers"].values())
        self.n_partitions = int(n_partitions or threads)
        self.parts = []          # actors or futures, in partition order
        self.placement = []      # worker address of each partition
        self.direct = direct     # resolved by start(): actor calls straight to the workers?
        self.bytes_sent = 0      # packed round messages sent to the partitions (actor mode)

    def start(self, X, yp, cls, settings: PartitionSettings, bounds=None, partition_cls=Partition):
        """Create one partition per row block on its worker.

        ``X`` is an in-memory array (each block is scattered to its worker), a
        :class:`~dmcsvm.engine.rows.StoreSource` (each worker reads its own rows from the zarr
        store, or streams them when its memory cannot hold them) or a
        :class:`~dmcsvm.engine.rows.DaskSource` (the array is persisted in partition-sized
        blocks and each partition is built on the worker that already holds its block).
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
            self._settings, self._partition_cls = part_settings, partition_cls
            for k, ((lo, hi), rows, w) in enumerate(zip(bounds, blocks, placement)):
                settings_k = part_settings[k]
                source = rows
                if isinstance(X, DaskSource):
                    source = X.array[lo:hi]                # recomputed if its worker is lost
                if not hasattr(rows, "load") and not isinstance(rows, Future):
                    rows = c.scatter(rows, workers=[w], direct=True)
                self._build.append((lo, hi, source, yp[lo:hi], cls[lo:hi]))
                args = (k, lo, hi, rows, yp[lo:hi], cls[lo:hi], settings_k)
                key = f"dmcsvm-partition-{k}-{self.token}"
                if self.mode == "actor":
                    fut = c.submit(partition_cls, *args, actor=True, workers=[w],
                                   allow_other_workers=False, key=key)
                else:
                    fut = c.submit(partition_cls, *args, workers=[w], allow_other_workers=False,
                                   pure=False, key=key)
                self.parts.append(fut)
                self.placement.append(w)
            if self.mode == "actor":
                self.parts = [f.result() for f in self.parts]
            else:
                wait(self.parts)
                bad = [f for f in self.parts if f.status != "finished"]
                if bad:
                    bad[0].result()
        # the partitions hold their own copies now: the scattered / persisted blocks are released
        # when ``blocks`` goes out of scope
        return self

    def _persist_blocks(self, array, bounds, placement):
        """Persist ``array`` rechunked to the partition bounds; return the block futures and, for
        each, a worker that holds it."""
        sizes = tuple(hi - lo for lo, hi in bounds)
        arr = array.rechunk((sizes, (array.shape[1],)))
        arr = arr.map_blocks(np.ascontiguousarray, dtype=arr.dtype,
                             name=f"dmcsvm-train-rows-{self.token}")
        arr = self.client.persist(arr)
        futs = futures_of(arr)
        wait(futs)
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
        P = len(settings.pcls)
        mode = settings.x_in_memory
        force = "auto" if mode == "auto" else (not bool(mode))
        out_blocks, out_settings = [], []
        self.plans = []
        for (lo, hi), rows, w in zip(bounds, blocks, placement):
            store = isinstance(rows, StoreRows)
            x_bytes = rows.nbytes if store else int(getattr(rows, "nbytes", 0) or 0)
            if sp.issparse(rows):
                x_bytes = rows.data.nbytes + rows.indices.nbytes + rows.indptr.nbytes
            plan = plan_partition(limits.get(w, 0), per_worker[w], hi - lo, P, x_bytes, store,
                                  settings.cache_bytes, settings.kernel_block_bytes,
                                  stream=force)
            self.plans.append(plan)
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

    def step(self, msg: dict) -> list[dict]:
        with self._calls():
            return self._step(msg)

    def _wait_actors(self, futs) -> list:
        """Results of the actor calls of the current operation (the last entry of the log).

        A partition whose worker has left the cluster is rebuilt on a live worker and the log is
        replayed to it (``recover=True``); otherwise the call raises a clear error.  Either way an
        actor call to a dead worker, which never returns by itself, is not waited on forever.
        """
        out = []
        for k, f in enumerate(futs):
            while True:
                try:
                    out.append(f.result(timeout=ACTOR_POLL_S))
                    break
                except (TimeoutError, asyncio.TimeoutError):
                    alive = self.client.scheduler_info(**self._info_kw)["workers"]
                    if self.placement[k] in alive:
                        continue
                    if not self.recover:
                        raise self._lost(k) from None
                    out.append(self._recover(k))
                    break
                except OSError as e:           # the worker's connection broke (CommClosedError)
                    if not self.recover:
                        raise self._lost(k) from e
                    out.append(self._recover(k))
                    break
        return out

    def _recover(self, k):
        """Rebuild partition ``k`` on a live worker and replay the message log to it; returns its
        answer to the last logged operation (the one that found the worker gone)."""
        import time
        t0 = time.monotonic()
        dead = self.placement[k]
        c = self.client
        failure = None
        while True:
            alive = sorted(w for w in c.scheduler_info(**self._info_kw)["workers"] if w != dead)
            if alive:
                try:
                    return self._rebuild(k, dead, alive, t0)
                except Exception as e:  # noqa: BLE001 - the chosen worker may be dying too
                    failure = e
            if time.monotonic() - t0 > self.recover_timeout:
                raise RuntimeError(
                    f"no Dask worker is left to take over partition {k} (its worker {dead} "
                    f"died); waited {self.recover_timeout:.0f} s for one to join") from failure
            time.sleep(0.5)

    def _rebuild(self, k, dead, alive, t0):
        """Create partition ``k`` on the least loaded live worker and replay the log to it."""
        import time
        c = self.client
        counts = {w: sum(p == w for i, p in enumerate(self.placement) if i != k) for w in alive}
        w = min(alive, key=lambda a: (counts[a], a))
        lo, hi, source, yp, cls = self._build[k]
        if isinstance(source, StoreRows):
            rows = source
        elif hasattr(source, "dask"):                     # a dask array slice: recompute it
            rows = c.compute(source.map_blocks(np.ascontiguousarray, dtype=source.dtype),
                             workers=[w])
        else:
            rows = c.scatter(source, workers=[w], direct=True, timeout=10)
        key = f"dmcsvm-partition-{k}-{self.token}-r{len(self.recoveries) + 1}"
        actor = c.submit(self._partition_cls, k, lo, hi, rows, yp, cls, self._settings[k],
                         actor=True, workers=[w], allow_other_workers=False,
                         key=key).result(timeout=max(self.recover_timeout, 10))
        reply = None
        for i in range(0, len(self.log), REPLAY_CHUNK):
            reply = actor.replay(self.log[i:i + REPLAY_CHUNK]).result()
        self.parts[k] = actor
        self.placement[k] = w
        self.recoveries.append((k, dead, w, time.monotonic() - t0))
        return reply

    def _wait_actors_plain(self, futs) -> list:
        out = []
        for k, f in enumerate(futs):
            while True:
                try:
                    out.append(f.result(timeout=ACTOR_POLL_S))
                    break
                except (TimeoutError, asyncio.TimeoutError):
                    if self.placement[k] not in self.client.scheduler_info(**self._info_kw)["workers"]:
                        raise self._lost(k) from None
                except OSError as e:
                    raise self._lost(k) from e
        return out

    def _recover_lost(self) -> None:
        alive = self.client.scheduler_info(**self._info_kw)["workers"]
        for k, w in enumerate(list(self.placement)):
            if w not in alive:
                self._recover(k)

    def _lost(self, k) -> RuntimeError:
        return RuntimeError(f"the Dask worker {self.placement[k]} holding partition {k} has left "
                            f"the cluster; its state is lost (start the fit again)")

    def _step(self, msg: dict) -> list[dict]:
        if self.mode == "actor":
            if self.recover:
                self.log.append(("step", msg))
            # one packed frame each way (Partition.step_packed); a partition rebuilt by _recover
            # answers with its replayed reply, already a dict
            blob = pack_message(msg)
            self.bytes_sent += len(blob) * len(self.parts)
            return [pickle.loads(r) if isinstance(r, bytes) else r
                    for r in self._wait_actors([a.step_packed(blob) for a in self.parts])]
        c = self.client
        futs = [c.submit(_step_task, p, msg, workers=[w], allow_other_workers=False, pure=False,
                         key=f"dmcsvm-round-p{k}-{_next()}")
                for k, (p, w) in enumerate(zip(self.parts, self.placement))]
        return c.gather(futs)

    def call(self, name: str, *args) -> list:
        """Call method ``name`` of every partition with ``args`` on its worker; results in
        partition order."""
        with self._calls():
            if self.mode == "actor":
                if self.recover and name not in READ_ONLY_CALLS:
                    self.log.append(("call", name, args))
                    return self._wait_actors([getattr(a, name)(*args) for a in self.parts])
                if name in READ_ONLY_CALLS:
                    # not logged: a replay would end on another operation; recover, then ask again
                    try:
                        return self._wait_actors_plain([getattr(a, name)(*args) for a in self.parts])
                    except RuntimeError:
                        if not self.recover:
                            raise
                        self._recover_lost()
                        return self._wait_actors_plain([getattr(a, name)(*args)
                                                        for a in self.parts])
                return self._wait_actors([getattr(a, name)(*args) for a in self.parts])
            c = self.client
            return c.gather([c.submit(_call_task, p, name, args, workers=[w], pure=False,
                                      key=f"dmcsvm-{name}-p{k}-{_next()}")
                             for k, (p, w) in enumerate(zip(self.parts, self.placement))])

    def stats(self) -> list[dict]:
        return self.call("stats")

    def close(self):
        """Let every partition release its files, then drop the references (the scheduler then
        releases the actors / pinned state) and the message log."""
        if self.parts:
            try:
                self.recover = False
                self.call("close")
            except Exception:  # noqa: BLE001 - a lost worker must not hide the training result
                pass
        self.parts = []
        self.log = []
        self._build = []


_counter = [0]


def _next() -> int:
    _counter[0] += 1
    return _counter[0]


def _takes_n_workers(client) -> bool:
    import inspect
    try:
        return "n_workers" in inspect.signature(client.scheduler_info).parameters
    except (TypeError, ValueError):
        return False
