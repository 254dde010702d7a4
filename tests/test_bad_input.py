"""Bad input raises ValueError with a message that names the problem."""

import re

import numpy as np
import pytest
import scipy.sparse as sp

from dmcsvm import MulticlassSVC
from dmcsvm.coordinators.crammer_singer import SolverSettings


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(24, 4))
    y = np.arange(24) % 3
    return X, y


@pytest.fixture(scope="module")
def fitted(data):
    X, y = data
    return MulticlassSVC(n_jobs=1).fit(X, y)


# ------------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sparse", [False, True])
def test_nan_in_X(data, sparse):
    X, y = data
    X = X.copy()
    X[3, 1] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        MulticlassSVC().fit(sp.csr_matrix(X) if sparse else X, y)


def test_inf_in_X(data):
    X, y = data
    X = X.copy()
    X[5, 2] = np.inf
    with pytest.raises(ValueError, match="Input X contains infinity"):
        MulticlassSVC().fit(X, y)
    X[5, 2] = -np.inf
    with pytest.raises(ValueError, match="Input X contains infinity"):
        MulticlassSVC().fit(X, y)


def test_nan_in_y(data):
    X, y = data
    with pytest.raises(ValueError, match="Input y contains NaN"):
        MulticlassSVC().fit(X, np.where(y == 1, np.nan, y))


def test_mismatched_lengths(data):
    X, y = data
    with pytest.raises(
        ValueError,
        match=re.escape("Found input variables with inconsistent numbers of samples: [24, 23]"),
    ):
        MulticlassSVC().fit(X, y[:-1])


@pytest.mark.parametrize("label,shown", [(0, "0"), ("only", "'only'")])
def test_one_class(data, label, shown):
    X, _ = data
    with pytest.raises(
        ValueError,
        match=re.escape(
            "MulticlassSVC needs samples of at least 2 classes in the data, but the data "
            f"contains only one class: {shown}"
        )
        + "$",
    ):
        MulticlassSVC().fit(X, np.full(X.shape[0], label))


def test_empty_X():
    with pytest.raises(ValueError, match=re.escape("Found array with 0 sample(s) (shape=(0, 4))")):
        MulticlassSVC().fit(np.zeros((0, 4)), np.zeros(0))
    with pytest.raises(ValueError, match=re.escape("Found array with 0 feature(s) (shape=(5, 0))")):
        MulticlassSVC().fit(np.zeros((5, 0)), np.arange(5) % 2)


def test_non_numeric_X():
    X = np.array([["a", "b"], ["c", "d"], ["e", "f"]])
    with pytest.raises(ValueError, match="could not convert string to float"):
        MulticlassSVC().fit(X, [0, 1, 0])


def test_complex_X(data):
    X, y = data
    with pytest.raises(ValueError, match="Complex data not supported"):
        MulticlassSVC().fit(X + 1j, y)


def test_wrong_dimensions(data):
    X, y = data
    with pytest.raises(ValueError, match="Expected 2D array, got 1D array instead"):
        MulticlassSVC().fit(X[:, 0], y)
    with pytest.raises(ValueError, match="y should be a 1d array"):
        MulticlassSVC().fit(X, np.c_[y, y])


def test_continuous_y(data):
    X, y = data
    with pytest.raises(ValueError, match="Unknown label type: continuous"):
        MulticlassSVC().fit(X, y + 0.5)


# ------------------------------------------------------------------------------------------------
# hyper-parameters
# ------------------------------------------------------------------------------------------------


def _bad(name, allowed, got):
    """The message of a value outside the constraint of ``name``."""
    return f"The '{name}' parameter of MulticlassSVC must be {allowed}. Got {got} instead."


def _bad_option(name, allowed, got):
    """The message of a solver option's value outside its constraint."""
    return (
        f"The '{name}' entry of MulticlassSVC's solver_options must be {allowed}. Got {got} "
        f"instead."
    )


_GAMMA = "a str among {'scale', 'auto'} or a float in the range (0.0, inf)"
BAD_PARAMS = [
    ({"C": 0}, _bad("C", "a float in the range (0.0, inf)", "0")),
    ({"C": -1.0}, _bad("C", "a float in the range (0.0, inf)", "-1.0")),
    ({"C": float("nan")}, _bad("C", "a float in the range (0.0, inf)", "nan")),
    ({"C": float("inf")}, _bad("C", "a float in the range (0.0, inf)", "inf")),
    ({"C": "1"}, _bad("C", "a float in the range (0.0, inf)", "'1'")),
    ({"gamma": 0}, _bad("gamma", _GAMMA, "0")),
    ({"gamma": -0.5}, _bad("gamma", _GAMMA, "-0.5")),
    ({"gamma": float("nan")}, _bad("gamma", _GAMMA, "nan")),
    ({"gamma": "bogus"}, _bad("gamma", _GAMMA, "'bogus'")),
    (
        {"solver_options": {"optimizer": "newton"}},
        _bad_option(
            "optimizer",
            "a str among {'basic', 'all_pairs', 'opt_kkt', 'fixed_point', 'exact'}",
            "'newton'",
        ),
    ),
    (
        {"solver_options": {"pattern_selection": "random"}},
        _bad_option("pattern_selection", "a str among {'kkt', 'amg', 'bmg'}", "'random'"),
    ),
    (
        {"solver_options": {"threshold": "cosine"}},
        _bad_option("threshold", "a str among {'max', 'mean', 'exp', 'linear', 'log'}", "'cosine'"),
    ),
    (
        {"solver_options": {"batch_size": 0}},
        _bad_option("batch_size", "an int in the range [1, inf) or None", "0"),
    ),
    (
        {"solver_options": {"batch_size": -5}},
        _bad_option("batch_size", "an int in the range [1, inf) or None", "-5"),
    ),
    (
        {"solver_options": {"batch_size": 2.5}},
        _bad_option("batch_size", "an int in the range [1, inf) or None", "2.5"),
    ),
    ({"tol": 0}, _bad("tol", "a float in the range (0.0, inf)", "0")),
    ({"tol": -0.001}, _bad("tol", "a float in the range (0.0, inf)", "-0.001")),
    (
        {"kernel": "laplacian"},
        _bad(
            "kernel",
            "a str among {'linear', 'poly', 'rbf', 'sigmoid', 'precomputed'} or a callable",
            "'laplacian'",
        ),
    ),
    (
        {"solver_options": {"threshold_fraction": 1.5}},
        _bad_option("threshold_fraction", "a float in the range [0.0, 1.0]", "1.5"),
    ),
    (
        {"solver_options": {"gap_tol": -0.1}},
        _bad_option("gap_tol", "a float in the range [0.0, inf)", "-0.1"),
    ),
    ({"max_iter": 0}, _bad("max_iter", "an int in the range [1, inf) or -1", "0")),
    (
        {"cache_size": -1},
        _bad("cache_size", "a str among {'auto'} or a float in the range [0.0, inf)", "-1"),
    ),
    (
        {"solver_options": {"batch_sweeps": 0}},
        _bad_option("batch_sweeps", "an int in the range [1, inf)", "0"),
    ),
    (
        {"n_jobs": 0},
        _bad("n_jobs", "an int in the range (-inf, -1], an int in the range [1, inf) or None", "0"),
    ),
    # degree >= 1 only where the kernel is 'poly': a cross-parameter check of KernelSpec
    ({"kernel": "poly", "degree": 0}, "degree must be an integer >= 1, got 0"),
]


@pytest.mark.parametrize(
    "params,message",
    BAD_PARAMS,
    ids=[";".join(f"{k}={v!r}" for k, v in p.items()) for p, _ in BAD_PARAMS],
)
def test_bad_hyper_parameter(data, params, message):
    X, y = data
    with pytest.raises(ValueError, match=re.escape(message)):
        MulticlassSVC(**params).fit(X, y)


def test_bad_hyper_parameter_rejected_before_touching_data():
    # a bad setting is reported even when the data would also be rejected
    with pytest.raises(
        ValueError,
        match=re.escape(
            "The 'C' parameter of MulticlassSVC must be a float in the range (0.0, inf). "
            "Got -1 instead."
        ),
    ):
        MulticlassSVC(C=-1).fit(np.zeros((0, 3)), np.zeros(0))


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("C", 0.0, "C must be a positive finite number"),
        ("optimizer", "x", "optimizer must be one of"),
        ("selection", "x", "selection must be one of"),
        ("threshold", "x", "threshold must be one of"),
        ("tol", float("nan"), "tol must be a positive number"),
        ("batch_size", 0, "batch_size must be an integer >= 1"),
        ("inner_skip", 1.0, r"inner_skip must be in \[0, 1\), got 1.0"),
        ("inner_skip", -0.1, r"inner_skip must be in \[0, 1\), got -0.1"),
    ],
)
def test_solver_settings_check(field, value, message):
    with pytest.raises(ValueError, match=message):
        SolverSettings(**{field: value}).check()
    assert SolverSettings().check().optimizer == "exact"


# ------------------------------------------------------------------------------------------------
# prediction
# ------------------------------------------------------------------------------------------------


def test_predict_wrong_n_features(data, fitted):
    X, _ = data
    msg = "X has 3 features, but MulticlassSVC is expecting 4 features as input"
    for method in (fitted.predict, fitted.decision_function):
        with pytest.raises(ValueError, match=msg):
            method(X[:, :3])
    with pytest.raises(ValueError, match=msg):
        fitted.score(X[:, :3], np.zeros(24))


def test_predict_nan(data, fitted):
    X, _ = data
    X = X.copy()
    X[0, 0] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        fitted.predict(X)


def test_predict_1d(data, fitted):
    X, _ = data
    with pytest.raises(ValueError, match="Expected 2D array, got 1D array instead"):
        fitted.predict(X[0])
