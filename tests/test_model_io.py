"""Model files: every registered estimator round-trips (npz and zarr) with identical predictions,
no pickle anywhere, and foreign / truncated / damaged / newer / edited files are refused with a
message naming the problem."""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_iris

from dmcsvm import MulticlassSVC
from dmcsvm.model_io import MODEL_VERSION, estimator_registry, load_model, save_model
from dmcsvm.runtime_params import RUNTIME_PARAMS


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return X, y


def _fit(name, X, y):
    cls = estimator_registry()[name]
    params = {"n_jobs": 1} if "n_jobs" in cls._get_param_names() else {}
    if name == "MultiPrototypeSVC":
        params.update(max_epochs=5, random_state=0)  # a few epochs: the file is what is tested
    if name == "BinarySVC":
        y = (y > 0).astype(int)
    return cls(**params).fit(X, y), y


def _fitted_attrs(est):
    return {k: v for k, v in vars(est).items() if k.endswith("_") and not k.startswith("_")}


def _assert_same(a, b, where="value"):
    from sklearn.base import BaseEstimator

    if isinstance(a, BaseEstimator):
        assert type(a) is type(b), where
        assert a.get_params(deep=False).keys() == b.get_params(deep=False).keys()
        for k, v in _fitted_attrs(a).items():
            _assert_same(v, getattr(b, k), f"{where}.{k}")
    elif sp.issparse(a):
        assert sp.issparse(b) and a.format == b.format and a.shape == b.shape, where
        assert np.array_equal(a.toarray(), b.toarray()), where
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape, where
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            _assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (u, v) in enumerate(zip(a, b, strict=False)):
            _assert_same(u, v, f"{where}[{i}]")
    elif isinstance(a, float) and np.isnan(a):
        assert np.isnan(b), where
    else:
        assert a == b and type(a) is type(b), f"{where}: {a!r} != {b!r}"


@pytest.mark.parametrize("ext", ["npz", "zarr"])
@pytest.mark.parametrize("name", sorted(estimator_registry()))
def test_every_registered_estimator_round_trips(iris, tmp_path, name, ext):
    X, y = iris
    est, _ = _fit(name, X, y)
    path = tmp_path / f"model.{ext}"
    save_model(est, path)
    back = load_model(path)
    assert type(back) is type(est)
    # the model's parameters come back; where it ran (runtime_params) is not part of the file
    defaults = type(est)().get_params(deep=False)
    assert back.get_params(deep=False) == {
        k: defaults[k] if k in RUNTIME_PARAMS else v for k, v in est.get_params(deep=False).items()
    }
    _assert_same(est, back, name)
    assert np.array_equal(back.predict(X), est.predict(X))
    assert np.array_equal(back.decision_function(X), est.decision_function(X))
    # nothing but the model and no temporary file beside it
    assert os.listdir(tmp_path) == [path.name]


def test_npz_needs_no_pickle(iris, tmp_path):
    X, y = iris
    est = MulticlassSVC(C=2.0, n_jobs=1).fit(X, np.array(["setosa", "versi", "virg"])[y])
    path = tmp_path / "m.npz"
    save_model(est, path)
    with np.load(path, allow_pickle=False) as z:  # every member loads without pickle
        for k in z.files:
            assert z[k].dtype != object
    back = load_model(path)
    assert back.classes_.tolist() == ["setosa", "versi", "virg"]
    assert np.array_equal(back.predict(X), est.predict(X))


def test_sparse_support_vectors_and_history(iris, tmp_path):
    X, y = iris
    est = MulticlassSVC(C=5.0, n_jobs=1).fit(sp.csr_matrix(X), y)
    save_model(est, tmp_path / "s.zarr")
    back = load_model(tmp_path / "s.zarr")
    assert sp.issparse(back.support_vectors_)
    assert back.history_.keys() == est.history_.keys()
    assert np.array_equal(back.history_["dual"], est.history_["dual"])
    assert np.array_equal(back.decision_function(X), est.decision_function(X))


def test_live_client_is_not_saved(iris, tmp_path):
    X, y = iris
    est = MulticlassSVC(n_jobs=1).fit(X, y)
    est.client = object()  # stands for a distributed.Client that trained the model
    save_model(est, tmp_path / "m.npz")
    assert load_model(tmp_path / "m.npz").client is None


def _rewrite_meta(path, edit):
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(bytes(arrays["meta"]).decode())
    edit(meta)
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(path, **arrays)


@pytest.fixture()
def saved(iris, tmp_path):
    X, y = iris
    path = tmp_path / "m.npz"
    save_model(MulticlassSVC(n_jobs=1).fit(X, y), path)
    return path


def test_refuses_newer_version(saved):
    _rewrite_meta(saved, lambda m: m.update(format_version=MODEL_VERSION + 97))
    with pytest.raises(
        ValueError,
        match=rf"format_version {MODEL_VERSION + 97}, written by a "
        r"newer dmcsvm; this dmcsvm reads versions 1 to",
    ):
        load_model(saved)


def test_refuses_unknown_estimator(saved):
    def edit(m):
        m["model"]["__estimator__"] = "os.system"

    _rewrite_meta(saved, edit)
    with pytest.raises(ValueError, match=r"unknown estimator 'os.system' in the model file"):
        load_model(saved)


def test_refuses_unknown_parameter_and_bad_attribute(saved, tmp_path):
    def edit(m):
        m["model"]["params"]["evil"] = 1

    _rewrite_meta(saved, edit)
    with pytest.raises(ValueError, match=r"parameter\(s\) evil unknown to MulticlassSVC"):
        load_model(saved)

    def edit2(m):
        del m["model"]["params"]["evil"]
        m["model"]["attrs"]["__class__"] = None

    _rewrite_meta(saved, edit2)
    with pytest.raises(ValueError, match=r"attribute name '__class__' is not a fitted attribute"):
        load_model(saved)


def test_refuses_truncated_foreign_and_damaged_files(saved, tmp_path):
    data = saved.read_bytes()
    cut = tmp_path / "cut.npz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"cut.npz is not a dmcsvm model file \(truncated"):
        load_model(cut)
    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, a=np.arange(3))
    with pytest.raises(ValueError, match=r"is not a dmcsvm model file \(no metadata\)"):
        load_model(foreign)
    text = tmp_path / "text.npz"
    text.write_text("hello")
    with pytest.raises(ValueError, match=r"is not a dmcsvm model file"):
        load_model(text)
    with pytest.raises(ValueError, match=r"missing.npz does not exist"):
        load_model(tmp_path / "missing.npz")
    # one array's bytes changed inside an otherwise valid archive: the checksum catches it
    with np.load(saved, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    key = next(k for k in arrays if k != "meta" and arrays[k].size)
    arrays[key] = arrays[key].copy()
    arrays[key].reshape(-1)[0] += 1
    np.savez(saved, **arrays)
    with pytest.raises(ValueError, match=rf"array '{key}' fails its checksum"):
        load_model(saved)


def test_refuses_zarr_model_with_missing_array(iris, tmp_path):
    X, y = iris
    path = tmp_path / "m.zarr"
    save_model(MulticlassSVC(n_jobs=1).fit(X, y), path)
    import shutil

    shutil.rmtree(path / "a0")
    with pytest.raises(ValueError, match=r"array 'a0' is missing \(truncated file\?\)"):
        load_model(path)


def test_never_overwrites_other_files(iris, tmp_path):
    X, y = iris
    est = MulticlassSVC(n_jobs=1).fit(X, y)
    other = tmp_path / "notes.npz"
    other.write_text("precious")
    with pytest.raises(ValueError, match=r"refusing to overwrite .*notes.npz: it is not a dmcsvm"):
        save_model(est, other)
    assert other.read_text() == "precious"
    with pytest.raises(ValueError, match=r"directory .* does not exist"):
        save_model(est, tmp_path / "nope" / "m.npz")
    assert sorted(os.listdir(tmp_path)) == ["notes.npz"]


def test_unfitted_and_unsupported_values(iris, tmp_path):
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        save_model(MulticlassSVC(), tmp_path / "m.npz")
    X, y = iris
    est = MulticlassSVC(n_jobs=1).fit(X, y)
    est.extra_ = {1, 2}  # a set: not storable without pickle
    with pytest.raises(ValueError, match=r"cannot save model.extra_: values of type set"):
        save_model(est, tmp_path / "m.npz")
    assert os.listdir(tmp_path) == []


def test_reads_version_1_files(iris, tmp_path):
    """dmcsvm 0.1 wrote MulticlassSVC as fixed npz members and a JSON meta of version 1."""
    X, y = iris
    est = MulticlassSVC(n_jobs=1).fit(X, y)
    meta = {
        "format": "dmcsvm-model",
        "format_version": 1,
        "estimator": "MulticlassSVC",
        "params": {"C": est.C, "kernel": est.kernel, "gamma": est.gamma},
        "gamma_": est.gamma_,
        "n_features_in_": est.n_features_in_,
        "n_iter_": est.n_iter_,
        "classes_kind": "i",
    }
    path = tmp_path / "v1.npz"
    np.savez(
        path,
        dual_coef=est.dual_coef_.T,
        support=est.support_,
        classes=est.classes_,
        sv=est.support_vectors_,
        meta=np.frombuffer(json.dumps(meta).encode(), np.uint8),
    )
    assert zipfile.is_zipfile(path)
    back = load_model(path)
    assert np.array_equal(back.decision_function(X), est.decision_function(X))


def _as_format_2(path, rename):
    """Rewrite a model file as format 2 wrote it: ``dual_coef_`` one row per support vector
    (1-D for ScatterSVC) and the renamed parameters by their old names."""
    import zlib

    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(bytes(arrays["meta"]).decode())
    node = meta["model"]
    ref = node["attrs"]["dual_coef_"]
    a = arrays[ref["__array__"]]
    old = np.ascontiguousarray(a.T if a.shape[0] > 1 else a[0])
    arrays[ref["__array__"]] = old
    ref.update(shape=list(old.shape), crc32=zlib.crc32(old))
    node["params"] = {rename.get(k, k): v for k, v in node["params"].items()}
    meta["format_version"] = 2
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(path, **arrays)


@pytest.mark.parametrize("name", ["MulticlassSVC", "MultiPrototypeSVC", "ScatterSVC"])
def test_reads_format_2_files(iris, tmp_path, name):
    """dmcsvm 0.1.0 wrote dual_coef_ with one row per support vector and called
    threshold_fraction mu: such a file loads with today's layout and names."""
    X, y = iris
    est, _ = _fit(name, X, y)
    path = tmp_path / "m.npz"
    save_model(est, path)
    _as_format_2(path, {})
    if name != "ScatterSVC":  # 0.1 wrote threshold_fraction, a parameter then, as mu
        _rewrite_meta(path, lambda m: m["model"]["params"].update(mu=0.25))
    back = load_model(path)
    want = {
        k: type(est)().get_params()[k] if k in RUNTIME_PARAMS else v
        for k, v in est.get_params(deep=False).items()
    }
    if name != "ScatterSVC":
        want["solver_options"] = {"threshold_fraction": 0.25}
    assert back.get_params(deep=False) == want
    assert np.array_equal(back.dual_coef_, est.dual_coef_)
    assert np.array_equal(back.decision_function(X), est.decision_function(X))
