"""``dmcsvm predict`` without scikit-learn (:mod:`dmcsvm.cli._fast_predict`): for every
model kind the command line predicts with, the output file is byte for byte the one the
estimator's own path writes, and its labels are ``load_model(...).predict(X)``."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from dmcsvm_cli import run_cli
from sklearn.datasets import load_digits
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler, StandardScaler

from dmcsvm import MulticlassSVC
from dmcsvm.cli import _fast_predict
from dmcsvm.estimators import (
    BinarySVC,
    MultiPrototypeSVC,
    OneVsOneSVC,
    OneVsRestSVC,
    ScatterSVC,
)
from dmcsvm.model_io import load_model, save_model
from dmcsvm.store import read_all, write_arrays


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """Digits 0-4: 300 training rows, and 600 test rows in a store of three chunks."""
    d = tmp_path_factory.mktemp("fast")
    X, y = load_digits(n_class=5, return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    write_arrays(d / "test.zarr", X[300:900], y[300:900], rows_per_chunk=256)
    return d, X[:300], y[:300]


def _cli(model, store, out, *flags):
    r = run_cli("predict", model, store, "-o", out, "--overwrite", "--no-progress", *flags)
    assert r.returncode == 0, r.stderr
    return out.read_bytes()


def _both(monkeypatch, model, store, out, *flags, fast=True):
    """The output of the fast path and of the estimator's path (fast_model made to say no)."""
    used = []
    real = _fast_predict.FastModel.predictions

    def spy(self, *a, **k):
        used.append(self.name)
        return real(self, *a, **k)

    with monkeypatch.context() as m:
        m.setattr(_fast_predict.FastModel, "predictions", spy)
        a = _cli(model, store, out, *flags)
    assert bool(used) == fast, used
    with monkeypatch.context() as m:
        m.setattr(_fast_predict, "fast_model", lambda path: None)
        b = _cli(model, store, out, *flags)
    return a, b


def _labels(text: bytes, header: bool):
    lines = text.decode().splitlines()[1 if header else 0 :]
    return np.array([ln.split()[0] for ln in lines])


KINDS = {
    "multiclass": lambda: MulticlassSVC(C=10, gamma=2.0),
    "multiclass-ovo": lambda: MulticlassSVC(C=10, gamma=2.0, decision_function_shape="ovo"),
    "multiclass-poly": lambda: MulticlassSVC(C=1, kernel="poly", degree=2, gamma=0.5),
    "multiprototype": lambda: MultiPrototypeSVC(n_prototypes=2, C=1, max_epochs=5, random_state=0),
    "ovr": lambda: OneVsRestSVC(C=10, gamma=2.0),
    "ovo": lambda: OneVsOneSVC(C=10, gamma=2.0),
    "scaled": lambda: make_pipeline(
        MinMaxScaler(feature_range=(-1, 1)), MulticlassSVC(C=10, gamma=0.5)
    ),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_fast_predict_writes_what_the_estimator_writes(kind, digits, tmp_path, monkeypatch):
    d, X, y = digits
    model = KINDS[kind]().fit(X, y)
    path = tmp_path / "m.npz"
    save_model(model, path)
    assert _fast_predict.fast_model(str(path)) is not None
    store = d / "test.zarr"
    Xt, _ = read_all(store)
    expected = load_model(path).predict(Xt)
    for flags in ((), ("--decision-values",)):
        a, b = _both(monkeypatch, path, store, tmp_path / "p.txt", *flags)
        assert a == b, (kind, flags)
        assert np.array_equal(_labels(a, bool(flags)), expected.astype(str))


def test_fast_predict_of_a_model_directory(digits, tmp_path, monkeypatch):
    """A model saved as a zarr group directory is read by the same reader."""
    d, X, y = digits
    path = tmp_path / "m.zarr"
    save_model(OneVsOneSVC(C=10, gamma=2.0).fit(X, y), path)
    a, b = _both(monkeypatch, path, d / "test.zarr", tmp_path / "p.txt", "--decision-values")
    assert a == b


@pytest.mark.parametrize(
    "est",
    [BinarySVC(C=10, gamma=2.0), MulticlassSVC(C=10, gamma=2.0), OneVsOneSVC(C=10, gamma=2.0)],
    ids=lambda e: type(e).__name__,
)
def test_fast_predict_of_two_classes_with_text_labels(est, digits, tmp_path, monkeypatch):
    d, X, y = digits
    keep = y < 2
    names = np.array(["zero", "one"])
    model = est.fit(X[keep], names[y[keep]])
    path = tmp_path / "m.npz"
    save_model(model, path)
    Xt, yt = read_all(d / "test.zarr")
    two = yt < 2
    write_arrays(tmp_path / "t.zarr", Xt[two], names[yt[two]], rows_per_chunk=64)
    a, b = _both(monkeypatch, path, tmp_path / "t.zarr", tmp_path / "p.txt", "--decision-values")
    assert a == b
    assert np.array_equal(_labels(a, True), load_model(path).predict(Xt[two]).astype(str))


def test_fast_predict_probabilities(digits, tmp_path, monkeypatch):
    d, X, y = digits
    path = tmp_path / "m.npz"
    save_model(MulticlassSVC(C=10, gamma=2.0, probability=True, random_state=0).fit(X, y), path)
    a, b = _both(monkeypatch, path, d / "test.zarr", tmp_path / "p.txt", "--probability")
    assert a == b
    P = np.array([[float(v) for v in ln.split()[1:]] for ln in a.decode().splitlines()[1:]])
    Xt, _ = read_all(d / "test.zarr")
    np.testing.assert_array_equal(P, load_model(path).predict_proba(Xt))


def test_fast_predict_leaves_other_models_and_inputs_to_the_estimator(
    digits, tmp_path, monkeypatch
):
    d, X, y = digits
    # a scaler it does not compute, and an estimator it does not compute: not taken
    for model in (
        make_pipeline(StandardScaler(), MulticlassSVC(C=10, gamma=0.5)),
        ScatterSVC(gamma=2.0),
    ):
        path = tmp_path / "m.npz"
        save_model(model.fit(X, y), path)
        assert _fast_predict.fast_model(str(path)) is None
        a, b = _both(monkeypatch, path, d / "test.zarr", tmp_path / "p.txt", fast=False)
        assert a == b
    # a model file it cannot read: load_model's message
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a model")
    assert _fast_predict.fast_model(str(bad)) is None
    r = run_cli("predict", bad, d / "test.zarr", "-o", tmp_path / "q.txt")
    assert r.returncode == 2 and "not a dmcsvm model file" in r.stderr


@pytest.mark.parametrize(
    "est",
    [MulticlassSVC(C=10, gamma=2.0), OneVsRestSVC(C=10, gamma=2.0)],
    ids=lambda e: type(e).__name__,
)
def test_fast_predict_of_a_sparse_store(est, digits, tmp_path, monkeypatch):
    d, X, y = digits
    path = tmp_path / "m.npz"
    save_model(est.fit(sp.csr_matrix(X), y), path)
    Xt, yt = read_all(d / "test.zarr")
    write_arrays(tmp_path / "s.zarr", sp.csr_matrix(Xt), yt, rows_per_chunk=200)
    a, b = _both(monkeypatch, path, tmp_path / "s.zarr", tmp_path / "p.txt", "--decision-values")
    assert a == b
    assert np.array_equal(_labels(a, True), load_model(path).predict(Xt).astype(str))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [600, 5000])
def test_the_thread_count_does_not_change_the_scores(n, dtype):
    """A FastModel counts its threads without scikit-learn (joblib's count within
    OMP_NUM_THREADS), and a store's chunks are other blocks than the whole array's: a row's
    scores may depend on neither to the bit, nor on the rows predicted with it beyond rounding.
    (Failed with OpenBLAS 0.3.31 when a block's product ran on several BLAS threads, or in
    single precision.  Other groupings of rows agree to the bit with its Haswell kernels, not
    with its SkylakeX ones: 4e-16 apart on rows 252-255 of the slice from row 64.)"""
    from dmcsvm.estimators._scoring import kernel_times, prototype_scores
    from dmcsvm.kernels import KernelSpec

    rng = np.random.default_rng(0)
    X, SV = rng.normal(size=(n, 30)).astype(dtype), rng.normal(size=(299, 30)).astype(dtype)
    coef = rng.normal(size=(5, 299))
    spec = KernelSpec("rbf", 0.05)
    runs = [prototype_scores(X, spec, SV, coef, j) for j in (1, 2, 3, None)]
    for r in runs[1:]:
        np.testing.assert_array_equal(r, runs[0])
    for a, b in ((0, 256), (256, 600), (64, 448), (n - 128, n)):
        part = prototype_scores(X[a:b], spec, SV, coef, 2)
        np.testing.assert_allclose(part, runs[0][a:b], rtol=1e-13, atol=1e-14)
    est = type("E", (), dict(kernel="rbf", gamma_=0.05, degree=3, coef0=0.0, n_jobs=1))
    sparse_coef = sp.csr_matrix(np.where(np.abs(coef.T) > 1, coef.T, 0.0))
    ref = kernel_times(est, X, SV, sparse_coef)
    est.n_jobs = 3
    np.testing.assert_array_equal(kernel_times(est, X, SV, sparse_coef), ref)


@pytest.mark.slow  # a fresh interpreter
def test_fast_predict_imports_no_scikit_learn(digits, tmp_path):
    d, X, y = digits
    path = tmp_path / "m.npz"
    save_model(MulticlassSVC(C=10, gamma=2.0).fit(X, y), path)
    code = (
        "import sys; from dmcsvm.cli import main; "
        f"assert main(['predict', {str(path)!r}, {str(d / 'test.zarr')!r}, '-o', "
        f"{str(tmp_path / 'p.txt')!r}, '--no-progress']) == 0; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'sklearn', 'dask', "
        "'distributed', 'pandas'}))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"
