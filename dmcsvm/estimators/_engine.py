"""What every estimator needs from the engine: thread counts and the executor behind the
``client`` switch (None in-process, a Client / scheduler address, or 'local')."""

from __future__ import annotations

import numbers

from ..engine.executor import InProcessExecutor

#: The thread policy: every estimator's ``n_jobs`` docstring (:mod:`._base`) and the README.
THREAD_POLICY = f"""\
    n_jobs : int or None, default=None
        Threads of the in-process executor (one row partition each unless ``n_partitions``
        says otherwise) and of in-memory prediction, with scikit-learn's meaning: ``None`` is 1
        unless inside a ``joblib.parallel_config(n_jobs=...)`` (or ``parallel_backend``)
        context, ``-1`` is every core, ``-2`` all but one.  Thread policy: dmcsvm uses
        ``n_jobs`` threads in all and no more; numba kernels are single-threaded and BLAS is
        limited to one thread per partition while training (to ``n_jobs // chunks`` threads
        while predicting), so ``GridSearchCV(..., n_jobs=k)`` with the default ``n_jobs=None``
        runs k single-threaded fits and never oversubscribes.  Partitions of fewer than
        {InProcessExecutor.POOL_MIN_ROWS:,} rows run in turn on one thread (a thread hand-off
        costs more than their round).  Ignored with a ``client`` (a Dask cluster's worker
        threads are its parallelism).  Threads share one interpreter: on a 16-core machine
        they gained up to about 4-8 cores, and a ``LocalCluster`` of one-thread workers was as
        fast or faster from 8 cores on (benchmarks/results/scaling.md)."""


def n_threads(n_jobs) -> int:
    """Threads for ``n_jobs``, scikit-learn's convention (joblib's ``effective_n_jobs``):
    ``None`` is 1 unless a ``joblib.parallel_config`` / ``parallel_backend`` context sets
    ``n_jobs``; ``-1`` every core (as joblib counts them: affinity and cgroup limits included),
    ``-2`` all but one; a positive integer itself."""
    if n_jobs is not None and (isinstance(n_jobs, bool) or not isinstance(n_jobs, numbers.Integral)
                               or n_jobs == 0):
        raise ValueError(f"n_jobs must be a non-zero integer or None, got {n_jobs!r}")
    from joblib import effective_n_jobs
    return max(1, int(effective_n_jobs(None if n_jobs is None else int(n_jobs))))


def blas_limits(n_jobs, threads):
    """Context that limits BLAS to its share of ``n_jobs`` while ``threads`` threads run
    (prediction in row chunks): ``max(1, n_threads(n_jobs) // threads)`` threads each.  A share
    of one is the counted hold of :mod:`dmcsvm.engine.threads`, which a fit running beside the
    prediction shares without either undoing the other's limit."""
    share = max(1, n_threads(n_jobs) // max(1, threads))
    if share == 1:
        from ..engine.threads import one_blas_thread
        return one_blas_thread()
    from ..engine.threads import limit_blas
    return limit_blas(share)


def run_chunks(n_jobs, chunks, work) -> None:
    """``work(chunk)`` for every chunk, on ``min(n_threads(n_jobs), len(chunks))`` threads with
    BLAS held to its share of ``n_jobs`` (:data:`THREAD_POLICY`)."""
    threads = min(n_threads(n_jobs), len(chunks))
    with blas_limits(n_jobs, threads):
        if threads > 1:
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(work, chunks))
        else:
            for c in chunks:
                work(c)


def make_executor(est):
    """The executor for estimator ``est`` (reads ``client``, ``n_jobs``, ``n_partitions``,
    ``n_workers``, ``threads_per_worker``, ``memory_limit``).  Returns ``(executor, owned)``;
    pass both to :func:`release_executor` when training ends."""
    if est.client is None:
        return InProcessExecutor(n_threads(est.n_jobs), est.n_partitions), []
    from ..engine.dask_executor import DaskExecutor, resolve_client
    client, owned = resolve_client(est.client, est.n_workers, est.threads_per_worker,
                                   est.memory_limit)
    try:
        return DaskExecutor(client, est.n_partitions), owned
    except BaseException:
        release_executor(None, owned)
        raise


def release_executor(executor, owned) -> None:
    """Close the executor and whatever client / LocalCluster was started for it."""
    try:
        if executor is not None:
            executor.close()
    finally:
        if owned:
            from ..engine.dask_executor import release_client
            release_client(owned)
