"""probability=True: calibrated predict_proba / predict_log_proba for every classifier.

Probabilities sum to one, exist only with probability=True, are deterministic given
random_state, are the same on a zarr store and a dask array (chunk by chunk) as in memory,
survive a save/load round trip bit for bit, work inside GridSearchCV and Pipeline, and are as
well calibrated as scikit-learn's ``CalibratedClassifierCV(SVC())`` (log-loss within 5 %) on
subsets of letter and usps (the full-size table is benchmarks/bench_probability.py).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
from data_dir import DATA, need
from dmcsvm_cli import run_cli
from sklearn.datasets import load_iris
from sklearn.metrics import log_loss

from dmcsvm import (
    BinarySVC,
    MulticlassSVC,
    MultiPrototypeSVC,
    OneVsOneSVC,
    OneVsRestSVC,
    ScatterSVC,
    load,
    save,
)
from dmcsvm.estimators._calibration import apply_calibration, platt_sigmoid
from dmcsvm.store import write_arrays

ALL = [
    lambda: MulticlassSVC(n_jobs=1, probability=True),
    lambda: MultiPrototypeSVC(
        n_prototypes=2, max_epochs=2, n_jobs=1, probability=True, random_state=0
    ),
    lambda: ScatterSVC(n_jobs=1, probability=True),
    lambda: OneVsRestSVC(n_jobs=1, probability=True),
    lambda: OneVsOneSVC(n_jobs=1, probability=True),
]
IDS = ["MulticlassSVC", "MultiPrototypeSVC", "ScatterSVC", "OneVsRestSVC", "OneVsOneSVC"]


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return X.astype(np.float32), y


@pytest.mark.parametrize("make", ALL, ids=IDS)
def test_probabilities_sum_to_one(iris, make):
    X, y = iris
    est = make().fit(X, y)
    P = est.predict_proba(X)
    assert P.shape == (150, 3)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert np.all(P >= 0) and np.all(P <= 1)
    np.testing.assert_allclose(est.predict_log_proba(X), np.log(P), rtol=1e-12, atol=1e-12)
    assert log_loss(y, P) < 0.5
    assert np.mean(P.argmax(axis=1) == y) > 0.85


@pytest.mark.parametrize("cls", [BinarySVC, MulticlassSVC, OneVsRestSVC, OneVsOneSVC, ScatterSVC])
def test_two_classes_use_platt_scaling(iris, cls):
    X, y = iris
    yb = np.where(y == 2, "virginica", "other")
    est = cls(n_jobs=1, probability=True).fit(X, yb)
    assert est.calibration_ == "sigmoid"
    P = est.predict_proba(X)
    assert P.shape == (150, 2)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    # monotone in the decision value, pointing the same way
    d = est.decision_function(X)
    order = np.argsort(d)
    assert np.all(np.diff(P[order, 1]) >= -1e-15)
    assert est.calibration_coef_[0] < 0
    assert log_loss(yb, P, labels=est.classes_) < 0.35


def test_not_available_without_probability(iris):
    X, y = iris
    est = MulticlassSVC(n_jobs=1).fit(X, y)
    assert not hasattr(est, "predict_proba") and not hasattr(est, "predict_log_proba")
    assert hasattr(MulticlassSVC(probability=True), "predict_proba")
    with pytest.raises(AttributeError, match="predict_proba"):
        est.predict_proba(X)
    # a refit without probability drops the old calibration
    est.set_params(probability=True).fit(X, y)
    assert hasattr(est, "calibration_coef_")
    est.set_params(probability=False).fit(X, y)
    assert not hasattr(est, "calibration_coef_")
    with pytest.raises(
        ValueError,
        match=re.escape(
            "The 'probability' parameter of MulticlassSVC must be an instance of 'bool' or an "
            "instance of 'numpy.bool'. Got 'yes' instead."
        ),
    ):
        MulticlassSVC(probability="yes").fit(X, y)


def test_deterministic_given_random_state(iris):
    X, y = iris
    a = OneVsRestSVC(n_jobs=1, probability=True, random_state=3).fit(X, y)
    b = OneVsRestSVC(n_jobs=1, probability=True, random_state=3).fit(X, y)
    np.testing.assert_array_equal(a.calibration_coef_, b.calibration_coef_)
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    c = OneVsRestSVC(n_jobs=1, probability=True, random_state=4).fit(X, y)
    assert not np.array_equal(a.calibration_coef_, c.calibration_coef_)


def test_platt_matches_a_direct_likelihood_fit():
    rng = np.random.default_rng(0)
    f = rng.normal(size=400)
    pos = rng.random(400) < 1 / (1 + np.exp(-2.0 * f + 0.5))
    A, B = platt_sigmoid(f, pos)
    from scipy.optimize import minimize

    n1, n0 = pos.sum(), (~pos).sum()
    t = np.where(pos, (n1 + 1) / (n1 + 2), 1 / (n0 + 2))

    def nll(ab):
        z = ab[0] * f + ab[1]
        return np.sum(t * np.logaddexp(0, z) + (1 - t) * np.logaddexp(0, -z))

    ref = minimize(nll, [0.0, 0.0], method="BFGS", options={"gtol": 1e-10}).x
    np.testing.assert_allclose([A, B], ref, rtol=1e-4, atol=1e-5)
    P = apply_calibration("sigmoid", np.array([A]), np.array([B]), f)
    np.testing.assert_allclose(P[:, 1], 1 / (1 + np.exp(A * f + B)))


# ------------------------------------------------------------------ stores, dask, save/load


def _blobs(seed=0, n=240, d=6, m=4):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=1.5, size=(m, d))
    y = rng.integers(0, m, n)
    return (centers[y] + rng.normal(size=(n, d))).astype(np.float32), y


@pytest.fixture(scope="module")
def blob_store(tmp_path_factory):
    X, y = _blobs()
    url = str(tmp_path_factory.mktemp("proba") / "train.zarr")
    write_arrays(url, X, y, rows_per_chunk=50)
    return url, X, y


@pytest.mark.parametrize("cls", [MulticlassSVC, OneVsOneSVC])
def test_store_and_dask_predict_proba_equal_in_memory(blob_store, cls):
    url, X, y = blob_store
    est = cls(n_jobs=1, probability=True, random_state=0).fit(X, y)
    P = est.predict_proba(X)
    # chunk by chunk (50-row store chunks, 70-row dask blocks): the same map on the same scores
    np.testing.assert_allclose(est.predict_proba(url), P, rtol=1e-10, atol=1e-12)
    Pd = est.predict_proba(da.from_array(X, chunks=(70, 6)))
    assert isinstance(Pd, da.Array)
    assert any("dmcsvm-predict" in str(k) for k in Pd.__dask_graph__().keys())
    np.testing.assert_allclose(Pd.compute(), P, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(est.predict_log_proba(url), np.log(P), rtol=1e-9, atol=1e-12)


def test_fit_on_a_store_calibrates_like_the_arrays(blob_store):
    url, X, y = blob_store
    ref = MulticlassSVC(n_jobs=1, probability=True, random_state=1).fit(X, y)
    est = MulticlassSVC(n_jobs=1, probability=True, random_state=1).fit(url)
    # folds of the store are dask arrays of its chunks: the same rows, the same folds
    np.testing.assert_allclose(est.calibration_coef_, ref.calibration_coef_, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(est.predict_proba(url), ref.predict_proba(X), atol=1e-5)
    dk = MulticlassSVC(n_jobs=1, probability=True, random_state=1).fit(
        da.from_array(X, chunks=(70, 6)), y
    )
    np.testing.assert_allclose(dk.calibration_coef_, ref.calibration_coef_, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("suffix", ["model.npz", "model.zarr"])
@pytest.mark.parametrize("cls", [MulticlassSVC, OneVsRestSVC, BinarySVC])
def test_save_load_keeps_probabilities_bit_for_bit(iris, tmp_path, suffix, cls):
    X, y = iris
    if cls is BinarySVC:
        y = (y == 2).astype(int)
    est = cls(n_jobs=1, probability=True).fit(X, y)
    path = tmp_path / suffix
    save(est, path)
    back = load(path)
    assert back.probability is True and back.calibration_ == est.calibration_
    np.testing.assert_array_equal(back.calibration_coef_, est.calibration_coef_)
    np.testing.assert_array_equal(back.predict_proba(X), est.predict_proba(X))
    np.testing.assert_array_equal(back.predict_log_proba(X), est.predict_log_proba(X))


# ------------------------------------------------------------------ sklearn composition


def test_gridsearch_and_pipeline_with_log_loss(iris):
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = iris
    pipe = make_pipeline(StandardScaler(), MulticlassSVC(n_jobs=1, probability=True))
    gs = GridSearchCV(pipe, {"multiclasssvc__C": [0.5, 5.0]}, cv=2, scoring="neg_log_loss")
    gs.fit(X, y)
    P = gs.predict_proba(X)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    assert gs.best_score_ > -0.4


# ------------------------------------------------------------------ calibration quality


def _load(name):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    try:
        from _data import load_letter, load_usps, stratified_subset
    finally:
        sys.path.pop(0)
    need(name)
    Xtr, ytr, Xte, yte = (load_letter if name == "letter" else load_usps)(DATA)
    n_tr, n_te = (1500, 1000) if name == "letter" else (1000, 1000)
    Xtr, ytr = stratified_subset(Xtr, ytr, n_tr, random_state=0)
    Xte, yte = stratified_subset(Xte, yte, n_te, random_state=0)
    return Xtr, ytr, Xte, yte


@pytest.mark.parametrize("name", [pytest.param("letter", marks=pytest.mark.slow), "usps"])
def test_log_loss_within_5_percent_of_calibrated_svc(name):
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.svm import SVC

    Xtr, ytr, Xte, yte = _load(name)
    ref = CalibratedClassifierCV(SVC(C=10.0), cv=5).fit(Xtr, ytr)
    ours = MulticlassSVC(C=10.0, n_jobs=2, probability=True, random_state=0).fit(
        Xtr.astype(np.float32), ytr
    )
    ll_ref = log_loss(yte, ref.predict_proba(Xte), labels=ref.classes_)
    ll = log_loss(yte, ours.predict_proba(Xte.astype(np.float32)), labels=ours.classes_)
    assert ll <= 1.05 * ll_ref, (ll, ll_ref)


# ------------------------------------------------------------------ command line


@pytest.mark.slow
def test_cli_predict_probability(blob_store, tmp_path):
    url, X, y = blob_store
    est = MulticlassSVC(n_jobs=1, probability=True, random_state=0).fit(X, y)
    save(est, tmp_path / "m.npz")
    save(MulticlassSVC(n_jobs=1).fit(X, y), tmp_path / "plain.npz")

    def cli(*args):
        r = run_cli(*args)
        return r.returncode, r.stderr

    code, err = cli("predict", tmp_path / "m.npz", url, "-o", tmp_path / "p.txt", "--probability")
    assert code == 0, err
    lines = (tmp_path / "p.txt").read_text().splitlines()
    assert lines[0].split() == ["label"] + [str(c) for c in est.classes_]
    P = np.array([[float(v) for v in ln.split()[1:]] for ln in lines[1:]])
    np.testing.assert_array_equal(P, est.predict_proba(url))  # repr round-trips exactly
    assert [ln.split()[0] for ln in lines[1:]] == [str(v) for v in est.predict(url)]
    code, err = cli(
        "predict", tmp_path / "plain.npz", url, "-o", tmp_path / "q.txt", "--probability"
    )
    assert code == 2 and "--probability" in err and not (tmp_path / "q.txt").exists()
