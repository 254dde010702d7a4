"""What every estimator needs from the engine: thread counts and the executor behind the
``client`` switch (None in-process, a Client / scheduler address, or 'local')."""

from __future__ import annotations

import numbers
import os

from ..engine.cache import gram_bytes, gram_places
from ..engine.executor import InProcessExecutor

#: The thread policy: every estimator's ``n_jobs`` docstring (:mod:`._base`) and
#: docs/user_guide.md.
THREAD_POLICY = f"""\
    n_jobs : int or None, default=None
        Threads of the in-process executor and of in-memory prediction.  ``None`` uses the
        cores this process may use, as HistGradientBoostingClassifier, XGBoost and LightGBM
        do (CPU affinity and cgroup quotas counted), reduced to its share when it runs inside
        another parallel job: in a joblib worker process (``GridSearchCV(..., n_jobs=k)``)
        the share joblib gives it (``cores // k``), in a joblib worker thread one thread, and
        under a ``threadpoolctl.threadpool_limits(n)`` or ``OMP_NUM_THREADS=n`` at most ``n``.
        Inside ``joblib.parallel_config(n_jobs=k)`` it is ``k``; ``-1`` is every core, ``-2``
        all but one, a positive integer itself.  dmcsvm uses ``n_jobs`` threads in all and no
        more: numba kernels are single-threaded and BLAS is limited to one thread per
        partition while training and per row block while predicting, so nested parallelism
        never oversubscribes the cores and predictions do not depend on ``n_jobs``.  The
        default row partitions (solver option ``n_partitions``) are one per thread, and the
        row partitioning is part of the solver's trajectory: set ``n_partitions`` for the same
        model on machines with other core counts.  Partitions of fewer than
        {InProcessExecutor.POOL_MIN_ROWS:,} rows run in turn on one thread (a thread hand-off
        costs more than their round).  With a ``client`` the cluster's worker threads run the
        partitions, and ``n_jobs`` threads of this process compute the coordinator's kernel
        rows while the workers wait."""


def available_threads() -> int:
    """The threads an ``n_jobs=None`` fit uses: the cores this process may use (affinity and
    cgroup quota), within ``OMP_NUM_THREADS`` and any ``threadpool_limits`` in force (what
    joblib sets in its worker processes: ``cores // n_jobs``), as scikit-learn's OpenMP
    estimators count them; one thread inside a joblib worker thread, whose share is unknown."""
    import threading

    from joblib.parallel import get_active_backend

    backend, _ = get_active_backend()
    if (
        getattr(backend, "nesting_level", 0)
        and threading.current_thread() is not threading.main_thread()
    ):
        # a joblib worker thread (threading backend): the outer job uses the cores.  A worker
        # process (loky) runs its tasks on its main thread, with joblib's OMP_NUM_THREADS
        return 1
    try:
        from sklearn.utils._openmp_helpers import _openmp_effective_n_threads

        return max(1, int(_openmp_effective_n_threads(only_physical_cores=False)))
    except ImportError:  # pragma: no cover - a scikit-learn without the helper
        return cpu_threads()


def cpu_threads() -> int:
    """The cores this process may use (joblib's count: affinity and cgroup quota) within
    ``OMP_NUM_THREADS``, without importing scikit-learn (0.9 s): what :func:`available_threads`
    counts in a process that sets no ``threadpool_limits``."""
    from joblib import cpu_count

    n = cpu_count()
    omp = os.environ.get("OMP_NUM_THREADS", "")
    return max(1, min(n, int(omp))) if omp.isdigit() and int(omp) > 0 else max(1, n)


def n_threads(n_jobs) -> int:
    """Threads for ``n_jobs`` (:data:`THREAD_POLICY`): ``None`` is :func:`available_threads`
    unless a ``joblib.parallel_config`` / ``parallel_backend`` context sets ``n_jobs``; ``-1``
    every core (as joblib counts them: affinity and cgroup limits included), ``-2`` all but
    one; a positive integer itself."""
    if n_jobs is not None and (
        isinstance(n_jobs, bool) or not isinstance(n_jobs, numbers.Integral) or n_jobs == 0
    ):
        raise ValueError(f"n_jobs must be a non-zero integer or None, got {n_jobs!r}")
    if n_jobs == 1:
        return 1  # as joblib says, without importing it (0.05-0.1 s)
    from joblib import effective_n_jobs

    if n_jobs is None:
        from joblib.parallel import get_active_backend

        if get_active_backend()[1] is None:  # no parallel_config(n_jobs=...) in force
            return available_threads()
    return max(1, int(effective_n_jobs(None if n_jobs is None else int(n_jobs))))


#: ``cache_size='auto'`` in-process: this share of the machine's memory, at most AUTO_CACHE_MAX MB
AUTO_CACHE_SHARE = 1 / 8
AUTO_CACHE_MAX = 4096.0
#: ``cache_size='auto'`` in-process, rows of many features: the coordinator's Gram block may grow
#: past the cache budget to hold a working set of half the rows, up to this share of the memory
AUTO_GRAM_SHARE = 1 / 3
#: ``cache_size='auto'``: the coordinator's Gram block of the working sets takes at most this
#: (MB; 14,000 rows of float32): every row new to it is computed against all it holds, so a
#: larger block costs rounds whose candidates churn (shuttle, letter: 7-15 % slower at 3 GB)
AUTO_GRAM_MAX = 800.0
#: ``cache_size='auto'`` with a ``client`` whose workers have no memory limit: each fit's budget
#: on the cluster (LIBSVM's default, what dmcsvm had before 'auto'; see :func:`partition_cache_mb`)
AUTO_CACHE_CLUSTER = 200.0


#: ``cache_size='auto'``: features per row (nonzeros for sparse rows) from which a kernel value
#: is worth its whole budget; below, the budgets shrink in proportion, to no less than
#: AUTO_CACHE_CLUSTER (see :func:`cache_mb`)
AUTO_CACHE_FULL_FEATURES = 256


def cache_mb(est, features: float | None = None) -> float:
    """The kernel cache budget (MB) of ``est.cache_size``: a number is itself; ``'auto'`` is an
    eighth of this machine's physical memory, at most 4096 MB, in-process (the coordinator's
    Gram block of the working sets and the partitions' kernel columns grow to it only as they
    need), and 200 MB with a ``client`` (its partitions get their workers' share instead:
    :func:`partition_cache_mb`).  A kernel column computed again costs ``n d`` flops;
    on 25,000 deformed MNIST digits 2,000 MB instead of 200 MB computed 39,230 columns instead
    of 257,564 and halved the fit (benchmarks/results/deformed_series.md).

    With ``features`` (per row; nonzeros for sparse rows) below
    :data:`AUTO_CACHE_FULL_FEATURES`, 'auto' takes that share of it, at least 200 MB: a cached
    value is memory written once and read back, a computed one ``features`` multiply-adds, and
    on few features the first costs more (its pages are faulted in, 0.3-2 s per GB on the
    project's VM): shuttle (9 features, 43,500 rows) held 1.5 GB and fitted in 2.6-4.3 s, at
    200 MB in 1.9 s (benchmarks/results/HISTORY.md, 'Budgets by features')."""
    v = est.cache_size
    if not isinstance(v, str):
        return float(v)
    if est.client is not None:
        return AUTO_CACHE_CLUSTER
    return _by_features(_machine_auto_mb(), features)


def partition_cache_mb(est, executor, features: float | None, n_parts: int) -> float:
    """The partitions' column-cache budget (MB) of a fit on ``executor``: :func:`cache_mb`,
    except 'auto' on a Dask cluster (``est.client``) whose workers all have a memory limit:
    there by their workers' memory, as in process by the machine's, an eighth of the smallest
    worker memory limit, at most AUTO_CACHE_MAX MB, for each worker that holds partitions (at
    most ``n_parts`` of them), by ``features`` as :func:`cache_mb`.  With the cluster's 200 MB,
    25,000 deformed digits on a running 2-worker LocalCluster computed 166,218 kernel columns
    (partitions 22.5 s) against 34,580 (13.9 s) in process with 3 GB."""
    if not isinstance(est.cache_size, str) or est.client is None:
        return cache_mb(est, features)
    info = getattr(executor, "worker_info", None) or {}
    limits = [int(w.get("memory_limit") or 0) for w in info.values()]
    if not limits or min(limits) <= 0:
        return cache_mb(est, features)
    per_worker = min(AUTO_CACHE_MAX, min(limits) / 2**20 * AUTO_CACHE_SHARE)
    return _by_features(per_worker * min(len(limits), max(1, n_parts)), features)


def _machine_auto_mb() -> float:
    """'auto' on this machine: an eighth of its physical memory, at most AUTO_CACHE_MAX MB."""
    total = _memory_mb()
    if total is None:  # pragma: no cover - not POSIX
        return 1024.0
    return float(min(AUTO_CACHE_MAX, total * AUTO_CACHE_SHARE))


def _memory_mb() -> float | None:
    """This machine's physical memory (MB), None where POSIX cannot say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return None


def gram_mb(
    est, features: float | None = None, rows: int | None = None, itemsize: int = 4
) -> float | None:
    """The coordinator's Gram budget (MB) for ``est.cache_size``: None (the cache size itself)
    for a number; for 'auto', with ``mb`` this machine's in-process 'auto' (:func:`cache_mb`),
    ``min(mb, 800)`` (measurements: benchmarks/results/HISTORY.md, 'Kernel cache defaults'),
    shared as :func:`cache_mb` by ``features`` below :data:`AUTO_CACHE_FULL_FEATURES`, and the
    whole of ``mb`` from there on.

    On many features the block bounds the working set (:func:`auto_batch`), and a larger one
    takes fewer rounds, so the block grows past ``mb`` to hold a working set of
    half the ``rows`` (of ``itemsize``-byte values), up to :data:`AUTO_GRAM_SHARE` of the
    machine's memory: 100,000 deformed digits fitted in 375 s and 22 rounds with the block
    grown to 8 GB (working sets of 46,340) against 488 s and 40 rounds with 3 GB (28,377).

    The block lives in the fitting process whatever the executor, so a fit with a ``client``
    takes this machine's rule too (its partitions' columns, on the workers, take
    :func:`partition_cache_mb`): with the cluster's 200 MB, 25,000 deformed digits on a running
    2-worker LocalCluster took 39 rounds and 57.6 s against 14 rounds and 29.2 s in process."""
    if not isinstance(est.cache_size, str):
        return None
    mb = _machine_auto_mb()
    if features is not None and features >= AUTO_CACHE_FULL_FEATURES:
        if rows is None:
            return mb
        need = gram_bytes(half_the_rows(rows), itemsize) / 2**20
        total = _memory_mb()
        return max(mb, min(need, total * AUTO_GRAM_SHARE)) if total else mb
    return _by_features(min(mb, AUTO_GRAM_MAX), features)


def _by_features(mb: float, features: float | None) -> float:
    """An 'auto' budget ``mb`` for rows of ``features`` features (:func:`cache_mb`)."""
    if features is None or features >= AUTO_CACHE_FULL_FEATURES:
        return mb
    return max(min(mb, AUTO_CACHE_CLUSTER), mb * max(features, 1.0) / AUTO_CACHE_FULL_FEATURES)


#: MulticlassSVC's ``batch_size=None``: the working set's patterns at least (and on rows of few
#: features, or sparse ones, or a linear kernel: always)
AUTO_BATCH_MIN = 5000


def half_the_rows(n: int) -> int:
    """The working set ``batch_size=None`` aims at on ``n`` rows (:func:`auto_batch`), and what
    the 'auto' Gram block grows to hold (:func:`gram_mb`)."""
    return n // 2


def auto_batch(n: int, features: float, gram_mb: float, itemsize: int, gram_block: bool) -> int:
    """MulticlassSVC's ``batch_size=None`` for ``n`` rows of ``features`` features: half the rows,
    at least :data:`AUTO_BATCH_MIN`, at most the places of the coordinator's Gram block within
    ``gram_mb`` (``itemsize``-byte kernel values), when the coordinator keeps that block
    (``gram_block``: dense rows, a nonlinear kernel) and the rows have at least
    :data:`AUTO_CACHE_FULL_FEATURES` features; :data:`AUTO_BATCH_MIN` otherwise.

    Each round ends with a pass over every active row and their kernel columns for the moved
    patterns, costly on many features; a larger working set settles more of the problem per
    round (its steps move every score through the kernel's near-constant part, and a larger
    sample of the violators keeps those moves from favouring the rows picked).  Deformed digits
    (784 features): 20,000 rows fit in 17.2 s at 10,000 against 22.9 s at 5,000; 50,000 rows
    in 138.6 s at 14,142 against 187 s.  On few features rounds are cheap and the steps of a
    larger set cost more than the rounds it saves: shuttle (9 features) 1.9 s at 7,071
    against 1.5 s (benchmarks/results/HISTORY.md, 'Working-set size by the data')."""
    if not gram_block or features < AUTO_CACHE_FULL_FEATURES or gram_mb <= 0:
        return AUTO_BATCH_MIN
    return int(max(AUTO_BATCH_MIN, min(half_the_rows(n), gram_places(gram_mb * 2**20, itemsize))))


def whole_block_mb(est, n: int, itemsize: int) -> float | None:
    """The Gram block (MB) of all ``n`` rows when it fits ``est.cache_size`` ('auto': this
    machine's, :func:`_machine_auto_mb`, whatever the features), else None.  MulticlassSVC's
    ``batch_size=None`` is then ``n``: the whole problem is one working set and its rounds run
    in the coordinator's block (:mod:`dmcsvm.coordinators.whole_block`), where the partitions
    would have computed kernel columns of the same values (and keep none: the budget their
    columns would have taken holds the block).  Deformed digits (784 features): 10,000 rows
    fit in 4.0 s against 6.9 s with working sets of 5,000 and the partitions' rounds, 25,000 in
    31.5 s against 34.6 s; usps 0.65-0.71 s against 0.91 s (benchmarks/results/HISTORY.md,
    'Rounds in the Gram block')."""
    need = gram_bytes(n, itemsize) / 2**20
    budget = _machine_auto_mb() if isinstance(est.cache_size, str) else float(est.cache_size)
    return need if 0 < need <= budget else None


def features_per_row(td) -> float:
    """Multiply-adds of one kernel value of the training rows ``td``: their features, or their
    mean nonzeros when sparse (a CSR array in memory or a sparse store)."""
    if not td.sparse:
        return float(td.d)
    nnz = getattr(td.store, "nnz", None)
    if nnz is None:
        nnz = getattr(td.original, "nnz", None) or getattr(td.source, "nnz", None)
    return float(td.d) if nnz is None else float(nnz) / max(int(td.n), 1)


def run_chunks(n_jobs, chunks, work) -> None:
    """``work(chunk)`` for every chunk, on ``min(n_threads(n_jobs), len(chunks))`` threads, BLAS
    on one thread in each (:data:`THREAD_POLICY`): several BLAS threads split a product in ways
    that depend on its shape and round a row differently (OpenBLAS 0.3.31), one thread gives
    a row the same bits whatever the thread count (:func:`~dmcsvm.estimators._scoring.blocks`).
    The hold is the counted one of :mod:`dmcsvm.engine.threads`, which a fit running beside
    the prediction shares without either undoing the other's limit."""
    from ..engine.threads import one_blas_thread

    threads = min(n_threads(n_jobs), len(chunks))
    with one_blas_thread():
        if threads > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(work, chunks))
        else:
            for c in chunks:
                work(c)


def make_executor(est, in_process: bool = False):
    """The executor for estimator ``est`` (reads ``client``, ``n_jobs``, the solver option
    ``n_partitions``, ``n_workers``, ``threads_per_worker``, ``memory_limit``).  Returns
    ``(executor, owned)``; pass both to :func:`release_executor` when training ends.

    ``in_process``: the fit's rounds all run in the coordinator's Gram block
    (:func:`~dmcsvm.coordinators.crammer_singer.runs_in_block`), so its partitions only take
    the result and check it: they stay in this process whatever ``client`` says, and no
    cluster is reached or started ('local').  Placing the rows on workers and the two round
    trips cost 0.03-0.14 s on the small real sets (in-process fits of 0.15-0.25 s), and a
    first ``client='local'`` fit's cluster start 2.2-2.6 s (benchmarks/results/HISTORY.md,
    'Fits in the block keep to this process')."""
    n_partitions = est._solver_options()["n_partitions"]
    if est.client is None or in_process:
        return InProcessExecutor(n_threads(est.n_jobs), n_partitions), []
    from ..engine.dask import DaskExecutor, resolve_client

    client, owned = resolve_client(
        est.client, est.n_workers, est.threads_per_worker, est.memory_limit
    )
    try:
        # the coordinator's Gram rows on this process's cores, as in-process (its workers wait
        # while it solves): usps on a LocalCluster, its solves 0.59 -> 0.47 s
        return DaskExecutor(client, n_partitions, n_threads=n_threads(est.n_jobs)), owned
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
            from ..engine.dask import release_client

            release_client(owned)
