"""``class_weight`` and ``sample_weight``: per-pattern dual bounds
``C_i = C * class_weight[y_i] * sample_weight_i`` (:mod:`dmcsvm.estimators._weights`).

* the weighted optimum: MulticlassSVC (kernel rounds, several optimizers / selections / batch
  sizes / partitions, and the linear in-memory path) against the exact QP of the Crammer–Singer
  dual with per-pattern ``C_i``; BinarySVC against the binary C-SVM QP with ``C_i``;
* BinarySVC against scikit-learn's SVC with ``class_weight`` and ``sample_weight``;
* 'balanced' = its dict; all-one weights = no weights bit for bit; integer weights = repeated
  rows; weight-0 rows = removed rows; in-process = LocalCluster;
* the store's ``sample_weight`` array, the checks on it, bad input with exact messages,
  checkpoints, model files, warm_start, and the command line.
"""

from __future__ import annotations

import os
import re
import shutil

import numpy as np
import pytest

from dmcsvm import (
    BinarySVC,
    MulticlassSVC,
    MultiPrototypeSVC,
    OneVsOneSVC,
    OneVsRestSVC,
    ScatterSVC,
)
from dmcsvm.errors import NonFiniteError
from dmcsvm.estimators._weights import pattern_bounds
from dmcsvm.kernels import KernelSpec, kernel_reference

GAMMA = 0.3
TIGHT = 1e-9


def _blobs(seed=0, n=36, d=3, m=3, spread=1.3):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=1.5, size=(m, d))
    y = np.arange(n) % m
    X = centers[y] + spread * rng.normal(size=(n, d))
    return X, y.astype(np.int64)


def _weights(seed, n, zeros=True):
    rng = np.random.default_rng(seed)
    w = rng.uniform(0.2, 3.0, n)
    if zeros:
        w[rng.choice(n, n // 6, replace=False)] = 0.0
    return w


def _full_B(est, n):
    B = np.zeros((n, est.dual_coef_.shape[0]))
    B[est.support_] = est.dual_coef_.T
    return B


@pytest.fixture(scope="module")
def weighted_problem(cs):
    """A 3-class problem with class weights and sample weights (some 0) and its exact
    weighted optimum."""
    X, y = _blobs()
    cw = {0: 2.0, 2: 0.5}
    sw = _weights(1, X.shape[0])
    C_i = pattern_bounds(1.5, y, 3, np.arange(3), cw, sw)
    K = kernel_reference(KernelSpec("rbf", GAMMA), X, X)
    D, _ = cs.cs_dual_qp(K, y, 3, C_i)
    Kl = X @ X.T
    Dl, _ = cs.cs_dual_qp(Kl, y, 3, C_i)
    return {"X": X, "y": y, "cw": cw, "sw": sw, "C_i": C_i, "K": K, "D": D, "Kl": Kl, "Dl": Dl}


def _check_cs_optimum(cs, p, est, K, D_star):
    n = p["X"].shape[0]
    B = _full_B(est, n)
    cs.check_feasible(B, p["y"], p["C_i"], atol=1e-9)
    assert np.all(B[np.arange(n), p["y"]] <= p["C_i"] * (1 + 1e-12) + 1e-12)
    assert not np.any(B[p["C_i"] == 0.0]), "a weight-0 row has coefficients"
    D = cs.dual_value(B, K, p["y"])
    assert D == pytest.approx(D_star, rel=1e-7)
    F = K @ B
    viol, _ = cs.kkt_violation(B, F, p["y"], p["C_i"])
    assert viol <= 1e-6
    P = cs.primal_from_scores(F, np.sum(B * F), p["y"], p["C_i"])
    assert P - D <= 1e-6 * abs(P)


# ------------------------------------------------------------------------ weighted optima


@pytest.mark.parametrize(
    "optimizer,selection,batch,n_jobs",
    [
        ("exact", "bmg", 5000, 1),
        ("opt_kkt", "kkt", 4, 2),
        ("fixed_point", "amg", 16, 2),
        ("all_pairs", "bmg", 1, 1),
        ("basic", "kkt", 3, 2),
    ],
)
def test_multiclass_reaches_the_weighted_cs_optimum(
    cs, weighted_problem, optimizer, selection, batch, n_jobs
):
    p = weighted_problem
    est = MulticlassSVC(
        kernel_dtype="float64",
        C=1.5,
        gamma=GAMMA,
        tol=TIGHT,
        n_jobs=n_jobs,
        class_weight=p["cw"],
        solver_options={
            "optimizer": optimizer,
            "pattern_selection": selection,
            "batch_size": batch,
            "n_partitions": n_jobs,
        },
    ).fit(p["X"], p["y"], sample_weight=p["sw"])
    assert est.converged_
    _check_cs_optimum(cs, p, est, p["K"], p["D"])
    # the solver's own primal (sum_i C_i xi_i) closes the gap with the dual
    assert est.history_["primal"][-1] == pytest.approx(est.history_["dual"][-1], rel=1e-6)


def test_linear_path_reaches_the_weighted_cs_optimum(cs, weighted_problem):
    p = weighted_problem
    est = MulticlassSVC(C=1.5, kernel="linear", tol=TIGHT, class_weight=p["cw"])
    est.fit(p["X"], p["y"], sample_weight=p["sw"])
    assert est.engine_stats_[0]["solver"] == "sequential_dual"
    _check_cs_optimum(cs, p, est, p["Kl"], p["Dl"])


def test_binary_reaches_the_weighted_binary_optimum(cs):
    X, y = _blobs(seed=4, n=30, m=2, spread=1.8)
    sw = _weights(2, 30)
    C_i = pattern_bounds(2.0, y, 2, np.arange(2), {1: 3.0}, sw)
    s = np.where(y == 1, 1.0, -1.0)
    K = kernel_reference(KernelSpec("rbf", GAMMA), X, X)
    val, _ = cs.binary_svm_dual_qp(K, s, C_i, bias=True)
    est = BinarySVC(
        kernel_dtype="float64",
        C=2.0,
        gamma=GAMMA,
        tol=TIGHT,
        n_jobs=2,
        class_weight={1: 3.0},
        solver_options={"batch_size": 6},
    ).fit(X, y, sample_weight=sw)
    a = np.zeros(30)
    a[est.support_] = est.dual_coef_[0] * s[est.support_]
    assert np.all(a >= 0) and np.all(a <= C_i * (1 + 1e-12))
    assert abs(s @ a) <= 1e-10
    assert not np.any(a[C_i == 0])
    assert a.sum() - 0.5 * (a * s) @ K @ (a * s) == pytest.approx(val, rel=1e-7)
    assert -est.objective_ == pytest.approx(val, rel=1e-7)


# ------------------------------------------------------------------------ against scikit-learn


@pytest.mark.parametrize(
    "kw,use_sw",
    [
        ({"class_weight": {0: 3.0, 1: 0.5}}, False),
        ({"class_weight": "balanced"}, False),
        ({}, True),
        ({"class_weight": "balanced"}, True),
    ],
)
def test_binary_svc_equals_sklearn_svc(kw, use_sw):
    from sklearn.svm import SVC

    X, y = _blobs(seed=7, n=40, m=2, spread=2.0)
    y = np.where(np.arange(40) < 28, 0, 1)  # unbalanced classes
    sw = _weights(3, 40) if use_sw else None
    ours = BinarySVC(kernel_dtype="float64", C=1.0, gamma=GAMMA, tol=1e-10, **kw).fit(
        X, y, sample_weight=sw
    )
    ref = SVC(C=1.0, gamma=GAMMA, tol=1e-10, **kw).fit(X, y, sample_weight=sw)
    d_ours, d_ref = ours.decision_function(X), ref.decision_function(X)
    assert np.abs(d_ours - d_ref).max() <= 1e-6
    assert np.array_equal(ours.predict(X), ref.predict(X))
    # the same dual coefficients on the same support; LIBSVM drops weight-0 rows before it
    # trains, so scikit-learn's support_ indexes the rows left
    kept = np.flatnonzero(sw > 0) if sw is not None else np.arange(40)
    coef = np.zeros(40)
    coef[ours.support_] = ours.dual_coef_[0]
    coef_ref = np.zeros(40)
    coef_ref[kept[ref.support_]] = ref.dual_coef_[0]
    np.testing.assert_array_equal(X[kept[ref.support_]], ref.support_vectors_)
    assert np.abs(coef - coef_ref).max() <= 1e-6
    np.testing.assert_allclose(ours.class_weight_, ref.class_weight_, rtol=1e-15)


# ------------------------------------------------------------------------ equivalences


def test_balanced_equals_its_dict():
    X, y = _blobs(seed=2, n=40)
    y[:6] = 0  # unequal class sizes
    counts = np.bincount(y)
    cw = {c: 40 / (3 * counts[c]) for c in range(3)}
    a = MulticlassSVC(gamma=GAMMA, class_weight="balanced").fit(X, y)
    b = MulticlassSVC(gamma=GAMMA, class_weight=cw).fit(X, y)
    assert np.array_equal(a.dual_coef_, b.dual_coef_) and np.array_equal(a.support_, b.support_)
    np.testing.assert_array_equal(a.class_weight_, [cw[0], cw[1], cw[2]])


#: every estimator with weights, as (class, parameters); ``make(k, **more)`` builds number k
_ESTIMATORS = [
    (MulticlassSVC, {"n_jobs": 2}),
    (MulticlassSVC, {"kernel": "linear"}),
    (BinarySVC, {}),
    (OneVsRestSVC, {}),
    (OneVsOneSVC, {}),
    (ScatterSVC, {}),
]
_IDS = ["multiclass", "linear", "binary", "ovr", "ovo", "scatter"]


def _make(k, **more):
    cls, kw = _ESTIMATORS[k]
    return lambda: cls(**{**kw, **more})


def _labels_for(est, y):
    return y % 2 if isinstance(est, BinarySVC) else y


@pytest.mark.parametrize("k", range(len(_ESTIMATORS)), ids=_IDS)
def test_unit_weights_are_bit_for_bit_no_weights(k):
    make = _make(k, gamma=GAMMA)
    X, y = _blobs(seed=5, n=30)
    y = _labels_for(make(), y)
    ref = make().fit(X, y)
    ones = make().fit(X, y, sample_weight=np.ones(30))
    unit = make().set_params(class_weight={c: 1.0 for c in np.unique(y)}).fit(X, y)
    for other in (ones, unit):
        assert np.array_equal(other.support_, ref.support_)
        a = other.dual_coef_
        b = ref.dual_coef_
        a, b = (a.toarray(), b.toarray()) if hasattr(a, "toarray") else (a, b)
        assert np.array_equal(a, b)
        assert np.array_equal(other.decision_function(X), ref.decision_function(X))


@pytest.mark.parametrize("k", range(len(_ESTIMATORS)), ids=_IDS)
def test_integer_weights_equal_repeated_rows(k):
    """gamma='scale' too: the variance counts rows by their weights."""
    make = _make(k, tol=TIGHT)
    X, y = _blobs(seed=6, n=30)
    y = _labels_for(make(), y)
    w = np.random.default_rng(8).integers(0, 4, 30)
    w[:3] = 1  # every class keeps rows
    a = make().fit(X, y, sample_weight=w)
    b = make().fit(np.repeat(X, w, axis=0), np.repeat(y, w))
    assert a.gamma_ == pytest.approx(b.gamma_, rel=1e-12)
    np.testing.assert_allclose(a.decision_function(X), b.decision_function(X), rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "make",
    [
        lambda: MulticlassSVC(gamma=GAMMA, tol=TIGHT, n_jobs=2, solver_options={"batch_size": 4}),
        lambda: MulticlassSVC(kernel="linear", tol=TIGHT),
        lambda: BinarySVC(gamma=GAMMA, tol=TIGHT),
        lambda: ScatterSVC(gamma=GAMMA, tol=TIGHT, mu=0.3),
    ],
)
def test_weight_zero_rows_are_removed_rows(make):
    X, y = _blobs(seed=9, n=30)
    y = _labels_for(make(), y)
    w = np.ones(30)
    w[[1, 4, 7, 11, 20]] = 0.0
    keep = w > 0
    a = make().fit(X, y, sample_weight=w)
    b = make().fit(X[keep], y[keep])
    assert not np.isin(a.support_, np.flatnonzero(~keep)).any()
    np.testing.assert_allclose(a.decision_function(X), b.decision_function(X), rtol=0, atol=1e-6)


# ------------------------------------------------------------------------ Dask


def test_localcluster_equals_inprocess(local_client, weighted_problem):
    p = weighted_problem
    kw = {"C": 1.5, "gamma": GAMMA, "tol": 1e-8, "class_weight": p["cw"]}
    opts = {"batch_size": 6, "n_partitions": 2}
    a = MulticlassSVC(n_jobs=2, **kw, solver_options=opts).fit(
        p["X"], p["y"], sample_weight=p["sw"]
    )
    b = MulticlassSVC(client=local_client, **kw, solver_options=opts).fit(
        p["X"], p["y"], sample_weight=p["sw"]
    )
    assert a.n_iter_ == b.n_iter_
    np.testing.assert_array_equal(a.support_, b.support_)
    np.testing.assert_allclose(a.dual_coef_, b.dual_coef_, rtol=0, atol=1e-9)
    y2 = p["y"] % 2
    kw2 = {"gamma": GAMMA, "tol": 1e-8, "class_weight": {1: 2.0}}
    opts = {"batch_size": 4, "n_partitions": 2}
    c = BinarySVC(n_jobs=2, **kw2, solver_options=opts).fit(p["X"], y2, sample_weight=p["sw"])
    d = BinarySVC(client=local_client, **kw2, solver_options=opts).fit(
        p["X"], y2, sample_weight=p["sw"]
    )
    np.testing.assert_array_equal(c.support_, d.support_)
    np.testing.assert_allclose(c.dual_coef_, d.dual_coef_, rtol=0, atol=1e-9)


# ------------------------------------------------------------------------ stores


def test_store_sample_weight_equals_fit_sample_weight(tmp_path):
    from dmcsvm.store import open_store, read_sample_weight, write_arrays

    X, y = _blobs(seed=10, n=40)
    X = X.astype(np.float32)
    w = _weights(4, 40)
    write_arrays(tmp_path / "w.zarr", X, y, rows_per_chunk=16, sample_weight=w)
    assert np.array_equal(read_sample_weight(open_store(tmp_path / "w.zarr")), w)
    kw = {"gamma": GAMMA, "tol": 1e-8, "n_jobs": 2}
    a = MulticlassSVC(**kw).fit(str(tmp_path / "w.zarr"))
    b = MulticlassSVC(**kw).fit(X, y, sample_weight=w)
    np.testing.assert_allclose(a.decision_function(X), b.decision_function(X), atol=1e-6)
    # an explicit sample_weight wins over the store's
    d = MulticlassSVC(**kw).fit(str(tmp_path / "w.zarr"), sample_weight=np.ones(40))
    e = MulticlassSVC(**kw).fit(X, y)
    np.testing.assert_allclose(d.decision_function(X), e.decision_function(X), atol=1e-6)


def test_store_sample_weight_nan_or_missing_chunk_is_refused(tmp_path):
    import zarr

    from dmcsvm.store import write_arrays

    X, y = _blobs(seed=11, n=40)
    path = tmp_path / "bad.zarr"
    write_arrays(path, X, y, rows_per_chunk=16, sample_weight=np.ones(40))
    arr = zarr.open_array(str(path), path="sample_weight", mode="r+")
    arr[21] = np.nan
    with pytest.raises(NonFiniteError, match=r"bad\.zarr: the sample_weight of row 21 is nan"):
        MulticlassSVC().fit(str(path))
    arr[21] = 1.0
    chunk = path / "sample_weight" / "c" / "1"
    assert chunk.exists()
    chunk.unlink()
    with pytest.raises(
        ValueError,
        match=r"chunk file sample_weight/c/1 \(rows 16 to 31 of "
        r"sample_weight\) is missing",
    ):
        MulticlassSVC().fit(str(path))
    with pytest.raises(ValueError, match=r"sample_weight\[3\] is -1\.0; weights must be >= 0"):
        write_arrays(tmp_path / "neg.zarr", X, y, sample_weight=np.r_[1, 1, 1, -1, np.ones(36)])
    assert not (tmp_path / "neg.zarr").exists()


# ------------------------------------------------------------------------ bad input

_NOT_ONE = (
    "has weight zero on every one of its rows (class_weight and sample_weight); give it "
    "a positive weight or leave its rows out"
)
_BAD = [
    (
        {5: 1.0},
        None,
        ValueError,
        (
            "class_weight has the label 5, which is not a class of the "
            "training data (classes: [0, 1, 2])"
        ),
    ),
    ({1: -2.0}, None, ValueError, "class_weight[1] is -2.0; weights must be >= 0"),
    (
        "balance",
        None,
        ValueError,
        (
            "The 'class_weight' parameter of ESTIMATOR must be an instance of 'dict', a str among "
            "{'balanced'} or None. Got 'balance' instead."
        ),
    ),
    (
        None,
        np.r_[1.0, -0.5, np.ones(28)],
        ValueError,
        "sample_weight[1] is -0.5; weights must be >= 0",
    ),
    (
        None,
        np.ones(29),
        ValueError,
        "sample_weight has 29 weights for 30 rows; it needs one per row",
    ),
    (
        None,
        np.ones((30, 2)),
        ValueError,
        "sample_weight must be 1-dimensional (one weight per row), got shape (30, 2)",
    ),
    (
        None,
        np.r_[np.ones(29), np.inf],
        NonFiniteError,
        "sample_weight[29] is inf; weights must be finite",
    ),
    (
        None,
        np.zeros(30),
        ValueError,
        (
            "every row has weight zero (class_weight and "
            "sample_weight); at least one row of each class needs a "
            "positive weight"
        ),
    ),
    (None, np.where(np.arange(30) % 3 == 2, 0.0, 1.0), ValueError, "class 2 " + _NOT_ONE),
    ({0: 0.0}, None, ValueError, "class 0 " + _NOT_ONE),
]


@pytest.mark.parametrize("cw,sw,exc,msg", _BAD)
@pytest.mark.parametrize("cls", [MulticlassSVC, OneVsRestSVC, ScatterSVC])
def test_bad_weights_are_refused_with_exact_messages(cls, cw, sw, exc, msg):
    X, y = _blobs(seed=12, n=30)
    with pytest.raises(exc) as info:
        cls(class_weight=cw).fit(X, y, sample_weight=sw)
    assert str(info.value) == msg.replace("ESTIMATOR", cls.__name__)


# ------------------------------------------------------------------------ checkpoints, files


def test_checkpoint_resume_with_other_weights_is_refused(tmp_path, weighted_problem):
    p = weighted_problem
    ck = str(tmp_path / "ck")
    kw = {
        "C": 1.5,
        "gamma": GAMMA,
        "tol": 1e-6,
        "n_jobs": 1,
        "checkpoint": ck,
        "checkpoint_every": 1,
    }
    a = MulticlassSVC(**kw).fit(p["X"], p["y"], sample_weight=p["sw"])
    with pytest.raises(
        ValueError,
        match=r"was written with other settings or data: "
        r"weights_crc32=",
    ):
        MulticlassSVC(resume=True, **kw).fit(p["X"], p["y"], sample_weight=p["sw"] * 2)
    with pytest.raises(ValueError, match="weights_crc32"):
        MulticlassSVC(resume=True, **kw).fit(p["X"], p["y"])  # unweighted now
    b = MulticlassSVC(resume=True, **kw).fit(p["X"], p["y"], sample_weight=p["sw"])
    np.testing.assert_allclose(_full_B(b, 36), _full_B(a, 36), atol=1e-9)


def test_model_file_round_trips_class_weight(tmp_path):
    from dmcsvm.model_io import load_model, save_model

    X, y = _blobs(seed=13, n=30)
    labels = np.array(["a", "b", "c"])[y]
    for est in (
        MulticlassSVC(gamma=GAMMA, class_weight={"a": 2.0, "c": 0.5}),
        OneVsOneSVC(gamma=GAMMA, class_weight="balanced"),
    ):
        est.fit(X, labels, sample_weight=_weights(5, 30, zeros=False))
        for name in ("m.npz", "m.zarr"):
            save_model(est, tmp_path / name)
            m = load_model(tmp_path / name)
            assert m.get_params()["class_weight"] == est.class_weight
            np.testing.assert_array_equal(m.class_weight_, est.class_weight_)
            assert np.array_equal(m.predict(X), est.predict(X))
            shutil.rmtree(tmp_path / name) if name.endswith(".zarr") else os.remove(tmp_path / name)


def test_warm_start_clips_to_new_weights(weighted_problem):
    p = weighted_problem
    kw = {"C": 1.5, "gamma": GAMMA, "tol": 1e-8, "n_jobs": 1}
    opts = {"batch_size": 6}
    warm = MulticlassSVC(warm_start=True, **kw, solver_options=opts).fit(p["X"], p["y"])
    warm.set_params(class_weight=p["cw"]).fit(p["X"], p["y"], sample_weight=p["sw"])
    cold = MulticlassSVC(class_weight=p["cw"], **kw, solver_options=opts).fit(
        p["X"], p["y"], sample_weight=p["sw"]
    )
    assert not np.isin(warm.support_, np.flatnonzero(p["C_i"] == 0)).any()
    np.testing.assert_allclose(
        warm.decision_function(p["X"]), cold.decision_function(p["X"]), atol=1e-6
    )


# ------------------------------------------------------------------------ command line


def _cli(*args):
    """The command line in this process (``dmcsvm.cli.main``, as the console script runs it:
    the same argument parsing, fit and model file; no interpreter start-up per call)."""
    from dmcsvm.cli import main

    assert main([str(a) for a in args]) == 0


def test_cli_help_names_the_weights(capsys):
    from dmcsvm.cli import main

    assert main(["train", "--help"]) == 0
    text = capsys.readouterr().out
    assert "--class-weight" in text and "'balanced'" in text
    assert re.search(r"optional\s+'sample_weight'\s+array", text)


def test_cli_class_weight_balanced_json_and_store_weights(tmp_path):
    """``--class-weight balanced``; a JSON dict (string keys) on a store whose sample_weight
    array is then used: both equal the API fits."""
    from dmcsvm.model_io import load_model
    from dmcsvm.store import write_arrays

    X, y = _blobs(seed=14, n=36)
    y[:5] = 0
    X = X.astype(np.float32)
    w = _weights(6, 36)
    write_arrays(tmp_path / "d.zarr", X, y)
    write_arrays(tmp_path / "w.zarr", X, y, sample_weight=w)
    base = ["--gamma", GAMMA, "--n-jobs", 1]
    _cli(
        "train", tmp_path / "d.zarr", "-o", tmp_path / "b.npz", "--class-weight", "balanced", *base
    )
    _cli(
        "train",
        tmp_path / "w.zarr",
        "-o",
        tmp_path / "j.npz",
        "--class-weight",
        '{"0": 2.5, "2": 0.5}',
        *base,
    )
    b, j = load_model(tmp_path / "b.npz"), load_model(tmp_path / "j.npz")
    assert b.class_weight == "balanced" and j.class_weight == {"0": 2.5, "2": 0.5}
    np.testing.assert_array_equal(j.class_weight_, [2.5, 1.0, 0.5])
    api_b = MulticlassSVC(gamma=GAMMA, n_jobs=1, class_weight="balanced").fit(X, y)
    api_j = MulticlassSVC(gamma=GAMMA, n_jobs=1, class_weight={0: 2.5, 2: 0.5})
    api_j.fit(X, y, sample_weight=w)
    for got, api in ((b, api_b), (j, api_j)):
        np.testing.assert_allclose(got.decision_function(X), api.decision_function(X), atol=1e-6)


def _csv(path, X, y, w):
    """Rows ``label,weight,features...`` (weights as written, e.g. a bad value)."""
    with open(path, "w") as f:
        for xi, yi, wi in zip(X, y, w, strict=False):
            f.write(",".join([str(int(yi)), str(wi)] + [repr(float(v)) for v in xi]) + "\n")


def test_csv_weight_column_becomes_the_store_sample_weight(tmp_path):
    """``from_csv(weight_column=)`` / ``dmcsvm train --weight-column``: the column is not a
    feature, the store keeps it as ``sample_weight``, and training uses it."""
    from dmcsvm.model_io import load_model
    from dmcsvm.store import from_csv, read_all, read_sample_weight

    X, y = _blobs(seed=15, n=36)
    X = X.astype(np.float32)
    w = _weights(7, 36)
    _csv(tmp_path / "d.csv", X, y, w)
    info = from_csv(tmp_path / "d.csv", tmp_path / "d.zarr", weight_column=1)
    assert info.n_features == X.shape[1]
    np.testing.assert_array_equal(read_sample_weight(info), w)
    np.testing.assert_array_equal(read_all(info)[0], X)
    _cli(
        "train",
        tmp_path / "d.csv",
        "--weight-column",
        1,
        "-o",
        tmp_path / "m.npz",
        "--gamma",
        GAMMA,
        "--n-jobs",
        1,
    )
    api = MulticlassSVC(gamma=GAMMA, n_jobs=1).fit(X, y, sample_weight=w)
    np.testing.assert_allclose(
        load_model(tmp_path / "m.npz").decision_function(X), api.decision_function(X), atol=1e-6
    )


@pytest.mark.parametrize(
    "bad,msg",
    [
        ("-1.0", "weight '-1.0' must be a finite number >= 0"),
        ("nan", "weight 'nan' must be a finite number >= 0"),
        ("heavy", "weight 'heavy' is not a number"),
    ],
)
def test_csv_bad_weight_is_refused_naming_the_line(tmp_path, bad, msg):
    X, y = _blobs(seed=16, n=8)
    w = [1.0] * 8
    w[5] = bad
    _csv(tmp_path / "d.csv", X, y, w)
    with pytest.raises(ValueError) as e:
        from dmcsvm.store import from_csv

        from_csv(tmp_path / "d.csv", tmp_path / "d.zarr", weight_column=1)
    assert str(e.value) == f"{tmp_path / 'd.csv'}, line 6: {msg}"
    assert not os.path.exists(tmp_path / "d.zarr")
    assert [p for p in os.listdir(tmp_path) if p != "d.csv"] == []


def test_weight_column_for_other_formats_is_a_usage_error(tmp_path, capsys):
    from sklearn.datasets import dump_svmlight_file

    from dmcsvm.cli import main

    X, y = _blobs(seed=17, n=8)
    dump_svmlight_file(X, y, str(tmp_path / "d.svm"))
    assert (
        main(["convert", str(tmp_path / "d.svm"), str(tmp_path / "d.zarr"), "--weight-column", "1"])
        == 2
    )
    err = capsys.readouterr().err
    assert "--weight-column applies to CSV input" in err
    assert not os.path.exists(tmp_path / "d.zarr")


# ------------------------------------------------------------------------ MultiPrototypeSVC

_MPROT_PATHS = {
    "sequential": dict(solver_options={"linear_solver": "sequential"}),
    "rounds": dict(solver_options={"linear_solver": "rounds"}, n_jobs=2),
    "kernel": dict(kernel="rbf", gamma=GAMMA, n_jobs=2),
}


@pytest.mark.parametrize("path", list(_MPROT_PATHS))
def test_mprot_unit_weights_are_bit_for_bit_no_weights(path):
    """The annealed search too (draws, energies, zeroed patterns): weights of 1 are no weights."""
    X, y = _blobs(seed=5, n=36)

    def make():
        return MultiPrototypeSVC(
            n_prototypes=2, C=1.0, max_epochs=6, random_state=0, **_MPROT_PATHS[path]
        )

    ref = make().fit(X, y)
    ones = make().fit(X, y, sample_weight=np.ones(36))
    unit = make().set_params(class_weight={c: 1.0 for c in np.unique(y)}).fit(X, y)
    for other in (ones, unit):
        assert np.array_equal(other.assignment_, ref.assignment_)
        assert np.array_equal(other.dual_coef_, ref.dual_coef_)
        assert other.energy_ == ref.energy_
        for key in ("energy", "n_changed"):
            assert np.array_equal(other.epoch_history_[key], ref.epoch_history_[key])


@pytest.mark.parametrize("path", list(_MPROT_PATHS))
def test_mprot_integer_weights_equal_repeated_rows(path):
    """One prototype per class (a convex problem: no draws whose order depends on the rows):
    weight w is the row repeated w times; weight 0 is the row left out."""
    X, y = _blobs(seed=6, n=30)
    w = np.random.default_rng(8).integers(0, 4, 30)
    w[:3] = 1
    path_kw = dict(_MPROT_PATHS[path])
    opts = {"gap_tol": 0.0, **path_kw.pop("solver_options", {})}
    kw = dict(n_prototypes=1, C=1.0, tol=TIGHT, random_state=0, **path_kw, solver_options=opts)
    a = MultiPrototypeSVC(**kw).fit(X, y, sample_weight=w)
    b = MultiPrototypeSVC(**kw).fit(np.repeat(X, w, axis=0), np.repeat(y, w))
    np.testing.assert_allclose(a.decision_function(X), b.decision_function(X), rtol=0, atol=1e-6)
    assert a.energy_ == pytest.approx(b.energy_, rel=1e-7)


def test_mprot_class_weight_moves_the_annealed_model():
    """A heavier class weight makes that class's slacks dearer: fewer of its training patterns
    are misclassified (here, all its errors go), for the same seed and schedule."""
    X, y = _blobs(seed=11, n=90)
    kw = dict(n_prototypes=2, C=0.05, max_epochs=10, random_state=0)
    plain = MultiPrototypeSVC(**kw).fit(X, y)
    heavy = MultiPrototypeSVC(class_weight={0: 20.0}, **kw).fit(X, y)

    def err(m):
        return int(np.sum((m.predict(X) != y) & (y == 0)))

    assert err(heavy) < err(plain)
    np.testing.assert_array_equal(heavy.class_weight_, [20.0, 1.0, 1.0])
