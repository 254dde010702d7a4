"""One BLAS thread for dmcsvm's numerics, held by reference count instead of a process-global
switch.

Every kernel block, score update and batch solve of dmcsvm runs with BLAS on one thread: the
partitions are the parallelism (one per core), and a GEMM's rounding may depend on how many
threads share it, so the same data must meet the same thread count wherever it runs — in-process,
on a Dask worker started with or without a nanny (a nanny sets ``OMP_NUM_THREADS=1``, a bare
``dask worker --no-nanny`` does not), and beside another fit in the same process.

threadpoolctl's limit is a process-wide setting, so two fits that each set it and restore it at
their end change each other's thread count half-way (two fits in threads of one process gave 59 of
5,000 different predictions).  :func:`one_blas_thread` counts its holders: the first sets the
limit, the last restores what was there before, and any number of fits, partitions and predictions
may hold it at once.

A limit of OpenBLAS (0.3.31, the one numpy and scipy ship here): once the main thread has set the
thread count, calls from other threads to set it are ignored.  A program whose first fit ran in its
main thread and whose later fits run in other threads (a threading backend of GridSearchCV) keeps
the count the main thread last left, which dmcsvm restores to the user's setting after each fit.
Dask workers (nanny or not) and the in-process executor started from the main thread are not
affected.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from threadpoolctl import ThreadpoolController

__all__ = ["one_blas_thread", "BlasThreadHold", "LazyPool", "limit_blas"]

_lock = threading.Lock()
_holders = 0
_limits = None

_controller_lock = threading.Lock()
_controller = None
_controller_modules = -1


def _blas_controller() -> ThreadpoolController:
    """threadpoolctl's view of the BLAS / OpenMP libraries in the process, made once and made
    again only after imports loaded new modules (a new shared library comes with one).  Making
    it reads the process's map of shared libraries: 3 ms, which every ``threadpool_limits``
    call paid again (a fifth of a digits linear fit, 14 ms)."""
    global _controller, _controller_modules
    with _controller_lock:
        n = len(sys.modules)
        if _controller is None or n != _controller_modules:
            _controller = ThreadpoolController()
            _controller_modules = n
        return _controller


def limit_blas(n: int):
    """``threadpool_limits(n, user_api="blas")`` on the cached controller: limits BLAS (not
    OpenMP, whose limit is the user's, read by ``n_jobs=None``) to ``n`` threads now; a
    context manager, or ``restore_original_limits()`` undoes it."""
    return _blas_controller().limit(limits=int(n), user_api="blas")


def _acquire() -> None:
    global _holders, _limits
    with _lock:
        if _holders == 0:
            _limits = limit_blas(1)
        _holders += 1


def _release() -> None:
    global _holders, _limits
    with _lock:
        _holders -= 1
        if _holders == 0 and _limits is not None:
            _limits.restore_original_limits()
            _limits = None


@contextlib.contextmanager
def one_blas_thread():
    """BLAS limited to one thread while the block runs (and while any other holder runs)."""
    _acquire()
    try:
        yield
    finally:
        _release()


class BlasThreadHold:
    """A hold that lives as long as an object does (a partition on its worker): taken by the
    constructor, given back once by :meth:`release`."""

    def __init__(self):
        _acquire()
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            _release()


class LazyPool:
    """A thread pool started at its first use and kept for the solve's later ones, until
    :meth:`close` (a later use starts it again): a solve's thousands of small parallel steps
    (the coordinator's Gram rows, the sequential solver's primal checks) would otherwise pay a
    pool's thread starts each time (a fifth of a letter q = 5 primal check)."""

    def __init__(self, workers: int, name: str):
        self.workers, self.name = int(workers), name
        self._pool = None

    @property
    def started(self) -> bool:
        """Whether the threads are running (from the first use to :meth:`close`)."""
        return self._pool is not None

    def _get(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix=f"dmcsvm-{self.name}")
        return self._pool

    def submit(self, fn, *args):
        return self._get().submit(fn, *args)

    def map(self, fn, items):
        return self._get().map(fn, items)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
