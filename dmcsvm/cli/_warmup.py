"""Numba warm-up: compile (or load from numba's on-disk cache) a model's fit and predict code in
this process before a LocalCluster's workers need it."""

from __future__ import annotations

import numpy as np


def start_warmup(model, X, y, rows=200):
    """Compile (or load from numba's cache) the numba code of ``model``'s fit and predict in a
    background thread of this process, on ``rows`` rows of the training data (same dtype, so the
    same specializations), while this process loads what the cluster needs.

    On a first run every process that meets a numba function compiles it; the workers and the
    coordinator used to do that at the same time, each for itself (3 processes compiling the
    same code on a 2-core box).  Compiled once here, the code is in numba's on-disk cache
    (``__pycache__`` beside the modules, or ``NUMBA_CACHE_DIR``) before any worker needs it, and
    the workers load it.  Returns the thread; join it before the LocalCluster starts: its
    scheduler runs in this process, and while numba compiles here the scheduler's event loop
    gets too little of the GIL to answer the workers' heartbeats in time (a worker then logged
    "Failed to communicate with scheduler during heartbeat" with a traceback on a first run).
    """
    import threading

    t = threading.Thread(
        target=warm_up, args=(model, X, y, rows), name="dmcsvm-numba-warmup", daemon=True
    )
    t.start()
    return t


def warm_up(model, X, y, rows=200) -> None:
    """Fit and predict a copy of ``model`` (in this process, one thread) on the first ``rows``
    rows: what :func:`start_warmup` runs.  Any error is ignored (only a head start: the real fit
    reports any problem)."""
    params = dict(model.get_params(deep=False), client=None, n_jobs=1, verbose=False)
    Xs, ys = X[:rows], y[:rows]  # a shuffled split: every class is there
    try:
        type(model)(**params).fit(Xs, ys).predict(Xs[:8])
        if _rounds_in_block(model):
            # those rows' fit ran its rounds in the coordinator's Gram block
            # (coordinators.whole_block); the workers' code is the partitions' rounds, which a
            # working set of a quarter of the rows runs
            opts = dict(params.get("solver_options") or {}, batch_size=max(2, len(ys) // 4))
            type(model)(**dict(params, solver_options=opts)).fit(Xs, ys)
    except Exception:  # noqa: BLE001 - see the docstring
        pass


def _rounds_in_block(model) -> bool:
    """Whether ``model``'s fit of a few rows runs its rounds in the coordinator's Gram block
    (MulticlassSVC with its working set sized by the data)."""
    from ..estimators.multiclass import MulticlassSVC

    opts = getattr(model, "solver_options", None) or {}
    return isinstance(model, MulticlassSVC) and opts.get("batch_size") is None


def warm_up_on_store(model, info, rows=200) -> None:
    """Compile (or load from numba's cache) ``model``'s fit and predict code in this thread on
    the first ``rows`` rows of the store, before a LocalCluster starts (``train
    --local-workers``): see :func:`start_warmup`.  Only the code matters, not the labels: if
    those rows hold one class, every other row is relabelled so that the fit runs."""
    from ..store import read_labels, read_rows

    m = min(int(info.n_samples), rows)
    if m < 2:
        return
    X, y = read_rows(info, 0, m), np.asarray(read_labels(info, 0, m))
    if np.unique(y).shape[0] < 2:
        y = y.copy()
        y[1::2] = y[0] + 1 if np.issubdtype(y.dtype, np.number) else f"{y[0]}_other"
    warm_up(model, X, y, rows=m)
