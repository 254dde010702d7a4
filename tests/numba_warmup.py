"""Numba's first compile, shared out between pytest-xdist's workers (see ``conftest``).

On a fresh clone every process compiles each numba function it meets and saves it to numba's
on-disk cache; xdist's workers start together and meet the same code first, so each compiled the
Crammer-Singer core (``solve_working_set`` with every per-pattern optimizer, the kernels and the
Gram cache: about 24 s of one core) for itself.  Here worker 0 compiles that core while the
others compile code the core does not touch (the SMO family, the explicit-W linear paths), and
every worker starts its tests once the core is in the cache.  With a warm cache each job only
loads it (a second or two)."""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

import numpy as np

# job lists by worker (worker i runs JOBS[i % len(JOBS)]); the first list holds the core
JOBS = (("core",), ("smo",), ("linear",))


def _iris():
    from sklearn.datasets import load_iris
    X, y = load_iris(return_X_y=True)
    return X, y


def _run(job):
    import dmcsvm
    X, y = _iris()
    X32 = X.astype(np.float32)
    if job == "core":                   # MulticlassSVC's float32 fast path, fit and predict
        dmcsvm.MulticlassSVC(n_jobs=1).fit(X32, y).predict(X32)
    elif job == "smo":                  # Platt's SMO: one-vs-one, binary with per-row bounds
        dmcsvm.OneVsOneSVC(n_jobs=1).fit(X32, y).predict(X32)
        dmcsvm.BinarySVC(n_jobs=1).fit(X, y > 0, sample_weight=np.linspace(0.5, 2.0, len(y)))
    elif job == "linear":               # explicit W: linear Crammer-Singer, MultiPrototypeSVC
        dmcsvm.MulticlassSVC(n_jobs=1, kernel="linear").fit(X, y)
        dmcsvm.MultiPrototypeSVC(n_prototypes=2, max_epochs=2, n_jobs=1).fit(X, y).predict(X)


def warm_up(worker: int, n_workers: int, where: Path, timeout: float = 180.0) -> None:
    """Run worker ``worker``'s share, then wait (at most ``timeout`` seconds) until worker 0 has
    put the core in the cache, which it signals with a file in ``where``.  Failures are ignored:
    this only moves compile work earlier, and the tests report any real problem."""
    done = Path(where) / "numba-core-compiled"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for job in JOBS[worker % len(JOBS)]:
            try:
                _run(job)
            except Exception:  # noqa: BLE001 - see the docstring
                pass
    if worker == 0:
        done.touch()
        return
    deadline = time.monotonic() + timeout
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.2)


def xdist_worker() -> tuple[int, int] | None:
    """(this worker's index, the number of workers) under pytest-xdist with two or more workers,
    else None."""
    wid, n = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not wid or not n or int(n) < 2:
        return None
    return int(wid.removeprefix("gw")), int(n)
