"""The Dask executor: the same :class:`Partition` objects, living on Dask workers.

Placement follows what xgboost's and lightgbm's Dask modules do: list the workers, assign each row
partition to one worker (round-robin over the workers, so every worker owns a contiguous share of
rows) and pin its data and state there.  A partition's state stays on its worker between rounds,
either as an **actor** (default: one direct worker-to-client call per partition per round, no
scheduler involvement) or as a **pinned future** (a task per partition per round that receives the
in-memory Partition object on its worker and mutates it).  Either way a round is one message per
partition carrying the batch update and one reply with its candidates and aggregates.
"""

from __future__ import annotations

import scipy.sparse as sp

from .executor import partition_bounds
from .partition import Partition, PartitionSettings


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
    """

    name = "dask"

    def __init__(self, client, n_partitions: int | None = None, mode: str = "actor"):
        if mode not in ("actor", "future"):
            raise ValueError(f"mode must be 'actor' or 'future', got {mode!r}")
        self.client = client
        self.mode = mode
        info = client.scheduler_info(n_workers=-1) if _takes_n_workers(client) \
            else client.scheduler_info()
        self.workers = sorted(info["workers"])
        if not self.workers:
            raise ValueError("the Dask cluster has no workers")
        threads = sum(w.get("nthreads", 1) for w in info["workers"].values())
        self.n_partitions = int(n_partitions or threads)
        self.parts = []          # actors or futures, in partition order
        self.placement = []      # worker address of each partition

    def start(self, X, yp, cls, settings: PartitionSettings, bounds=None, partition_cls=Partition):
        """Create one partition per row block on its worker; ``X`` is an in-memory array (rows are
        scattered to the owning worker) or a :class:`~dmcsvm.engine.partition.StoreRows` source
        (each worker reads its own rows from the zarr store)."""
        n = X.shape[0]
        bounds = bounds or partition_bounds(n, self.n_partitions)
        c = self.client
        if sp.issparse(X):
            X = X.tocsr()
        for k, (lo, hi) in enumerate(bounds):
            w = self.workers[k * len(self.workers) // len(bounds)]
            rows = X.slice(lo, hi) if hasattr(X, "slice") else X[lo:hi]
            if not hasattr(rows, "load"):
                rows = c.scatter(rows, workers=[w], direct=True)
            args = (k, lo, hi, rows, yp[lo:hi], cls[lo:hi], settings)
            if self.mode == "actor":
                fut = c.submit(partition_cls, *args, actor=True, workers=[w],
                               allow_other_workers=False, key=f"dmcsvm-partition-{k}-{id(self)}")
            else:
                fut = c.submit(partition_cls, *args, workers=[w], allow_other_workers=False,
                               pure=False, key=f"dmcsvm-partition-{k}-{id(self)}")
            self.parts.append(fut)
            self.placement.append(w)
        if self.mode == "actor":
            with c.as_current():
                self.parts = [f.result() for f in self.parts]
        else:
            from distributed import wait
            wait(self.parts)
            bad = [f for f in self.parts if f.status != "finished"]
            if bad:
                bad[0].result()
        return self

    def step(self, msg: dict) -> list[dict]:
        # actor handles talk through the *current* client: make it ours, not whichever client the
        # user created last (otherwise a call waits forever on another cluster)
        with self.client.as_current():
            return self._step(msg)

    def _step(self, msg: dict) -> list[dict]:
        if self.mode == "actor":
            futs = [a.step(msg) for a in self.parts]
            return [f.result() for f in futs]
        c = self.client
        futs = [c.submit(_step_task, p, msg, workers=[w], allow_other_workers=False, pure=False,
                         key=f"dmcsvm-round-p{k}-{_next()}")
                for k, (p, w) in enumerate(zip(self.parts, self.placement))]
        return c.gather(futs)

    def call(self, name: str, *args) -> list:
        """Call method ``name`` of every partition with ``args`` on its worker; results in
        partition order."""
        with self.client.as_current():
            if self.mode == "actor":
                futs = [getattr(a, name)(*args) for a in self.parts]
                return [f.result() for f in futs]
            c = self.client
            return c.gather([c.submit(_call_task, p, name, args, workers=[w], pure=False,
                                      key=f"dmcsvm-{name}-p{k}-{_next()}")
                             for k, (p, w) in enumerate(zip(self.parts, self.placement))])

    def stats(self) -> list[dict]:
        return self.call("stats")

    def close(self):
        # dropping the references lets the scheduler release the actors / pinned state
        self.parts = []


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
