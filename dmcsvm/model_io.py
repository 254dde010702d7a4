"""Saving and loading trained models without pickle: arrays in ``.npz`` (allow_pickle=False) and
the settings in JSON, so that opening an untrusted model file can never run code."""

from __future__ import annotations

import json
import os
import tempfile

import numpy as np
import scipy.sparse as sp

MODEL_FORMAT = "dmcsvm-model"
MODEL_VERSION = 1


def save_model(model, path: str) -> None:
    """Write a fitted :class:`~dmcsvm.MulticlassSVC` to ``path`` (a single ``.npz`` file)."""
    from sklearn.utils.validation import check_is_fitted
    check_is_fitted(model)
    meta = {"format": MODEL_FORMAT, "format_version": MODEL_VERSION,
            "estimator": type(model).__name__, "params": _jsonable(model.get_params()),
            "gamma_": float(model.gamma_), "n_features_in_": int(model.n_features_in_),
            "n_iter_": int(model.n_iter_), "classes_kind": model.classes_.dtype.kind}
    arrays = {"dual_coef": model.dual_coef_, "support": model.support_,
              "classes": model.classes_.astype(str) if model.classes_.dtype.kind in "OUS"
              else model.classes_}
    SV = model.support_vectors_
    if sp.issparse(SV):
        SV = SV.tocsr()
        arrays.update(sv_data=SV.data, sv_indices=SV.indices, sv_indptr=SV.indptr,
                      sv_shape=np.asarray(SV.shape))
    else:
        arrays["sv"] = SV
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, suffix=".npz.tmp")
    os.close(fd)
    try:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def load_model(path: str):
    """Read a model written by :func:`save_model`; refuses other files with a clear error."""
    from .estimators import MulticlassSVC
    try:
        z = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is not a dmcsvm model file: {e}") from None
    with z:
        if "meta" not in z.files:
            raise ValueError(f"{path} is not a dmcsvm model file (no metadata)")
        meta = json.loads(bytes(z["meta"]).decode())
        if meta.get("format") != MODEL_FORMAT:
            raise ValueError(f"{path} is not a dmcsvm model file (format {meta.get('format')!r})")
        if meta.get("format_version") != MODEL_VERSION:
            raise ValueError(f"{path} has model format_version {meta.get('format_version')}; "
                             f"this dmcsvm reads version {MODEL_VERSION}")
        m = MulticlassSVC(**meta["params"])
        if "sv" in z.files:
            m.support_vectors_ = z["sv"]
        else:
            m.support_vectors_ = sp.csr_matrix((z["sv_data"], z["sv_indices"], z["sv_indptr"]),
                                               shape=tuple(z["sv_shape"]))
        m.dual_coef_ = z["dual_coef"]
        m.support_ = z["support"]
        m.classes_ = z["classes"]
    m.gamma_ = meta["gamma_"]
    m.n_features_in_ = meta["n_features_in_"]
    m.n_iter_ = meta["n_iter_"]
    return m


def _jsonable(params: dict) -> dict:
    out = {}
    for k, v in params.items():
        if isinstance(v, (np.integer,)):
            v = int(v)
        elif isinstance(v, (np.floating,)):
            v = float(v)
        if v is None or isinstance(v, (bool, int, float, str)):
            out[k] = v
    return out
