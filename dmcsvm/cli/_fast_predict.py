"""``dmcsvm predict`` without scikit-learn.

Importing scikit-learn takes about half of a command-line prediction.  For the models the
command line trains (MulticlassSVC, MultiPrototypeSVC, BinarySVC, OneVsRestSVC, OneVsOneSVC, and
``train --scale``'s Pipeline of a MinMaxScaler before one of them), :func:`fast_model` reads the
model file's arrays and settings as :func:`dmcsvm.model_io.load_model` does (same checksums)
and gives a :class:`FastModel`, which computes the decision values with the estimators' own
functions of :mod:`dmcsvm.estimators._scoring`, on the same row blocks (a store's chunks, then
the estimator's row chunks): the same labels, decision values and probabilities bit for bit.

Anything else (another estimator or scaler, a precomputed or callable kernel, a model file of
an older format, input that is not finite or not float32/float64, a cluster to run on) returns
None or raises :class:`Unsupported`, and the command takes the estimator's own path, which
also gives its error messages.
"""

from __future__ import annotations

import copy

import numpy as np
import scipy.sparse as sp

from ..estimators import _scoring as sc
from ..estimators._engine import cpu_threads
from ..kernels import KERNELS, KernelSpec
from ..model_io import (
    MODEL_FORMAT,
    MODEL_VERSION,
    _check_consistent,
    _Decoder,
    _read_meta,
)
from ..param_history import upgrade_params

#: the estimators a FastModel computes, and the settings each needs from its file
_NEEDS = {
    "MulticlassSVC": ("kernel", "degree", "coef0", "probability", "decision_function_shape"),
    "MultiPrototypeSVC": ("kernel", "degree", "coef0", "probability"),
    "BinarySVC": ("kernel", "degree", "coef0", "probability"),
    "OneVsRestSVC": ("kernel", "degree", "coef0", "probability"),
    "OneVsOneSVC": ("kernel", "degree", "coef0", "probability"),
}


class Unsupported(Exception):
    """This model or input is left to the estimator's own path."""


def fast_model(path):
    """A :class:`FastModel` of the model file ``path``, or None when the file is not one of the
    kinds it computes (the caller then loads it with :func:`dmcsvm.model_io.load_model`, which
    also reports a foreign or damaged file)."""
    try:
        meta, get, close = _read_meta(path)
    except ValueError:
        return None
    try:
        if meta.get("format") != MODEL_FORMAT or meta.get("format_version") != MODEL_VERSION:
            return None
        tree = meta.get("model")
        if not isinstance(tree, dict):
            return None
        dec = _Decoder(path, get, MODEL_VERSION)
        steps = tree.get("__pipeline__")
        if steps is None:
            model = FastModel(*_entry(dec, tree, _NEEDS), scalers=())
        elif isinstance(steps, list) and steps:
            scalers = [_scaler(dec, item[1]) for item in steps[:-1]]
            model = FastModel(*_entry(dec, steps[-1][1], _NEEDS), scalers=scalers)
        else:
            return None
        return _check_consistent(path, model)  # load_model's check of an edited file
    except (Unsupported, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None  # load_model says what is wrong with the file
    finally:
        close()


def _scaler(dec, node):
    """The settings and attributes of a Pipeline's MinMaxScaler entry, in one dict."""
    _, params, attrs = _entry(dec, node, {"MinMaxScaler": ("copy", "clip")})
    return {**params, **attrs}


def _entry(dec, node, kinds):
    """``(name, settings, attributes)`` of an estimator entry of a kind in ``kinds``."""
    if not isinstance(node, dict):
        raise Unsupported
    name = node.get("__estimator__")
    if (
        name not in kinds
        or not isinstance(node.get("params"), dict)
        or not isinstance(node.get("attrs"), dict)
    ):
        raise Unsupported
    params = upgrade_params(name, node["params"])
    out = {}
    for k in kinds[name]:
        if k not in params:
            raise Unsupported
        v = params[k]
        if isinstance(v, dict):  # only plain JSON settings
            raise Unsupported
        out[k] = v
    attrs = {}
    for k, v in node["attrs"].items():
        if isinstance(v, dict) and ("__estimator__" in v or "__pipeline__" in v):
            raise Unsupported
        attrs[k] = dec.value(v)
    return name, out, attrs


class FastModel:
    """A saved model's arrays and settings with the estimator's block arithmetic: what
    ``dmcsvm predict`` needs (``classes_``, ``n_features_in_``, :meth:`predictions`)."""

    accepts_stores = True

    def __init__(self, name, params, attrs, scalers):
        self.name = name
        self.scalers = list(scalers)
        self.__dict__.update(params)
        self.__dict__.update(attrs)
        self.n_jobs = 1  # a store's chunks are the parallelism: one thread each
        if (
            self.kernel not in KERNELS
            or self.scalers
            and any(s["clip"] or not s["copy"] for s in self.scalers)
        ):
            raise Unsupported
        self.classes_ = np.asarray(self.classes_)
        self.n_features_in_ = int(self.n_features_in_)
        self._spec = KernelSpec(self.kernel, self.gamma_, int(self.degree), float(self.coef0))
        if self.probability and not hasattr(self, "calibration_"):
            raise Unsupported
        if self.scalers:
            self.accepts_stores = False  # a Pipeline: the rows are read into memory

    # ------------------------------------------------------------------ one block
    def _check(self, X):
        """The estimators' ``validate_data(accept_sparse='csr', dtype=[float64, float32])`` for
        the blocks a store gives; anything it would convert or refuse is left to it."""
        if sp.issparse(X):
            if (
                X.format != "csr"
                or X.dtype not in (np.float32, np.float64)
                or not np.isfinite(X.data).all()
            ):
                raise Unsupported
            return X
        X = np.asarray(X)
        if (
            X.ndim != 2
            or X.dtype not in (np.float32, np.float64)
            or not np.isfinite(X).all()
            or X.shape[1] != self.n_features_in_
        ):
            raise Unsupported
        return X

    def _scaled(self, X):
        """``MinMaxScaler.transform`` of every scaler before the estimator (dense, as scikit-
        learn computes it: a copy, ``*= scale_``, ``+= min_``)."""
        for s in self.scalers:
            if (
                sp.issparse(X)
                or X.dtype not in (np.float32, np.float64)
                or not np.isfinite(X).all()
            ):
                raise Unsupported
            X = np.array(X, copy=True)
            X *= s["scale_"]
            X += s["min_"]
        return X

    def _decision_ovr(self, X):
        """The estimator's class scores of a block: what ``predict`` argmaxes and the
        probability map takes."""
        X = self._check(X)
        m = len(self.classes_)
        if self.name == "MulticlassSVC":
            S = sc.prototype_scores(
                X, self._spec, self.support_vectors_, self.dual_coef_, self.n_jobs
            )
            return S[:, 1] - S[:, 0] if S.shape[1] == 2 else S
        if self.name == "MultiPrototypeSVC":
            S = sc.multiprototype_scores(X, self, self._spec)
            return sc.best_prototype_per_class(S, self.n_prototypes_, m)
        if self.name == "BinarySVC":
            return (
                sc.kernel_times(self, X, self.support_vectors_, self.dual_coef_.T)[:, 0]
                + self.intercept_[0]
            )
        D = (
            sc.kernel_times(self, X, self.support_vectors_, self.dual_coef_.T.tocsr())
            + self.intercept_[None, :]
        )
        if self.name == "OneVsOneSVC":
            return sc.ovo_votes(D, self.pairs_, m)
        return D[:, 0] if m == 2 else D

    def _outputs(self, X, decision, proba):
        """``(labels, decision values or probabilities or None)`` of one block."""
        S = self._decision_ovr(self._scaled(X))
        pred = sc.labels_of_scores(self.classes_, S)
        if proba:
            return pred, sc.apply_calibration(
                self.calibration_, self.calibration_coef_, self.calibration_intercept_, S
            )
        if not decision:
            return pred, None
        if getattr(self, "decision_function_shape", "ovr") == "ovo" and S.ndim == 2:
            return pred, sc.ovo_from_scores(S)
        return pred, S

    def decision_function(self, X):
        """The estimator's ``decision_function`` of rows in memory."""
        return self._outputs(X, True, False)[1]

    def predict(self, X):
        """The estimator's ``predict`` of rows in memory."""
        return self._outputs(X, False, False)[0]

    def predictions(self, info, decision=False, proba=False, X=None):
        """``(labels, decision values / probabilities or None)`` of the store ``info`` as the
        estimator gives them: chunk by chunk with one thread each, or for a Pipeline of the
        rows ``X`` read into memory."""
        if not self.accepts_stores:
            # n_jobs=None in a loaded estimator: the threads it counts, here without importing
            # scikit-learn for the count (the values do not depend on it)
            model = copy.copy(self)
            model.n_jobs = cpu_threads()
            return model._outputs(X, decision, proba)
        parts = sc.map_store_chunks(info, lambda block: self._outputs(block, decision, proba))
        if not parts:
            raise Unsupported  # an empty store: the estimator's path says so
        pred = np.concatenate([p for p, _ in parts], axis=0)
        D = None if parts[0][1] is None else np.concatenate([d for _, d in parts], axis=0)
        return pred, D
