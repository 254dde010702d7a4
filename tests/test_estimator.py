"""MulticlassSVC: fit / predict / decision_function / score, fitted attributes, input formats,
progress bar and convergence warnings."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.datasets import load_digits, load_iris
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.svm import SVC

from dmcsvm import MulticlassSVC
from dmcsvm.kernels import KernelSpec, kernel_reference

HISTORY_REQUIRED = {
    "dual",
    "primal",
    "gap",
    "max_V",
    "max_psi",
    "n_active",
    "elapsed",
    "threshold",
    "batch",
    "round",
}


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return X, y


@pytest.fixture(scope="module")
def iris_model(iris):
    X, y = iris
    return MulticlassSVC(C=2.0, n_jobs=2).fit(X, y)


@pytest.fixture(scope="module")
def digits_small():
    X, y = load_digits(return_X_y=True)
    return X[:300] / 16.0, y[:300]


def _dual_from_model(model, X, y_idx):
    """Dual value recomputed from the fitted attributes (docs/design.md, 'The Crammer-Singer
    dual')."""
    spec = KernelSpec(model.kernel, model.gamma_, model.degree, model.coef0)
    B = np.zeros((X.shape[0], len(model.classes_)))
    B[model.support_] = model.dual_coef_.T
    K = kernel_reference(spec, X, X)
    return B[np.arange(X.shape[0]), y_idx].sum() - 0.5 * np.sum(B * (K @ B))


# ------------------------------------------------------------------------------------------------
# accuracy sanity
# ------------------------------------------------------------------------------------------------


def test_iris_fit_predict_score(iris, iris_model):
    X, y = iris
    m = iris_model
    pred = m.predict(X)
    assert pred.shape == (150,)
    assert set(np.unique(pred)) <= set(m.classes_)
    assert m.score(X, y) == pytest.approx(np.mean(pred == y))
    assert m.score(X, y) >= 0.95
    D = m.decision_function(X)
    assert D.shape == (150, 3)
    np.testing.assert_array_equal(pred, m.classes_[np.argmax(D, axis=1)])


def test_digits_test_accuracy():
    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
    m = MulticlassSVC(C=10, n_jobs=2).fit(Xtr, ytr)
    assert m.converged_
    assert m.score(Xte, yte) >= 0.95


@pytest.mark.parametrize(
    "kernel,params",
    [
        pytest.param("linear", {}, marks=pytest.mark.slow),  # the default tol takes a while here
        ("poly", {"degree": 2, "coef0": 1.0}),
        ("rbf", {"gamma": 0.5}),
    ],
)
def test_every_kernel_learns_iris(iris, kernel, params):
    X, y = iris
    m = MulticlassSVC(kernel=kernel, C=1.0, n_jobs=1, **params).fit(X, y)
    assert m.score(X, y) >= 0.9


# ------------------------------------------------------------------------------------------------
# fitted attributes
# ------------------------------------------------------------------------------------------------


def test_fitted_attributes(iris, iris_model):
    X, y = iris
    m = iris_model
    np.testing.assert_array_equal(m.classes_, [0, 1, 2])
    assert m.n_features_in_ == 4
    # support
    sv = m.support_
    assert sv.ndim == 1 and sv.shape[0] > 0
    assert np.all(np.diff(sv) > 0) and sv.min() >= 0 and sv.max() < 150
    np.testing.assert_array_equal(m.support_vectors_, X[sv])
    assert m.n_support_.shape == (3,)
    assert m.n_support_.sum() == sv.shape[0]
    np.testing.assert_array_equal(m.n_support_, np.bincount(y[sv], minlength=3))
    # signed coefficients: own class in [0, C], others <= 0, every SV's column sums to 0, none
    # all-zero; one row per class, one column per support vector (scikit-learn's SVC layout)
    assert m.dual_coef_.shape == (3, sv.shape[0])
    B = m.dual_coef_.T
    np.testing.assert_allclose(B.sum(axis=1), 0.0, atol=1e-12)
    own = B[np.arange(len(sv)), y[sv]]
    assert np.all(own > 0) and np.all(own <= m.C)
    other = B.copy()
    other[np.arange(len(sv)), y[sv]] = 0.0
    assert np.all(other <= 0)
    # gamma resolved like sklearn's SVC
    assert m.gamma_ == pytest.approx(SVC(gamma="scale").fit(X, y)._gamma, rel=1e-12)
    # decision function = kernel(X, SV) @ dual_coef_.T
    K = kernel_reference(KernelSpec("rbf", m.gamma_), X, m.support_vectors_)
    np.testing.assert_allclose(m.decision_function(X), K @ B, rtol=1e-10, atol=1e-10)
    # iterations and history
    assert isinstance(m.n_iter_, (int, np.integer)) and m.n_iter_ >= 1
    assert HISTORY_REQUIRED <= set(m.history_)
    for k, v in m.history_.items():
        assert len(v) == m.n_iter_, k
    assert np.all(np.diff(m.history_["elapsed"]) >= 0)
    assert m.converged_
    # converged means: every psi <= tol, or the relative duality gap <= gap_tol
    assert m.history_["max_psi"][-1] <= m.tol or m.history_["gap"][-1] <= m.gap_tol
    # the last dual value is the one of the fitted coefficients: exactly (to rounding) with
    # float64 kernel values; with the default float32 ones the solver's dual is that of the
    # float32 kernel matrix, whose values are rounded at 6e-8
    assert m.history_["dual"][-1] == pytest.approx(_dual_from_model(m, X, y), rel=1e-5)
    m64 = clone(m).set_params(kernel_dtype="float64").fit(X, y)
    assert m64.history_["dual"][-1] == pytest.approx(_dual_from_model(m64, X, y), rel=1e-9)
    # the primal never drops below the dual (weak duality)
    assert np.all(m.history_["primal"] >= m.history_["dual"] - 1e-9)


def test_converged_by_gap_tol(iris):
    X, y = iris
    gap_tol = 1e-2
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        m = MulticlassSVC(C=2.0, tol=1e-12, n_jobs=2, solver_options={"gap_tol": gap_tol}).fit(X, y)
    assert m.converged_
    h = m.history_
    assert h["gap"][-1] <= gap_tol
    assert h["gap"][0] > gap_tol
    # with psi out of reach the stop came from the gap
    assert h["max_psi"][-1] > 1e-12


def test_tight_fit_reaches_qp_optimum(cs):
    X, y = cs.make_blobs_problem(41, 45, 3, 3, spread=1.3, scale=1.5)
    m = MulticlassSVC(
        C=1.0, kernel="rbf", gamma=0.5, tol=1e-8, n_jobs=2, solver_options={"gap_tol": 0.0}
    ).fit(X, y)
    assert m.converged_
    K = kernel_reference(KernelSpec("rbf", 0.5), X, X)
    D_star, _ = cs.cs_dual_qp(K, y, 3, 1.0)
    assert _dual_from_model(m, X, y) == pytest.approx(D_star, rel=1e-6)
    assert m.history_["max_psi"][-1] <= 1e-8
    assert m.history_["gap"][-1] <= 1e-5


def test_fit_is_deterministic_and_refit_resets(iris):
    X, y = iris
    m1 = MulticlassSVC(n_jobs=2).fit(X, y)
    m2 = clone(m1).fit(X, y)
    np.testing.assert_array_equal(m1.support_, m2.support_)
    np.testing.assert_array_equal(m1.dual_coef_, m2.dual_coef_)
    # refit on different data replaces everything
    m1.fit(X[:, :2], y)
    assert m1.n_features_in_ == 2
    assert m1.support_vectors_.shape[1] == 2


def test_n_jobs_do_not_change_the_solution(iris):
    X, y = iris
    kw = dict(C=1.0, tol=1e-8)
    opts = {"gap_tol": 0.0}
    m1 = MulticlassSVC(n_jobs=1, **kw, solver_options=opts).fit(X, y)
    m2 = MulticlassSVC(n_jobs=2, **kw, solver_options=opts).fit(X, y)
    assert m1.history_["dual"][-1] == pytest.approx(m2.history_["dual"][-1], rel=1e-8)
    np.testing.assert_allclose(m1.decision_function(X), m2.decision_function(X), atol=1e-5)


@pytest.mark.parametrize("batch_size", [1, 10])
def test_batch_size_same_optimum_as_default(iris, batch_size):
    X, y = iris
    kw = dict(C=1.0, tol=1e-7, n_jobs=2)
    opts = {"gap_tol": 0.0}
    ref = MulticlassSVC(kernel_dtype="float64", **kw, solver_options=opts).fit(X, y)
    m = MulticlassSVC(
        kernel_dtype="float64", **kw, solver_options={**opts, "batch_size": batch_size}
    ).fit(X, y)
    assert m.history_["dual"][-1] == pytest.approx(ref.history_["dual"][-1], rel=1e-7)


# ------------------------------------------------------------------------------------------------
# labels and input formats
# ------------------------------------------------------------------------------------------------


def test_string_labels(iris, iris_model):
    X, y = iris
    names = np.array(["setosa", "versicolor", "virginica"])
    m = MulticlassSVC(C=2.0, n_jobs=2).fit(X, names[y])
    np.testing.assert_array_equal(m.classes_, names)
    pred = m.predict(X)
    assert pred.dtype.kind == "U"
    np.testing.assert_array_equal(pred, names[iris_model.predict(X)])
    np.testing.assert_array_equal(m.dual_coef_, iris_model.dual_coef_)
    assert m.score(X, names[y]) == iris_model.score(X, y)


def test_unsorted_labels_map_to_sorted_classes(iris):
    X, y = iris
    labels = np.array([7, -3, 5])[y]
    m = MulticlassSVC(n_jobs=2).fit(X, labels)
    np.testing.assert_array_equal(m.classes_, [-3, 5, 7])
    assert m.score(X, labels) >= 0.95
    # column r of dual_coef_ / decision_function belongs to classes_[r]
    D = m.decision_function(X)
    np.testing.assert_array_equal(m.predict(X), m.classes_[np.argmax(D, axis=1)])


def test_sparse_csr_gives_the_same_model(digits_small):
    X, y = digits_small
    md = MulticlassSVC(kernel_dtype="float64", n_jobs=2).fit(X, y)
    ms = MulticlassSVC(kernel_dtype="float64", n_jobs=2).fit(sp.csr_matrix(X), y)
    np.testing.assert_array_equal(md.support_, ms.support_)
    np.testing.assert_allclose(ms.dual_coef_, md.dual_coef_, rtol=0, atol=1e-10)
    assert sp.issparse(ms.support_vectors_)
    np.testing.assert_array_equal(ms.support_vectors_.toarray(), X[ms.support_])
    assert ms.gamma_ == pytest.approx(md.gamma_, rel=1e-12)
    np.testing.assert_allclose(
        ms.decision_function(sp.csr_matrix(X)), md.decision_function(X), atol=1e-9
    )
    np.testing.assert_allclose(ms.decision_function(X), md.decision_function(X), atol=1e-9)
    np.testing.assert_array_equal(ms.predict(sp.csr_matrix(X)), md.predict(X))


def test_sparse_csc_and_coo_accepted(digits_small):
    X, y = digits_small
    X, y = X[:120], y[:120]
    md = MulticlassSVC(kernel_dtype="float64", n_jobs=1).fit(X, y)
    for fmt in (sp.csc_matrix, sp.coo_matrix):
        ms = MulticlassSVC(kernel_dtype="float64", n_jobs=1).fit(fmt(X), y)
        np.testing.assert_allclose(ms.dual_coef_, md.dual_coef_, atol=1e-10)


def test_float32_input(digits_small):
    X, y = digits_small
    md = MulticlassSVC(n_jobs=2, tol=1e-6, solver_options={"gap_tol": 0.0}).fit(X, y)
    m32 = MulticlassSVC(n_jobs=2, tol=1e-6, solver_options={"gap_tol": 0.0}).fit(
        X.astype(np.float32), y
    )
    assert m32.converged_
    assert m32.support_vectors_.dtype == np.float32
    assert m32.history_["dual"][-1] == pytest.approx(md.history_["dual"][-1], rel=1e-6)
    np.testing.assert_allclose(
        m32.decision_function(X.astype(np.float32)), md.decision_function(X), atol=1e-4
    )
    np.testing.assert_array_equal(m32.predict(X), md.predict(X))


def test_list_input(iris):
    X, y = iris
    m = MulticlassSVC(n_jobs=1).fit(X.tolist(), y.tolist())
    assert m.predict(X[:5].tolist()).shape == (5,)


# ------------------------------------------------------------------------------------------------
# binary problems
# ------------------------------------------------------------------------------------------------


def test_binary_decision_function(iris):
    X, y = iris
    mask = y > 0
    Xb, yb = X[mask], np.where(y[mask] == 2, "pos", "neg")
    m = MulticlassSVC(C=1.0, n_jobs=2).fit(Xb, yb)
    np.testing.assert_array_equal(m.classes_, ["neg", "pos"])
    d = m.decision_function(Xb)
    assert d.shape == (100,)
    np.testing.assert_array_equal(m.predict(Xb), np.where(d > 0, "pos", "neg"))
    K = kernel_reference(KernelSpec("rbf", m.gamma_), Xb, m.support_vectors_)
    S = K @ m.dual_coef_.T
    np.testing.assert_allclose(d, S[:, 1] - S[:, 0], atol=1e-10)
    assert m.score(Xb, yb) >= 0.9
    # two classes: dual_coef_ columns are (-alpha, +alpha) or (+alpha, -alpha)
    np.testing.assert_allclose(m.dual_coef_[0], -m.dual_coef_[1], atol=1e-14)


# ------------------------------------------------------------------------------------------------
# progress bar and warnings
# ------------------------------------------------------------------------------------------------


def test_verbose_shows_progress_bar(iris, capfd):
    X, y = iris
    MulticlassSVC(verbose=True, n_jobs=1).fit(X, y)
    out, err = capfd.readouterr()
    assert "dmcsvm rounds" in err
    assert "gap=" in err


def test_not_verbose_is_silent(iris, capfd):
    X, y = iris
    MulticlassSVC(verbose=False, n_jobs=1).fit(X, y)
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_max_iter_raises_convergence_warning(iris):
    X, y = iris
    with pytest.warns(ConvergenceWarning, match="max_iter=1 "):
        m = MulticlassSVC(max_iter=1, n_jobs=2).fit(X, y)
    assert m.n_iter_ == 1
    assert not m.converged_
    # a stopped model is still a usable, consistent model
    assert m.predict(X).shape == (150,)
    assert m.history_["dual"][-1] <= _dual_from_model(m, X, y) + 1e-12


def test_converged_fit_emits_no_warning(iris):
    X, y = iris
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        MulticlassSVC(n_jobs=2).fit(X, y)


def test_unfitted_model_raises(iris):
    from sklearn.exceptions import NotFittedError

    X, _ = iris
    with pytest.raises(NotFittedError):
        MulticlassSVC().predict(X)


def test_prediction_in_chunks_on_threads(iris, iris_model):
    # many row blocks of 256 on two threads and on one: the same scores, those of the reference
    X, _ = iris
    Xbig = np.tile(X, (15, 1))
    m = clone(iris_model).set_params(n_jobs=2).fit(*iris)
    D = m.decision_function(Xbig)
    assert D.shape == (2250, 3)
    K = kernel_reference(KernelSpec("rbf", m.gamma_), Xbig, m.support_vectors_)
    np.testing.assert_allclose(D, K @ m.dual_coef_.T, rtol=1e-10, atol=1e-10)
    m.set_params(n_jobs=1)
    np.testing.assert_array_equal(m.decision_function(Xbig), D)


@pytest.mark.parametrize("tol", [3e-2, 1e-3, 1e-5])
def test_tol_binds(digits_small, tol):
    """The stopping rule is ``tol`` on psi, checked with every row unshrunk, at the default and
    whatever a user sets: the last round has every row active and max psi <= tol, and a lower
    tol ends closer to the optimum."""
    X, y = digits_small
    m = MulticlassSVC(C=10.0, tol=tol).fit(X, y)
    h = m.history_
    assert m.converged_
    assert h["n_active"][-1] == X.shape[0]
    assert h["max_psi"][-1] <= tol
    assert MulticlassSVC().tol == 1e-3 and MulticlassSVC()._solver_options()["gap_tol"] == 0.0
    if tol < 1e-3:
        looser = MulticlassSVC(C=10.0, tol=1e-3).fit(X, y).history_
        assert h["gap"][-1] < looser["gap"][-1]
