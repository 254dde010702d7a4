"""Issue 40, "first contact": the command line's Unix and LIBSVM habits, feature scaling kept in
the model, the SVC surface (sigmoid, precomputed and callable kernels, decision_function_shape)
and the store's class check."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
from oracles import check_feasible, cs_dual_qp, dual_value, kkt_violation
from sklearn.datasets import dump_svmlight_file, load_iris
from sklearn.metrics.pairwise import rbf_kernel, sigmoid_kernel
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import MinMaxScaler, StandardScaler
from sklearn.svm import SVC

from dmcsvm import MulticlassSVC
from dmcsvm.cli import build_parser, main
from dmcsvm.cli._params import estimator_params
from dmcsvm.kernels import KernelSpec, kernel_block, kernel_diag
from dmcsvm.model_io import load_model, save_model
from dmcsvm.store import write_arrays


def run(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def ok(capsys, *args):
    code, out, err = run(capsys, *args)
    assert code == 0, (code, out, err)
    return out


def usage_error(capsys, *args):
    code, _, err = run(capsys, *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (code, err)
    return lines[0]


@pytest.fixture(scope="module")
def iris_svm(tmp_path_factory):
    d = tmp_path_factory.mktemp("iris")
    X, y = load_iris(return_X_y=True)
    dump_svmlight_file(X * 10, y, str(d / "iris.svm"), zero_based=False)
    return d / "iris.svm"


# ------------------------------------------------------------------------------- 2. the CLI


def test_bare_command_prints_help(capsys):
    out = ok(capsys)
    assert out.startswith("usage: dmcsvm [-h] [--version] COMMAND ...")
    assert "Run dmcsvm COMMAND --help" in out and "scale" in out


def test_python_dash_m_dmcsvm_runs_the_command():
    r = subprocess.run(
        [sys.executable, "-m", "dmcsvm", "--version"], capture_output=True, text=True, timeout=60
    )
    from dmcsvm import __version__

    assert (r.returncode, r.stdout, r.stderr) == (0, f"dmcsvm {__version__}\n", "")


@pytest.mark.slow  # a fresh interpreter runs the command: ~3 s quiet, 7 s at load 3.7
def test_closed_pipe_exits_quietly(iris_svm, tmp_path):
    model = tmp_path / "m.npz"
    assert main(["train", str(iris_svm), "-o", str(model), "-g", "0.05", "-c", "1"]) == 0
    # the reader takes one line and goes away: no traceback, status 0
    cmd = (
        f"{sys.executable} -m dmcsvm evaluate {model} {iris_svm} | head -1; "
        f'echo "status ${{PIPESTATUS[0]}}"'
    )
    r = subprocess.run(
        ["bash", "-c", cmd],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert r.stdout.splitlines() == ["accuracy 0.9933 (149 of 150)", "status 0"], r.stdout
    assert r.stderr == ""


def test_libsvm_short_flags_and_kernel_numbers():
    p = build_parser(["train"])
    for t, name in [
        ("0", "linear"),
        ("1", "poly"),
        ("2", "rbf"),
        ("3", "sigmoid"),
        ("4", "precomputed"),
        ("sigmoid", "sigmoid"),
    ]:
        a = p.parse_args(["train", "d.svm", "-o", "m.npz", "-c", "10", "-g", "0.5", "-t", t])
        assert (a.est__C, a.est__gamma, a.est__kernel) == (10, 0.5, name)
    # the underscore spelling is still accepted
    a = p.parse_args(["train", "d.svm", "-o", "m.npz", "--gap_tol", "0.1", "--gap-tol", "0.2"])
    assert a.opt__gap_tol == 0.2
    # a solver option, and its name in dmcsvm 0.2, go into solver_options
    a = p.parse_args(["train", "d.svm", "-o", "m.npz", "--selection", "kkt", "--batch-size", "7"])
    assert estimator_params(a)["solver_options"] == {"pattern_selection": "kkt", "batch_size": 7}


def test_no_abbreviated_options(capsys, iris_svm, tmp_path):
    assert (
        usage_error(capsys, "train", iris_svm, "-o", tmp_path / "m.npz", "--c", "1")
        == "dmcsvm: error: unrecognized arguments: --c 1"
    )
    assert (
        usage_error(capsys, "predict", "m.npz", iris_svm, "-o", tmp_path / "p", "--dec")
        == "dmcsvm: error: unrecognized arguments: --dec"
    )
    assert os.listdir(tmp_path) == []


def test_one_overwrite_rule_for_every_output(capsys, iris_svm, tmp_path):
    model, pred, png, log = (tmp_path / n for n in ("m.npz", "p.txt", "c.png", "log.jsonl"))
    ok(capsys, "train", iris_svm, "-o", model, "-g", "0.05", "--log-json", log)
    before = model.read_bytes()
    msg = f"dmcsvm: error: {model} already exists; pass --overwrite to replace it"
    assert usage_error(capsys, "train", iris_svm, "-o", model, "-c", "3") == msg
    assert model.read_bytes() == before
    ok(capsys, "train", iris_svm, "-o", model, "-c", "3", "-g", "0.05", "--overwrite")
    assert model.read_bytes() != before
    pred.write_text("keep\n")
    assert (
        usage_error(capsys, "predict", model, iris_svm, "-o", pred)
        == f"dmcsvm: error: {pred} already exists; pass --overwrite to replace it"
    )
    assert pred.read_text() == "keep\n"
    ok(capsys, "predict", model, iris_svm, "-o", pred, "--overwrite")
    assert len(pred.read_text().splitlines()) == 150
    png.write_bytes(b"keep")
    assert (
        usage_error(capsys, "plot", log, "-o", png)
        == f"dmcsvm: error: {png} already exists; pass --overwrite to replace it"
    )
    assert png.read_bytes() == b"keep"
    # nothing half-written: no temporary left beside the outputs
    assert sorted(os.listdir(tmp_path)) == ["c.png", "log.jsonl", "m.npz", "p.txt"]


def test_help_is_plain_text_and_about_a_screen(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    for cmd in ("convert", "info", "scale", "train", "predict", "evaluate", "plot", "demo"):
        out = ok(capsys, cmd, "--help")
        assert "``" not in out and ":func:" not in out and ":mod:" not in out, cmd
        assert "Fig." not in out and "Eq." not in out, cmd  # paper references stay in Python
        assert len(out.splitlines()) <= 95, (cmd, len(out.splitlines()))


def test_a_file_that_is_not_a_model(capsys, iris_svm, tmp_path):
    png = tmp_path / "x.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    assert (
        usage_error(capsys, "predict", png, iris_svm, "-o", tmp_path / "p.txt")
        == f"dmcsvm: error: {png} is not a dmcsvm model file: a model is an .npz archive or a "
        f"model directory written by dmcsvm train / save_model"
    )
    np.save(tmp_path / "a.npy", np.zeros(3))
    with pytest.raises(ValueError, match=r"a\.npy is not a dmcsvm model file: a model is"):
        load_model(tmp_path / "a.npy")


def test_info_shows_text_labels_as_text(capsys, tmp_path):
    y = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZ") * 2)
    write_arrays(tmp_path / "letters.zarr", np.random.default_rng(0).random((52, 3)), y)
    out = ok(capsys, "info", tmp_path / "letters.zarr")
    assert "classes        26 (text labels)\n" in out
    assert "\n             A  2\n" in out and "\n             Z  2\n" in out
    write_arrays(tmp_path / "ints.zarr", np.zeros((4, 2)), np.array([1, 2, 1, 2]))
    assert "classes        2 (integer labels)\n" in ok(capsys, "info", tmp_path / "ints.zarr")


# ------------------------------------------------------------------------------- scaling


def test_scale_matches_minmaxscaler_and_round_trips(capsys, iris_svm, tmp_path):
    X, y = load_iris(return_X_y=True)
    X = (X * 10).astype(np.float32)
    rng_file, out = tmp_path / "range.txt", tmp_path / "scaled.svm"
    ok(capsys, "scale", iris_svm, "-o", out, "-s", rng_file)
    lines = rng_file.read_text().splitlines()
    assert lines[:2] == ["x", "-1.0 1.0"] and len(lines) == 2 + 4
    from sklearn.datasets import load_svmlight_file

    Xs, ys = load_svmlight_file(str(out), n_features=4)
    ref = MinMaxScaler(feature_range=(-1, 1)).fit_transform(X)
    np.testing.assert_allclose(Xs.toarray(), ref, atol=1e-7)
    np.testing.assert_array_equal(ys, y)
    # -r: the training ranges again, here into a store; -l/-u with -r is refused
    ok(capsys, "scale", iris_svm, "-o", tmp_path / "s.zarr", "-r", rng_file)
    from dmcsvm.store import read_all

    np.testing.assert_allclose(read_all(str(tmp_path / "s.zarr"))[0], ref, atol=1e-6)
    assert (
        usage_error(capsys, "scale", iris_svm, "-o", tmp_path / "t.svm", "-r", rng_file, "-l", "0")
        == "dmcsvm: error: -r takes lower and upper from its file: give either -r or -l/-u"
    )
    assert (
        usage_error(capsys, "scale", iris_svm, "-o", out)
        == f"dmcsvm: error: {out} already exists; pass --overwrite to replace it"
    )
    ok(capsys, "scale", iris_svm, "-o", tmp_path / "u.svm", "-l", "0", "-u", "1")
    Xu, _ = load_svmlight_file(str(tmp_path / "u.svm"), n_features=4)
    np.testing.assert_allclose(Xu.toarray(), MinMaxScaler().fit_transform(X), atol=1e-7)
    (tmp_path / "bad.txt").write_text("y\n0 1\n")
    assert "is not a feature range file" in usage_error(
        capsys, "scale", iris_svm, "-o", tmp_path / "v.svm", "-r", tmp_path / "bad.txt"
    )


def test_train_scale_keeps_the_scaler_in_the_model(capsys, iris_svm, tmp_path):
    model = tmp_path / "m.npz"
    ok(capsys, "train", iris_svm, "-o", model, "--scale", "-t", "linear", "-c", "10")
    pipe = load_model(model)
    assert isinstance(pipe, Pipeline)
    scaler = pipe.steps[0][1]
    assert isinstance(scaler, MinMaxScaler) and scaler.feature_range == (-1, 1)
    X, y = load_iris(return_X_y=True)
    X = (X * 10).astype(np.float32)
    ref = MulticlassSVC(kernel="linear", C=10).fit(
        MinMaxScaler(feature_range=(-1, 1)).fit_transform(X), y
    )
    ok(capsys, "predict", model, iris_svm, "-o", tmp_path / "p.txt", "--decision-values")
    got = np.loadtxt(tmp_path / "p.txt", skiprows=1)
    np.testing.assert_allclose(
        got[:, 1:],
        ref.decision_function(MinMaxScaler(feature_range=(-1, 1)).fit(X).transform(X)),
        rtol=1e-6,
        atol=1e-6,
    )
    np.testing.assert_array_equal(
        got[:, 0], ref.predict(MinMaxScaler(feature_range=(-1, 1)).fit(X).transform(X))
    )


@pytest.mark.parametrize("scaler", [MinMaxScaler(feature_range=(-1, 1)), StandardScaler()])
def test_pipeline_saves_and_loads_without_pickle(scaler, tmp_path):
    X, y = load_iris(return_X_y=True)
    pipe = Pipeline([("scale", scaler), ("svm", MulticlassSVC(C=3))]).fit(X, y)
    for name in ("p.npz", "p.zarr"):
        save_model(pipe, tmp_path / name)
        back = load_model(tmp_path / name)
        assert [n for n, _ in back.steps] == ["scale", "svm"]
        assert type(back.steps[0][1]) is type(scaler)
        np.testing.assert_array_equal(back.decision_function(X), pipe.decision_function(X))
    with np.load(tmp_path / "p.npz", allow_pickle=False) as z:  # plain arrays only
        assert all(z[k].dtype != object for k in z.files)


def test_pipeline_of_other_steps_is_refused(tmp_path):
    from sklearn.decomposition import PCA

    X, y = load_iris(return_X_y=True)
    pipe = Pipeline([("pca", PCA(2)), ("svm", MulticlassSVC())]).fit(X, y)
    with pytest.raises(
        ValueError,
        match=r"cannot save model: step 'pca' is a PCA; a saved "
        r"Pipeline holds only MinMaxScaler, StandardScaler, "
        r"MaxAbsScaler before its dmcsvm estimator",
    ):
        save_model(pipe, tmp_path / "p.npz")
    assert not os.listdir(tmp_path)


# ------------------------------------------------------------------------------- the warning


def test_store_with_many_classes_gives_no_false_regression_warning(tmp_path):
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(26), 8)  # 26 classes, 208 rows
    X = rng.normal(size=(208, 4)) + y[:, None] * 0.5
    write_arrays(tmp_path / "d.zarr", X, y)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="The number of unique classes")
        MulticlassSVC(max_iter=3).fit(str(tmp_path / "d.zarr"))
    # the warning is kept where it is true: 30 rows of 25 classes
    y2 = np.concatenate([np.arange(25), np.arange(5)])
    write_arrays(tmp_path / "e.zarr", rng.normal(size=(30, 2)), y2)
    with (
        pytest.warns(
            UserWarning,
            match="The number of unique classes is greater than 50% of the number of samples",
        ),
        warnings.catch_warnings(),
    ):
        warnings.filterwarnings("ignore", message="dmcsvm solver stopped")
        MulticlassSVC(max_iter=3).fit(str(tmp_path / "e.zarr"))


# ------------------------------------------------------------------------------- 3. SVC surface


def _iris_scaled():
    X, y = load_iris(return_X_y=True)
    return MinMaxScaler(feature_range=(-1, 1)).fit_transform(X), y


def test_sigmoid_kernel_block_is_sklearns():
    rng = np.random.default_rng(1)
    A, B = rng.normal(size=(7, 5)), rng.normal(size=(4, 5))
    spec = KernelSpec("sigmoid", 0.3, 3, -0.5)
    np.testing.assert_allclose(
        kernel_block(spec, A, B), sigmoid_kernel(A, B, 0.3, -0.5), rtol=1e-12
    )
    np.testing.assert_allclose(
        kernel_block(spec, A.astype(np.float32), B.astype(np.float32), dtype=np.float32),
        sigmoid_kernel(A, B, 0.3, -0.5),
        atol=1e-6,
    )
    np.testing.assert_allclose(kernel_diag(spec, A), np.diag(sigmoid_kernel(A, A, 0.3, -0.5)))


def _dual(est, K, y):
    """The Crammer-Singer dual value of a fitted model, from its support coefficients."""
    n, m = K.shape[0], len(est.classes_)
    B = np.zeros((n, m))
    B[est.support_] = est.dual_coef_.T
    return dual_value(B, K, np.searchsorted(est.classes_, y))


def _coef(est, n):
    B = np.zeros((n, len(est.classes_)))
    B[est.support_] = est.dual_coef_.T
    return B


def test_sigmoid_fit_meets_the_optimality_conditions_and_agrees_with_svc():
    # the sigmoid kernel is not positive semidefinite (here its smallest eigenvalue is -2e-3),
    # so no convex QP oracle applies: the solution is checked by the KKT conditions of the
    # Crammer-Singer dual (Aiolli-Sperduti 2005 Eq. 15) on the true kernel, as LIBSVM would
    X, y = _iris_scaled()
    gamma, coef0, C = 0.05, 0.0, 10.0
    est = MulticlassSVC(kernel="sigmoid", gamma=gamma, coef0=coef0, C=C, tol=1e-4).fit(X, y)
    K = sigmoid_kernel(X, X, gamma, coef0)
    B = _coef(est, len(y))
    check_feasible(B, y, C, atol=1e-9)
    assert kkt_violation(B, K @ B, y, C)[0] <= 1e-3
    np.testing.assert_allclose(est.decision_function(X), K @ B, atol=1e-6)
    # SVC (one-vs-one with biases) is another model (without a bias, tanh(gamma <x, z>) is odd
    # in x): mostly the same labels
    svc = SVC(kernel="sigmoid", gamma=gamma, coef0=coef0, C=C).fit(X, y)
    assert np.mean(est.predict(X) == svc.predict(X)) >= 0.85


def test_precomputed_and_callable_equal_the_named_kernel(tmp_path):
    X, y = _iris_scaled()
    Xte = X[::7] + 0.01
    named = MulticlassSVC(kernel="rbf", gamma=0.5, C=10, tol=1e-5).fit(X, y)
    pre = MulticlassSVC(kernel="precomputed", C=10, tol=1e-5).fit(rbf_kernel(X, X, 0.5), y)
    fn = MulticlassSVC(kernel=lambda A, B: rbf_kernel(A, B, 0.5), C=10, tol=1e-5).fit(X, y)
    K = rbf_kernel(X, X, 0.5)
    best, _ = cs_dual_qp(K, y, 3, 10.0)
    for est in (named, pre, fn):
        assert _dual(est, K, y) == pytest.approx(best, rel=1e-4)
    D = named.decision_function(Xte)
    np.testing.assert_allclose(pre.decision_function(rbf_kernel(Xte, X, 0.5)), D, atol=1e-3)
    np.testing.assert_allclose(fn.decision_function(Xte), D, atol=1e-3)
    np.testing.assert_array_equal(pre.predict(rbf_kernel(Xte, X, 0.5)), named.predict(Xte))
    # the precomputed model keeps no support vectors and saves / loads as indices + coefficients
    assert pre.support_vectors_.shape == (len(pre.support_), 0)
    save_model(pre, tmp_path / "pre.npz")
    back = load_model(tmp_path / "pre.npz")
    np.testing.assert_array_equal(back.support_, pre.support_)
    np.testing.assert_array_equal(
        back.decision_function(rbf_kernel(Xte, X, 0.5)),
        pre.decision_function(rbf_kernel(Xte, X, 0.5)),
    )
    with pytest.raises(
        ValueError,
        match="cannot save model: its kernel is a Python callable, and a model file stores no code",
    ):
        save_model(fn, tmp_path / "fn.npz")
    assert sorted(os.listdir(tmp_path)) == ["pre.npz"]


def test_precomputed_binary_reaches_the_qp_optimum():
    # two classes: the bias-free Crammer-Singer model is not SVC's (which has a bias), so the
    # exact QP is the peer here
    X, y = _iris_scaled()
    keep = y > 0
    X, y = X[keep], y[keep] - 1
    K = X @ X.T + 1.0
    pre = MulticlassSVC(kernel="precomputed", C=1, tol=1e-5).fit(K, y)
    best, _ = cs_dual_qp(K, y, 2, 1.0)
    assert _dual(pre, K, y) == pytest.approx(best, rel=1e-4)
    assert pre.decision_function(K).shape == (len(y),)


def test_gram_kernels_refuse_clusters_stores_and_dask(tmp_path):
    X, y = _iris_scaled()
    K = X @ X.T
    with pytest.raises(
        ValueError,
        match=r"^MulticlassSVC with kernel='precomputed' runs in "
        r"this process only and cannot go to a Dask cluster: "
        r"set client=None$",
    ):
        MulticlassSVC(kernel="precomputed", client="tcp://127.0.0.1:1").fit(K, y)
    write_arrays(tmp_path / "k.zarr", K, y)
    with pytest.raises(
        ValueError,
        match=r"^MulticlassSVC with a callable kernel takes X in "
        r"memory \(a NumPy array\) in this process only; it "
        r"cannot go to a cluster, and X is a zarr store$",
    ):
        MulticlassSVC(kernel=np.dot).fit(str(tmp_path / "k.zarr"))
    import dask.array as da

    with pytest.raises(ValueError, match=r"cannot go to a cluster, and X is a dask array$"):
        MulticlassSVC(kernel="precomputed").fit(da.from_array(K), y)
    with pytest.raises(
        ValueError,
        match=r"must be the square Gram matrix of the training "
        r"rows, got shape \(150, 4\)",
    ):
        MulticlassSVC(kernel="precomputed").fit(X, y)


def test_decision_function_shape_ovo():
    X, y = _iris_scaled()
    ovr = MulticlassSVC(C=10).fit(X, y)
    ovo = MulticlassSVC(C=10, decision_function_shape="ovo").fit(X, y)
    S = ovr.decision_function(X)
    D = ovo.decision_function(X)
    np.testing.assert_array_equal(
        D, np.stack([S[:, 0] - S[:, 1], S[:, 0] - S[:, 2], S[:, 1] - S[:, 2]], axis=1)
    )
    svc = SVC(C=10, decision_function_shape="ovo").fit(X, y)
    assert svc.decision_function(X).shape == D.shape  # SVC's shape and pair order
    # the sign is SVC's: a positive (i, j) value votes for class i
    votes = np.zeros_like(S)
    for c, (i, j) in enumerate([(0, 1), (0, 2), (1, 2)]):
        votes[:, i] += D[:, c] > 0
        votes[:, j] += D[:, c] <= 0
    np.testing.assert_array_equal(ovo.classes_[votes.argmax(1)], ovo.predict(X))
    np.testing.assert_array_equal(ovo.predict(X), ovr.predict(X))
    with pytest.raises(ValueError, match="decision_function_shape"):
        MulticlassSVC(decision_function_shape="ova").fit(X, y)


def test_ovo_model_and_probabilities_save_and_load(tmp_path):
    X, y = _iris_scaled()
    est = MulticlassSVC(C=10, decision_function_shape="ovo", probability=True, random_state=0).fit(
        X, y
    )
    save_model(est, tmp_path / "m.npz")
    back = load_model(tmp_path / "m.npz")
    assert back.decision_function_shape == "ovo"
    np.testing.assert_array_equal(back.decision_function(X), est.decision_function(X))
    np.testing.assert_allclose(back.predict_proba(X).sum(1), 1.0)
    # four classes: 'ovo' gives 6 columns, which the load check counts right
    y4 = np.where(X[:, 0] > 0.5, 3, y)
    est4 = MulticlassSVC(C=10, decision_function_shape="ovo").fit(X, y4)
    save_model(est4, tmp_path / "m4.npz")
    assert load_model(tmp_path / "m4.npz").decision_function(X[:2]).shape == (2, 6)
    pre = MulticlassSVC(kernel="precomputed", C=10, probability=True, random_state=0).fit(
        X @ X.T, y
    )
    assert pre.predict_proba(X @ X.T).shape == (150, 3)


# ------------------------------------------------------------------------------- 1. fast start


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    "spec",
    [
        KernelSpec("rbf", 0.3),
        KernelSpec("poly", 0.5, 3, 1.0),
        KernelSpec("poly", 0.2, 7, -0.5),
        KernelSpec("linear"),
        KernelSpec("sigmoid", 0.1, 3, 0.2),
    ],
)
def test_numpy_pass_equals_numba_bit_for_bit(spec, dtype):
    rng = np.random.default_rng(3)
    A, B = rng.normal(size=(300, 20)).astype(dtype), rng.normal(size=(77, 20)).astype(dtype)
    jit = kernel_block(spec, A, B, dtype=np.float64)
    plain = kernel_block(spec, A, B, dtype=np.float64, jit=False)
    np.testing.assert_array_equal(plain, jit)
    out = np.empty((300, 77))  # in place on the GEMM's output, as training does
    np.testing.assert_array_equal(
        kernel_block(spec, A.astype(np.float64), B.astype(np.float64), out=out, jit=False),
        kernel_block(spec, A.astype(np.float64), B.astype(np.float64)),
    )


_FRESH_PREDICT = r"""
import sys
import numpy as np
from dmcsvm import kernels
from dmcsvm.model_io import load_model
m = load_model(sys.argv[1])
X = np.load(sys.argv[2])
assert not kernels.numba_loaded() and kernels.prefer_numpy(len(X) * len(m.support_))
D = m.decision_function(X)
assert not kernels.numba_loaded()              # the prediction did not start numba
assert "dmcsvm.estimators.binary" not in sys.modules     # nor import the SMO family
np.save(sys.argv[3], D)
"""


@pytest.mark.slow  # a fresh interpreter: ~3 s quiet, 6 s at load 3.7
def test_a_small_prediction_in_a_fresh_process_skips_numba_and_gives_the_same_values(tmp_path):
    X, y = _iris_scaled()
    m = MulticlassSVC(C=10, gamma=0.7).fit(X, y)
    save_model(m, tmp_path / "m.npz")
    np.save(tmp_path / "X.npy", X)
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            _FRESH_PREDICT,
            str(tmp_path / "m.npz"),
            str(tmp_path / "X.npy"),
            str(tmp_path / "D.npy"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "D.npy"), m.decision_function(X))


def test_prefer_numpy_only_for_small_jobs_before_numba():
    from dmcsvm import kernels

    kernel_block(KernelSpec("rbf", 1.0), np.ones((2, 2)), np.ones((2, 2)))  # numba now loaded
    assert kernels.numba_loaded()
    assert not kernels.prefer_numpy(10)
    assert kernels.NUMPY_FIRST_MAX == 2**24


# ------------------------------------------------------------------------------- 6. libraries


def test_evaluate_reports_through_sklearns_classification_report(capsys, iris_svm, tmp_path):
    from sklearn.metrics import classification_report

    model = tmp_path / "m.npz"
    ok(capsys, "train", iris_svm, "-o", model, "-g", "0.05")
    out = ok(capsys, "evaluate", model, iris_svm, "--json", tmp_path / "e.json")
    X, y = load_iris(return_X_y=True)
    pred = load_model(model).predict((X * 10).astype(np.float32))
    text = classification_report(
        y, pred, labels=[0, 1, 2], target_names=["0", "1", "2"], digits=4, zero_division=0
    )
    assert text.rstrip("\n") in out
    import json

    ev = json.loads((tmp_path / "e.json").read_text())
    rep = classification_report(y, pred, output_dict=True, zero_division=0)
    assert ev["macro_avg"]["f1"] == rep["macro avg"]["f1-score"]
    assert [c["recall"] for c in ev["per_class"]] == [rep[k]["recall"] for k in ("0", "1", "2")]


def test_status_messages_go_to_stderr_through_logging(capsys):
    import logging

    log = logging.getLogger("dmcsvm.cli.demo")
    before = logging.getLogger("dmcsvm").handlers[:]
    code = main(["demo", "--in-process", "--max-iter", "2", "--help"])
    assert code == 0
    assert logging.getLogger("dmcsvm").handlers == before  # main leaves logging as it was
    from dmcsvm.cli import _status_handler

    h = _status_handler()
    rec = log.makeRecord("dmcsvm.cli.demo", logging.INFO, __file__, 1, "started %s", ("x",), None)
    assert h.format(rec) == "dmcsvm: started x"


_CSVS = {
    "numbers.csv": "1,0.5,2\n2,1.5,-3\n\n1,2,4e-3\n",
    "text_labels.csv": "id,label,x1,x2\n7,cat,1,2\n8,dog,3,4\n9,cat,5,6\n",
    "quoted.csv": '"a",1,2\n"b",3,"4"\n',
    "weights.csv": "1,0.5,2,1.0\n0,1.5,-3,2.5\n1,2,4,0\n",
    "spaces.txt.gz": "  1 0.5 2  \n2\t1.5 -3\n1 2 4\n",
}
_CSV_ARGS = {
    "numbers.csv": {},
    "text_labels.csv": {"label_column": 1, "skip_header": 1, "drop_columns": (0,)},
    "quoted.csv": {},
    "weights.csv": {"weight_column": -1},
    "spaces.txt.gz": {"delimiter": "whitespace"},
}


@pytest.mark.parametrize("name", sorted(_CSVS))
def test_csv_through_pandas_equals_the_exact_reader(name, tmp_path, monkeypatch):
    import gzip

    pytest.importorskip("pandas")  # the csv extra; the test extra installs it

    from dmcsvm.store import delimited, from_csv, read_all, read_sample_weight

    src = tmp_path / name
    data = _CSVS[name].encode()
    src.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    kw = _CSV_ARGS[name]
    exact = delimited._from_csv_exact

    def refuse(*a, **k):
        raise AssertionError("the exact reader ran for a well-formed file")

    monkeypatch.setattr(delimited, "_from_csv_exact", refuse)
    fast = from_csv(src, tmp_path / "fast.zarr", **kw)
    monkeypatch.setattr(
        delimited,
        "_from_csv_pandas",
        lambda *a, **k: (_ for _ in ()).throw(delimited._Fallback("off")),
    )
    monkeypatch.setattr(delimited, "_from_csv_exact", exact)
    slow = from_csv(src, tmp_path / "slow.zarr", **kw)
    for a, b in zip(read_all(fast), read_all(slow), strict=False):
        np.testing.assert_array_equal(a, b)
    assert fast.classes == slow.classes
    wa, wb = read_sample_weight(fast), read_sample_weight(slow)
    assert (wa is None and wb is None) or np.array_equal(wa, wb)


@pytest.mark.parametrize(
    "text,message",
    [
        ("1,2,3\n1,2\n", "line 2: 2 fields, expected 3"),
        ("1,2,3\n1,x,3\n", "line 2: column 1 is not a number: 'x'"),
        ("1,2,3\n1,nan,3\n", "contains NaN or infinity at row 1 (line 2)"),
        ("1,2,3\n1,2,3,4\n", "line 2: 4 fields, expected 3"),
    ],
)
def test_csv_errors_still_name_the_line(text, message, tmp_path):
    from dmcsvm.store import from_csv

    (tmp_path / "bad.csv").write_text(text)
    with pytest.raises(ValueError, match=re.escape(message)):
        from_csv(tmp_path / "bad.csv", tmp_path / "bad.zarr")
    assert sorted(os.listdir(tmp_path)) == ["bad.csv"]


def _write_precomputed(path, K, y, serial=True):
    with open(path, "w") as f:
        for i in range(len(y)):
            s = i + 1 if serial else 1
            f.write(
                f"{y[i]} 0:{s} "
                + " ".join(f"{j + 1}:{float(v)!r}" for j, v in enumerate(K[i]))
                + "\n"
            )


def test_cli_precomputed_kernel_in_libsvms_format(capsys, tmp_path):
    X, y = _iris_scaled()
    K, Kt = rbf_kernel(X, X, 0.5), rbf_kernel(X[::5], X, 0.5)
    _write_precomputed(tmp_path / "k.train", K, y)
    _write_precomputed(tmp_path / "k.test", Kt, y[::5], serial=False)
    ok(capsys, "train", tmp_path / "k.train", "-o", tmp_path / "m.npz", "-t", "4", "-c", "10")
    ok(
        capsys,
        "predict",
        tmp_path / "m.npz",
        tmp_path / "k.test",
        "-o",
        tmp_path / "p.txt",
        "--decision-values",
    )
    got = np.loadtxt(tmp_path / "p.txt", skiprows=1)
    api = MulticlassSVC(kernel="precomputed", C=10).fit(K.astype(np.float32), y)
    np.testing.assert_allclose(
        got[:, 1:], api.decision_function(Kt.astype(np.float32)), rtol=1e-9, atol=1e-12
    )
    _write_precomputed(tmp_path / "bad.train", K, y, serial=False)
    assert (
        usage_error(capsys, "train", tmp_path / "bad.train", "-o", tmp_path / "n.npz", "-t", "4")
        == f"dmcsvm: error: {tmp_path / 'bad.train'}: with a precomputed kernel (-t 4) column 0 "
        f"must hold the serial numbers 1 to 150 (LIBSVM's format: 0:i)"
    )
    assert (
        usage_error(
            capsys, "train", tmp_path / "k.train", "-o", tmp_path / "n.npz", "-t", "4", "--scale"
        )
        == "dmcsvm: error: --scale does not apply to a precomputed kernel (-t 4): the data are "
        "kernel values, not features"
    )


def test_ovo_decision_values_on_the_command_line_and_dask(capsys, tmp_path):
    import dask.array as da

    X, y = _iris_scaled()
    y4 = np.where(X[:, 0] > 0.5, 3, y)
    est = MulticlassSVC(C=10, decision_function_shape="ovo").fit(X, y4)
    save_model(est, tmp_path / "m.npz")
    write_arrays(tmp_path / "d.zarr", X, y4)
    ok(
        capsys,
        "predict",
        tmp_path / "m.npz",
        tmp_path / "d.zarr",
        "-o",
        tmp_path / "p.txt",
        "--decision-values",
    )
    lines = (tmp_path / "p.txt").read_text().splitlines()
    assert lines[0] == "label 0/1 0/2 0/3 1/2 1/3 2/3"
    got = np.array([[float(v) for v in ln.split()] for ln in lines[1:]])
    np.testing.assert_allclose(
        got[:, 1:], est.decision_function(X.astype(np.float32)), rtol=1e-6, atol=1e-6
    )
    Xd = da.from_array(X, chunks=(40, 4))
    np.testing.assert_array_equal(est.decision_function(Xd).compute(), est.decision_function(X))
    np.testing.assert_array_equal(est.predict(Xd).compute(), est.predict(X))
