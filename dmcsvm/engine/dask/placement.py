"""Where each partition lives and how much of its worker's memory it may use.

Placement follows xgboost's and lightgbm's Dask modules: list the workers, assign each row
partition to one worker (round-robin, so every worker owns a contiguous share of rows) and pin its
rows and state there.  A worker's partitions live behind one
:class:`~dmcsvm.engine.worker_group.WorkerGroup` actor run on the worker's threads.  Rows of a dask
array are persisted in partition-sized blocks and each partition goes where its block already
is.  The memory plan (:func:`~dmcsvm.engine.memory.plan_partition`) fits every partition to its
worker's memory limit: store rows that do not fit are streamed, and the column cache gets what is
left.  See docs/design.md, 'Architecture: coordinator, partitions, rounds'."""

from __future__ import annotations

import contextlib
from dataclasses import replace

import numpy as np
import scipy.sparse as sp
from distributed import Future, futures_of

from ..memory import plan_partition
from ..rows import StoreRows
from ..worker_group import WorkerGroup
from . import limits
from .liveness import settle


def round_robin(workers: list, n_partitions: int) -> list:
    """The worker of each of ``n_partitions`` partitions: contiguous runs, one per worker, in the
    workers' order (every worker owns a contiguous share of rows)."""
    return [workers[k * len(workers) // n_partitions] for k in range(n_partitions)]


def groups_of(placement: list) -> list:
    """The partitions of every worker (one group per worker, in the order of first placement),
    each ascending."""
    return [[k for k, p in enumerate(placement) if p == w] for w in dict.fromkeys(placement)]


def block_of(X, lo: int, hi: int):
    """Rows ``[lo, hi)`` of ``X`` as a partition is built from them (a row source slices
    itself)."""
    return X.slice(lo, hi) if hasattr(X, "slice") else X[lo:hi]


def scatter_rows(client, rows, w, timeout: float):
    """``rows`` for a partition on worker ``w``: a store source or a future as they are, an
    in-memory block scattered to ``w``."""
    if hasattr(rows, "load") or isinstance(rows, Future):
        return rows
    return client.scatter(
        rows, workers=[w], direct=True, timeout=max(timeout, limits.CALL_TIMEOUT_S)
    )


class Placement:
    """Building the partitions on their workers and building them again elsewhere (a mixin of
    :class:`~.executor.DaskExecutor`).

    Reads ``client``, ``token``, ``groups``, ``worker_info``, ``recover_timeout``, ``_build``,
    ``_settings``, ``_partition_cls``; sets ``placement``, ``plans``, ``_x_bytes``, ``_gen``."""

    def _persist_blocks(self, array, bounds, placement):
        """Persist ``array`` rechunked to the partition bounds; return the block futures and, for
        each, a worker that holds it."""
        sizes = tuple(hi - lo for lo, hi in bounds)
        arr = array.rechunk((sizes, (array.shape[1],)))
        arr = arr.map_blocks(
            np.ascontiguousarray, dtype=arr.dtype, name=f"dmcsvm-train-rows-{self.token}"
        )
        arr = self.client.persist(arr)
        futs = futures_of(arr)
        self._wait_futures(futs, "persisting the training rows")
        by_block = {f.key[1]: f for f in futs}
        blocks = [by_block[k] for k in range(len(bounds))]
        who = self.client.who_has(blocks)
        owners = []
        for f, w in zip(blocks, placement, strict=False):
            holders = sorted(who.get(f.key, ()))
            owners.append(holders[0] if holders else w)
        return blocks, owners

    def _plan_memory(self, blocks, bounds, placement, settings, X):
        """Fit every partition to its worker's memory limit (:mod:`dmcsvm.engine.memory`): store
        rows that do not fit are streamed, and the in-memory column cache gets what is left.
        Returns the (possibly re-marked) blocks and each partition's settings."""
        mem = {w: info.get("memory_limit") or 0 for w, info in self.worker_info.items()}
        per_worker = {w: placement.count(w) for w in set(placement)}
        # score columns per row: P prototypes, or one for the SMO partitions (no pcls)
        P = 1 if settings.pcls is None else len(settings.pcls)
        mode = settings.x_in_memory
        force = "auto" if mode == "auto" else (not bool(mode))
        out_blocks, out_settings = [], []
        self.plans = []
        self._x_bytes = []
        for (lo, hi), rows, w in zip(bounds, blocks, placement, strict=False):
            store = isinstance(rows, StoreRows)
            x_bytes = rows.nbytes if store else int(getattr(rows, "nbytes", 0) or 0)
            if sp.issparse(rows):
                x_bytes = rows.data.nbytes + rows.indices.nbytes + rows.indptr.nbytes
            plan = plan_partition(
                mem.get(w, 0),
                per_worker[w],
                hi - lo,
                P,
                x_bytes,
                store,
                settings.cache_bytes,
                settings.kernel_block_bytes,
                stream=force,
            )
            self.plans.append(plan)
            self._x_bytes.append(x_bytes)
            if store:
                rows = replace(rows, stream=plan.stream)
            out_blocks.append(rows)
            out_settings.append(
                replace(settings, cache_bytes=plan.cache_bytes)
                if plan.cache_bytes != settings.cache_bytes
                else settings
            )
        return out_blocks, out_settings

    def _submit(self, g, w, rows, key):
        """Create group ``g`` on worker ``w`` from its partitions' ``rows`` (one per partition):
        a :class:`WorkerGroup` actor running on the worker's threads."""
        specs = []
        for k, r in zip(self.groups[g], rows, strict=False):
            lo, hi, _, yp, cls = self._build[k]
            specs.append((k, self._partition_cls, (k, lo, hi, r, yp, cls, self._settings[k])))
        threads = int((self.worker_info.get(w) or {}).get("nthreads") or 1)
        return self.client.submit(
            WorkerGroup, specs, threads, actor=True, workers=[w], allow_other_workers=False, key=key
        )

    def _rows_for(self, k, w):
        """Rows of partition ``k`` for a new partition object on worker ``w``."""
        source = self._build[k][2]
        if isinstance(source, StoreRows):
            return source
        if hasattr(source, "dask"):  # a dask array slice: recompute it
            return self.client.compute(
                source.map_blocks(np.ascontiguousarray, dtype=source.dtype), workers=[w]
            )
        # a fresh key (hash=False): the content-hashed key of the first scatter may still be
        # known to the scheduler as lost with the dead worker, which cancels its new dependents
        return self.client.scatter(
            source,
            workers=[w],
            direct=True,
            hash=False,
            timeout=max(self.recover_timeout, limits.CALL_TIMEOUT_S),
        )

    def _await_built(self, g, fut):
        """The actor of group ``g`` once created; bounded (see ``DaskExecutor.start``)."""
        attempts = 0
        while True:
            settle(fut)
            if fut.status == "finished":
                self._actor_futs[g] = fut
                return fut.result()
            if fut.status == "error":
                if not self._group_lost(g) and not self._memory_restarts():
                    fut.result()  # the constructor's own error
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
            if len(restarts) >= limits.BUILD_RESTARTS:
                raise self._memory_error(k, restarts, "while building")
            if not lost:
                continue
            attempts += 1
            if attempts > limits.BUILD_RESTARTS:
                raise RuntimeError(
                    f"the Dask workers restarted {attempts} times while building partition {k} "
                    f"(rows {self._build[k][0]}..{self._build[k][1]}): the last one was "
                    f"{self.placement[k]}; see the workers' logs for why they died"
                )
            with contextlib.suppress(Exception):
                self.client.cancel([fut])
            w = self._wait_for_worker(g, f"to create partition {k} on")
            self._place(g, w)
            fut = self._submit(
                g,
                w,
                [self._rows_for(j, w) for j in self.groups[g]],
                f"dmcsvm-group-{g}-{self.token}-b{attempts}",
            )

    def _place(self, g, w):
        """Group ``g``'s partitions now live on worker ``w``."""
        for k in self.groups[g]:
            self.placement[k] = w
            self._gen[k] = self._watch.removed.get(w, 0)
