"""Input forms every estimator accepts: numpy, scipy.sparse, a dask array, or a zarr store path/URL.

Training data becomes a *row source* for the executors (an in-memory array, a
:class:`~dmcsvm.engine.rows.StoreSource` read by the workers themselves, or a
:class:`~dmcsvm.engine.rows.DaskSource` persisted on the cluster), so a store or a dask array is
never gathered on the coordinator.  Prediction of a store or a dask array runs chunk-parallel
(one task per row chunk, each reading or receiving only its rows).
"""

from __future__ import annotations

import os
import sys
import uuid
import warnings
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import validate_data

from ..engine.rows import DaskSource, StoreSource
from ..errors import NonFiniteError, check_finite_rows
from ..kernels import resolve_gamma, row_norms_sq
from ._scoring import labels_of_scores, map_store_chunks


def is_store(X) -> bool:
    """A zarr store location: a path or URL string (or os.PathLike)."""
    return isinstance(X, (str, os.PathLike))


def is_dask(X) -> bool:
    """A dask array.  Checked without importing ``dask.array`` (0.6 s of a command-line predict):
    an object can only be a dask array once that module is loaded."""
    da = sys.modules.get("dask.array")
    return da is not None and isinstance(X, da.Array)


@dataclass
class TrainingData:
    """Training input resolved for the executors.

    ``source`` is what ``executor.start`` receives; ``labels`` the label vector in memory
    (:func:`fit_inputs` drops it once it has the classes and every row's class index);
    ``align`` the row count partition edges should fall on (the store's chunking).
    """

    source: object
    labels: np.ndarray | None
    n: int
    d: int
    sparse: bool
    dtype: np.dtype
    align: int = 1
    var: float | None = None  # X.var() over all entries, for gamma='scale'
    #: the store's optional per-row weights (its ``sample_weight`` array), None otherwise
    sample_weight: np.ndarray | None = None
    #: the validated store (:class:`~dmcsvm.store.layout.StoreInfo`) of a store input
    store: object = None
    #: the rows as given (float64 array or CSR) when ``source`` holds them cast to float32 for
    #: float32 kernel values (:func:`in_kernel_precision`); None otherwise
    original: object = None

    @property
    def in_process(self) -> bool:
        """Whether the rows are held in this process (an ndarray or CSR), not read from a store
        or a dask array where the workers are."""
        return isinstance(self.source, np.ndarray) or sp.issparse(self.source)

    def gamma(self, gamma) -> float:
        """The kernel coefficient, resolved as scikit-learn's SVC does; with a
        ``sample_weight`` (not all ones) ``'scale'`` uses the variance of X with rows counted
        that many times, so that integer weights and repeated rows give the same kernel."""
        if (
            isinstance(gamma, str)
            and gamma == "scale"
            and self.sample_weight is not None
            and not np.all(self.sample_weight == 1.0)
        ):
            var = _weighted_var(self, self.sample_weight)
            return 1.0 / (self.d * var) if var > 0 else 1.0
        if self.in_process:
            return resolve_gamma(gamma, self.source)
        if isinstance(gamma, str) and gamma == "scale":
            return 1.0 / (self.d * self.var) if self.var and self.var > 0 else 1.0
        return resolve_gamma(gamma, np.zeros((0, self.d)))


def _weighted_var(td: TrainingData, w) -> float:
    """Variance of all entries of X with row ``i`` counted ``w[i]`` times (float64 sums),
    streamed by row blocks for a store or a dask array."""

    def sums(X, wb):
        X2 = X.multiply(X) if sp.issparse(X) else np.asarray(X, dtype=np.float64) ** 2
        rs = np.asarray(X.sum(axis=1), dtype=np.float64).ravel()
        rq = np.asarray(X2.sum(axis=1), dtype=np.float64).ravel()
        return float(wb @ rs), float(wb @ rq)

    src = td.source
    if isinstance(src, StoreSource):
        from ..store import open_store, read_rows

        info = open_store(src.url)
        parts = [sums(read_rows(info, lo, hi), w[lo:hi]) for lo, hi in info.chunk_bounds]
    elif isinstance(src, DaskSource):
        import dask

        X = src.array
        parts = [
            tuple(
                float(v)
                for v in dask.compute((X.sum(axis=1) * w).sum(), ((X * X).sum(axis=1) * w).sum())
            )
        ]
    else:
        X = src.tocsr() if sp.issparse(src) else src
        parts = [sums(X, w)]
    s, s2 = sum(p[0] for p in parts), sum(p[1] for p in parts)
    count = float(np.sum(w)) * td.d
    mean = s / count
    return s2 / count - mean * mean


def _store_var(info) -> float:
    """Mean and variance of all entries of a store, streamed chunk by chunk (float64 sums)."""
    from ..store import read_rows

    s = s2 = 0.0
    for lo, hi in info.chunk_bounds:
        X = read_rows(info, lo, hi)
        v = X.data if sp.issparse(X) else X
        v = v.astype(np.float64, copy=False)
        s += float(v.sum())
        s2 += float(np.dot(v.ravel(), v.ravel()))
    count = float(info.n_samples) * info.n_features
    mean = s / count
    return s2 / count - mean * mean


def _check_no_y(y, name):
    if y is not None:
        raise ValueError(
            f"y must be None when X is a data store ({name!r}): the labels are read "
            f"from the store's 'y' array"
        )


def training_data(est, X, y, store_labels=True) -> TrainingData:
    """Validate ``(X, y)`` for ``est.fit`` and resolve them to a :class:`TrainingData`.

    A store is validated by :func:`dmcsvm.store.open_store` before any worker starts (missing
    arrays, wrong format version, mismatched lengths, chunking that splits rows).  With
    ``store_labels=False`` a store's labels are not read (``labels`` None; see
    :func:`fit_inputs`).
    """
    if is_store(X):
        from ..store import open_store, read_labels

        _check_no_y(y, str(X))
        info = open_store(X)
        labels = None
        if store_labels:
            labels = read_labels(info)
            if info.classes is not None:
                labels = np.asarray(info.classes, dtype=object)[labels]
        est.n_features_in_ = info.n_features
        row_bytes = (
            (8.0 * info.nnz / max(info.n_samples, 1) + 8.0)
            if info.sparse
            else 4.0 * info.n_features
        )
        src = StoreSource(info.url, info.n_samples, info.n_features, info.rows_per_chunk, row_bytes)
        var = _store_var(info) if getattr(est, "gamma", None) == "scale" else None
        from ..store import read_sample_weight

        return TrainingData(
            src,
            labels,
            info.n_samples,
            info.n_features,
            info.sparse,
            np.dtype(np.float32),
            info.rows_per_chunk,
            var,
            read_sample_weight(info),
            store=info,
        )
    if is_dask(X):
        import dask.array as da

        if X.ndim != 2:
            raise ValueError(f"Expected a 2-dimensional dask array for X, got shape {X.shape}")
        if y is None:
            raise ValueError("y is required when X is a dask array")
        if X.dtype.kind not in "fiub":
            raise ValueError(f"X must hold numbers, got a dask array of dtype {X.dtype}")
        labels = np.asarray(y.compute() if is_dask(y) else y)
        if labels.ndim != 1:
            raise ValueError(f"y must be 1-dimensional, got shape {labels.shape}")
        if labels.shape[0] != X.shape[0]:
            raise ValueError(
                f"Found input variables with inconsistent numbers of samples: "
                f"[{X.shape[0]}, {labels.shape[0]}]"
            )
        if X.shape[0] < 1 or X.shape[1] < 1:
            raise ValueError(
                f"X must have at least one sample and one feature, got shape {X.shape}"
            )
        dtype = np.dtype(np.float32) if X.dtype == np.float32 else np.dtype(np.float64)
        X = X.astype(dtype)
        finite, var = da.compute(da.isfinite(X).all(), X.var(dtype=np.float64))
        if not bool(finite):
            raise ValueError("Input X contains NaN or infinity.")
        if not np.isfinite(var):
            raise NonFiniteError(
                f"the variance of X is {float(var)!r}: its values are so large "
                f"that their squares overflow; scale the features"
            )
        est.n_features_in_ = int(X.shape[1])
        return TrainingData(
            DaskSource(X), labels, int(X.shape[0]), int(X.shape[1]), False, dtype, 1, float(var)
        )
    X, labels = validate_data(est, X, y, accept_sparse="csr", dtype=[np.float64, np.float32])
    # finite entries whose squares overflow (|x| ~ 1e154 and up) make every score NaN: refuse
    # them before gamma='scale' or any kernel reads them, naming the row
    check_finite_rows("its squared norm", 0, row_norms_sq(X))
    return TrainingData(X, labels, X.shape[0], X.shape[1], sp.issparse(X), X.dtype)


#: ``kernel_dtype`` values: the precision of kernel values (and of the rows they are formed from)
KERNEL_DTYPES = ("float32", "float64")

#: numpydoc text of ``kernel_dtype``, shared by every kernel estimator's docstring
KERNEL_DTYPE_DOC = """\
    kernel_dtype : {'float32', 'float64'}, default='float32'
        Precision of the kernel values the solver computes and caches.  'float32' (LIBSVM
        keeps its kernel cache in float as well) casts float64 rows to float32 for the kernel
        computations: half the memory traffic, twice the cached columns and single-precision
        GEMMs, with scores, coefficients and the dual kept in float64 and squared distances
        formed in float64.  'float64' computes them from the rows as given (float32 input,
        such as a zarr store, stays float32).  ``support_vectors_`` are the rows as given.
        The linear kernel's explicit-weight path works on the rows as given either way."""


def in_kernel_precision(est, td: TrainingData) -> TrainingData:
    """``td`` with in-memory float64 rows (array, CSR, dask array) cast to float32 when
    ``est.kernel_dtype`` is 'float32' (the rows as given stay in ``original`` for
    ``support_vectors_``); unchanged otherwise.  The cast costs one pass over X; every round
    then reads half the bytes and runs sgemm instead of dgemm."""
    if getattr(est, "kernel_dtype", "float64") != "float32" or td.dtype == np.float32:
        return td
    src = td.source
    if isinstance(src, DaskSource):
        return replace(
            td, source=DaskSource(src.array.astype(np.float32)), dtype=np.dtype(np.float32)
        )
    if isinstance(src, np.ndarray) or sp.issparse(src):
        X32 = src.astype(np.float32)
        if sp.issparse(X32):
            X32 = X32.tocsr()
        return replace(td, source=X32, dtype=np.dtype(np.float32), original=src)
    return td


def rows_of(td: TrainingData, ids) -> np.ndarray:
    """X rows ``ids`` (in the given order) of a training input: indexing for arrays and CSR, the
    store chunks that hold them for a store, one small computation for a dask array."""
    ids = np.asarray(ids, dtype=np.int64)
    src = td.source
    if not isinstance(src, (StoreSource, DaskSource)):
        return src[ids]
    if isinstance(src, StoreSource):
        # the chunks holding the rows, read once each (StreamingRows.take)
        from ..engine.rows import StreamingRows

        rows = StreamingRows(src.slice(0, td.n))
        try:
            return rows.take(ids)
        finally:
            rows.close()
    order = np.argsort(ids, kind="stable")
    got = np.asarray(src.array[ids[order]].compute(scheduler="threads"))
    inv = np.empty_like(order)
    inv[order] = np.arange(order.shape[0])
    return got[inv]


class RowsView:
    """``view[ids]`` = :func:`rows_of` ``(td, ids)``: what solvers index as ``X[ids]``."""

    def __init__(self, td: TrainingData):
        self.td = td
        self.shape = (td.n, td.d)

    def __getitem__(self, ids):
        return rows_of(self.td, ids)


# ---------------------------------------------------------------------------------- prediction


def _check_features(est, d):
    if d != est.n_features_in_:
        raise ValueError(
            f"X has {d} features, but {type(est).__name__} is expecting "
            f"{est.n_features_in_} features as input."
        )


def _store_apply(url, lo, hi, fn, *args):
    from ..store import read_rows

    return fn(read_rows(url, lo, hi), *args)


def _map_row_blocks(est, X, fn, args, token, trailing, dtype):
    """``fn(block, *args)`` over the row blocks of a dask array (lazy dask array back) or the
    chunks of a store (one task per chunk, computed now on the estimator's cluster or local
    threads; ndarray back), each block a ``(rows,) + trailing`` result."""
    import dask
    from dask import delayed

    if is_dask(X):
        import dask.array as da

        if X.ndim != 2:
            raise ValueError(f"Expected a 2-dimensional dask array for X, got shape {X.shape}")
        _check_features(est, X.shape[1])
        X = X.rechunk({1: -1})
        parts = []
        for i, (blk, rows) in enumerate(zip(X.to_delayed().ravel(), X.chunks[0], strict=False)):
            t = delayed(fn, pure=True)(blk, *args, dask_key_name=f"dmcsvm-predict-{token}-{i}")
            parts.append(da.from_delayed(t, shape=(rows,) + trailing, dtype=dtype))
        return da.concatenate(parts, axis=0) if parts else da.zeros((0,) + trailing, dtype=dtype)
    from ..store import open_store

    info = open_store(X)
    _check_features(est, info.n_features)
    tasks = [
        delayed(_store_apply, pure=True)(
            info.url, lo, hi, fn, *args, dask_key_name=f"dmcsvm-predict-{token}-{i}"
        )
        for i, (lo, hi) in enumerate(info.chunk_bounds)
    ]
    scheduler, owned = _predict_scheduler(est)
    try:
        out = dask.compute(*tasks, scheduler=scheduler)
    finally:
        for obj in owned:
            obj.close()
    return np.concatenate(out, axis=0) if out else np.zeros((0,) + trailing, dtype=dtype)


def _predict_scheduler(est):
    """The estimator's cluster when it names one (a Client or a scheduler address), else dask's
    threaded scheduler on this machine, as the function itself: a scheduler named by a string
    makes ``dask.compute`` import distributed (0.6 s of a command-line predict)."""
    client = getattr(est, "client", None)
    if isinstance(client, str) and client != "local":
        from distributed import Client

        c = Client(client)
        return c, [c]
    # a Client object means distributed is loaded: no import (0.6 s) for the common local case
    distributed = sys.modules.get("distributed")
    if distributed is not None and isinstance(client, distributed.Client):
        return client, []
    import dask.threaded

    return dask.threaded.get, []


def decision_scores(est, X):
    """The decision values ``predict`` argmaxes: ``est._decision_ovr`` (one score per class
    whatever ``decision_function_shape`` says) where the estimator has it, else its
    ``decision_function``."""
    method = getattr(est, "_decision_ovr", None)
    return method(X) if method is not None else est.decision_function(X)


class ChunkedPredictMixin:
    """``predict`` and ``score`` over ``decision_function`` for estimators whose decision takes
    arrays, dask arrays (lazy result) and zarr stores (chunk-parallel)."""

    #: ``fit`` / ``predict`` take a zarr store path (the CLI passes stores through unread)
    accepts_stores = True

    def predict(self, X):
        """Class of the largest decision value; a dask array for a dask-array input."""
        D = decision_scores(self, X)
        if is_dask(D):
            classes = self.classes_
            if D.ndim == 1:
                return D.map_blocks(lambda d: classes[(d > 0).astype(int)], dtype=classes.dtype)
            return D.map_blocks(
                lambda d: classes[np.argmax(d, axis=1)], drop_axis=1, dtype=classes.dtype
            )
        return labels_of_scores(self.classes_, D)

    def score(self, X, y=None, sample_weight=None):
        """Mean accuracy; for a zarr store ``y`` may be omitted (the store's labels are used)."""
        if is_store(X) and y is None:
            from ..store import open_store, read_labels

            info = open_store(X)
            y = read_labels(info)
            if info.classes is not None:
                y = np.asarray(info.classes, dtype=object)[y]
        if is_dask(y):
            y = y.compute()
        pred = self.predict(X)
        if is_dask(pred):
            pred = pred.compute()
        from sklearn.metrics import accuracy_score

        return accuracy_score(y, pred, sample_weight=sample_weight)


def _method_block(X, est, method):
    return getattr(est, method)(X)


def chunked_method(est, X, method):
    """``est.<method>`` of a zarr store (computed now, one task per chunk; returns ndarray) or of
    a dask array (a lazy dask array, one task per row block), for estimators whose method takes
    an array block.  The fitted model travels to the tasks without its cluster handle; the test
    rows are never gathered in one place."""
    import copy

    token = uuid.uuid4().hex[:8]
    model = copy.copy(est)
    model.client = None  # a Client does not travel; the tasks need none
    if hasattr(model, "n_jobs"):
        model.n_jobs = 1  # the tasks are the parallelism: one thread each
    probe = np.asarray(getattr(model, method)(np.zeros((1, est.n_features_in_))))
    if is_store(X) and _predicts_locally(est):
        return _store_map_local(est, X, model, method, probe)

    from dask import delayed

    model_d = delayed(model, pure=True, name=f"dmcsvm-model-{token}", traverse=False)
    return _map_row_blocks(
        est, X, _method_block, (model_d, method), token, probe.shape[1:], probe.dtype
    )


def _predicts_locally(est) -> bool:
    """Whether a store's chunks are computed on this machine's threads (no cluster named by
    the estimator's ``client``): what :func:`_predict_scheduler` would give as dask's
    threaded scheduler."""
    client = getattr(est, "client", None)
    if isinstance(client, str) and client != "local":
        return False
    distributed = sys.modules.get("distributed")
    return not (distributed is not None and isinstance(client, distributed.Client))


def _store_map_local(est, X, model, method, probe):
    """``model.<method>`` of every chunk of a store on a pool of this machine's threads, as
    many as dask's threaded scheduler would run, without importing dask (0.1-0.2 s of a
    command-line prediction): the same per-chunk computations, concatenated in order."""
    from ..store import open_store

    info = open_store(X)
    _check_features(est, info.n_features)
    out = map_store_chunks(info, lambda block: _method_block(block, model, method))
    return (
        np.concatenate(out, axis=0) if out else np.zeros((0,) + probe.shape[1:], dtype=probe.dtype)
    )


def fit_inputs(est, X, y, min_classes=2, lazy_store_labels=False):
    """The resolved training input (:class:`TrainingData`: arrays, CSR, a zarr store path or a
    dask array), the class labels and the class index of every row.

    With ``lazy_store_labels`` a store's classes are found chunk by chunk and the class index
    is a :class:`~dmcsvm.store.class_index.StoreClassIndex` (read where it is used: each
    partition reads its own rows' labels), not an n-long array on the coordinator; for callers
    that only slice it per partition and index it at the support rows."""
    if lazy_store_labels and is_store(X):
        from ..store.class_index import StoreClassIndex, scan_classes

        td = training_data(est, X, y, store_labels=False)
        classes, table = scan_classes(td.store)
        check_store_targets(classes, td.n)
        _check_min_classes(est, classes, min_classes)
        return td, classes, StoreClassIndex(td.store, 0, td.n, classes, table)
    td = training_data(est, X, y)
    y = td.labels
    check_classification_targets(y)
    classes, y_idx = np.unique(y, return_inverse=True)
    _check_min_classes(est, classes, min_classes)
    # the raw labels are not needed past this point: one O(n) array less on the coordinator
    # while it trains (docs/design.md, 'The coordinator's size')
    td.labels = None
    return td, classes, y_idx.astype(np.int64, copy=False)


_MANY_CLASSES = "The number of unique classes is greater than 50% of the number of samples"


def check_store_targets(classes, n_samples) -> None:
    """scikit-learn's ``check_classification_targets`` for a store, whose labels are known by
    their classes (found chunk by chunk) and row count: the same errors for labels that are
    not classes, and its "more classes than half the samples" warning only when that is so of
    the rows (checking the classes alone, each once, warned for every store of more than 20
    classes)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_MANY_CLASSES, category=UserWarning)
        check_classification_targets(classes)
    if n_samples > 20 and classes.shape[0] > round(0.5 * n_samples):
        warnings.warn(
            f"{_MANY_CLASSES}. `y` could represent a regression problem, not a "
            f"classification problem.",
            UserWarning,
            stacklevel=4,
        )


def _check_min_classes(est, classes, min_classes):
    if classes.shape[0] < min_classes:
        raise ValueError(
            f"{type(est).__name__} needs samples of at least 2 classes in the data, "
            f"but the data contains only one class: {classes.tolist()[0]!r}"
        )
