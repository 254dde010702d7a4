"""Saving and loading fitted estimators without pickle.

A model file holds every fitted attribute of an estimator (the public names ending in ``_``:
ndarrays, CSR matrices, scalars, dicts of arrays such as ``history_``, nested lists, fitted
sub-estimators) and its model parameters (``get_params()`` less the where-to-run settings of
:mod:`dmcsvm.runtime_params`, which are neither written nor read), in one of two containers:

- ``*.npz`` (a single file): the arrays as ``a0, a1, ...`` (``allow_pickle=False``) and the JSON
  metadata as the uint8 array ``meta``;
- anything else (a directory, e.g. ``model.zarr``): a zarr group with the arrays ``a0, a1, ...``
  and the JSON metadata in the group attribute ``dmcsvm_model``.

The metadata is a JSON tree::

    {"format": "dmcsvm-model", "format_version": 2, "dmcsvm_version": "...",
     "model": {"__estimator__": "MulticlassSVC", "params": {...}, "attrs": {...}}}

(a saved ``Pipeline`` of scalers and an estimator is ``{"__pipeline__": [[name, step],
...]}`` in place of the ``__estimator__`` entry, each step such an entry) in which every array is
a reference ``{"__array__": "a3", "dtype": "<f8", "shape": [...],
"crc32": ...}``; the checksum catches a truncated or damaged file.  Loading builds the class
from a registry of allowed estimator names (the estimators exported by
:mod:`dmcsvm.estimators`; a name from the file is never imported), checks the parameters
against its signature and sets the attributes, so a model file can never run code.  Files are
written to a temporary name beside the target and renamed into place (atomic on one
filesystem).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import tempfile
import uuid
import zipfile
import zlib

import numpy as np
import scipy.sparse as sp

from .file_modes import atomic_file, default_mode
from .param_history import upgrade_params
from .runtime_params import split_runtime

__all__ = ["MODEL_FORMAT", "MODEL_VERSION", "save_model", "load_model", "estimator_registry"]

MODEL_FORMAT = "dmcsvm-model"
MODEL_VERSION = 3
"""Version written; versions 1 (MulticlassSVC npz of dmcsvm 0.1), 2 and 3 are read.  3: every
``dual_coef_`` is (outputs, n_SV) as scikit-learn's SVC (2 wrote MulticlassSVC's and
MultiPrototypeSVC's as (n_SV, P), ScatterSVC's as (n_SV,)) and ``mu`` of MulticlassSVC /
MultiPrototypeSVC is ``threshold_fraction`` (:mod:`dmcsvm.param_history`)."""

#: estimators whose ``dual_coef_`` format 2 wrote with one row per support vector
_COEF_BY_ROW_V2 = ("MulticlassSVC", "MultiPrototypeSVC", "ScatterSVC")

_ATTR_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*_$")
_PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# ------------------------------------------------------------------------------------ registry


def estimator_registry() -> dict:
    """The estimator classes a model file may name: ``{name: class}``.

    Every scikit-learn estimator exported by :mod:`dmcsvm.estimators` (its ``__all__``), so an
    estimator added there can be saved, loaded and trained from the command line at once.
    """
    from sklearn.base import BaseEstimator

    from . import estimators

    out = {}
    for name in getattr(estimators, "__all__", ()):
        cls = getattr(estimators, name, None)
        if isinstance(cls, type) and issubclass(cls, BaseEstimator):
            out[name] = cls
    return out


#: the preprocessing steps a model file may hold before its estimator (a Pipeline)
_TRANSFORMERS = ("MinMaxScaler", "StandardScaler", "MaxAbsScaler")


def estimator_class(name):
    """The registered estimator class called ``name`` (None for any other name), importing only
    its own module: a model file names one estimator, and loading it to predict need not import
    the others (:func:`estimator_registry` imports them all)."""
    from sklearn.base import BaseEstimator

    from . import estimators

    if not isinstance(name, str) or name not in getattr(estimators, "__all__", ()):
        return None
    cls = getattr(estimators, name, None)
    return cls if isinstance(cls, type) and issubclass(cls, BaseEstimator) else None


def transformer_registry() -> dict:
    """The scikit-learn transformers a saved ``Pipeline`` may hold before its dmcsvm estimator:
    ``{name: class}`` (the feature scalers; their fitted state is plain arrays)."""
    from sklearn import preprocessing

    return {name: getattr(preprocessing, name) for name in _TRANSFORMERS}


def _dataclass_registry() -> dict:
    from .kernels import KernelSpec

    return {"KernelSpec": KernelSpec}


# ------------------------------------------------------------------------------------ encoding


class _Encoder:
    """Turns an estimator into a JSON tree plus a list of numeric arrays."""

    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}

    def array(self, a: np.ndarray, where: str) -> dict:
        a = np.asarray(a)
        if a.dtype.kind in "biufc":
            a = np.ascontiguousarray(a)
            key = f"a{len(self.arrays)}"
            self.arrays[key] = a
            return {
                "__array__": key,
                "dtype": a.dtype.str,
                "shape": list(a.shape),
                "crc32": zlib.crc32(a),
            }
        if a.dtype.kind == "U":
            return {"__strarray__": a.tolist(), "dtype": a.dtype.str, "shape": list(a.shape)}
        if a.dtype.kind == "O":
            items = a.ravel().tolist()
            if all(isinstance(v, (str, bool, int, float)) or v is None for v in items):
                return {
                    "__objarray__": [self.value(v, where) for v in items],
                    "shape": list(a.shape),
                }
        raise ValueError(f"cannot save {where}: arrays of dtype {a.dtype} are not supported")

    def value(self, v, where: str):
        from sklearn.base import BaseEstimator

        if isinstance(v, np.generic):  # before float: np.float64 is a float subclass
            if v.dtype.kind in "biufc":
                item = v.item()
                if isinstance(item, float) and not math.isfinite(item):
                    item = {"__float__": repr(item)}
                elif isinstance(item, complex):
                    return {"__array0__": self.array(np.asarray(v), where)}
                return {"__npscalar__": v.dtype.str, "value": item}
            if v.dtype.kind == "U":
                return str(v)
            raise ValueError(f"cannot save {where}: scalar of dtype {v.dtype}")
        if v is None or isinstance(v, (bool, str, int)):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else {"__float__": repr(v)}
        if isinstance(v, np.ndarray):
            return self.array(v, where)
        if sp.issparse(v):
            fmt = v.format if v.format in ("csr", "csc") else "csr"
            m = v.asformat(fmt)
            return {
                "__sparse__": fmt,
                "shape": list(m.shape),
                "data": self.array(m.data, where),
                "indices": self.array(m.indices, where),
                "indptr": self.array(m.indptr, where),
            }
        if isinstance(v, BaseEstimator):
            return self.estimator(v, where)
        if isinstance(v, dict):
            if all(isinstance(k, str) for k in v):
                return {"__dict__": {k: self.value(x, f"{where}[{k!r}]") for k, x in v.items()}}
            return {
                "__items__": [
                    [self.value(k, where), self.value(x, f"{where}[{k!r}]")] for k, x in v.items()
                ]
            }
        if isinstance(v, (list, tuple)):
            items = [self.value(x, f"{where}[{i}]") for i, x in enumerate(v)]
            return items if isinstance(v, list) else {"__tuple__": items}
        if (
            dataclasses.is_dataclass(v)
            and type(v).__name__ in _dataclass_registry()
            and _dataclass_registry()[type(v).__name__] is type(v)
        ):
            fields = {f.name: self.value(getattr(v, f.name), where) for f in dataclasses.fields(v)}
            return {"__dataclass__": type(v).__name__, "fields": fields}
        raise ValueError(
            f"cannot save {where}: values of type {type(v).__name__} are not supported"
        )

    def pipeline(self, pipe, where="model") -> dict:
        """A ``Pipeline`` of scalers ending in a dmcsvm estimator: its steps, by name."""
        steps = pipe.steps
        if not steps:
            raise ValueError(f"cannot save {where}: the Pipeline has no steps")
        tr = transformer_registry()
        out = []
        for k, (name, step) in enumerate(steps):
            last = k == len(steps) - 1
            if not isinstance(name, str) or not _PARAM_NAME.match(name):
                raise ValueError(f"cannot save {where}: step name {name!r} is not an identifier")
            if not last and tr.get(type(step).__name__) is not type(step):
                raise ValueError(
                    f"cannot save {where}: step {name!r} is a "
                    f"{type(step).__name__}; a saved Pipeline holds only "
                    f"{', '.join(_TRANSFORMERS)} before its dmcsvm estimator"
                )
            out.append(
                [name, self.estimator(step, f"{where}.{name}", registry=None if last else tr)]
            )
        return {"__pipeline__": out}

    def estimator(self, est, where="model", registry=None) -> dict:
        from sklearn.pipeline import Pipeline

        if registry is None and type(est) is Pipeline:
            return self.pipeline(est, where)
        name = type(est).__name__
        reg = estimator_registry() if registry is None else registry
        if reg.get(name) is not type(est):
            raise ValueError(
                f"cannot save {where}: {name} is not a dmcsvm estimator "
                f"(known: {', '.join(sorted(reg))})"
            )
        if callable(getattr(est, "kernel", None)):
            raise ValueError(
                f"cannot save {where}: its kernel is a Python callable, and a model "
                f"file stores no code; save a model with a named kernel, or with "
                f"kernel='precomputed' and your kernel's values"
            )
        # where-to-run settings (cluster, threads, caches, checkpoints) are never written: a
        # model file must not choose where the code that loads it connects (runtime_params)
        model_params, _ = split_runtime(est.get_params(deep=False))
        params = {k: self.value(v, f"{where}.{k}") for k, v in model_params.items()}
        attrs = {
            k: self.value(v, f"{where}.{k}")
            for k, v in sorted(vars(est).items())
            if _ATTR_NAME.match(k)
        }
        return {"__estimator__": name, "params": params, "attrs": attrs}


class _Decoder:
    """Rebuilds values from the JSON tree, reading arrays through ``get(key)``."""

    def __init__(self, path, get, version=MODEL_VERSION):
        self.path, self.get, self.version = path, get, version

    def bad(self, msg):
        return ValueError(f"{self.path} is not a valid dmcsvm model file: {msg}")

    def array(self, ref) -> np.ndarray:
        try:
            key, dtype, shape, crc = ref["__array__"], ref["dtype"], ref["shape"], ref["crc32"]
        except (KeyError, TypeError):
            raise self.bad("an array reference is incomplete") from None
        a = self.get(key)
        if a is None:
            raise self.bad(f"array {key!r} is missing (truncated file?)")
        a = np.asarray(a)
        if a.dtype.str != dtype or list(a.shape) != list(shape):
            raise self.bad(
                f"array {key!r} has dtype {a.dtype.str} and shape {list(a.shape)}; "
                f"the metadata says {dtype} and {list(shape)} (truncated file?)"
            )
        a = np.ascontiguousarray(a)
        if zlib.crc32(a) != crc:
            raise self.bad(f"array {key!r} fails its checksum (truncated or damaged file)")
        return a

    def value(self, v):
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if not isinstance(v, dict) or len(v) == 0:
            raise self.bad(f"unexpected value {v!r}")
        if "__array__" in v:
            return self.array(v)
        if "__float__" in v:
            return float(v["__float__"])
        if "__npscalar__" in v:
            inner = v["value"]
            if isinstance(inner, dict):
                inner = self.value(inner)
            return np.dtype(v["__npscalar__"]).type(inner)
        if "__array0__" in v:
            return self.array(v["__array0__"])[()]
        if "__strarray__" in v:
            return np.array(v["__strarray__"], dtype=v["dtype"]).reshape(v["shape"])
        if "__objarray__" in v:
            items = [self.value(x) for x in v["__objarray__"]]
            a = np.empty(len(items), dtype=object)
            a[:] = items
            return a.reshape(v["shape"])
        if "__sparse__" in v:
            cls = {"csr": sp.csr_matrix, "csc": sp.csc_matrix}.get(v["__sparse__"])
            if cls is None:
                raise self.bad(f"unknown sparse format {v['__sparse__']!r}")
            return cls(
                (self.array(v["data"]), self.array(v["indices"]), self.array(v["indptr"])),
                shape=tuple(v["shape"]),
            )
        if "__dict__" in v:
            return {k: self.value(x) for k, x in v["__dict__"].items()}
        if "__items__" in v:
            return {self._key(self.value(k)): self.value(x) for k, x in v["__items__"]}
        if "__tuple__" in v:
            return tuple(self.value(x) for x in v["__tuple__"])
        if "__dataclass__" in v:
            cls = _dataclass_registry().get(v["__dataclass__"])
            if cls is None:
                raise self.bad(f"unknown value type {v['__dataclass__']!r}")
            return cls(**{k: self.value(x) for k, x in v["fields"].items()})
        if "__estimator__" in v:
            return self.estimator(v)
        raise self.bad(f"unexpected value with keys {sorted(v)}")

    @staticmethod
    def _key(k):
        return k.item() if isinstance(k, np.generic) else k

    def pipeline(self, node):
        from sklearn.pipeline import Pipeline

        steps = node.get("__pipeline__")
        if not isinstance(steps, list) or not steps:
            raise self.bad("the Pipeline entry has no steps")
        tr = transformer_registry()
        out = []
        for k, item in enumerate(steps):
            if not (
                isinstance(item, list)
                and len(item) == 2
                and isinstance(item[0], str)
                and _PARAM_NAME.match(item[0])
                and isinstance(item[1], dict)
            ):
                raise self.bad(f"Pipeline step {k} is not a [name, estimator] pair")
            last = k == len(steps) - 1
            out.append((item[0], self.estimator(item[1], registry=None if last else tr)))
        return Pipeline(out)

    def estimator(self, node, registry=None):
        if registry is None and isinstance(node, dict) and "__pipeline__" in node:
            return self.pipeline(node)
        name = node.get("__estimator__")
        if registry is None:
            cls = estimator_class(name)
        else:
            cls = registry.get(name) if isinstance(name, str) else None
        if cls is None:
            reg = estimator_registry() if registry is None else registry
            raise ValueError(
                f"{self.path}: unknown estimator {name!r} in the model file "
                f"(this dmcsvm knows {', '.join(sorted(reg))})"
            )
        params = node.get("params")
        attrs = node.get("attrs")
        if not isinstance(params, dict) or not isinstance(attrs, dict):
            raise self.bad(f"the {name} entry lacks its params or attrs")
        # names of an older dmcsvm: today's (on the values: a moved parameter goes into the
        # solver_options dict)
        params = upgrade_params(name, {k: self.value(x) for k, x in params.items()})
        known = set(cls._get_param_names())
        unknown = sorted(set(params) - known)
        if unknown:
            raise ValueError(
                f"{self.path}: parameter(s) {', '.join(unknown)} unknown to {name} "
                f"(written by another dmcsvm version?)"
            )
        # runtime parameters in a file (written by dmcsvm <= 0.1, or edited in) are ignored: the
        # loaded model runs where its caller says, by default in this process
        kw, _ = split_runtime(params)
        if registry is not None and isinstance(kw.get("feature_range"), list):
            kw["feature_range"] = tuple(kw["feature_range"])
        est = cls(**kw)
        for k, x in attrs.items():
            if not _ATTR_NAME.match(k):
                raise self.bad(f"attribute name {k!r} is not a fitted attribute")
            setattr(est, k, self.value(x))
        if self.version < 3 and name in _COEF_BY_ROW_V2 and hasattr(est, "dual_coef_"):
            coef = np.asarray(est.dual_coef_)
            est.dual_coef_ = np.ascontiguousarray(coef.T if coef.ndim == 2 else coef[None, :])
        return est


# ------------------------------------------------------------------------------------ save


def _is_npz(path: str) -> bool:
    return str(path).endswith(".npz")


def save_model(model, path) -> None:
    """Write a fitted dmcsvm estimator to ``path`` atomically, without pickle.

    Parameters
    ----------
    model : estimator or sklearn.pipeline.Pipeline
        A fitted estimator of :mod:`dmcsvm.estimators` (any of them, including wrappers that
        hold fitted sub-estimators), or a fitted ``Pipeline`` of feature scalers
        (``MinMaxScaler``, ``StandardScaler``, ``MaxAbsScaler``: :func:`transformer_registry`)
        ending in one; written as ``{"__pipeline__": [[name, step], ...]}`` of the same
        arrays-plus-JSON entries.  A model whose kernel is a Python callable is refused (a
        model file stores no code); ``kernel='precomputed'`` saves its support indices and
        coefficients (no support vectors).
    path : str or os.PathLike
        ``*.npz`` for a single file, anything else (e.g. ``model.zarr``) for a zarr group
        directory.  An existing model at ``path`` is replaced; anything else there is refused.

    Raises
    ------
    ValueError
        When the model is not fitted, is not a registered dmcsvm estimator (or such a
        Pipeline), has a callable kernel, holds a value that cannot be stored without pickle,
        or ``path`` holds something other than a model.
    """
    from sklearn.utils.validation import check_is_fitted

    from . import __version__

    check_is_fitted(model)
    path = os.path.abspath(os.fspath(path))
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise ValueError(f"cannot write {path}: directory {parent} does not exist")
    enc = _Encoder()
    tree = enc.estimator(model)
    meta = {
        "format": MODEL_FORMAT,
        "format_version": MODEL_VERSION,
        "dmcsvm_version": __version__,
        "estimator": tree.get("__estimator__", "Pipeline"),
        "model": tree,
    }
    text = json.dumps(meta, allow_nan=False)
    if os.path.lexists(path):
        _check_replaceable(path)
    if _is_npz(path):
        with atomic_file(path, "wb") as fh:
            np.savez(fh, meta=np.frombuffer(text.encode(), dtype=np.uint8), **enc.arrays)
        return
    import zarr

    tmp = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(path)}.tmp-")
    try:
        os.chmod(tmp, default_mode(directory=True))  # not mkdtemp's private 0700
        g = zarr.open_group(tmp, mode="w", zarr_format=3)
        for key, a in enc.arrays.items():
            arr = g.create_array(
                key,
                shape=a.shape,
                dtype=a.dtype,
                chunks=tuple(max(1, s) for s in a.shape) if a.ndim else (),
            )
            if a.size:
                arr[...] = a
        g.attrs["dmcsvm_model"] = meta
        _replace_dir(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _check_replaceable(path):
    """Only a dmcsvm model may be overwritten."""
    try:
        meta, _, close = _read_meta(path)
    except ValueError:
        meta, close = None, None
    if close is not None:
        close()
    if not isinstance(meta, dict) or meta.get("format") != MODEL_FORMAT:
        raise ValueError(f"refusing to overwrite {path}: it is not a dmcsvm model")


def _replace_dir(tmp, path):
    if os.path.lexists(path):
        old = f"{path}.old-{uuid.uuid4().hex[:8]}"
        if os.path.isdir(path):
            os.rename(path, old)
        else:
            os.replace(path, old)
        try:
            os.rename(tmp, path)
        except BaseException:
            os.rename(old, path)
            raise
        if os.path.isdir(old):
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.unlink(old)
    else:
        os.rename(tmp, path)


# ------------------------------------------------------------------------------------ load


def _read_meta(path):
    """``(meta, get_array, close)`` of a model file; ValueError for anything else."""
    if not os.path.exists(path):
        raise ValueError(f"{path} does not exist")
    if os.path.isdir(path):
        import zarr

        try:
            g = zarr.open_group(path, mode="r")
            meta = g.attrs.get("dmcsvm_model")
        except Exception as e:
            raise ValueError(f"{path} is not a dmcsvm model file: {e}") from None
        if not isinstance(meta, dict):
            raise ValueError(f"{path} is not a dmcsvm model file (no dmcsvm_model metadata)")

        def get(key):
            try:
                node = g[key]
            except KeyError:
                return None
            try:
                return node[...]
            except Exception as e:
                raise ValueError(f"{path}: cannot read array {key!r}: {e}") from None

        return meta, get, lambda: None
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic not in (b"PK\x03\x04", b"PK\x05\x06"):
        # np.load would read a .npy, or a pickle (refused: "allow_pickle=False"): neither is a
        # model, and the message should say so rather than talk about pickles
        raise ValueError(
            f"{path} is not a dmcsvm model file: a model is an .npz archive or "
            f"a model directory written by dmcsvm train / save_model"
        )
    try:
        z = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise ValueError(f"{path} is not a dmcsvm model file (truncated or foreign: {e})") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise ValueError(f"{path} is not a dmcsvm model file (a plain .npy array)")
    try:
        if "meta" not in z.files:
            raise ValueError(f"{path} is not a dmcsvm model file (no metadata)")
        meta = json.loads(bytes(z["meta"]).decode())
    except ValueError:
        z.close()
        raise
    except Exception as e:
        z.close()
        raise ValueError(f"{path} is not a dmcsvm model file (truncated or damaged: {e})") from None
    if not isinstance(meta, dict):
        z.close()
        raise ValueError(f"{path} is not a dmcsvm model file (metadata is not a JSON object)")

    def get(key):
        if key not in z.files:
            return None
        try:
            return z[key]
        except Exception as e:
            raise ValueError(
                f"{path}: array {key!r} cannot be read (truncated or damaged: {e})"
            ) from None

    return meta, get, z.close


def load_model(path):
    """Read a model written by :func:`save_model` (or dmcsvm 0.1's ``.npz``).

    Parameters
    ----------
    path : str or os.PathLike
        A ``*.npz`` model file or a zarr model directory.

    Returns
    -------
    estimator
        The fitted estimator, ready to predict.

    Raises
    ------
    ValueError
        For a missing, foreign, truncated or damaged file, a format version newer than this
        dmcsvm reads, an estimator name that is not in :func:`estimator_registry`, or
        parameters unknown to that estimator; the message names the problem.
    """
    path = os.path.abspath(os.fspath(path))
    meta, get, close = _read_meta(path)
    try:
        if meta.get("format") != MODEL_FORMAT:
            raise ValueError(f"{path} is not a dmcsvm model file (format {meta.get('format')!r})")
        version = meta.get("format_version")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise ValueError(f"{path} has an invalid model format_version {version!r}")
        if version > MODEL_VERSION:
            raise ValueError(
                f"{path} has model format_version {version}, written by a newer "
                f"dmcsvm; this dmcsvm reads versions 1 to {MODEL_VERSION}"
            )
        if version == 1:
            return _check_consistent(path, _load_v1(path, meta, get))
        tree = meta.get("model")
        if not isinstance(tree, dict):
            raise ValueError(f"{path} is not a valid dmcsvm model file: no model entry")
        return _check_consistent(path, _Decoder(path, get, version).estimator(tree))
    finally:
        close()


def _check_consistent(path, est):
    """Predict one row of zeros: an edited file whose attributes do not fit together (a string
    where a number belongs, fewer classes than coefficient columns) is refused here, naming the
    file, instead of failing later inside predict with a bare TypeError or IndexError."""
    n = getattr(est, "n_features_in_", None)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(
            f"{path} is not a valid dmcsvm model file: n_features_in_ is {n!r}, "
            f"not a positive integer"
        )
    try:
        zeros = np.zeros((1, int(n)))
        k = len(est.classes_)
        D = np.asarray(est.decision_function(zeros))
        last = est.steps[-1][1] if hasattr(est, "steps") else est
        cols = (
            k * (k - 1) // 2 if getattr(last, "decision_function_shape", "ovr") == "ovo" else k
        )  # 'ovo': one value per pair of classes
        if (D.ndim == 1 and k != 2) or (D.ndim == 2 and D.shape[1] != cols):
            raise ValueError(
                f"decision_function gives {1 if D.ndim == 1 else D.shape[1]} "
                f"score(s) per row for {k} classes_"
            )
        pred = np.asarray(est.predict(zeros))
        if pred.shape != (1,) or pred[0] not in np.asarray(est.classes_):
            raise ValueError(f"predict gave {pred!r}, not one of classes_")
    except Exception as e:  # noqa: BLE001 - any failure means the attributes are inconsistent
        raise ValueError(
            f"{path} is not a valid dmcsvm model file: its fitted attributes do not "
            f"fit together ({type(e).__name__}: {e})"
        ) from None
    return est


def _load_v1(path, meta, get):
    """dmcsvm 0.1 model files: MulticlassSVC only, fixed array names."""
    reg = estimator_registry()
    name = meta.get("estimator")
    if name != "MulticlassSVC" or name not in reg:
        raise ValueError(
            f"{path}: unknown estimator {name!r} in the model file "
            f"(this dmcsvm knows {', '.join(sorted(reg))})"
        )
    params = upgrade_params(name, meta["params"])
    m = reg[name](**split_runtime(params)[0])

    def need(key):
        a = get(key)
        if a is None:
            raise ValueError(f"{path} is not a valid dmcsvm model file: array {key!r} is missing")
        return a

    if get("sv") is not None:
        m.support_vectors_ = get("sv")
    else:
        m.support_vectors_ = sp.csr_matrix(
            (need("sv_data"), need("sv_indices"), need("sv_indptr")), shape=tuple(need("sv_shape"))
        )
    m.dual_coef_ = np.ascontiguousarray(need("dual_coef").T)  # 0.1 wrote (n_SV, P)
    m.support_ = need("support")
    m.classes_ = need("classes")
    m.gamma_ = meta["gamma_"]
    m.n_features_in_ = meta["n_features_in_"]
    m.n_iter_ = meta["n_iter_"]
    return m
