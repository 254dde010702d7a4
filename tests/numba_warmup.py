"""Numba's first compile, shared out between pytest-xdist's workers (see ``conftest``).

On a fresh clone every process compiles each numba function it meets and saves it to numba's
on-disk cache; xdist's workers start together and meet the same code, so each compiled most of it
for itself.  Here the compile is split into jobs run once, in two phases: first worker 0 compiles
the Crammer-Singer core (``solve_working_set`` with every per-pattern optimizer, the kernels, the
Gram cache: about 24 s of one core; every other kernel estimator calls into it) while the others
compile code that does not touch it (the SMO family, the explicit-W linear paths); then the
variants built on the core (float64 input, per-row bounds, polynomial kernel, ScatterSVC,
MultiPrototypeSVC's kernel path) are dealt out.  Each worker starts its tests when every job is
in the cache.  With a warm cache each job only loads it (a second or two)."""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

import numpy as np

# per phase, the jobs of worker i are JOBS[phase][i::n_workers]
JOBS = (("core", "smo", "linear"),
        ("weighted32", "float64", "weighted64", "poly", "mprot_rbf", "scatter"))


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
    elif job in ("weighted32", "weighted64"):
        Xw = X32 if job == "weighted32" else X
        dmcsvm.MulticlassSVC(n_jobs=1).fit(Xw, y, sample_weight=np.linspace(0.5, 2.0, len(y)))
    elif job == "float64":
        dmcsvm.MulticlassSVC(n_jobs=1).fit(X, y).predict(X)
    elif job == "poly":
        dmcsvm.MulticlassSVC(n_jobs=1, kernel="poly").fit(X, y)
    elif job == "mprot_rbf":
        dmcsvm.MultiPrototypeSVC(n_prototypes=2, max_epochs=2, kernel="rbf", n_jobs=1).fit(X32, y)
    elif job == "scatter":
        dmcsvm.ScatterSVC(n_jobs=1).fit(X32, y).predict(X32)


def warm_up(worker: int, n_workers: int, where: Path, timeout: float = 180.0) -> None:
    """Run worker ``worker``'s jobs of each phase, each phase starting when every worker has
    finished the one before (marker files in ``where``), at most ``timeout`` seconds of waiting
    in all.  Failures are ignored: this only moves compile work earlier, and the tests report any
    real problem."""
    deadline = time.monotonic() + timeout
    for phase, jobs in enumerate(JOBS):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for job in jobs[worker::n_workers]:
                try:
                    _run(job)
                except Exception:  # noqa: BLE001 - see the docstring
                    pass
        (Path(where) / f"numba-{phase}-{worker}").touch()
        while (not all((Path(where) / f"numba-{phase}-{w}").exists() for w in range(n_workers))
               and time.monotonic() < deadline):
            time.sleep(0.2)


def xdist_worker() -> tuple[int, int] | None:
    """(this worker's index, the number of workers) under pytest-xdist with two or more workers,
    else None."""
    wid, n = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not wid or not n or int(n) < 2:
        return None
    return int(wid.removeprefix("gw")), int(n)
