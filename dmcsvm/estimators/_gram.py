"""Kernels given as values rather than by name: ``kernel='precomputed'`` (``X`` is the Gram
matrix) and a Python callable ``kernel(A, B)``, both in this process only; and the one-vs-one
form of class scores (``decision_function_shape='ovo'``).

A Gram matrix ``K`` (n x n, symmetric positive semidefinite) is trained on as the linear kernel
of the rows of ``Phi = V sqrt(S)`` (``K = V S V^T``, its eigendecomposition, negative eigenvalues
of rounding clipped to 0): ``Phi Phi^T = K``, so the dual problem, its optimum and the support
coefficients are those of ``K`` itself; only ``K[:, support_]`` is needed to predict.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from ._inputs import is_dask, is_store
from ._scoring import ovo_from_scores

__all__ = ["check_in_process", "gram_features", "is_gram_kernel", "ovo_from_scores", "gram_of"]


def is_gram_kernel(kernel) -> bool:
    """Whether ``kernel`` is given by its values: 'precomputed' or a callable."""
    return callable(kernel) or (isinstance(kernel, str) and kernel == "precomputed")


def _kernel_name(kernel) -> str:
    return "kernel='precomputed'" if isinstance(kernel, str) else "a callable kernel"


def check_in_process(est, X) -> None:
    """A Gram matrix or a Python kernel function runs in this process only: a clear error for a
    ``client``, a zarr store or a dask array."""
    what = _kernel_name(est.kernel)
    if getattr(est, "client", None) is not None:
        raise ValueError(
            f"{type(est).__name__} with {what} runs in this process only and "
            f"cannot go to a Dask cluster: set client=None"
        )
    if is_store(X) or is_dask(X):
        kind = "a zarr store" if is_store(X) else "a dask array"
        raise ValueError(
            f"{type(est).__name__} with {what} takes X in memory (a NumPy array) "
            f"in this process only; it cannot go to a cluster, and X is {kind}"
        )


def gram_of(est, X, Y=None, train=False) -> np.ndarray:
    """The kernel values of ``X`` against the training rows ``Y``: ``X`` itself for
    'precomputed' (checked: square when training, as many columns as training rows
    otherwise), ``kernel(X, Y)`` for a callable (checked: its shape), as float64."""
    check_in_process(est, X)
    if isinstance(est.kernel, str):
        K = X.toarray() if sp.issparse(X) else np.asarray(X, dtype=np.float64)
        if K.ndim != 2:
            raise ValueError(
                f"with kernel='precomputed' X must be a 2-D Gram matrix, got shape {K.shape}"
            )
        if train and K.shape[0] != K.shape[1]:
            raise ValueError(
                f"with kernel='precomputed' X must be the square Gram matrix of "
                f"the training rows, got shape {K.shape}"
            )
        return np.asarray(K, dtype=np.float64)
    K = np.asarray(est.kernel(X, X if Y is None else Y), dtype=np.float64)
    expected = (X.shape[0], (X if Y is None else Y).shape[0])
    if K.shape != expected:
        raise ValueError(
            f"the kernel callable returned shape {K.shape} for inputs of "
            f"{expected[0]} and {expected[1]} rows; expected {expected}"
        )
    return K


def gram_features(K) -> np.ndarray:
    """Rows ``Phi`` with ``Phi @ Phi.T == K`` (to rounding) of a symmetric positive
    semidefinite ``K``: ``V sqrt(S)`` of its eigendecomposition.  Eigenvalues below
    ``-1e-8 max|S|`` mean ``K`` is not positive semidefinite: a warning says so, and they are
    clipped to 0 (the nearest positive semidefinite kernel)."""
    if not np.all(np.isfinite(K)):
        raise ValueError("the Gram matrix contains NaN or infinity")
    asym = np.max(np.abs(K - K.T)) if K.size else 0.0
    scale = np.max(np.abs(K)) if K.size else 0.0
    if asym > 1e-8 * max(scale, 1.0):
        raise ValueError(
            f"the Gram matrix of the training rows must be symmetric; max |K - K^T| = {asym:.3g}"
        )
    s, V = np.linalg.eigh((K + K.T) / 2)
    if s.size and s.min() < -1e-8 * max(np.abs(s).max(), 1.0):
        warnings.warn(
            f"the kernel matrix is not positive semidefinite (smallest eigenvalue "
            f"{s.min():.3g}); negative eigenvalues are clipped to 0",
            stacklevel=3,
        )
    keep = s > 1e-12 * max(s.max(initial=0.0), 1.0)
    return np.ascontiguousarray(V[:, keep] * np.sqrt(s[keep]))
