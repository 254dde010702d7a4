"""Helpers the benchmark scripts share: timing, synthetic data, and the one hook through which a
script sees (or replaces) the executor an estimator trains on.  Imports no benchmark script, so
every script can import it (``_data`` loads the shared data sets, ``_report`` writes results).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np


def load() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def med(ts) -> float:
    """Median of a list of times."""
    return float(statistics.median(ts))


def _times(fn: Callable[[], Any], repeat: int, warm: int) -> list[float]:
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return ts


def timeit(fn: Callable[[], Any], repeat: int = 5, warm: int = 1) -> float:
    """Median seconds of ``fn()`` over ``repeat`` calls after ``warm`` untimed ones."""
    return med(_times(fn, repeat, warm))


def best(fn: Callable[[], Any], repeat: int = 5, warm: int = 1) -> float:
    """Fastest of ``repeat`` timed calls of ``fn()`` after ``warm`` untimed ones: the figure
    least disturbed by other work on a shared machine."""
    return float(min(_times(fn, repeat, warm)))


def blobs(n: int, d: int, P: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows in ``d`` dimensions around ``P`` Gaussian centres, labels 0..P-1, features
    scaled to [-1, 1]; float32 rows, int64 labels."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 1.0, (P, d))
    y = rng.integers(0, P, n)
    X = centers[y] + rng.normal(0.0, 1.1, (n, d))
    X = (X - X.min(0)) / (X.max(0) - X.min(0)) * 2 - 1
    return X.astype(np.float32), y.astype(np.int64)


@contextlib.contextmanager
def executor_hook(wrap: Callable[[Any, Any], Any]) -> Iterator[None]:
    """Within the block, every executor an estimator builds for ``fit`` goes through
    ``wrap(executor, estimator)``, whose result is used instead: a recorder that times and
    counts its calls, or another executor on the same client.  The library is not changed:
    the hook wraps the estimators' ``make_executor`` and puts it back on exit."""
    import dmcsvm.estimators.multiclass as mc

    orig = mc.make_executor

    def hooked(est):
        ex, owned = orig(est)
        return wrap(ex, est), owned

    mc.make_executor = hooked
    try:
        yield
    finally:
        mc.make_executor = orig
