"""Executors run the partitions' rounds: in-process on threads, or on a Dask cluster (:mod:`.dask`).

An executor owns a list of partitions and offers one operation per round, :meth:`step`, that sends
the same message to every partition and returns their replies in partition order.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import scipy.sparse as sp

from .partition import Partition, PartitionSettings
from .partition_base import PartitionBase
from .rows import StoreRows


def partition_bounds(n: int, n_parts: int, align: int = 1) -> list[tuple[int, int]]:
    """Split ``range(n)`` into ``n_parts`` contiguous, nearly equal row blocks (edges on
    ``align``)."""
    n_parts = max(1, min(int(n_parts), n))
    edges = np.linspace(0, n, n_parts + 1)
    if align > 1:
        edges = np.round(edges / align) * align
        edges[-1] = n
    edges = np.unique(edges.astype(np.int64))
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=False) if b > a]


def with_row_bounds(settings: PartitionSettings, row_C, lo: int, hi: int) -> PartitionSettings:
    """``settings`` of the partition of rows ``[lo, hi)``, holding those rows' bounds ``C_i``
    when there are per-row bounds (``row_C`` not None)."""
    if row_C is None:
        return settings
    return replace(settings, row_C=np.ascontiguousarray(row_C[lo:hi], dtype=np.float64))


class InProcessExecutor:
    """Partitions held in this process; a round runs them on a thread pool (numba and BLAS
    release the GIL), or in turn on this thread when they are small (:attr:`POOL_MIN_ROWS`).
    BLAS is limited to one thread while partitions live (engine.threads) so that ``n_threads``
    partitions do not oversubscribe the cores.

    Parameters
    ----------
    n_threads : int
        Threads, and by default partitions.
    n_partitions : int, optional
        Number of row partitions (defaults to ``n_threads``).
    """

    name = "inprocess"

    #: a round runs its partitions on the thread pool only when one of them holds at least this
    #: many rows: below it, handing work to a thread costs more than the work (a round of two
    #: 500-row partitions: 0.4 ms more per round on two threads than in turn, measured with 50
    #: patterns per batch; two 2,000-row partitions: 1.3x faster on two threads)
    POOL_MIN_ROWS = 1024

    def __init__(self, n_threads: int = 1, n_partitions: int | None = None):
        self.n_threads = max(1, int(n_threads))
        self.n_partitions = int(n_partitions or self.n_threads)
        self.parts: list[PartitionBase] = []
        self._pool = None

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
        """Create the partitions (``partition_cls``: :class:`Partition` or any partition with its
        constructor, ``yp``/``cls`` being what that kind reads per row, e.g. signs and groups for
        a GradientPartition) over rows of ``X`` (ndarray, CSR or a store row source).  ``row_C``
        (optional, one dual bound per row) is split so that each partition holds its rows'."""
        n = X.shape[0]
        bounds = bounds or partition_bounds(n, self.n_partitions)
        if sp.issparse(X):
            X = X.tocsr()
        if self.n_threads > 1 and max(hi - lo for lo, hi in bounds) >= self.POOL_MIN_ROWS:
            self._pool = ThreadPoolExecutor(self.n_threads)
        for k, (lo, hi) in enumerate(bounds):
            rows = X.slice(lo, hi) if hasattr(X, "slice") else X[lo:hi]
            if isinstance(rows, StoreRows) and settings.x_in_memory is False:
                rows = replace(rows, stream=True)
            self.parts.append(
                partition_cls(
                    k, lo, hi, rows, yp[lo:hi], cls[lo:hi], with_row_bounds(settings, row_C, lo, hi)
                )
            )
        return self

    def step(self, msg) -> list:
        """Send the round message ``msg`` to every partition; their replies in partition order
        (:func:`~dmcsvm.engine.messages.merge` combines them)."""
        if self._pool is None:
            return [p.step(msg) for p in self.parts]
        return list(self._pool.map(lambda p: p.step(msg), self.parts))

    def call(self, name: str, *args) -> list:
        """Call method ``name`` of every partition with ``args``; results in partition order."""
        if self._pool is None:
            return [getattr(p, name)(*args) for p in self.parts]
        return list(self._pool.map(lambda p: getattr(p, name)(*args), self.parts))

    def stats(self) -> list[dict]:
        return self.call("stats")

    def set_snapshot(self, fn, name: str = "state") -> None:
        """Coordinators register their state for rebuilding lost partitions
        (``DaskExecutor.set_snapshot``); partitions in this process are never lost: ignored."""

    def close(self):
        for p in self.parts:
            p.close()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        self.parts = []
