"""The ``LocalCluster`` behind ``client='local'``: started by the first fit that asks for it and
kept for this process's later fits of the same size, as Dask's own ``Client()`` is.

A 2-worker LocalCluster of processes took 1.6-3.9 s to start, warm up and close on the 2-core VM
(``benchmarks/results/local_cluster.md``): more than a whole fit of most real sets, and paid by
every fit of a ``GridSearchCV`` or ``cross_val_score``.  Kept, it is paid once.  It is closed
when the interpreter exits, or by :func:`close_local_clusters`; one that stopped (its scheduler
closed, its client disconnected) is started again, and a child process made by ``fork`` starts
its own instead of talking through its parent's event loop.  Its client is never Dask's default
client, so it does not capture the user's own computations.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading

from distributed.diagnostics.plugin import WorkerPlugin

_lock = threading.Lock()
#: (n_workers, threads_per_worker, memory_limit) -> (pid, LocalCluster, Client)
_clusters: dict = {}
_at_exit = False


def local_client(n_workers=None, threads_per_worker=None, memory_limit=None):
    """The client of this process's LocalCluster of that size (worker processes, no
    dashboard), started now if there is none or it stopped."""
    key = (n_workers, threads_per_worker or 1, memory_limit)
    with _lock:
        got = _clusters.get(key)
        if got is not None and got[0] == os.getpid():  # (a parent's, after fork: left alone)
            if _running(got[1], got[2]):
                return got[2]
            _close(got)
        cluster, client = _start(*key)
        _clusters[key] = (os.getpid(), cluster, client)
        _register_exit()
        return client


def close_local_clusters() -> int:
    """Close every LocalCluster that ``client='local'`` started in this process; returns how
    many.  The next ``client='local'`` fit starts a new one."""
    with _lock:
        got = [v for v in _clusters.values() if v[0] == os.getpid()]
        _clusters.clear()
    for entry in got:
        _close(entry)
    return len(got)


#: the nannies' environment variable that Dask sets to 65536 by default (its
#: ``distributed.nanny.pre-spawn-environ``) so that workers hand freed memory back to the OS
TRIM_KEY = "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_"
DASK_TRIM_DEFAULT = 65536


def worker_environ() -> dict:
    """The Dask config this module's LocalCluster starts under: Dask's default
    ``MALLOC_TRIM_THRESHOLD_=65536`` left unset in its workers (a value the user configured is
    kept).  Set, it also fixes glibc's mmap threshold, so every freed block goes back to the OS
    and a fit's partitions, which allocate their kernel columns afresh each round, faulted them
    in again each round: shuttle's partition steps took 0.75-1.24 s on the workers against
    0.48-0.55 s in process, and the fit 1.8 s against 1.1 s; unset, 1.19-1.21 s
    (benchmarks/results/HISTORY.md, session 45)."""
    import dask

    if dask.config.get(TRIM_KEY, None) in (DASK_TRIM_DEFAULT, str(DASK_TRIM_DEFAULT)):
        return {TRIM_KEY: None}
    return {}


#: Dask settings of this module's LocalCluster that keep its idle processes quiet: no
#: statistical profiler in the workers (it samples every thread's stack every 10 ms, under the
#: GIL, for a dashboard this cluster does not start), and the event loops' health tick and the
#: memory monitor at 1 s and 0.5 s instead of 20 and 100 ms.  Idle, a 2-worker cluster took
#: 7.7-10.2 % of a core with Dask's defaults and 2.0 % with these; on 2 cores in-process fits
#: beside it ran 5-15 % slower (benchmarks/results/HISTORY.md, session 47).
QUIET = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.worker.memory.monitor-interval": "500ms",
}


@contextlib.contextmanager
def _workers_environ():
    """:func:`worker_environ` while the cluster starts.  A nanny also sets its variables in the
    process that starts it, and the workers inherit this process's environment, so Dask's
    default value left there by an earlier cluster of this process is taken out meanwhile."""
    import dask

    cfg = worker_environ()
    name = TRIM_KEY.rsplit(".", 1)[1]
    held = os.environ.pop(name) if cfg and os.environ.get(name) == str(DASK_TRIM_DEFAULT) else None
    try:
        with dask.config.set({**QUIET, **cfg}):
            yield
    finally:
        if held is not None:
            os.environ[name] = held


def _start(n_workers, threads_per_worker, memory_limit):
    from distributed import Client, LocalCluster

    # (only the sizes left unset take LocalCluster's defaults: dashboard_address=None is what
    # turns the dashboard off, so it is never dropped with them)
    sizes = {"n_workers": n_workers, "memory_limit": memory_limit}
    with _workers_environ():  # (the nannies read it when they are made)
        cluster = LocalCluster(
            threads_per_worker=threads_per_worker,
            processes=True,
            dashboard_address=None,
            **{k: v for k, v in sizes.items() if v is not None},
        )
    try:
        client = Client(cluster, set_as_default=False)
        if worker_environ():  # (not where the user configured how workers free memory)
            client.register_plugin(KeepFreedMemory(), name=KeepFreedMemory.name)
        return cluster, client
    except BaseException:
        cluster.close()
        raise


#: glibc's ``mallopt`` parameters (``<malloc.h>``)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Make glibc's malloc in this process serve every block from its heap and keep what is
    freed there (``mallopt``: no ``mmap`` blocks, trim only above 2 GiB free); False where
    there is no glibc ``mallopt``.

    A worker's partitions are made anew each fit, and numpy's blocks above glibc's mmap
    threshold (32 MB at most) came from ``mmap`` and went back to the OS when freed: each fit
    faulted its kernel blocks and caches in again.  On the 2-core VM that was 0.3-0.6 s of
    system time per worker per shuttle fit and the fit took 1.8-1.95 s on ``client='local'``
    against 1.1 s kept (benchmarks/results/HISTORY.md, session 47).  Only for the workers of
    this module's own cluster: a process that keeps its freed memory holds its peak."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))


class KeepFreedMemory(WorkerPlugin):
    """Worker plugin: :func:`keep_freed_memory` in each worker, those started later too (a
    worker restarted after a loss)."""

    name = "dmcsvm-keep-freed-memory"

    def setup(self, worker):
        worker.dmcsvm_keeps_freed_memory = keep_freed_memory()


def _running(cluster, client) -> bool:
    """Whether the cluster and our client to it are both still up."""
    return cluster.status.name == "running" and client.status == "running"


def _close(entry) -> None:
    """Close a kept cluster and its client (best effort: a stopped one may raise)."""
    _, cluster, client = entry
    for obj in (client, cluster):
        try:
            obj.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass


def _register_exit() -> None:
    """Close the kept clusters at exit, before distributed's own clean-up (atexit runs the
    handlers registered last first, and distributed registered its own at import)."""
    global _at_exit
    if not _at_exit:
        atexit.register(close_local_clusters)
        _at_exit = True
