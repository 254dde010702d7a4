"""The arithmetic of prediction, without scikit-learn.

The estimators' ``decision_function`` / ``predict`` / ``predict_proba`` compute their values of
an array block with these functions, and :mod:`dmcsvm.cli._fast_predict` calls the same ones on
a model file's arrays without building the estimator (importing scikit-learn is most of a
command-line prediction's time), so both give the same values bit for bit.  Nothing here may
import scikit-learn, dask or zarr.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp

from ..kernels import KernelSpec, kernel_block, prefer_numpy, row_norms_sq
from ._engine import run_chunks

#: rows of one block of a prediction (its kernel values are one block x n_SV)
PREDICT_BLOCK = 256


def blocks(n) -> list[tuple[int, int]]:
    """The row blocks ``(a, b)`` of an ``n``-row prediction: :data:`PREDICT_BLOCK` rows each
    from row 0, whatever the thread count.

    Why fixed, and why float64 with BLAS on one thread per block (:func:`_as_float64`,
    :func:`~dmcsvm.estimators._engine.run_chunks`): OpenBLAS rounds a row of a product in a
    way that depends on the product's shape.  Several BLAS threads split the product by its
    shape, and a single-precision product rounds a row by the block it is in.  With the blocks
    fixed, a row's prediction does not depend on ``n_jobs``, bit for bit.  Other groupings of
    the same rows (a store's chunks against the whole array) agree to rounding, and to the bit
    only where the BLAS kernels are shape-stable: 0.3.31's Haswell kernels give a row the same
    bits in any double-precision block of a multiple of 8 rows; its SkylakeX (AVX-512) kernels
    sum a 256-row block's last 4 rows against an odd support count, and blocks of fewer than
    about 40 rows, in another order (1-2 ulps)."""
    return [(a, min(a + PREDICT_BLOCK, n)) for a in range(0, n, PREDICT_BLOCK)]


def _as_float64(A):
    """``A`` (dense or sparse) in float64: a prediction's products run in double precision
    (:func:`blocks`)."""
    return A if A.dtype == np.float64 else A.astype(np.float64)


def prototype_scores(X, spec: KernelSpec, SV, dual_coef, n_jobs) -> np.ndarray:
    """``K(X, SV) @ dual_coef.T`` (n_samples, n_prototypes) in row blocks on ``n_jobs`` threads:
    MulticlassSVC's class scores (one prototype per class)."""
    coef = np.ascontiguousarray(np.asarray(dual_coef, dtype=np.float64).T)
    return _kernel_product(X, spec, SV, coef, n_jobs)


def kernel_times(est, X, SV, coef) -> np.ndarray:
    """``K(X, SV) @ coef`` in row blocks on ``n_jobs`` threads (``coef`` dense or sparse,
    (n_SV, k)); returns a dense (n, k) array.  ``est`` gives ``kernel``, ``gamma_``, ``degree``,
    ``coef0`` and ``n_jobs``."""
    spec = KernelSpec(est.kernel, est.gamma_, int(est.degree), float(est.coef0))
    return _kernel_product(X, spec, SV, coef, est.n_jobs)


def _in_blocks(n, k, n_jobs, block) -> np.ndarray:
    """The (n, k) float64 array whose rows ``a:b`` are ``block(a, b)`` for every row block of
    :func:`blocks`, on ``n_jobs`` threads in all (THREAD_POLICY)."""
    out = np.zeros((n, k))

    def work(ab):
        out[ab[0] : ab[1]] = block(*ab)

    run_chunks(n_jobs, blocks(n), work)
    return out


def _kernel_product(X, spec: KernelSpec, SV, coef, n_jobs) -> np.ndarray:
    """``K(X, SV) @ coef`` (dense (n, k)) in the row blocks of :func:`blocks`, in float64."""
    n = X.shape[0]
    if SV.shape[0] == 0 or n == 0:
        return np.zeros((n, coef.shape[1]))
    SV = _as_float64(SV)
    sv_norms = row_norms_sq(SV)
    jit = not prefer_numpy(n * SV.shape[0])  # a small prediction skips numba's start

    def block(a, b):
        K = kernel_block(spec, _as_float64(X[a:b]), SV, norms_b=sv_norms, jit=jit)
        return (coef.T @ K.T).T if sp.issparse(coef) else K @ coef

    return _in_blocks(n, coef.shape[1], n_jobs, block)


def multiprototype_scores(X, est, spec: KernelSpec):
    """MultiPrototypeSVC's prototype scores (n_samples, n_prototypes): ``X @ prototypes_.T +
    intercept_`` for explicit linear prototypes (``est.prototypes_`` not None), else
    ``K(X, support_vectors_) @ dual_coef_.T``; in row blocks on ``est.n_jobs`` threads."""
    n = X.shape[0]
    if est.prototypes_ is not None:
        W = _as_float64(np.asarray(est.prototypes_))
        S = _in_blocks(
            n, W.shape[0], est.n_jobs, lambda a, b: np.asarray(_as_float64(X[a:b]) @ W.T)
        )
        return S + est.intercept_
    return prototype_scores(X, spec, est.support_vectors_, est.dual_coef_, est.n_jobs)


def best_prototype_per_class(S, n_prototypes, m) -> np.ndarray:
    """MultiPrototypeSVC's class scores: the largest score of each of the ``m`` classes'
    prototypes (n_samples, m); for two classes ``score_1 - score_0``."""
    bounds = np.concatenate([[0], np.cumsum(n_prototypes)])
    D = np.column_stack([S[:, bounds[c] : bounds[c + 1]].max(axis=1) for c in range(m)])
    if m == 2:
        return D[:, 1] - D[:, 0]
    return D


def ovo_votes(D, pairs, m) -> np.ndarray:
    """OneVsOneSVC's decision from the binary problems' values ``D`` (n_samples, n_problems):
    votes of every class plus its summed pairwise confidences squashed into (-1/3, 1/3), so
    that ``argmax`` is the vote winner with ties broken by confidence; for two classes the
    binary decision value (positive means ``classes_[1]``)."""
    if m == 2:
        return -D[:, 0]  # problem (0, 1) has class 0 positive
    n = D.shape[0]
    votes = np.zeros((n, m))
    conf = np.zeros((n, m))
    for k, (i, j) in enumerate(pairs):
        d = D[:, k]
        votes[:, i] += d > 0
        votes[:, j] += d <= 0
        conf[:, i] += d
        conf[:, j] -= d
    return votes + conf / (3.0 * (np.abs(conf) + 1.0))


def ovo_from_scores(S) -> np.ndarray:
    """``f_i - f_j`` for every pair ``i < j`` of classes in scikit-learn's SVC order
    ``(0, 1), (0, 2), ..., (0, k-1), (1, 2), ...``: positive votes for class ``i``, as SVC's
    one-vs-one decision values do.  ``S`` is (n_samples, n_classes)."""
    S = np.asarray(S)
    i, j = np.triu_indices(S.shape[1], k=1)
    return S[:, i] - S[:, j]


def labels_of_scores(classes, D):
    """The class of the largest decision value (a vector ``D``: ``classes[1]`` when positive)."""
    if D.ndim == 1:
        return classes[(D > 0).astype(int)]
    return classes[np.argmax(D, axis=1)]


def _sigmoid(z):
    """``1 / (1 + exp(z))`` without overflow."""
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, e / (1.0 + e), 1.0 / (1.0 + e))


def apply_calibration(method, coef, intercept, D, log=False):
    """Class probabilities (or their logs) of decision values ``D`` under a fitted map."""
    D = np.asarray(D, dtype=np.float64)
    if method == "sigmoid":
        z = D * coef[0] + intercept[0]
        p1 = _sigmoid(z)
        P = np.column_stack([1.0 - p1, p1])
        if log:
            # log P1 = -log(1 + exp(z)), log P0 = -log(1 + exp(-z)): exact in both tails
            return np.column_stack([-np.logaddexp(0.0, -z), -np.logaddexp(0.0, z)])
        return P
    if method == "ovr_sigmoid":
        P = _sigmoid(D * coef[None, :] + intercept[None, :])
        s = P.sum(axis=1, keepdims=True)
        m = P.shape[1]
        P = np.where(s > 0, P / np.where(s > 0, s, 1.0), 1.0 / m)
        return np.log(P) if log else P
    if method == "multinomial":
        Z = D @ coef.T + intercept
        Z = Z - Z.max(axis=1, keepdims=True)
        if log:
            return Z - np.log(np.exp(Z).sum(axis=1, keepdims=True))
        E = np.exp(Z)
        return E / E.sum(axis=1, keepdims=True)
    raise ValueError(f"unknown calibration method {method!r}")


def map_store_chunks(info, fn) -> list:
    """``[fn(rows) of every chunk]`` of the store ``info`` (a
    :class:`~dmcsvm.store.layout.StoreInfo`) in order, on a pool of as many of this machine's
    threads as dask's threaded scheduler would run."""
    from ..store import read_rows

    bounds = list(info.chunk_bounds)
    if not bounds:
        return []

    def one(b):
        return fn(read_rows(info.url, b[0], b[1]))

    workers = max(
        1,
        min(
            len(bounds),
            len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else (os.cpu_count() or 1),
        ),
    )
    if workers == 1:
        out = [one(b) for b in bounds]
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            out = list(pool.map(one, bounds))
    return out
