"""What every estimator needs from the engine: thread counts and the executor behind the
``client`` switch (None in-process, a Client / scheduler address, or 'local')."""

from __future__ import annotations

import numbers
import os

from ..engine.executor import InProcessExecutor


def n_threads(n_jobs) -> int:
    """sklearn/joblib convention, except that ``None`` means every core: training is the point."""
    cpus = os.cpu_count() or 1
    if n_jobs is None:
        return cpus
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, numbers.Integral) or n_jobs == 0:
        raise ValueError(f"n_jobs must be a non-zero integer or None, got {n_jobs!r}")
    return max(1, cpus + 1 + n_jobs) if n_jobs < 0 else int(n_jobs)


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
