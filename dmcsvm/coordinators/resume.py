"""Resuming a Crammer-Singer solve from a checkpoint: the :class:`CoordinatorState` and first
message rebuilt from a :class:`~dmcsvm.checkpoint.Checkpoint` (the file format is
:mod:`dmcsvm.checkpoint`, the estimators' use of it :mod:`dmcsvm.estimators._checkpoint`)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..checkpoint import Checkpoint
from ..engine.messages import RoundMessage
from .coefficients import CoefficientRows

__all__ = ["resume_state"]


def resume_state(ck: Checkpoint, X=None):
    """The :class:`CoordinatorState` and first message that continue the checkpointed solve.

    The first message sends every support pattern with its full coefficient row, so freshly
    started partitions (``F = 0``, ``B = 0``) rebuild ``F_part = K(X_part, X_SV) @ B_SV`` and
    their copy of ``B``.  When the training data ``X`` is given, the checkpoint's support rows
    are checked against it (a resume on other data fails).
    """
    from .crammer_singer import CoordinatorState

    if X is not None and not (isinstance(X, np.ndarray) or sp.issparse(X)):
        # a store or dask row source: check the shape only, the support rows come from the file
        if tuple(X.shape) != (ck.n, ck.n_features):
            raise ValueError(
                f"{ck.path}: the checkpoint is of data of shape "
                f"({ck.n}, {ck.n_features}); the training data has shape "
                f"{tuple(X.shape)}"
            )
        X = None
    if X is not None:
        if X.shape != (ck.n, ck.n_features):
            raise ValueError(
                f"{ck.path}: the checkpoint is of data of shape "
                f"({ck.n}, {ck.n_features}); the training data has shape {X.shape}"
            )
        if len(ck.ids):
            mine = _take_rows(X, ck.ids)
            a = mine.toarray() if sp.issparse(mine) else np.asarray(mine)
            b = ck.X.toarray() if sp.issparse(ck.X) else np.asarray(ck.X)
            if not np.array_equal(a.astype(np.float64), b.astype(np.float64)):
                raise ValueError(
                    f"{ck.path}: the checkpoint's support patterns differ from "
                    "those rows of the training data (other data?)"
                )
    B = CoefficientRows(ck.n, ck.P)
    B[ck.ids] = ck.B
    state = CoordinatorState(B=B, rounds=ck.rounds)
    n_hist = len(next(iter(ck.history.values()), []))
    for k in state.history:  # keys a newer solver records: NaN for old rounds
        state.history[k] = list(ck.history.get(k, [float("nan")] * n_hist))
    while state.history.n_rows > state.history.limit:  # a checkpoint from an unbounded solver
        state.history.thin()
    Xsv = ck.X
    if X is not None and len(ck.ids):
        Xsv = mine  # the training data's own dtype and layout
    state.bank.add(ck.ids, Xsv)
    first_msg = RoundMessage(ids=ck.ids, XB=Xsv, dB=ck.B.copy()) if len(ck.ids) else None
    return state, first_msg


def _take_rows(X, ids):
    """Rows ``ids`` (increasing) of the training data: an array / CSR matrix, a store row source
    (``.url``; read chunk by chunk) or a dask row source (``.array``)."""
    if isinstance(X, np.ndarray) or sp.issparse(X):
        return X[ids]
    if hasattr(X, "url"):
        from ..store import open_store, read_rows

        info = open_store(X.url)
        blocks = []
        for lo, hi in info.chunk_bounds:
            sel = ids[(ids >= lo) & (ids < hi)]
            if len(sel):
                blocks.append(read_rows(info, lo, hi)[sel - lo])
        return sp.vstack(blocks).tocsr() if info.sparse else np.concatenate(blocks)
    if hasattr(X, "array"):
        import dask

        out = dask.compute(X.array[ids])[0]
        return out if sp.issparse(out) else np.asarray(out)
    return X[ids]
